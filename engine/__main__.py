import sys

from engine.cli import main
from engine.lm.providers import check_plugins

try:
    check_plugins()  # imported with the LM client: commands that call no LM never import litellm
except ValueError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
sys.exit(main())
