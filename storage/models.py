"""SQLModel tables: the data model of docs/design.md §7.

The database is the only interface between the studio and the engine, so every fact the
engine learns is a row here. Ids of runs and candidates are short random strings chosen by
the application (not autoincrement integers) so that an export can be imported into another
database with the same ids. JSON columns are reassigned, never edited in place (SQLAlchemy
does not notice in-place edits).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import JSON, Column, Index, Integer, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from storage.states import CandidateStatus, CommandStatus, JobStatus, LMCallStatus, RunStatus


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(5)}"


def _json(default: Any = None) -> Any:
    factory = (lambda: {}) if default == "dict" else (lambda: [])
    return Field(default_factory=factory, sa_column=Column(JSON, nullable=False))


class Run(SQLModel, table=True):
    id: str = Field(default_factory=lambda: new_id("r"), primary_key=True, max_length=32)
    name: str = Field(max_length=200)
    owner: str = Field(default="", max_length=100)
    config: dict = _json("dict")
    status: str = Field(default=RunStatus.QUEUED.value, index=True, max_length=20)  # storage.states.RunStatus
    status_reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    created_at: datetime = Field(default_factory=utcnow)
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    # lease: a worker owns a running run until lease_expires_at; heartbeats extend it
    lease_owner: Optional[str] = Field(default=None, max_length=100)
    lease_expires_at: Optional[datetime] = None
    heartbeat_at: Optional[datetime] = None
    # set for a run started from Python (engine.api.optimize): its evaluator lives in that process, so no
    # engine worker may claim it; holds the id of the process that started or last resumed it
    attached_to: Optional[str] = Field(default=None, max_length=100)
    step_mode: bool = False  # run exactly one step, then pause (teaching)
    # totals, updated atomically as facts are recorded
    metric_calls: int = 0
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0  # the search's running time (what max_seconds counts), as of seconds_at
    # when the worker running the run last wrote ``seconds``; None while no worker runs it (queued,
    # paused, finished). storage.run_figures.running_seconds adds the time since, while it runs
    seconds_at: Optional[datetime] = None
    test_seconds: float = Field(default=0.0, sa_column_kwargs={"server_default": "0"})  # the held-out test passes
    steps_done: int = 0
    proposals_total: int = 0
    proposals_parsed: int = 0
    proposals_valid: int = 0
    # proposals whose reflection LM answered (usable or not): the denominator of the parse, validity
    # and improvement rates, so that a proposal still waiting for its answer, or whose LM failed, is
    # never counted as unparsed (and a retry in flight never pushes a rate above 100 %)
    proposals_answered: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # proposals whose first answer was unusable and that asked the LM once more (each one more reflection call)
    proposals_retried: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # children that beat their parent on the minibatch ("improved"; "accepted" means validated).
    # The database column keeps its first name, so existing databases read unchanged.
    proposals_improved: int = Field(default=0, sa_column=Column("proposals_accepted", Integer, nullable=False, default=0))
    budget_overshoot: int = 0
    # one more each time the frontier may have changed (a validation pass, a veto, an unveto): the
    # studio reads the frontier again only when it moves
    frontier_version: int = 0
    # the frontier_version that the run's ``frontier`` rows and its candidates' frontier counts
    # describe (written with them, in one transaction, by the engine); -1 when the engine does not
    # keep them (a run recorded by an older release): the studio then computes the frontier from
    # the evaluations, as it did before
    frontier_kept: int = Field(default=-1, sa_column_kwargs={"server_default": "-1"})
    consecutive_lm_failures: int = 0
    # LM attempts (every retry is one), those that failed, and those a crash cut off (see LMCall)
    lm_calls: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    lm_calls_failed: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    lm_calls_interrupted: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    best_candidate_id: Optional[str] = Field(default=None, max_length=32)
    best_val_mean: Optional[float] = None
    test_mean: Optional[float] = None
    seed_test_mean: Optional[float] = None  # the seed on the test set (the held-out audit's baseline)
    test_cost_usd: float = 0.0  # dollars of the test pass's lm() calls, outside the dollar budget
    # the candidate a person approved (the ``approve`` command: who and why are on that command)
    approved_candidate_id: Optional[str] = Field(default=None, max_length=32)
    # a branch: the run it started from (its config's [branch] run), kept as a plain id without a
    # foreign key, so that deleting the base run leaves its branches whole
    branch_of: Optional[str] = Field(default=None, index=True, max_length=32)


class Example(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("run_id", "key"),)
    pk: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True, max_length=32)
    key: str = Field(max_length=200)  # the example id shown to users and used in exports
    split: str = Field(max_length=10)  # train | val | test
    position: int = 0
    payload: Any = Field(default=None, sa_column=Column(JSON))


class Candidate(SQLModel, table=True):
    __table_args__ = (Index("ix_candidate_run_hash", "run_id", "content_hash"),)
    id: str = Field(default_factory=lambda: new_id("c"), primary_key=True, max_length=32)
    run_id: str = Field(foreign_key="run.id", index=True, max_length=32)
    content: dict = _json("dict")
    content_hash: str = Field(max_length=64)
    origin: str = Field(max_length=20)  # storage.states.Origin
    parent_ids: list = _json("list")
    component: Optional[str] = Field(default=None, max_length=200)  # component rewritten
    merge_path: str = Field(default="", max_length=20)  # a merge: storage.states.MergePath; else ""
    step: int = 0
    status: str = Field(default=CandidateStatus.PROPOSED.value, index=True, max_length=20)  # CandidateStatus
    # beat its parent on the minibatch (a merge: kept every version's gains); set when it was tested
    improved: bool = False
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    cause: str = Field(default="", max_length=20)  # storage.states.Cause of a failure or rejection; else ""
    pinned: bool = False
    vetoed: bool = False
    author: str = Field(default="", max_length=100)
    created_at: datetime = Field(default_factory=utcnow)
    lm_call_id: Optional[int] = None  # the reflection / merge call that wrote it
    parent_minibatch_score: Optional[float] = None
    minibatch_score: Optional[float] = None
    minibatch_keys: list = _json("list")
    # how the parent's minibatch was drawn (engine.search.minibatch): known failures, redraws
    minibatch_reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    val_mean: Optional[float] = None
    val_count: int = 0
    # its lowest and highest validation score (None: not validated, or recorded by an older release):
    # with val_mean and val_count, what the studio tells degenerate frontier members by without
    # reading every score (engine.analyze.degenerate.from_aggregates)
    val_min: Optional[float] = None
    val_max: Optional[float] = None
    val_cut_short: str = Field(default="", max_length=500)
    # how many validation examples it holds the best score on (ties included), and how many entries
    # of the run's frontier type ([search] frontier: the same number for "instance"); kept by the
    # engine with the run's ``frontier`` rows, 0 while it is not on the frontier or is vetoed
    frontier_examples: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    frontier_entries: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    frontier_version: int = 0  # the frontier version the proposal started from
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None


class Evaluation(SQLModel, table=True):
    __table_args__ = (
        UniqueConstraint("candidate_id", "example_pk"),
        Index("ix_evaluation_run", "run_id"),
        # covers the studio's read of a run's validation scores without touching the table
        Index("ix_evaluation_scores", "run_id", "candidate_id", "example_pk", "score"),
    )
    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=32)
    candidate_id: str = Field(foreign_key="candidate.id", index=True, max_length=32)
    example_pk: Optional[int] = Field(default=None, foreign_key="example.pk")
    content_hash: str = Field(max_length=64, index=True)
    score: float = 0.0
    side_info: dict = _json("dict")
    error: Optional[str] = Field(default=None, sa_column=Column(Text))
    seconds: float = 0.0
    cost_usd: float = 0.0
    cached: bool = False
    # a copy of an evaluation another run recorded of the same text on the same example (a branch
    # reusing its base run's, engine/reuse.py): that run's id. Cached too: it costs no metric call.
    reused_from: Optional[str] = Field(default=None, max_length=32)
    created_at: datetime = Field(default_factory=utcnow)


class Frontier(SQLModel, table=True):
    """One entry of a run's frontier as the engine keeps it (``engine.search.kept_frontier``): per
    validation example (``objective`` ""), and with a ``[search] frontier`` type other than
    ``instance`` per objective (``example`` "": the candidates' means of it) or per (example,
    objective) pair, the best value of the eligible candidates (accepted, not vetoed), the lowest
    (the entry is *contested* when they differ) and how many candidates hold the best (ties
    within 1e-9). A few hundred rows, where the scores they summarise are millions."""

    __table_args__ = (UniqueConstraint("run_id", "example", "objective"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True, max_length=32)
    example: str = Field(default="", max_length=200)  # the example key; "" for an objective's mean
    objective: str = Field(default="", max_length=200)  # a side_info["scores"] name; "" for the score
    best: float
    lowest: float
    holders: int = 0


# LMCall.error_kind values (engine.lm.errors.error_kind, plus an unusable answer and a crash)
LM_ERROR_KINDS = ("rate_limit", "server_error", "timeout", "bad_body", "connection", "request", "no_fence", "crash")


class LMCall(SQLModel, table=True):
    """One attempt at an LM request: each retry is a row of its own (``attempt`` 0, 1, …).

    ``status``: ``started`` (written before the request is sent), ``done`` (an answer came
    back), ``failed`` (``error`` and ``error_kind`` say why) or ``interrupted`` (the worker
    died while it was in flight: tokens unknown, ``cost_usd`` estimated from the prompt).
    An answer the engine could not use (``no_fence``) is ``failed`` too, with its answer,
    tokens and cost kept (databases written before kept such a row ``done``).
    """

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: Optional[str] = Field(default=None, foreign_key="run.id", index=True, max_length=32)
    purpose: str = Field(max_length=20)  # reflection | merge | seed | task | judge | test | check | analysis
    candidate_id: Optional[str] = Field(default=None, max_length=32)
    example_key: Optional[str] = Field(default=None, max_length=200)
    step: Optional[int] = None
    model: str = Field(max_length=200)
    messages: list = _json("list")
    answer: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    cached: bool = False
    error: Optional[str] = Field(default=None, sa_column=Column(Text))
    started_at: datetime = Field(default_factory=utcnow)
    attempt: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    status: str = Field(default=LMCallStatus.DONE.value, max_length=20,  # storage.states.LMCallStatus
                        sa_column_kwargs={"server_default": LMCallStatus.DONE.value})
    # rate_limit | server_error | timeout | bad_body | connection | request | no_fence | crash
    error_kind: Optional[str] = Field(default=None, max_length=20)


class Step(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("run_id", "index"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True, max_length=32)
    index: int
    parent_ids: list = _json("list")
    parent_reasons: dict = _json("dict")  # candidate id -> why it was chosen
    proposal_ids: list = _json("list")
    accepted_ids: list = _json("list")
    applied_command_ids: list = _json("list")
    metric_calls: int = 0
    cost_usd: float = 0.0
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: Optional[datetime] = None
    seconds: float = 0.0
    predicted_speedup: Optional[float] = None
    measured_speedup: Optional[float] = None  # k × the runtime model's 1×1 step time / this step's wall-clock
    worker_utilisation: Optional[float] = None
    events: list = _json("list")  # timeline: [{kind, start, end, candidate_id}]


class Command(SQLModel, table=True):
    # one submission, one command: a repeated client token (a double click, a retried request)
    # is refused by the database itself, whichever process sends it
    __table_args__ = (Index("ux_command_client_token", "run_id", "client_token", unique=True),)
    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True, max_length=32)
    kind: str = Field(max_length=30)
    payload: dict = _json("dict")
    author: str = Field(default="", max_length=100)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    created_at: datetime = Field(default_factory=utcnow)
    status: str = Field(default=CommandStatus.PENDING.value, max_length=20)  # CommandStatus
    applied_at: Optional[datetime] = None
    applied_step: Optional[int] = None
    result: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    client_token: Optional[str] = Field(default=None, max_length=64)  # the sender's id for this submission


class Comment(SQLModel, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True, max_length=32)
    candidate_id: str = Field(foreign_key="candidate.id", index=True, max_length=32)
    author: str = Field(default="", max_length=100)
    text: str = Field(sa_column=Column(Text, nullable=False))
    kind: str = Field(default="comment", max_length=20)  # comment | feedback
    created_at: datetime = Field(default_factory=utcnow)


class WorkerBeat(SQLModel, table=True):
    """One row per engine worker process: the studio shows its heartbeat."""

    id: str = Field(primary_key=True, max_length=100)
    pid: int
    host: str = Field(max_length=200)
    started_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime = Field(default_factory=utcnow)
    current_run_id: Optional[str] = Field(default=None, max_length=32)  # the first of run_ids
    run_ids: list = _json()  # the runs it runs now
    max_runs: int = 1  # how many runs it runs at once
    stopped_at: Optional[datetime] = None  # when it exited cleanly (None: running, or it died)


class Job(SQLModel, table=True):
    """Short work the studio asks an engine worker for (try an evaluator, test an LM): the page
    writes the row, a worker runs it and records progress and the result, the page polls."""

    id: str = Field(default_factory=lambda: new_id("j"), primary_key=True, max_length=32)
    kind: str = Field(max_length=30)  # try_evaluator | check_lm | analyze
    payload: dict = _json("dict")
    author: str = Field(default="", max_length=100)
    status: str = Field(default=JobStatus.PENDING.value, index=True, max_length=20)  # storage.states.JobStatus
    progress: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    result: dict = _json("dict")
    error: Optional[str] = Field(default=None, sa_column=Column(Text))
    worker_id: Optional[str] = Field(default=None, max_length=100)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None


class Refusal(SQLModel, table=True):
    """An action the command layer refused for a person's role or rate limit (engine/access.py):
    kept so that admins can see who tried what, and shown in the run's activity feed."""

    id: Optional[int] = Field(default=None, primary_key=True)
    created_at: datetime = Field(default_factory=utcnow, index=True)
    actor: str = Field(default="", max_length=200)
    role: str = Field(default="", max_length=20)
    action: str = Field(max_length=30)
    run_id: Optional[str] = Field(default=None, index=True, max_length=32)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))


class RoleGrant(SQLModel, table=True):
    """A role an admin granted in the studio or with ``python -m engine grant`` (engine/roles.py):
    one rule (an e-mail address, an @domain or a claim value) and the role it gives. Grants only
    add to the ``[roles]`` table of the secrets file, which stays the bootstrap (engine/access.py)."""

    id: Optional[int] = Field(default=None, primary_key=True)
    rule: str = Field(max_length=200, unique=True)
    role: str = Field(max_length=20)  # viewer | editor | admin
    granted_by: str = Field(default="", max_length=200)
    created_at: datetime = Field(default_factory=utcnow)


class AdminAction(SQLModel, table=True):
    """An admin's action whose subject may be gone afterwards: a run deleted (its rows with it), a
    role granted or revoked. Holds no foreign key, so it outlives what it names."""

    id: Optional[int] = Field(default=None, primary_key=True)
    created_at: datetime = Field(default_factory=utcnow, index=True)
    actor: str = Field(default="", max_length=200)
    action: str = Field(max_length=30)  # delete_run | grant | revoke
    subject: str = Field(default="", max_length=200)  # the run id, or the rule of a grant
    detail: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))  # what it was
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
