#!/usr/bin/env bash
# A Dask worker for evaluations: needs this repository (the sandbox code) and bubblewrap on its machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${DASK_SCHEDULER:?set DASK_SCHEDULER, e.g. tcp://10.0.0.5:8786}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-.venv/bin/python}" -m distributed.cli.dask_worker "$DASK_SCHEDULER" --nworkers 1 \
    --nthreads "${DASK_THREADS:-2}" --host "${DASK_WORKER_HOST:-127.0.0.1}"
