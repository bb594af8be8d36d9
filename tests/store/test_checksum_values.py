"""The record checksums as stored (store/_checksum.py), value for value: databases
written by any earlier version hold these digests, so how they are computed may change
but never what they are. The expected digests were computed by the first version of
the module, before any change to how it computes them."""

from __future__ import annotations

import pytest

from turnkeeper.store._checksum import (
    created_checksum,
    event_checksum,
    index_checksum,
    projection_checksum,
)


def test_digests_are_those_every_stored_record_carries() -> None:
    payload = '{"a":"\\u00e9"}'
    assert (
        event_checksum("session:é-1", 7, "turn.accepted", 2, 1765012345678901, payload, strict=True)
        == "e04b1bbdcda12cda4d624d84361a38c7"
    )
    state = '{"title":"naïve 🚀"}'
    assert (
        projection_checksum("goal:日本", "goal", 12, 3, state, strict=True)
        == "e45b284d91b8bb54495b6956e8928ac7"
    )
    assert (
        index_checksum("turn-ü", "session:x", "turn", strict=True)
        == "48551740c520a8e7127b30107242878e"
    )
    assert created_checksum("session:ü", 1765012345678901) == "708a71a16754371c8d5833b65fbadbde"


def test_text_read_with_invalid_utf8_hashes_as_its_raw_bytes() -> None:
    # A read hands back a flipped byte as a lone surrogate: hashed as that raw byte, so
    # the comparison fails as a checksum mismatch instead of raising.
    assert event_checksum("s", 1, "t", 1, 0, "bad \udcff byte") == (
        "eb3f67159f653111a62f7ab859a0721d"
    )
    assert projection_checksum("g", "goal", 1, 1, "\udcfe") == "01206bf9b8a301e8d2ba8fb8265bafe0"
    assert created_checksum("s\udcff", 5) == "e2c7001ca84ef638593689e5b31d7185"


def test_the_write_path_rejects_text_that_is_not_utf8() -> None:
    with pytest.raises(UnicodeEncodeError):
        event_checksum("s", 1, "t", 1, 0, "bad \udcff byte", strict=True)
    with pytest.raises(UnicodeEncodeError):
        projection_checksum("g\udcff", "goal", 1, 1, "{}", strict=True)
