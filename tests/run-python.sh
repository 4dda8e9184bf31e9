#!/usr/bin/env bash
# Python client tests (psycopg) against the installed extension.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "$root/.venv/bin/pytest" -q "$root/tests/python" "$@"
