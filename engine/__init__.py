"""Refract's engine: batched reflective optimization (see docs/design.md)."""

import os

# litellm fetches a remote price list at import unless told otherwise; the bundled one is
# offline and fast. Set here so that whichever engine module imports litellm first, it holds.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _register_refract_evaluator() -> None:
    """Make ``import refract_evaluator`` work in this process, as it does in the sandbox: an
    evaluator run in-process by ``optimize_anything`` uses ``oa.log`` like a sandboxed one. The
    module is loaded from its file (stdlib only), without importing the sandbox package."""
    import importlib.util
    import sys
    from pathlib import Path

    if "refract_evaluator" in sys.modules:
        return
    path = Path(__file__).resolve().parent / "sandbox" / "runtime" / "refract_evaluator.py"
    spec = importlib.util.spec_from_file_location("refract_evaluator", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["refract_evaluator"] = module
    spec.loader.exec_module(module)


_register_refract_evaluator()


def __getattr__(name: str):
    """``from engine import optimize_anything`` (imported on first use: the CLI and the worker
    do not need it)."""
    if name in ("optimize_anything", "OptimizeResult"):
        from engine import api, result

        return api.optimize_anything if name == "optimize_anything" else result.OptimizeResult
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
