"""``python -m engine check-lm [MODEL]``: test the connection to an LM.

Prints which model is checked (and, without MODEL, why it is the default), then the latency and
a sample answer, or the exact error. Exit status: 0 answered, 1 the LM failed, 2 bad arguments.
"""

from __future__ import annotations

import sys

from pydantic import ValidationError

from engine.config import LOCAL_MODEL, LMConfig
from engine.lm.client import LMClient, default_lm_config, default_model_reason
from engine.lm.keys import key_refusal


def check_lm_command(model: str | None = None, *, api_base: str | None = None,
                     api_key_env: str | None = None, client: LMClient | None = None,
                     out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if model is None:
            cfg = default_lm_config(**{k: v for k, v in (("api_base", api_base), ("api_key_env", api_key_env)) if v})
            print(f"default model: {default_model_reason()}", file=out)
        else:
            cfg = LMConfig(model=model, api_base=api_base, api_key_env=api_key_env)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"error: {problems}", file=err)
        return 2
    refused = key_refusal(cfg.api_key_env, cfg.api_base)
    if refused:  # the studio's "Test connection" comes here too: no request, nothing read
        print(f"error: api_key_env: {refused}", file=err)
        return 2
    where = f" at {cfg.api_base}" if cfg.api_base else ""
    print(f"checking {cfg.model}{where} …", file=out, flush=True)
    if cfg.model == LOCAL_MODEL and not _prepare_local(out, err):
        return 1
    result = (client or LMClient()).check(cfg)
    if not result["ok"]:
        print(f"error after {result['seconds']:.2f} s: {result['error']}", file=err)
        return 1
    print(f"ok: answered in {result['seconds']:.2f} s: {result['answer']!r} "
          f"({result['tokens_in']} tokens in, {result['tokens_out']} out, ${result['cost_usd']:.6f})", file=out)
    return 0


def _prepare_local(out, err) -> bool:
    """Join/verify and load the local model first, so that its one-time costs are shown apart
    from the latency of an answer."""
    from engine.lm import local as local_lm
    from engine.lm.local_model import LocalModelError

    try:
        runtime = local_lm.get_runtime()
    except LocalModelError as exc:
        print(f"error: {exc}", file=err)
        return False
    print(f"local model loaded in {runtime.load_seconds:.1f} s "
          f"(context window {runtime.n_ctx} tokens, CPU only)", file=out)
    return True
