"""The export document (``refract-run/2``), defined once: ``export_run`` writes it through these
models and ``import_run`` reads it through them, so the export of a finished run always imports
and nothing of another shape does.

Reading checks the shape and every value before a row is written: types without coercion (a
count is a whole number, never ``"many"`` or ``true``), ranges (no negative cost, no count a
database column cannot hold), the database's text lengths, the words of each state, timestamps,
and that every reference (a parent, an evaluation's candidate and example, an LM call's position,
a step's commands) names something the document holds (``references``). Only a finished run is
imported (completed, failed or stopped): a queued or running one would be claimed by a worker and
run again (``importable``); any run can be exported. Problems are ``field: reason`` lines, e.g. ``candidates.2.content: missing``.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from storage.models import LM_ERROR_KINDS
from storage.states import FINISHED, CandidateStatus, CommandStatus, LMCallStatus, MergePath, Origin, RunStatus

from engine.interrupt import INTERRUPTED

FORMAT = "refract-run/2"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
INT_MAX = 2**31 - 1  # an INTEGER column of PostgreSQL


def _no_nul(text: str) -> str:
    if "\x00" in text:  # PostgreSQL cannot store it in a text column
        raise ValueError("must not contain a NUL character")
    return text


def _stamp(text: str) -> str:
    try:
        datetime.strptime(text, TIME_FORMAT)
    except ValueError:
        raise ValueError(f"must be a UTC time such as 2026-01-31T12:00:00.000000Z, not {text[:40]!r}") from None
    return text


def Text(max_length: Optional[int] = None):  # noqa: N802 -- a type
    return Annotated[str, Field(max_length=max_length), AfterValidator(_no_nul)]


Count = Annotated[int, Field(ge=0, le=INT_MAX)]
Amount = Annotated[float, Field(ge=0)]  # dollars, seconds
Stamp = Optional[Annotated[str, AfterValidator(_stamp)]]
Ratio = Optional[Annotated[float, Field(allow_inf_nan=True)]]  # measured figures: whatever the step measured
Id = Annotated[str, Field(min_length=1, max_length=32), AfterValidator(_no_nul)]


def _words(enum) -> Any:
    return Literal[tuple(m.value for m in enum)]


class _Doc(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class LMTotals(_Doc):
    total: Count = 0
    failed: Count = 0
    interrupted: Count = 0


class Proposals(_Doc):
    total: Count
    parsed: Count
    valid: Count
    improved: Count
    retried: Count = 0  # not counted before refract-run/2 had it


class Totals(_Doc):
    metric_calls: Count
    cost_usd: Amount
    tokens_in: Count
    tokens_out: Count
    seconds: Amount
    steps: Count
    budget_overshoot: Count
    lm_calls: Optional[LMTotals] = None  # older documents: counted as none
    proposals: Proposals


class RunDoc(_Doc):
    id: Id
    name: Text(200) = Field(min_length=1)
    owner: Text(100) = ""
    config: dict[str, Any]
    status: _words(RunStatus)
    status_reason: Text() = ""
    created_at: Stamp = None
    started_at: Stamp = None
    finished_at: Stamp = None
    totals: Totals


class ExampleDoc(_Doc):
    id: Text(200) = Field(min_length=1)
    split: Literal["train", "val", "test"]
    payload: Any = None


class CandidateDoc(_Doc):
    id: Id
    parent_ids: list[Id] = []
    origin: _words(Origin)
    step: Count = 0
    content: dict[Text(200), Text()]  # empty for a proposal that never got a text (failed)
    status: _words(CandidateStatus)
    reason: Text() = ""
    component: Optional[Text(200)] = None
    merge_path: Optional[Literal[("", *(m.value for m in MergePath))]] = None  # older documents: from the origin
    pinned: bool = False
    vetoed: bool = False
    author: Text(100) = ""
    val_mean: Optional[float] = None
    val_scores: dict[Text(200), float] = {}
    val_cut_short: Text(500) = ""
    minibatch_score: Optional[float] = None
    parent_minibatch_score: Optional[float] = None
    minibatch_keys: list[Text(200)] = []
    frontier_version: Count = 0
    created_at: Stamp = None
    started_at: Stamp = None
    finished_at: Stamp = None
    lm_call: Optional[Count] = None  # a position in ``lm_calls``


class EvaluationDoc(_Doc):
    candidate_id: Id
    example_id: Optional[Text(200)] = None
    score: float
    side_info: dict[str, Any] = {}
    error: Optional[Text()] = None
    cached: bool = False
    seconds: Amount = 0.0
    cost_usd: Amount = 0.0
    created_at: Stamp = None


class LMCallDoc(_Doc):
    purpose: Literal["reflection", "merge", "seed", "task", "judge", "test", "check", "analysis"]
    model: Text(200)
    candidate_id: Optional[Text(32)] = None
    example_id: Optional[Text(200)] = None
    step: Optional[Count] = None
    messages: list[Any] = []
    answer: Text() = ""
    tokens_in: Count = 0
    tokens_out: Count = 0
    cost_usd: Amount = 0.0
    seconds: Amount = 0.0
    cached: bool = False
    error: Optional[Text()] = None
    attempt: Count = 0
    status: _words(LMCallStatus) = LMCallStatus.DONE.value
    error_kind: Optional[Literal[(*LM_ERROR_KINDS, INTERRUPTED)]] = None
    started_at: Stamp = None


class StepDoc(_Doc):
    index: Count
    parent_ids: list[Id] = []
    parent_reasons: dict[Text(32), Text()] = {}
    proposal_ids: list[Id] = []
    accepted_ids: list[Id] = []
    applied_command_ids: list[Count] = []  # positions in ``commands``
    metric_calls: Count = 0
    started_at: Stamp = None
    ended_at: Stamp = None
    cost_usd: Amount = 0.0
    seconds: Amount = 0.0
    predicted_speedup: Ratio = None
    measured_speedup: Ratio = None
    worker_utilisation: Ratio = None


class CommandDoc(_Doc):
    id: Count  # its position: what steps' applied_command_ids name
    kind: Text(30)
    payload: dict[str, Any] = {}
    author: Text(100) = ""
    reason: Text() = ""
    status: _words(CommandStatus)
    created_at: Stamp = None
    applied_at: Stamp = None
    applied_step: Optional[Count] = None
    result: Text() = ""


class CommentDoc(_Doc):
    candidate_id: Id
    author: Text(100) = ""
    text: Text()
    kind: Literal["comment", "feedback"] = "comment"
    created_at: Stamp = None


class BestDoc(_Doc):
    candidate_id: Optional[Id] = None
    val_mean: Optional[float] = None
    test_mean: Optional[float] = None
    seed_test_mean: Optional[float] = None
    test_cost_usd: Optional[Amount] = None


class Document(_Doc):
    format: Literal[FORMAT]
    run: RunDoc
    examples: list[ExampleDoc] = []
    candidates: list[CandidateDoc] = Field(min_length=1)
    evaluations: list[EvaluationDoc] = []
    lm_calls: list[LMCallDoc] = []
    steps: list[StepDoc] = []
    commands: list[CommandDoc] = []
    comments: list[CommentDoc] = []
    frontier_type: str = "instance"  # written for readers; recomputed from the scores, never read back
    frontier: list[dict[str, Any]] = []
    best: BestDoc = BestDoc()


def _twice(field: str, values: list) -> list[str]:
    return [f"{field}: {v!r} appears {n} times; each must be unique" for v, n in Counter(values).items() if n > 1]


def importable(doc: Document) -> list[str]:
    """``field: reason`` for what an import refuses in a well-formed document: a run that is not
    finished, a reference to something the document does not hold, an id it holds twice."""
    out = []
    if doc.run.status not in FINISHED:
        out.append(f"run.status: {doc.run.status!r} is not a finished run (completed, failed or stopped): only a "
                   "finished run is imported, so that no worker claims it and runs the document's evaluator again; "
                   "stop the run, then export it")
    return out + references(doc)


def references(doc: Document) -> list[str]:
    """``field: reason`` for every reference of the document to something it does not hold, and
    every id it holds twice."""
    cands = {c.id for c in doc.candidates}
    examples = {e.id for e in doc.examples}
    out = _twice("candidates.id", [c.id for c in doc.candidates]) + _twice("examples.id", [e.id for e in doc.examples])
    out += _twice("steps.index", [s.index for s in doc.steps])
    out += _twice("evaluations", [f"{e.candidate_id} on {e.example_id}" for e in doc.evaluations])

    def known(field: str, ids, where: set, what: str) -> None:
        out.extend(f"{field}: {i!r} names no {what} of the document" for i in ids if i is not None and i not in where)

    for n, c in enumerate(doc.candidates):
        if c.status == CandidateStatus.ACCEPTED and not c.content:
            out.append(f"candidates.{n}.content: an accepted candidate needs at least one component")
        known(f"candidates.{n}.parent_ids", c.parent_ids, cands, "candidate")
        if c.lm_call is not None and c.lm_call >= len(doc.lm_calls):
            out.append(f"candidates.{n}.lm_call: {c.lm_call} is not a position in lm_calls (it has {len(doc.lm_calls)})")
    for n, e in enumerate(doc.evaluations):
        known(f"evaluations.{n}.candidate_id", [e.candidate_id], cands, "candidate")
        known(f"evaluations.{n}.example_id", [e.example_id], examples, "example")
    for n, s in enumerate(doc.steps):
        for field in ("parent_ids", "proposal_ids", "accepted_ids"):
            known(f"steps.{n}.{field}", getattr(s, field), cands, "candidate")
        out.extend(f"steps.{n}.applied_command_ids: {i} is not a position in commands (it has {len(doc.commands)})"
                   for i in s.applied_command_ids if i >= len(doc.commands))
    for n, c in enumerate(doc.comments):
        known(f"comments.{n}.candidate_id", [c.candidate_id], cands, "candidate")
    known("best.candidate_id", [doc.best.candidate_id], cands, "candidate")
    return out
