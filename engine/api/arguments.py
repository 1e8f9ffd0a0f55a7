"""``optimize_anything``'s arguments, checked and turned into a run's config.

``config`` is Refract's (a dict of the TOML's sections, or a ``RunConfig``) or GEPA's
(``GEPAConfig``, read by ``engine.api.gepa_config``). Bad arguments raise ``ConfigError``
(``field: reason``; a ``ValueError``) before anything is stored.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from engine.config import ConfigError, RunConfig, parse_config
from engine.api.gepa_config import is_gepa_config, translate
from engine.sandbox.runtime import outcome

POOLS = ("auto", "thread", "main", "process")


@dataclass
class Plan:
    """How one call runs, beside its config."""

    config: Union[dict, RunConfig, None]
    reflection_model: Optional[str] = None  # a litellm model string (a callable is registered as one)
    stop_callbacks: list = field(default_factory=list)
    progress: bool = True
    pool: str = "thread"
    raise_on_exception: bool = False
    run_dir: Optional[str] = None
    gepa: bool = False  # the config was GEPA's: its result keeps GEPA's candidate form


def plan_call(seed_candidate: Any, config: Any, dataset: Optional[list], reflection_lm: Any, stop_callbacks: Any,
              progress: Optional[bool], pool: str, objective: Optional[str], resume: Optional[str],
              branch_from: Any = None) -> Plan:
    """The call's plan: GEPA's config translated, the arguments' own settings winning where both
    are given only when they agree."""
    from engine.api.callable_lm import model_for
    from engine.stopping import callbacks_of

    if pool not in POOLS:
        raise ConfigError(f"pool: {pool!r} is not one of {', '.join(POOLS)}")
    plan = Plan(config=config, stop_callbacks=callbacks_of(stop_callbacks))
    lm_given = reflection_lm is not None
    if is_gepa_config(config):
        t = translate(config, single_task=dataset is None)
        if reflection_lm is not None and t.reflection_lm not in (None, reflection_lm):
            raise ConfigError("reflection_lm: also given in config.reflection.reflection_lm; give it once")
        reflection_lm, lm_given = reflection_lm if reflection_lm is not None else t.reflection_lm, True
        plan.config, plan.stop_callbacks = t.config, plan.stop_callbacks + t.stop_callbacks
        plan.raise_on_exception, plan.run_dir, plan.gepa = t.raise_on_exception, t.run_dir, True
        progress = t.progress if progress is None else progress
        pool = t.pool if pool == "auto" and t.pool else pool
    elif not isinstance(config, (dict, RunConfig, type(None))):
        raise ConfigError(f"config: must be a dict, a RunConfig or a GEPAConfig, not {type(config).__name__}")
    if seed_candidate is None and not resume and branch_from is None:  # a branch's seeds come from its base run
        if not (objective or "").strip():
            raise ConfigError("objective: 'objective' is required when seed_candidate is None: the reflection LM "
                              "writes the first candidate from it")
        if lm_given and reflection_lm is None:
            raise ConfigError("reflection_lm: reflection_lm is required when seed_candidate is None: it writes the "
                              "first candidate (give a model name or a callable)")
    plan.reflection_model = model_for(reflection_lm) if callable(reflection_lm) else reflection_lm
    if plan.reflection_model is not None and not isinstance(plan.reflection_model, str):
        raise ConfigError(f"reflection_lm: must be a litellm model string or a callable (prompt) -> str, "
                          f"not {type(reflection_lm).__name__}")
    plan.progress = True if progress is None else bool(progress)
    # GEPA evaluates a lone example on the calling thread (where `signal` works); so does Refract
    plan.pool = ("main" if dataset is None else "thread") if pool == "auto" else pool
    return plan


def build_config(seed_candidate, evaluator: Callable, dataset, valset, testset, objective, background,
                 config: Union[dict, RunConfig, None], name: Optional[str],
                 reflection_model: Optional[str] = None) -> RunConfig:
    """The run's validated config: ``config``'s settings plus the arguments (an argument and a
    ``config`` key for the same thing is an error, not a silent choice). No budget is too small
    here: as in GEPA, the run does what it allows (the seed's evaluation first) and says why it
    stopped."""
    data = config.model_dump(mode="json") if isinstance(config, RunConfig) else dict(config or {})
    given = {"seed_candidate": seed_candidate, "objective": objective, "background": background, "name": name,
             "dataset": _storable(dataset, "dataset"), "valset": _storable(valset, "valset"),
             "testset": _storable(testset, "testset")}
    for key, value in given.items():
        if value is None:
            continue
        if data.get(key) not in (None, value) and not isinstance(config, RunConfig):
            raise ConfigError(f"config.{key}: also given as the argument {key}=; give it once")
        data[key] = value
    if reflection_model is not None:
        lm = dict(data.get("reflection_lm") or {})
        if lm.get("model") not in (None, reflection_model) and not isinstance(config, RunConfig):
            raise ConfigError("config.reflection_lm.model: also given as the argument reflection_lm=; give it once")
        data["reflection_lm"] = {**lm, "model": reflection_model}
    data.pop("evaluator_file", None)
    data["evaluator"] = evaluator_record(evaluator)
    data.setdefault("name", getattr(evaluator, "__name__", "") or "python run")
    return parse_config(data, check_budget=False)


def check_pickles(fn: Optional[Callable], field_name: str) -> None:
    """A process pool sends the function to its processes by pickling it."""
    if fn is None:
        return
    try:
        pickle.dumps(fn)
    except Exception as exc:  # pickling raises several types (PicklingError, AttributeError, TypeError…)
        raise ConfigError(f"{field_name}: cannot be sent to a process pool ({exc}); define it at the top level of a "
                          "module, or use pool=\"thread\"") from None


def evaluator_record(fn: Callable) -> str:
    """What the run stores as its evaluator: provenance only (the function runs from memory)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = ""
    where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return (f"# evaluated in the Python process that started this run, not sandboxed: {where}\n"
            + (source or "# (source not available)\n"))


def _storable(rows: Optional[list], field_name: str) -> Optional[list]:
    """The examples as stored for the studio and shown to the reflection LM: JSON as they are;
    a dataclass or a pydantic model as its fields; anything else as its repr."""
    if rows is None:
        return None
    if not isinstance(rows, (list, tuple)):
        raise ConfigError(f"{field_name}: must be a list of examples, not {type(rows).__name__}")
    return [_storable_row(row, f"{field_name}[{i}]") for i, row in enumerate(rows)]


def _storable_row(row: Any, where: str) -> Any:
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        fields = dataclasses.asdict(row)
    elif callable(getattr(row, "model_dump", None)):
        fields = row.model_dump()
    else:
        fields = row
    try:
        return outcome.to_json(fields, where)
    except outcome.NotJSON:
        return {"repr": repr(row)[:2000]}
