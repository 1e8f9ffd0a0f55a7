#!/usr/bin/env bash
# Health check of one part of a team deployment; exit 0 when healthy. Usage: health.sh PART
#   database   the database answers             (REFRACT_DB)
#   worker     an engine worker of this machine beat in the last 30 s (REFRACT_DB)
#   studio     the studio answers /_stcore/health (REFRACT_STUDIO_URL, default http://127.0.0.1:8501)
#   dask       the Dask scheduler's /health      (DASK_DASHBOARD_URL, default http://127.0.0.1:8787)
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-.venv/bin/python}"
get() { "$py" -c 'import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1], timeout=5).read(); sys.exit(r.strip() not in (b"ok",))' "$1"; }
case "${1:-}" in
  database) "$py" -c 'import os, sys; from storage.db import open_db; print("database ok:", open_db(os.environ["REFRACT_DB"]).safe_url)' ;;
  worker) "$py" -m engine health --db "${REFRACT_DB:?set REFRACT_DB}" --this-host ;;
  studio) get "${REFRACT_STUDIO_URL:-http://127.0.0.1:8501}/_stcore/health" && echo "studio ok" ;;
  dask) get "${DASK_DASHBOARD_URL:-http://127.0.0.1:8787}/health" && echo "dask scheduler ok" ;;
  *) echo "usage: $0 database|worker|studio|dask" >&2; exit 2 ;;
esac
