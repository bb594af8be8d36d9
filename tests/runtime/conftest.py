"""Registered before any test module here imports it: the crash suite's invariants
are plain ``assert`` statements in ``crash_support``, not in a test module, and only
rewritten modules explain a failed assertion with the values that failed it."""

import pytest

pytest.register_assert_rewrite("tests.runtime.crash_support")
