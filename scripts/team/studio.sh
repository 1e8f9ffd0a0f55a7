#!/usr/bin/env bash
# The studio for a team: behind sign-in, on every interface (or REFRACT_ADDRESS), without a worker of
# its own (workers run as their own services: worker.sh). Needs REFRACT_DB and a secrets file with
# [auth] and [roles] (REFRACT_SECRETS, default .streamlit/secrets.toml); without [auth] it refuses to start.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${REFRACT_DB:?set REFRACT_DB to the team database, e.g. postgresql+psycopg://refract@db/refract}"
secrets="${REFRACT_SECRETS:-.streamlit/secrets.toml}"
export REFRACT_WORKER=0
exec "${PYTHON:-.venv/bin/python}" -m streamlit run app.py --server.address="${REFRACT_ADDRESS:-0.0.0.0}" \
    --server.port="${REFRACT_PORT:-8501}" --server.headless=true --browser.gatherUsageStats=false \
    --secrets.files="$secrets"
