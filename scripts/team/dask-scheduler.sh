#!/usr/bin/env bash
# The Dask scheduler that runs' evaluations go to ([executor] backend = "dask", address = "tcp://HOST:PORT").
# Dask executes pickled code: bind it to a private address only (DASK_HOST, default 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-.venv/bin/python}" -m distributed.cli.dask_scheduler --host "${DASK_HOST:-127.0.0.1}" \
    --port "${DASK_PORT:-8786}" --dashboard-address "${DASK_HOST:-127.0.0.1}:${DASK_DASHBOARD_PORT:-8787}"
