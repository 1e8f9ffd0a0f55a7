"""Run configuration: the TOML a user writes, validated with pydantic.

Every error names the field and says what is wrong (``ConfigError``). Reading a config file and
the files it names is ``engine.config_files`` (``load_config``, ``parse_config``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from engine.config_sections import BranchConfig, ReviewConfig, branch_problem
from engine.lm.providers import is_local, one_at_a_time
from engine.prompt_evaluator import PromptEvaluatorConfig, check_placeholders, generate_source
from engine.user_errors import refuse_bool_number
from engine.config_checks import ConfigWarning, config_warnings, default_proposals, default_shape, narrow_for_one_at_a_time  # noqa: F401  (re-exported)

LOCAL_MODEL = "local/qwen2.5-coder-1.5b"


class ConfigError(ValueError):
    """An invalid run configuration; ``str()`` lists every problem as ``field: reason``."""


class _Strict(BaseModel):
    # nan and inf are no budget, limit or rate: refuse them instead of comparing with them
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_bool_number(cls, info.field_name, value)  # true is no minibatch size


class SearchConfig(_Strict):
    parents_per_step: int = Field(2, ge=1, le=64, description="P: parents selected per step (1 by default on an LM that answers one request at a time, the local model)")
    proposals_per_parent: int = Field(2, ge=1, le=64, description="K: reflective proposals per parent (1 by default on an LM that answers one request at a time)")
    minibatch_size: int = Field(3, ge=1, le=1000)
    selection: Literal["pareto", "best", "epsilon_greedy", "top_k_pareto"] = "pareto"
    top_k_pareto_k: int = Field(5, ge=1, description="k of selection = \"top_k_pareto\" (GEPA's 5)")
    frontier: Literal["instance", "objective", "hybrid", "cartesian"] = Field(
        "hybrid", description="what the Pareto frontier is kept over: examples, side_info['scores'] objectives, both, or each pair")
    skip_perfect_score: bool = Field(False, description="no proposal for a parent that scores max_score on every example of its minibatch")
    component_selector: Literal["round_robin", "all"] = Field("round_robin", description="which components one proposal rewrites")
    epsilon: float = Field(0.1, ge=0, le=1, description="exploration rate for epsilon_greedy")
    improvement: Literal["strict", "improvement_or_equal"] = Field(
        "strict", description="when a child has improved: it beats its parent on the minibatch, or at least equals it")
    acceptance: Optional[Literal["strict", "improvement_or_equal"]] = Field(
        None, description="the old name of `improvement`, still read (config_warnings says so)")
    accept: Literal["all", "best", "top_k"] = Field("all", description="which improving children of a step pay a validation pass (and are accepted)")
    top_k: int = Field(2, ge=1)
    merge: bool = False
    max_merges: int = Field(5, ge=0)
    merge_siblings: bool = False
    schedule: Literal["sync", "async"] = "sync"
    pin_every: int = Field(3, ge=1, description="a pinned candidate is a parent at least once every N steps")
    early_stop_validation: bool = True
    max_score: Optional[float] = Field(None, description="the highest score one example can get (e.g. 1.0); enables early-stopped validation passes")
    require_fence: bool = Field(True, description="an answer without a fenced block is a failed proposal; false takes the whole answer")
    best_example_evals_k: int = Field(30, ge=0, le=1000, description="evaluations per example an evaluator's opt_state holds (GEPA's name)")
    seed: int = 0
    _given: set = PrivateAttr(default_factory=set)

    @model_validator(mode="after")
    def _renamed(self) -> "SearchConfig":
        if self.acceptance is not None:
            self.improvement = self.acceptance
        return self

    @model_validator(mode="after")
    def _batched_default(self) -> "SearchConfig":
        """P × K > 1 and neither ``accept`` nor ``merge_siblings`` given: the shape that keeps
        quality (``default_shape``). Validating every improving child of a wide step spent the
        budget on near-copies of one fix (docs/benchmarks-batching.md). A value the config sets
        is kept, and the stored config holds the values used: a resumed run keeps its shape."""
        given = self.model_fields_set
        self._given = set(given)  # what the config itself set, before the defaults below add to it
        if not given & {"accept", "merge_siblings"} and not (self.schedule == "async" and self.merge):
            for key, value in default_shape(self.batch_size, self.schedule).items():
                setattr(self, key, value)
        return self

    def __eq__(self, other: object) -> bool:
        """Equal values are equal configs, however they were written (``_given`` differs between a
        config and the stored copy of it, which sets every field)."""
        return isinstance(other, SearchConfig) and self.model_dump() == other.model_dump()

    @property
    def given(self) -> set[str]:
        """The fields the config itself set (not the defaults a validator filled in)."""
        return self._given

    @property
    def batch_size(self) -> int:
        return self.parents_per_step * self.proposals_per_parent


class BudgetConfig(_Strict):
    max_metric_calls: Optional[int] = Field(500, ge=1)
    max_cost_usd: Optional[float] = Field(None, gt=0)
    max_seconds: Optional[float] = Field(None, gt=0)
    stop_at_score: Optional[float] = None
    max_steps: Optional[int] = Field(None, ge=1)
    max_candidate_proposals: Optional[int] = Field(None, ge=1, description="stop after this many reflective proposals")
    max_steps_without_improvement: Optional[int] = Field(None, ge=1, description="stop when the best mean has not risen for this many steps")


class LMConfig(_Strict):
    model: str = LOCAL_MODEL
    api_base: Optional[str] = None
    api_key_env: Optional[str] = Field(None, description="name of the environment variable that holds the key")
    temperature: float = Field(0.7, ge=0, le=2)
    max_tokens: int = Field(2000, ge=16, le=200_000)
    timeout_seconds: float = Field(300, gt=0)
    num_retries: int = Field(3, ge=0, le=10)
    max_concurrency: int = Field(8, ge=1, le=256)
    kwargs: dict[str, Any] = Field(default_factory=dict, description="extra litellm parameters from an allow-list")
    prompt_template: Optional[str] = Field(None, description="the reflection prompt with {candidate} and {side_info}")

    @field_validator("kwargs")
    @classmethod
    def _allowed_kwargs(cls, v: dict) -> dict:
        from engine.lm.params import check_kwargs

        return check_kwargs(v)

    @field_validator("prompt_template")
    @classmethod
    def _template(cls, v: Optional[str]) -> Optional[str]:
        from engine.search.reflection_template import check_template

        return None if v is None else check_template(v)

    @field_validator("model")
    @classmethod
    def _model_nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must be a litellm model string such as 'openai/gpt-4.1-mini'")
        return v.strip()

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (not v or not v.replace("_", "").isalnum()):
            raise ValueError("must be the NAME of an environment variable (e.g. OPENAI_API_KEY), never the key itself")
        return v


class ExecutorConfig(_Strict):
    backend: Literal["local", "dask"] = "local"
    address: Optional[str] = Field(None, description="dask scheduler address, or 'local' for a LocalCluster")
    workers: int = Field(4, ge=1, le=256)
    timeout_seconds: float = Field(30, gt=0, le=86_400)
    memory_mb: int = Field(1024, ge=64)
    network: bool = False


class DataLimits(_Strict):
    """How large a dataset may be (each of dataset, valset, testset): a file over a limit is
    refused with the limit's name, so an accident (a 50 MB export) cannot fill the database."""

    max_rows: int = Field(10_000, ge=1, description="rows in one dataset")
    max_row_bytes: int = Field(1_000_000, ge=1, description="bytes in one row")
    max_dataset_bytes: int = Field(20_000_000, ge=1, description="bytes in one dataset file")


