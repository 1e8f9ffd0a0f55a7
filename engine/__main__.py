import sys

from engine.cli import main
from engine.lm.providers import load_plugins

try:
    load_plugins()
except ValueError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
sys.exit(main())
