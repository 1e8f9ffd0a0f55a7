"""Refract's engine: batched reflective optimization (see docs/design.md)."""

import os

# litellm fetches a remote price list at import unless told otherwise; the bundled one is
# offline and fast. Set here so that whichever engine module imports litellm first, it holds.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
