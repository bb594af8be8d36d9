#!/usr/bin/env bash
# Lint, type-check and run the whole test suite. Extra arguments go to pytest.
source "$(dirname "$0")/_env.sh"
echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "[test] mypy --strict"
.venv/bin/mypy
echo "[test] pytest"
.venv/bin/pytest "$@"
