# The two commands of the README: `make run` starts the studio, `make test` runs every test.
# Both set the machine up first (scripts/setup.sh: idempotent, quiet, fast when nothing changed).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup run test bench

setup:
	@bash scripts/setup.sh

run: setup
	$(PY) -m streamlit run app.py --server.address=127.0.0.1 --server.headless=true --browser.gatherUsageStats=false

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	@$(PY) -m pip install -q -r requirements-bench.txt
	@set -e; found=0; for f in bench/*.py; do \
		[ -e "$$f" ] || continue; found=1; \
		echo "== $$f"; $(PY) "$$f"; \
	done; [ $$found = 1 ] || echo "no benchmarks in bench/ yet"
