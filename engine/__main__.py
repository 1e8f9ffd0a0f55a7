import logging
import os
import sys

from engine.cli import main
from engine.lm.providers import check_plugins
from storage import settings

bad = settings.problems()  # a bad REFRACT_* value: said once, before anything reads it
for problem in bad:
    print(f"error: {problem}", file=sys.stderr)
if bad:
    sys.exit(2)
try:
    check_plugins()  # imported with the LM client: commands that call no LM never import litellm
except ValueError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
code = main()
local = sys.modules.get("engine.lm.local")  # loaded only by a command that asked the local model
starting = sys.modules.get("engine.lm.starting")
if (local is not None and local.generating()) or (starting is not None and starting.warming()):
    # Tearing the interpreter down under an answer the local runtime is still generating (a
    # reflection cut at the time limit) crashed the process with SIGSEGV after the run had ended
    # well, and under litellm's import still running in its thread (a command that failed its
    # checks at once, a worker stopped soon after it started) aborted it; everything is written
    # (the database at every step): flush and leave at
    # once, with the command's own exit code, after the LM answers still to be cached.
    cache = sys.modules.get("storage.lm_cache")
    if cache is not None:
        cache.flush_unwritten()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
sys.exit(code)
