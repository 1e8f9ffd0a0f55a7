"""The states of runs, candidates, commands, jobs and LM calls, and the command kinds: defined
once, stored as their string values.

Each is a ``StrEnum``, so a member equals its string (``RunStatus.RUNNING == "running"``) and
rows written before these types existed read back unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"  # waiting for a worker
    RUNNING = "running"  # a worker holds its lease (or held it and died: another one takes over)
    PAUSED = "paused"  # by a human, after one step in step mode, or after repeated LM failures
    COMPLETED = "completed"  # a budget, the target score or "no progress" ended it
    FAILED = "failed"  # it could not start or the engine hit an error
    STOPPED = "stopped"  # by a human, or no candidate could be a parent any more


FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED)
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.PAUSED)

# which status a run may move to from each status (``repo.transition_run`` refuses the rest).
# A finished run moves back to running when a budget change continues it.
RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.STOPPED, RunStatus.FAILED}),
    RunStatus.RUNNING: frozenset({RunStatus.PAUSED, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED}),
    RunStatus.PAUSED: frozenset({RunStatus.RUNNING, RunStatus.STOPPED, RunStatus.FAILED, RunStatus.COMPLETED}),
    RunStatus.COMPLETED: frozenset({RunStatus.RUNNING, RunStatus.STOPPED}),
    RunStatus.FAILED: frozenset({RunStatus.RUNNING, RunStatus.STOPPED}),
    RunStatus.STOPPED: frozenset({RunStatus.RUNNING}),
}


class CandidateStatus(StrEnum):
    PROPOSED = "proposed"  # written (and maybe tested on its minibatch), not yet validated
    ACCEPTED = "accepted"  # validated: it is in the pool and can be a parent
    REJECTED = "rejected"  # tested, not validated (no improvement, passed over, or merged into another)
    FAILED = "failed"  # never became a testable candidate (LM error, unusable or invalid answer, budget)


# which status a candidate may move to from each status (``transitions.set_candidate_status``
# refuses the rest). A rejected or failed candidate that has a text becomes accepted when it is
# validated after all (pinned, say); an accepted candidate stays accepted (it competes; a veto
# or a pin is a field of its own) and nothing becomes a proposal again.
CANDIDATE_TRANSITIONS: dict[CandidateStatus, frozenset[CandidateStatus]] = {
    CandidateStatus.PROPOSED: frozenset({CandidateStatus.ACCEPTED, CandidateStatus.REJECTED, CandidateStatus.FAILED}),
    # rejected <-> failed: a proposal's later attempt in the same slot can end either way (a retry's
    # answer repeating an earlier proposal fails a child its first answer had left rejected)
    CandidateStatus.REJECTED: frozenset({CandidateStatus.ACCEPTED, CandidateStatus.FAILED}),
    CandidateStatus.FAILED: frozenset({CandidateStatus.ACCEPTED, CandidateStatus.REJECTED}),
    CandidateStatus.ACCEPTED: frozenset(),
}


class Cause(StrEnum):
    """Why a candidate failed or was rejected, for the reasons a run's "no progress" counts
    (``engine.stopping``); empty for any other reason (its text says it)."""

    LM_FAILED = "lm_failed"  # the reflection LM's call failed
    NO_FENCE = "no_fence"  # an answer without a fenced block
    UNUSABLE = "unusable"  # another unusable answer (unchanged, only the Change: line …)
    REPEAT = "repeat"  # repeats an earlier proposal for its parent
    INVALID = "invalid"  # the evaluator's validate refused it
    BUDGET = "budget"  # the budget left no room for its LM call or its test
    INTERRUPTED = "interrupted"  # a pause or a stop cut it off
    NO_IMPROVEMENT = "no_improvement"  # tested: not better than its parent on the minibatch


class CommandStatus(StrEnum):
    PENDING = "pending"
    APPLIED = "applied"
    REJECTED = "rejected"


class CommandKind(StrEnum):
    """What a command asks for: the one list that sending, access and applying derive from."""

    PAUSE = "pause"
    RESUME = "resume"
    STEP = "step"  # resume for one step, then pause
    STOP = "stop"
    PIN = "pin"
    UNPIN = "unpin"
    VETO = "veto"
    UNVETO = "unveto"
    EDIT = "edit"  # a new human candidate from an edited one
    INJECT = "inject"  # a new human candidate from a text
    FEEDBACK = "feedback"
    BUDGET = "budget"
    APPROVE = "approve"  # applied at once, not by the engine
    LM = "lm"  # new LM settings of a paused run


RUN_CONTROL_KINDS = (CommandKind.PAUSE, CommandKind.RESUME, CommandKind.STEP, CommandKind.STOP)
CANDIDATE_KINDS = (CommandKind.PIN, CommandKind.UNPIN, CommandKind.VETO, CommandKind.UNVETO, CommandKind.EDIT,
                   CommandKind.FEEDBACK)  # the commands that name a candidate


class JobStatus(StrEnum):
    PENDING = "pending"  # waiting for a worker
    RUNNING = "running"  # a worker claimed it
    DONE = "done"
    FAILED = "failed"


class LMCallStatus(StrEnum):
    STARTED = "started"  # written before the request is sent: a crash leaves a trace
    DONE = "done"  # an answer came
    FAILED = "failed"  # the LM or the connection failed
    INTERRUPTED = "interrupted"  # cut off by a pause or a stop, or its worker died


class Origin(StrEnum):
    """How a candidate was made."""

    SEED = "seed"
    REFLECTION = "reflection"  # the reflection LM rewrote one component of its parent
    MERGE = "merge"  # system-aware merge: components of two frontier members (counted by max_merges)
    SIBLING_MERGE = "sibling_merge"  # improving siblings combined into one (merge_siblings)
    HUMAN = "human"  # an edit or an injected candidate


class MergePath(StrEnum):
    """How a merge's text was written (``Candidate.merge_path``; empty for other origins)."""

    THREE_WAY = "three_way"  # line-level three-way merge over the common ancestor: no LM call
    LM = "lm"  # a real conflict: the reflection LM wrote the combined text
