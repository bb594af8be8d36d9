"""Handoff packets: a goal carried from one project, machine or team to another.

``build`` turns a goal's state into a :class:`HandoffPacket` (checked by ``clean``
for credentials and local paths), ``adopt`` turns a packet back into the kernel
proposals that recreate the goal elsewhere. See docs/handoff.md.
"""

from turnkeeper.handoff.packet import PACKET_KIND, SCHEMA_VERSION, HandoffPacket, parse_packet

__all__ = ["PACKET_KIND", "SCHEMA_VERSION", "HandoffPacket", "parse_packet"]
