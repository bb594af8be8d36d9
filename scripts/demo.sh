#!/usr/bin/env bash
# The main demonstration, on the embedded SQLite store, in a throwaway directory.
source "$(dirname "$0")/_env.sh"
exec .venv/bin/turnkeeper demo "$@"
