"""Refract's engine: batched reflective optimization (see DESIGN.md)."""

import os

# litellm fetches a remote price list at import unless told otherwise; the bundled one is
# offline and fast. Set here so that whichever engine module imports litellm first, it holds.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def __getattr__(name: str):
    """``from engine import optimize_anything`` (imported on first use: the CLI and the worker
    do not need it)."""
    if name in ("optimize_anything", "OptimizeResult"):
        from engine import api, result

        return api.optimize_anything if name == "optimize_anything" else result.OptimizeResult
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
