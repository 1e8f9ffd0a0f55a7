"""GEPA's config objects for ``optimize_anything(config=...)``, read as Refract's settings.

``config`` may be GEPA 0.1.4's own ``GEPAConfig`` (``gepa.optimize_anything``, when gepa is
installed) or the classes below, which carry GEPA's field names and defaults so that a GEPA
program runs without gepa installed (``refract_evaluator.GEPAConfig`` is this one). Both are read
field by field (``translate``): each field maps to a Refract setting, or has no effect because
Refract always does what it asks (``NO_EFFECT``), or, set to anything but its default, is refused
by name with the reason (``config.engine.val_evaluation_policy: …``), never silently ignored.

A GEPA config means GEPA's defaults where the two differ: one proposal per step (GEPA's
``SingleMutationSampling``; its ``PxNSampling(p, n)`` & co. map to the batch shape), a
minibatch of 1 without a dataset and 3 with one, the progress bar off, and an evaluator that
raises ending the run with its error (``raise_on_exception``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from engine.config import ConfigError

GEPA_DEFAULT_REFLECTION_LM = "openai/gpt-5.1"

# Fields whose request Refract always meets, or that concern GEPA's own internals: read, no effect.
NO_EFFECT = {
    "engine.use_cloudpickle": "a process pool pickles the evaluator itself (pool=\"process\")",
    "engine.track_best_outputs": "every evaluation's side information is stored",
    "engine.capture_stdio": "print() and stderr are always captured into side_info",
    "engine.cache_evaluation": "evaluations are always cached by content in the run's database",
    "engine.cache_evaluation_storage": "the cache is the run's database",
    "tracking.key_prefix": "nothing is sent to a tracker",
    "tracking.wandb_api_key": "nothing is sent to W&B", "tracking.wandb_init_kwargs": "nothing is sent to W&B",
    "tracking.wandb_attach_existing": "nothing is sent to W&B", "tracking.wandb_step_metric": "nothing is sent to W&B",
    "tracking.mlflow_tracking_uri": "nothing is sent to MLflow",
    "tracking.mlflow_experiment_name": "nothing is sent to MLflow",
    "tracking.mlflow_attach_existing": "nothing is sent to MLflow",
}

_WATCH = "the studio shows the run live and the database keeps every step (python -m engine export RUN)"
# Fields refused when set (to anything but the default beside them), with the reason.
REFUSED = {
    "engine.val_evaluation_policy": ("full_eval", "Refract validates every child on the whole valset (it may stop a "
                                     "pass early once the child cannot reach the frontier); custom policies are not supported"),
    "reflection.reflection_strategy": (None, "the reflection call is Refract's own (give reflection_lm instead)"),
    "reflection.batch_sampler": ("epoch_shuffled", "minibatches are always epoch-shuffled"),
    "reflection.custom_candidate_proposer": (None, "custom proposers are not supported; the reflection LM proposes"),
    "merge.merge_val_overlap_floor": (5, "Refract's merge is a three-way text merge over the common ancestor, "
                                      "with no overlap floor"),
    "tracking.logger": (None, f"GEPA's loggers are not supported: {_WATCH}"),
    "tracking.use_wandb": (False, f"W&B tracking is not supported: {_WATCH}"),
    "tracking.use_mlflow": (False, f"MLflow tracking is not supported: {_WATCH}"),
    "callbacks": (None, f"observation callbacks are not supported: {_WATCH}"),
}

SELECTION = {"pareto": "pareto", "current_best": "best", "epsilon_greedy": "epsilon_greedy",
             "top_k_pareto": "top_k_pareto"}
IMPROVEMENT = {"strict_improvement": "strict", "improvement_or_equal": "improvement_or_equal"}


@dataclass
class EngineConfig:
    run_dir: Optional[str] = None
    seed: int = 0
    display_progress_bar: bool = False
    raise_on_exception: bool = True
    use_cloudpickle: bool = True
    track_best_outputs: bool = True
    max_metric_calls: Optional[int] = None
    max_candidate_proposals: Optional[int] = None
    max_reflection_cost: Optional[float] = None
    val_evaluation_policy: Any = "full_eval"
    candidate_selection_strategy: Any = "pareto"
    frontier_type: str = "hybrid"
    acceptance_criterion: Any = "strict_improvement"
    parallel: bool = True
    max_workers: Optional[int] = field(default_factory=lambda: os.cpu_count() or 32)
    cache_evaluation: bool = False
    cache_evaluation_storage: str = "auto"
    best_example_evals_k: int = 30
    capture_stdio: bool = False
    sampling_strategy: Any = None
    selection_strategy: Any = None


@dataclass
class ReflectionConfig:
    skip_perfect_score: bool = False
    perfect_score: Optional[float] = None
    reflection_strategy: Any = None
    batch_sampler: Any = "epoch_shuffled"
    reflection_minibatch_size: Optional[int] = None
    module_selector: Any = "round_robin"
    reflection_lm: Any = GEPA_DEFAULT_REFLECTION_LM
    reflection_lm_kwargs: Optional[dict] = None
    reflection_prompt_template: Any = None  # None: Refract's default prompt (GEPA's default text is read as it)
    custom_candidate_proposer: Any = None


@dataclass
class MergeConfig:
    max_merge_invocations: int = 5
    merge_val_overlap_floor: int = 5


@dataclass
class RefinerConfig:
    refiner_lm: Any = None
    max_refinements: int = 1


@dataclass
class TrackingConfig:
    logger: Any = None
    use_wandb: bool = False
    wandb_api_key: Optional[str] = None
    wandb_init_kwargs: Optional[dict] = None
    wandb_attach_existing: bool = False
    wandb_step_metric: Optional[str] = None
    use_mlflow: bool = False
    mlflow_tracking_uri: Optional[str] = None
    mlflow_experiment_name: Optional[str] = None
    mlflow_attach_existing: bool = False
    key_prefix: str = ""


_PARTS = {"engine": EngineConfig, "reflection": ReflectionConfig, "tracking": TrackingConfig,
          "merge": MergeConfig, "refiner": RefinerConfig}


@dataclass
class GEPAConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    reflection: ReflectionConfig = field(default_factory=ReflectionConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    merge: Optional[MergeConfig] = None
    refiner: Optional[RefinerConfig] = None
    stop_callbacks: Any = None
    callbacks: Optional[list] = None

    def __post_init__(self) -> None:
        for name, cls in _PARTS.items():  # dicts, e.g. from a JSON or YAML file
            if isinstance(getattr(self, name), dict):
                setattr(self, name, cls(**getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "GEPAConfig":
        return GEPAConfig(**d)


def is_gepa_config(obj: Any) -> bool:
    """GEPA's GEPAConfig or this module's (read by their fields, not their class)."""
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type) and type(obj).__name__ == "GEPAConfig"


@dataclass
class Translated:
    """A GEPA config as Refract's config sections plus what ``optimize_anything`` takes apart."""

    config: dict
    reflection_lm: Any = None  # a model string, a callable, or None (Refract's default model)
    reflection_lm_given: bool = False  # None set on purpose (a seedless run then has no LM)
    stop_callbacks: list = field(default_factory=list)
    progress: bool = False
    pool: Optional[str] = None
    raise_on_exception: bool = True
    run_dir: Optional[str] = None


