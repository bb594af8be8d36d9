"""Both kernels' models refuse a copy that names a field they do not have."""

from __future__ import annotations

import pytest

from tests.kernel_session.helpers import new_session
from turnkeeper.kernel.model import Criterion


def test_a_misspelt_update_is_refused_and_a_right_one_applies() -> None:
    criterion = Criterion(id="c1", text="tests pass")
    assert criterion.model_copy(update={"met": True}).met is True
    with pytest.raises(ValueError, match=r"Criterion has no field \['mett'\]"):
        criterion.model_copy(update={"mett": True})
    assert criterion.met is False  # frozen: the original is untouched either way


def test_the_session_kernel_shares_the_check() -> None:
    state = new_session().s
    assert state.model_copy(update={"turns_without_progress": 2}).turns_without_progress == 2
    with pytest.raises(ValueError, match="has no field"):
        state.model_copy(update={"turns_without_progres": 2})
