"""Refract's engine: batched reflective optimization (see docs/design.md).

Glossary — one word per concept, the same in code, database, exports, CLI and studio:

- **candidate**: one version of the artifact (one text, or one text per component).
- **proposal**: one reflection LM call that writes a child from a parent, and its test.
- **improved**: a child beat its parent on the parent's minibatch (``[search] improvement``
  says whether equalling counts). Counted in ``Run.proposals_improved``; ``Candidate.improved``.
  A merge has improved when it kept every gain of what it combined.
- **validated** / **accepted**: a child that paid a validation pass (``[search] accept`` says
  which improved children do) is *accepted* — candidate status ``accepted``; it is in the pool
  and can be a parent. ``Step.accepted_ids`` are the children validated in that step.
- **rejected**: tested, not accepted (did not improve, was passed over, or was merged into
  another). **failed**: never became a testable candidate (LM error, unusable answer, budget).
- **step**: the unit both schedules record. Synchronous: P parents × K proposals at once, then
  a barrier. Asynchronous: no barrier; every C = P×K proposals started form one step (earlier
  versions called these "waves").
- **merge** (origin ``merge``): the system-aware merge of two frontier members that changed
  different components or lines, counted against ``max_merges``. **sibling merge** (origin
  ``sibling_merge``): the improved children of a step (asynchronously: an improving child and the
  current best) combined into one child, with ``merge_siblings``. Either records its merge path:
  ``three_way`` (no LM call) or ``lm`` (a real conflict).
- **command**: what a human sends a run (pause, resume, step, stop, pin, veto, edit, inject,
  feedback, budget), applied at the next step boundary; *steering* is sending commands. The
  studio's command log lists them.
- States are ``storage.states`` enums: ``RunStatus``, ``CandidateStatus``, ``CommandStatus``,
  ``Origin``; a run's status changes only through ``storage.repo.transition_run``.
"""

import os

# litellm fetches a remote price list at import unless told otherwise; the bundled one is
# offline and fast. Set here so that whichever engine module imports litellm first, it holds.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _register_runtime_modules() -> None:
    """Make ``import refract_evaluator`` (and ``refract_prompt``, which the evaluator of a
    ``[prompt_evaluator]`` imports) work in this process, as they do in the sandbox: an
    evaluator run in-process by ``optimize_anything`` uses ``oa.log`` like a sandboxed one. The
    modules are loaded from their files, without importing the sandbox package."""
    import importlib.util
    import sys
    from pathlib import Path

    for name in ("refract_evaluator", "refract_prompt"):  # in this order: the second imports the first
        if name in sys.modules:
            continue
        path = Path(__file__).resolve().parent / "sandbox" / "runtime" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


_register_runtime_modules()


def __getattr__(name: str):
    """``from engine import optimize_anything`` (imported on first use: the CLI and the worker
    do not need it)."""
    if name in ("optimize_anything", "OptimizeResult"):
        from engine.api import optimize as api
        from engine.api import result

        return api.optimize_anything if name == "optimize_anything" else result.OptimizeResult
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
