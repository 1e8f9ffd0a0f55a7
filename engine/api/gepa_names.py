"""The rest of GEPA's ``optimize_anything`` module names, for programs and tests that import them
from ``refract_evaluator``: ``EvaluatorWrapper`` (how an evaluator is called and its output
captured, over Refract's own ``engine.api.in_process``), ``make_litellm_lm``, ``SideInfo`` and
the seedless helpers. Each is Refract's behaviour under GEPA's name and signature.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from engine.api.in_process import CAPTURE_CHARS, Signature, route_streams, evaluate_captured
from engine.api.result import STR_CANDIDATE_KEY
from engine.executor import EvalTask
from engine.sandbox.runtime import outcome

_STR_CANDIDATE_KEY = STR_CANDIDATE_KEY
SideInfo = dict  # the side information an evaluator returns: any JSON-able dict (images allowed)


class EvaluatorWrapper:
    """Calls ``evaluator_fn`` as a run does: the candidate (unwrapped from
    ``{"current_candidate": text}`` with ``str_candidate_mode``), the example unless
    ``single_instance_mode``, ``opt_state`` when it declares it; ``oa.log`` and printed text
    captured into the side information (always: ``capture_stdio`` changes nothing). Returns
    GEPA's ``(score, None, side_info)``; an evaluator that raises re-raises with
    ``raise_on_exception``, else scores 0 with ``{"error": message}``."""

    def __init__(self, evaluator_fn: Callable[..., Any], single_instance_mode: bool, capture_stdio: bool = False,
                 str_candidate_mode: bool = False, raise_on_exception: bool = True) -> None:
        self.fn, self.sig = evaluator_fn, Signature(evaluator_fn)
        self.single, self.str_mode, self.raise_on_exception = single_instance_mode, str_candidate_mode, raise_on_exception
        self._given = threading.local()  # the opt_state of the call in this thread, handed on as it is

    def __call__(self, candidate: dict, example: Any = None, opt_state: Any = None, **_: Any) -> tuple:
        self._given.state = opt_state
        task = EvalTask(candidate=candidate[STR_CANDIDATE_KEY] if self.str_mode else candidate,
                        example=None if self.single else example,
                        opt_state=getattr(opt_state, "best_example_evals", None))
        raised: list = []
        route_streams(True)  # print() lands in this call's side information, only while it runs
        try:
            done = evaluate_captured(self._call, self.sig, task, CAPTURE_CHARS, raised=raised)
        finally:
            route_streams(False)
        if raised and self.raise_on_exception:
            raise raised[0]
        side = dict(done.side_info)
        if done.error:
            side = {k: v for k, v in side.items() if k != "traceback"}
            side["error"] = done.error
        return done.score, None, side

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if "opt_state" in kwargs and self._given.state is not None:
            kwargs["opt_state"] = self._given.state
        return self.fn(*args, **kwargs)


def make_litellm_lm(model_name: str, **kwargs: Any) -> Callable[[Any], str]:
    """A callable ``(prompt or messages) -> str`` over ``litellm.completion`` (for code that
    passes it around; ``reflection_lm=model_name`` goes through Refract's LM client instead,
    recorded, retried and cached)."""

    def lm(prompt: Any) -> str:
        import litellm

        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return litellm.completion(model=model_name, messages=messages, **kwargs).choices[0].message.content

    return lm


def _build_seed_generation_prompt(objective: str, background: Optional[str] = None,
                                  dataset: Optional[list] = None) -> str:
    """The request the reflection LM gets when ``seed_candidate`` is None (Refract's own,
    ``engine.search.reflection.seed_request``, under GEPA's headings)."""
    from engine.search.reflection import seed_request

    rows = None if dataset is None else [outcome.to_json(r, "dataset") if _plain(r) else repr(r) for r in dataset]
    return seed_request("", objective, background or "", rows)


def _generate_seed_candidate(lm: Callable[[str], str], objective: str, background: Optional[str] = None,
                             dataset: Optional[list] = None, logger: Any = None) -> dict:
    """Ask ``lm`` for a first candidate; ``{"current_candidate": text}``."""
    from engine.search.reflection import parse_answer

    if logger is not None:
        logger.log("Generating the seed candidate with the reflection LM…")
    answer = lm(_build_seed_generation_prompt(objective, background, dataset))
    text = parse_answer(answer or "", "", require_fence=False).text or ""
    if logger is not None:
        logger.log(f"Generated the seed candidate ({len(text)} chars)")
    return {STR_CANDIDATE_KEY: text}


def _plain(row: Any) -> bool:
    try:
        outcome.to_json(row, "row")
        return True
    except outcome.NotJSON:
        return False
