"""Testing the connection to an LM: ``python -m engine check-lm [MODEL]``, and the check of a
run's LMs before the run is created.

``check-lm`` prints which model is checked (and, without MODEL, why it is the default), then the
latency and a sample answer, or the exact error. Exit status: 0 answered, 1 the LM failed, 2 bad
arguments.

``run_lm_problems(cfg)`` asks every LM a run configures (``[reflection_lm]``, ``[task_lm]``,
``[judge_lm]``) one short question before anything is stored — at Start in the studio (a
``check_lm`` job), at ``submit`` / ``run`` / ``validate``, and in the Python API — and says, at the
field, why one did not answer: an unknown model, an ``api_base`` where nothing listens or without
``http://``, a key variable that is not set. A run whose LM cannot answer would otherwise spend
its seed's evaluations and then pause.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from pydantic import ValidationError

from engine.config import LOCAL_MODEL, ConfigError, LMConfig, RunConfig
from engine.lm.client import LMClient, default_lm_config, default_model_reason
from engine.lm.keys import key_refusal
from engine.lm.providers import is_in_process, is_local


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


LM_FIELDS = ("reflection_lm", "task_lm", "judge_lm")
CHECK_TIMEOUT_S = 60.0  # a self-hosted server may load its model on the first request


def run_lm_problems(cfg: RunConfig, client: Optional[LMClient] = None,
                    fields: tuple[str, ...] = LM_FIELDS) -> list[str]:
    """One short real request to each LM of ``cfg`` (of ``fields``) that is not served in this
    process, the same settings asked once; a ``field.setting: reason`` line for each that did not
    answer ([] when all did). LMs served in this process — the built-in local model, a Python
    callable, a test provider — have no connection to check and are not asked."""
    lms = {name: getattr(cfg, name) for name in fields if getattr(cfg, name, None) is not None}
    problems: list[str] = []
    asked: dict[tuple, list[str]] = {}
    for name, lm in lms.items():
        if _served_here(lm.model):
            continue
        if lm.api_base and not lm.api_base.startswith(("http://", "https://")):
            problems.append(f"{name}.api_base: {lm.api_base!r} needs http:// or https:// in front "
                            f"(for example http://{lm.api_base})")
            continue
        asked.setdefault((lm.model, lm.api_base, lm.api_key_env), []).append(name)
    if not asked:
        return problems
    client = client or LMClient()
    settings = [lms[names[0]].model_copy(update={"timeout_seconds": min(lms[names[0]].timeout_seconds, CHECK_TIMEOUT_S)})
                for names in asked.values()]
    with ThreadPoolExecutor(len(settings), thread_name_prefix="lm-check") as pool:
        results = list(pool.map(client.check, settings))
    for names, lm, result in zip(asked.values(), settings, results):
        if not result["ok"]:
            setting, reason = _where(lm, result)
            problems += [f"{name}.{setting}: {reason}" for name in names]
    return problems


def _served_here(model: str) -> bool:
    """A model this process answers itself: the caller's Python callable (asked only by the run:
    GEPA's callables may count their calls), the built-in local model, a provider registered here."""
    from engine.lm.loading import is_callable_model, setup_litellm

    if is_callable_model(model) or is_local(model):
        return True  # without importing litellm: a run of callables never pays for it
    setup_litellm()  # the test hook's providers register with it; asking the model needs it anyway
    return is_in_process(model)


def check_run_lms(cfg: RunConfig, client: Optional[LMClient] = None) -> None:
    """``run_lm_problems``, raised as one ``ConfigError`` (a line per problem) when there are any."""
    problems = run_lm_problems(cfg, client)
    if problems:
        raise ConfigError("\n".join(problems))


def _short(error: str) -> str:
    """A provider's error on one line, without litellm's repeated class prefixes
    ("BadRequestError: litellm.BadRequestError: …")."""
    line = error.strip().splitlines()[0] if error.strip() else "no answer"
    while True:
        head, sep, rest = line.partition(": ")
        if not sep or " " in head or not (head.endswith(("Error", "Exception")) or head.startswith("litellm.")):
            break
        line = rest
    if "LLM Provider NOT provided" in line:
        return "litellm does not know its provider; write it as provider/model, e.g. openai/gpt-4.1-mini"
    return line[:300]


def _where(lm: LMConfig, result: dict) -> tuple[str, str]:
    """(the setting a failed check points at, the reason in words)."""
    error, kind = _short(result["error"] or ""), result.get("error_kind")
    if kind is None and ("api_key_env" in error or "no credentials" in error):
        return "api_key_env", error
    if any(w in (result["error"] or "") for w in ("AuthenticationError", "PermissionDeniedError")):
        return "api_key_env", f"the provider refused the key: {error}"
    if kind in ("connection", "timeout") and lm.api_base:
        what = "nothing answers at" if kind == "connection" else f"no answer within {lm.timeout_seconds:g} s from"
        return "api_base", f"{what} {lm.api_base} ({error}); start the server there, or correct the address"
    return "model", f"{lm.model!r} did not answer: {error}"
