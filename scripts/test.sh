#!/usr/bin/env bash
# Lint, type-check and run the whole test suite. Extra arguments go to pytest.
source "$(dirname "$0")/_env.sh"
echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "[test] mypy --strict"
.venv/bin/mypy
echo "[test] pytest"
# Two worker processes (pytest-xdist), one per core of the machine the suite is planned
# for: most of a test's time is spent waiting on the processes, databases and browsers it
# drives, so two workers more than halve the suite's time. Every test keeps to its own temporary
# directory, database schema, ports and network namespaces, so they may run side by
# side. TURNKEEPER_TEST_WORKERS=0 runs the tests in this one process.
.venv/bin/pytest -n "${TURNKEEPER_TEST_WORKERS:-2}" "$@"
