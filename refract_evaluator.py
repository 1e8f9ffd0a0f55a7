"""``import refract_evaluator as oa`` in your own Python: the one line that ports a GEPA program.

The module itself lives in ``engine/sandbox/runtime/refract_evaluator.py``, where the sandbox
imports it; this file loads that one under the same name (so that the engine, the sandbox and
your code share one module) and steps aside. Importable wherever ``import engine`` is. Where
gepa is installed, ``Image`` is then also a ``gepa.Image`` (``_adopt_gepa_image``).
"""

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    __name__, Path(__file__).resolve().parent / "engine" / "sandbox" / "runtime" / "refract_evaluator.py")
_module = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _module  # `import` hands back what sys.modules holds once this file has run
_spec.loader.exec_module(_module)
_module._adopt_gepa_image()  # a ported program may hand our images to GEPA's own code