def _value(part: Any, name: str, default: Any = None) -> Any:
    return getattr(part, name, default) if part is not None else default


def _refuse_set(cfg: Any) -> None:
    """Every field of REFUSED that holds more than its default, as one ConfigError."""
    problems = []
    for path, (default, reason) in REFUSED.items():
        head, _, name = path.rpartition(".")
        part = getattr(cfg, head, None) if head else cfg
        value = _value(part, name, default)
        if value not in (default, None, []):
            problems.append(f"config.{path}: {reason}")
    if cfg.refiner is not None:
        problems.append("config.refiner: GEPA's refiner (an extra LM call after each evaluation) is not supported; "
                        "leave refiner=None: the reflection LM already reads every evaluation's side information")
    if problems:
        raise ConfigError("\n".join(problems))


def translate(cfg: Any, single_task: bool) -> Translated:
    """Refract's settings for a GEPA config; ConfigError naming every field it cannot honour."""
    _refuse_set(cfg)
    eng, ref = cfg.engine, cfg.reflection
    search, budget, executor = _search(eng, ref, single_task), _budget(eng), {}
    workers = eng.max_workers if eng.parallel else 1
    if workers:
        executor["workers"] = max(1, min(int(workers), 256))
    if cfg.merge is not None:
        search.update(merge=True, max_merges=cfg.merge.max_merge_invocations)
    if eng.cache_evaluation and eng.cache_evaluation_storage == "disk" and not eng.run_dir:
        raise ConfigError("config.engine.cache_evaluation_storage: cache_evaluation_storage='disk' requires run_dir "
                          "in EngineConfig")
    out = Translated(config={"search": search, "budget": budget, "executor": executor,
                             "reflection_lm": _lm_settings(ref, cfg)},
                     progress=bool(eng.display_progress_bar), pool=None if eng.parallel else "main",
                     raise_on_exception=bool(eng.raise_on_exception), run_dir=eng.run_dir)
    out.reflection_lm, out.reflection_lm_given = ref.reflection_lm, True
    out.stop_callbacks = _stoppers(cfg.stop_callbacks, eng.run_dir)
    return out


