#!/usr/bin/env bash
# One engine worker: claims queued runs (leased, so several workers on several machines share them) and
# runs the studio's jobs. Start as many as you like anywhere that reaches REFRACT_DB.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${REFRACT_DB:?set REFRACT_DB to the team database}"
exec "${PYTHON:-.venv/bin/python}" -m engine worker --db "$REFRACT_DB" "$@"
