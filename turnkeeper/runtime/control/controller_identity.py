"""Who a controller is, and when its death is proven rather than guessed.

A controller's lease owner name is ``ctl:<host>:<boot id>:<pid namespace>:<pid>:<start
time>``. A successor may take a live lease over early only when it can prove the holder
is gone, and a pid proves that only where it means the same process to both: the same
host name, the same boot (a pid from before a reboot names nothing now) and the same
PID namespace (a controller in a container that shares the host name has pids of its
own: pid 7 there is some other process here, and the container's pid namespace is
another inode). Anything else — another machine, another boot, another namespace, a
name this version does not understand — is not provable, and its lease must expire.
The namespace is read from ``/proc/self/ns/pid``, which psutil does not expose.
"""

from __future__ import annotations

import os
import re
import socket

from turnkeeper.hosts import process_tree

PREFIX = "ctl"
_HOST_CHARS = 64  # the owner name must fit the store's 200-character id column
_NS_LINK = re.compile(r"^pid:\[(\d+)\]$")


def pid_namespace() -> str:
    """This process's PID namespace: the inode of ``/proc/self/ns/pid`` ("" if unknown)."""
    try:
        match = _NS_LINK.match(os.readlink("/proc/self/ns/pid"))
    except OSError:
        return ""
    return match.group(1) if match else ""


def _host() -> str:
    # ':' separates the fields; a host name never holds one, but never trust that.
    return socket.gethostname().replace(":", "_")[:_HOST_CHARS] or "localhost"


def owner_name(pid: int, start_time: int) -> str:
    """The owner name of a controller with ``pid`` and ``start_time`` on this machine,
    in this boot and this PID namespace."""
    namespace = pid_namespace() or "-"
    return f"{PREFIX}:{_host()}:{process_tree.boot_id()}:{namespace}:{pid}:{start_time}"


def controller_owner() -> str:
    """This controller's lease owner name (see the module docstring)."""
    me = process_tree.identify(os.getpid(), "controller")
    return owner_name(me.pid, me.start_time)


def can_probe(owner: str) -> bool:
    """Whether this process sees ``owner``'s processes as they are: a controller of this
    version's naming on this machine, in this boot and this PID namespace. Only then
    can its death, or its hosts' end, be proven from here."""
    parts = owner.split(":")
    if len(parts) != 6 or parts[0] != PREFIX:
        return False  # not a controller of this version's naming: only expiry can tell
    host, boot, namespace, pid, start = parts[1:]
    if host != _host() or boot != process_tree.boot_id():
        return False  # another machine, or this one before a reboot
    if namespace == "-" or namespace != pid_namespace():
        return False  # another PID namespace: its pid means another process here
    return pid.isdigit() and start.isdigit()


def owner_is_dead(owner: str) -> bool:
    """True only if ``owner`` names a controller that provably no longer runs."""
    if not can_probe(owner):
        return False
    pid, start = owner.split(":")[4:]
    stat = process_tree.read_stat(int(pid))
    return stat is None or stat.start_time != int(start) or stat.dead