def _search(eng: Any, ref: Any, single_task: bool) -> dict:
    selection = eng.candidate_selection_strategy
    if selection not in SELECTION:
        raise ConfigError(f"config.engine.candidate_selection_strategy: {_named(selection)} is not one of "
                          f"{', '.join(SELECTION)} (custom selectors are not supported)")
    improvement = eng.acceptance_criterion
    if improvement not in IMPROVEMENT:
        raise ConfigError(f"config.engine.acceptance_criterion: {_named(improvement)} is not one of "
                          f"{', '.join(IMPROVEMENT)} (custom criteria are not supported)")
    if ref.module_selector not in ("round_robin", "all"):
        raise ConfigError(f"config.reflection.module_selector: {_named(ref.module_selector)} is not round_robin or all "
                          "(custom selectors are not supported)")
    parents, proposals = _shape(eng.sampling_strategy)
    search = {"selection": SELECTION[selection], "improvement": IMPROVEMENT[improvement],
              "frontier": eng.frontier_type, "component_selector": ref.module_selector, "seed": eng.seed,
              "parents_per_step": parents, "proposals_per_parent": proposals,
              "minibatch_size": ref.reflection_minibatch_size or (1 if single_task else 3),
              "skip_perfect_score": bool(ref.skip_perfect_score), "best_example_evals_k": eng.best_example_evals_k,
              **_accept(eng.selection_strategy)}
    if ref.perfect_score is not None:
        search["max_score"] = ref.perfect_score
    return search


def _shape(sampling: Any) -> tuple[int, int]:
    """GEPA's sampling strategy as the batch shape (parents per step, proposals per parent)."""
    name = type(sampling).__name__
    if sampling is None or name == "SingleMutationSampling":
        return 1, 1
    if name == "PxNSampling":
        return int(sampling.p), int(sampling.n)
    if name == "SameParentSampling":
        return 1, int(sampling.n)
    if name == "IndependentSampling":
        return int(sampling.n), 1
    raise ConfigError(f"config.engine.sampling_strategy: {name} is not supported; use PxNSampling(p, n), "
                      "SameParentSampling(n) or IndependentSampling(n) (they map to the batch shape P × K)")


def _accept(selection: Any) -> dict:
    """GEPA's selection strategy as ``[search] accept``."""
    name = type(selection).__name__
    if selection is None:  # not chosen: Refract's default shape (engine.config.default_shape)
        return {}
    if name == "AllImprovements":
        return {"accept": "all"}
    if name == "BestImprovement":
        return {"accept": "best"}
    if name == "TopKImprovements":
        return {"accept": "top_k", "top_k": int(selection.k)}
    raise ConfigError(f"config.engine.selection_strategy: {name} is not supported; use AllImprovements(), "
                      "BestImprovement() or TopKImprovements(k) (they map to [search] accept)")


def _budget(eng: Any) -> dict:
    budget: dict = {"max_metric_calls": eng.max_metric_calls}
    if eng.max_candidate_proposals is not None:
        budget["max_candidate_proposals"] = eng.max_candidate_proposals
    if eng.max_reflection_cost is not None:  # Refract's dollar budget counts every LM call of the run
        budget["max_cost_usd"] = eng.max_reflection_cost
    return budget


def _lm_settings(ref: Any, cfg: Any) -> dict:
    """[reflection_lm] without its model (given apart: it may be a callable)."""
    settings: dict = {}
    kwargs = dict(ref.reflection_lm_kwargs or {})
    for name in ("temperature", "max_tokens"):
        if name in kwargs:
            settings[name] = kwargs.pop(name)
    if kwargs:
        settings["kwargs"] = kwargs
    template = ref.reflection_prompt_template
    if isinstance(template, dict):
        raise ConfigError("config.reflection.reflection_prompt_template: a template per component is not supported; "
                          "give one template (its {component} placeholder names the component being rewritten)")
    gepa_default = getattr(sys.modules.get(type(cfg).__module__), "optimize_anything_reflection_prompt_template", None)
    if isinstance(template, str) and template != gepa_default:
        settings["prompt_template"] = template
    return settings


def _stoppers(stop_callbacks: Any, run_dir: Optional[str]) -> list[Callable]:
    from engine.stopping import callbacks_of

    stoppers = callbacks_of(stop_callbacks)
    if run_dir:  # as GEPA does: touching RUN_DIR/gepa.stop ends the run
        os.makedirs(run_dir, exist_ok=True)
        stoppers.append(StopFile(os.path.join(run_dir, "gepa.stop")))
    return stoppers


class StopFile:
    """A stop callback: True once ``path`` exists (GEPA's ``FileStopper`` on ``run_dir/gepa.stop``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, state: Any) -> bool:
        return os.path.exists(self.path)


def _named(value: Any) -> str:
    return repr(value) if isinstance(value, str) else type(value).__name__