class RunConfig(_Strict):
    """A validated run. ``evaluator`` always holds the source; datasets hold parsed rows."""

    name: str = Field(min_length=1, max_length=200)
    objective: str = ""
    background: str = ""
    artifact_kind: str = ""
    seed_candidate: Union[str, dict[str, str], None] = None
    evaluator: str = Field("", description="the evaluator's source; generated when prompt_evaluator is given")
    evaluator_file: Optional[str] = None
    prompt_evaluator: Optional[PromptEvaluatorConfig] = None
    dataset: Optional[list[Any]] = None
    valset: Optional[list[Any]] = None
    testset: Optional[list[Any]] = None
    dataset_file: Optional[str] = None
    valset_file: Optional[str] = None
    testset_file: Optional[str] = None
    search: SearchConfig = SearchConfig()
    budget: BudgetConfig = BudgetConfig()
    reflection_lm: LMConfig = LMConfig()
    task_lm: Optional[LMConfig] = None
    judge_lm: Optional[LMConfig] = Field(None, description="the model of llm_rubric assertions; the reflection LM by default")
    executor: ExecutorConfig = ExecutorConfig()
    limits: DataLimits = DataLimits()
    allow_outside_files: bool = Field(False, description="the files named by *_file may lie outside the config's folder")
    branch: Optional[BranchConfig] = Field(None, description="the run and candidates this run branched from")
    review: ReviewConfig = ReviewConfig()

    @field_validator("seed_candidate")
    @classmethod
    def _seed_nonempty(cls, v):
        if isinstance(v, dict):
            if not v:
                raise ValueError("a [seed_candidate] table needs at least one component")
            for k, text in v.items():
                if not isinstance(text, str):
                    raise ValueError(f"component {k!r} must be a string")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> "RunConfig":
        if self.seed_candidate in (None, "") and not self.objective.strip():
            raise ValueError("seed_candidate: missing; give a seed_candidate, or an objective from which the reflection LM writes the seed")
        for name in ("dataset", "valset", "testset"):
            rows = getattr(self, name)
            if rows is not None and len(rows) == 0:
                raise ValueError(f"{name}: the {name} is empty; give at least one example or leave it out")
            if rows is not None and len(rows) > self.limits.max_rows:
                raise ValueError(f"{name}: {len(rows):,} rows, more than limits.max_rows ({self.limits.max_rows:,}); "
                                 "use a sample of the data, or raise the limit in [limits]")
        if self.testset and not self.dataset:
            raise ValueError("testset: a testset needs a dataset (the search never sees the test set); give a dataset too")
        for name in ("task_lm", "judge_lm"):
            if getattr(self, name) is not None and getattr(self, name).prompt_template is not None:
                raise ValueError(f"{name}.prompt_template: only the reflection LM has a prompt template; move it to [reflection_lm]")
        self._evaluator_source()
        problem = branch_problem(self.branch, self.seed_candidate)
        if problem:
            raise ValueError(problem)
        if one_at_a_time(self.reflection_lm):
            narrow_for_one_at_a_time(self.search, is_local(self.reflection_lm.model))
        if self.search.skip_perfect_score and self.search.max_score is None:
            raise ValueError("search.skip_perfect_score: needs search.max_score (the perfect score of one example)")
        self._schedule_supports_search()
        if self.valset and not self.dataset:
            raise ValueError("valset: a valset needs a dataset (the examples the reflection LM learns from); "
                             "give a dataset, or give these examples as the dataset (it is then also the valset)")
        return self

    def _evaluator_source(self) -> None:
        """A prompt evaluator is compiled to the evaluator's source (again on every load, so
        the stored source always matches the stored table)."""
        if self.prompt_evaluator is None:
            if not self.evaluator:
                raise ValueError("evaluator: must not be empty")
            return
        if self.executor.backend != "local":
            raise ValueError("prompt_evaluator: needs executor.backend = \"local\"; the task LM is called through "
                             "lm(), which Dask workers cannot reach")
        check_placeholders(self.prompt_evaluator, self.seed_candidate, self.dataset)
        self.evaluator = generate_source(self.prompt_evaluator, self.seed_candidate)

    def _schedule_supports_search(self) -> None:
        """Every [search] option works in both schedules or is refused here, where it was set."""
        s = self.search
        if s.schedule != "async" or s.batch_size == 1:  # C = 1 runs the synchronous loop
            return
        if s.accept != "all":
            raise ValueError(f"search.accept: {s.accept!r} chooses among the children of one step; schedule = \"async\" "
                             "validates every improving child as it arrives, so only accept = \"all\" applies")

    @property
    def mode(self) -> str:
        if not self.dataset:
            return "single-task"
        return "generalization" if self.valset else "multi-task"

    @property
    def is_multi_component(self) -> bool:
        return isinstance(self.seed_candidate, dict)

    def stored(self) -> dict:
        """The config as stored in the database and exports (file names kept for provenance;
        it never holds API keys, only the names of the variables that hold them)."""
        return self.model_dump(mode="json")


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# Reading a config (its TOML, the files it names, the budget check) lives in engine.config_files,
# which imports the models above; its functions stay importable from here, where every caller has
# always found them, looked up on first use (an import at load time would be circular).
_READING = ("check_budget_feasible", "load_config", "parse_config", "parse_toml")


def __getattr__(name: str) -> Any:
    if name in _READING:
        from engine import config_files

        return getattr(config_files, name)
    raise AttributeError(f"module 'engine.config' has no attribute {name!r}")
