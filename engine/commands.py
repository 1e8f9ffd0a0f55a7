"""Human commands: sent by the studio or the CLI (one code path), applied by the engine at
step boundaries, in the order they were sent. Every command is recorded with who, when and
why, and its result; nothing is applied twice.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ValidationError

from storage import access as access_store, repo
from storage.db import Database
from storage.errors import Conflict, NotFound
from storage.models import Candidate, Command, utcnow
from storage.states import (
    CANDIDATE_KINDS,
    FINISHED,
    RUN_CONTROL_KINDS,
    CandidateStatus,
    CommandKind,
    CommandStatus,
    Origin,
    RunStatus,
)

from engine.access import Actor, check, local_actor
from engine.config import BudgetConfig, RunConfig
from engine.user_errors import validation_reasons

KINDS = tuple(CommandKind)  # storage.states.CommandKind: the one list of command kinds
LM_SECTIONS = ("reflection_lm", "task_lm", "judge_lm")
LM_SETTINGS = ("model", "api_base", "api_key_env")  # what the ``lm`` command changes


class CommandError(ValueError):
    """A command that cannot be sent; the message says why and what to do."""


class AlreadySent(CommandError):
    """The submission with this client token was already queued (a double click, a retry)."""

    def __init__(self, command_id: int) -> None:
        super().__init__(f"already sent: this submission is command {command_id}, queued once")
        self.command_id = command_id


def send_command(db: Database, run_id: str, kind: str, payload: Optional[dict] = None, author: str = "",
                 reason: str = "", client_token: Optional[str] = None, actor: Optional[Actor] = None) -> int:
    """Validate and queue a command; returns its id. Applied by the engine at the next step
    boundary (or when a worker next picks the run up); ``approve`` is applied at once.

    ``actor`` is who sends it: its role is checked here, before anything else, and a refusal is
    recorded and raised as ``engine.access.Refused``; the command carries ``actor.name`` as its
    author. Without an actor the caller is trusted (the CLI, the Python API: ``author`` with
    admin rights); the studio always passes the signed-in person.

    Idempotent per submission: a sender that gives a ``client_token`` (one per click, per
    request) gets ``AlreadySent`` with the first command's id when the same token comes again,
    and nothing new is queued."""
    actor = actor or local_actor(author)
    author = actor.name
    if kind in KINDS:
        check(db, actor, kind, run_id)
    payload = dict(payload or {})
    if client_token is not None:
        if not isinstance(client_token, str) or not 8 <= len(client_token) <= 64:
            raise CommandError("client_token: give 8 to 64 characters, unique per submission (e.g. a uuid)")
        done = repo.command_with_token(db, run_id, client_token)
        if done is not None:
            raise AlreadySent(done.id)
    if kind not in KINDS:
        raise CommandError(f"command: unknown command {kind!r}; one of: {', '.join(KINDS)}")
    run = repo.get_run(db, run_id)  # NotFound with a clear message
    if kind == CommandKind.APPROVE:
        return _approve(db, run_id, payload.get("candidate_id"), author, reason, client_token)
    _check_payload(db, run_id, kind, payload)
    if kind == CommandKind.BUDGET:
        try:
            BudgetConfig.model_validate({**RunConfig.model_validate(run.config).budget.model_dump(), **payload})
        except ValidationError as exc:
            raise CommandError("\n".join(validation_reasons(exc, "budget."))) from None
        cap = payload.get("max_metric_calls")
        if cap is not None and cap < run.metric_calls:
            raise CommandError(f"budget.max_metric_calls: {cap} is below what the run has already spent "
                               f"({run.metric_calls}); give at least {run.metric_calls} (or stop the run)")
    if kind == CommandKind.LM:
        lm_config(run, payload)  # CommandError at the field
    continuing = (CommandKind.BUDGET, CommandKind.RESUME, CommandKind.STEP)  # what a finished run accepts
    if run.status in FINISHED and kind not in continuing and not _resume_pending(db, run_id):
        raise CommandError(f"run: {run_id} is {run.status}; continue it first with a new budget "
                           f"(`python -m engine budget {run_id} --max-metric-calls N`, then `resume`)")
    if kind == CommandKind.VETO and _would_leave_no_parent(db, run_id, payload["candidate_id"]):
        raise CommandError("candidate: this is the last candidate that can be a parent; vetoing it would stop the search. "
                           "Pin or edit another candidate first.")
    if kind == CommandKind.STOP and run.status == RunStatus.QUEUED:
        # no worker may pick it up soon (they may all be busy): cancel it now, atomically
        cancelled = repo.cancel_queued_run(db, run_id, author, reason, client_token)
        if cancelled is not None:
            return cancelled
    try:
        return repo.add_command(db, run_id, kind, payload, author, reason, client_token)
    except Conflict:
        done = repo.command_with_token(db, run_id, client_token) if client_token else None
        if done is None:
            raise
        raise AlreadySent(done.id) from None  # the same token won a race a moment ago


def _check_payload(db: Database, run_id: str, kind: str, payload: dict) -> None:
    """The candidate a command names belongs to the run and has text; edits and feedback are not empty."""
    if kind in CANDIDATE_KINDS:
        cand = repo.get_candidate(db, payload.get("candidate_id", ""))
        if cand.run_id != run_id:
            raise NotFound(f"candidate: {cand.id} belongs to run {cand.run_id}, not {run_id}")
        if not cand.content and kind in (CommandKind.PIN, CommandKind.VETO, CommandKind.EDIT, CommandKind.FEEDBACK):
            raise CommandError(f"candidate: {cand.id} is a failed proposal with no text ({cand.reason}); "
                               "it can never be a parent. Pin or edit its parent instead.")
    if kind in (CommandKind.EDIT, CommandKind.INJECT):
        content = payload.get("content")
        texts = content.values() if isinstance(content, dict) else [content]
        if not content or any(not isinstance(t, str) or not t.strip() for t in texts):
            raise CommandError("content: the edited text is empty: write the new version (or leave it unchanged and cancel)")
    if kind == CommandKind.FEEDBACK and not str(payload.get("text", "")).strip():
        raise CommandError("text: the feedback is empty: say what should change")


def _approve(db: Database, run_id: str, candidate_id: Optional[str], author: str, reason: str,
             client_token: Optional[str]) -> int:
    """Approval is a review decision, not a search step: recorded and applied at once, on any run."""
    if not reason.strip():
        raise CommandError("reason: say why this candidate is approved (it is recorded with the approval)")
    if candidate_id is not None:
        cand = repo.get_candidate(db, candidate_id)
        if cand.run_id != run_id:
            raise NotFound(f"candidate: {cand.id} belongs to run {cand.run_id}, not {run_id}")
        if not cand.content:
            raise CommandError(f"candidate: {cand.id} is a failed proposal with no text; it cannot be approved")
    try:
        return access_store.approve(db, run_id, candidate_id, author, reason, client_token)
    except Conflict:
        done = repo.command_with_token(db, run_id, client_token) if client_token else None
        if done is None:
            raise
        raise AlreadySent(done.id) from None


def lm_config(run, payload: dict) -> dict:
    """The run's stored config with the ``lm`` command's settings in place (``{"reflection_lm":
    {"model", "api_base", "api_key_env"}, "task_lm": …, "judge_lm": …}``; an empty api_base or key
    variable clears it); CommandError at the field when the run is not paused or a setting is bad.
    The LMs are asked one short request when the engine applies it."""
    if run.status != RunStatus.PAUSED:
        raise CommandError(f"run: {run.id} is {run.status}; the LM settings of a paused run can be changed: pause it "
                           "first (a running step keeps the settings it started with)")
    unknown = [k for k in payload if k not in LM_SECTIONS] + [f"{k}.{name}" for k, v in payload.items()
                                                               if isinstance(v, dict) for name in v if name not in LM_SETTINGS]
    if unknown or not payload or not all(isinstance(v, dict) and v for v in payload.values()):
        raise CommandError(f"lm: give {' / '.join(LM_SECTIONS)} tables of {', '.join(LM_SETTINGS)}"
                           + (f" (not {', '.join(unknown)})" if unknown else ""))
    cfg = dict(run.config)
    for section, values in payload.items():
        cleared = {k: (v.strip() or None) if isinstance(v, str) and k != "model" else v for k, v in values.items()}
        cfg[section] = {**(cfg.get(section) or {}), **cleared}
    try:
        RunConfig.model_validate(cfg)
    except ValidationError as exc:
        raise CommandError("\n".join(validation_reasons(exc))) from None
    return cfg


def _resume_pending(db: Database, run_id: str) -> bool:
    """A finished run with a queued resume is being continued: commands sent after the resume
    are applied, in order, once a worker picks it up."""
    return any(c.kind in (CommandKind.RESUME, CommandKind.STEP) for c in repo.pending_commands(db, run_id))


def _would_leave_no_parent(db: Database, run_id: str, candidate_id: str) -> bool:
    eligible = [c for c in repo.list_candidates(db, run_id, [CandidateStatus.ACCEPTED]) if not c.vetoed]
    return [c.id for c in eligible] == [candidate_id]


class CommandApplier:
    """Applies pending commands to a running optimization (engine side)."""

    def __init__(self, ctx, validate_candidate) -> None:
        self.ctx = ctx
        self.validate_candidate = validate_candidate  # callable(candidate_id): full validation pass

    def apply_pending(self) -> list[int]:
        applied = []
        for cmd in repo.pending_commands(self.ctx.db, self.ctx.run_id):
            try:
                status, result = CommandStatus.APPLIED, self._apply(cmd)
            except Exception as exc:  # a command that cannot apply is rejected, never a crash
                status, result = CommandStatus.REJECTED, str(exc)
            repo.finish_command(self.ctx.db, cmd.id, status, result, self.ctx.step_index)
            applied.append(cmd.id)
        if applied:
            # a veto, an un-veto or a new human candidate can change the best candidate now,
            # not only after the next step (a paused run may have none for a while)
            self.ctx.record_best()
        return applied

    def _apply(self, cmd: Command) -> str:
        ctx, p = self.ctx, cmd.payload
        if cmd.kind in RUN_CONTROL_KINDS:
            who = cmd.author or "someone"
            to, reason, fields = {CommandKind.PAUSE: (RunStatus.PAUSED, f"paused by {who}", {}),
                                  CommandKind.RESUME: (RunStatus.RUNNING, "", {"step_mode": False, "finished_at": None}),
                                  CommandKind.STEP: (RunStatus.RUNNING, "", {"step_mode": True, "finished_at": None}),
                                  CommandKind.STOP: (RunStatus.STOPPED, f"stopped by {who}", {})}[cmd.kind]
            repo.transition_run(ctx.db, ctx.run_id, to, reason, **fields)
            return f"run {to}" + (" for one step" if cmd.kind == CommandKind.STEP else "")
        if cmd.kind == CommandKind.BUDGET:
            cfg = repo.get_run(ctx.db, ctx.run_id).config
            new = BudgetConfig.model_validate({**cfg["budget"], **p})
            cfg = {**cfg, "budget": new.model_dump(mode="json")}
            repo.set_run_fields(ctx.db, ctx.run_id, config=cfg)
            ctx.budget.update_limits(new)
            ctx.cfg = RunConfig.model_validate(cfg)
            return "budget now " + ", ".join(f"{k}={v}" for k, v in new.model_dump().items() if v is not None)
        if cmd.kind == CommandKind.INJECT:
            return self._new_human(None, p["content"], cmd)
        if cmd.kind == CommandKind.LM:
            return self._lm(p)
        cand = ctx.state.candidates.get(p["candidate_id"]) or repo.get_candidate(ctx.db, p["candidate_id"])
        if cmd.kind in (CommandKind.PIN, CommandKind.UNPIN, CommandKind.VETO, CommandKind.UNVETO):
            field = "pinned" if cmd.kind.endswith("pin") else "vetoed"
            value = not cmd.kind.startswith("un")
            if value and not cand.content:
                raise ValueError(f"refused: {cand.id} is a failed proposal with no text")
            if cmd.kind == CommandKind.VETO and [c for c in ctx.state.eligible_ids() if c != cand.id] == []:
                raise ValueError("refused: it is the last candidate that can be a parent")
            setattr(cand, field, value)
            ctx.save(cand)
            if field == "vetoed":  # the kept frontier follows at once (engine.search.kept_frontier)
                from engine.search.validation import write_frontier

                ctx.state.set_eligible(cand.id, not value)
                write_frontier(ctx)
            note = ""
            if cmd.kind == CommandKind.PIN and cand.id not in ctx.state.scores:
                # a rejected proposal was never validated: validate it now, so that it can be a
                # parent (pinned candidates are always eligible) and shows on the frontier
                self.validate_candidate(cand.id)
                note = " and validated, so it can be a parent"
            return f"{cand.id} {cmd.kind}ned{note}" if cmd.kind.endswith("pin") else f"{cand.id} {cmd.kind}ed"
        if cmd.kind == CommandKind.FEEDBACK:
            # idempotent: a command re-applied after a crash does not attach the feedback twice
            known = repo.list_comments(ctx.db, ctx.run_id, cand.id, kind="feedback")
            if not any(c.author == cmd.author and c.text == p["text"] for c in known):
                repo.add_comment(ctx.db, ctx.run_id, cand.id, cmd.author, p["text"], kind="feedback")
            return f"feedback attached to {cand.id}; the next reflections on it will read it"
        if cmd.kind == CommandKind.EDIT:
            content = p["content"]
            if not isinstance(content, dict):
                component = p.get("component") or ctx.components[0]
                if component not in cand.content:
                    raise ValueError(f"unknown component {component!r}; components: {', '.join(cand.content)}")
                content = {**cand.content, component: content}
            return self._new_human(cand, content, cmd)
        raise ValueError(f"unknown command {cmd.kind!r}")

    def _lm(self, payload: dict) -> str:
        """New LM settings, once each changed LM answered one short request (the run stays paused)."""
        from engine.lm.check import run_lm_problems

        ctx = self.ctx
        cfg = RunConfig.model_validate(lm_config(repo.get_run(ctx.db, ctx.run_id), payload))
        problems = run_lm_problems(cfg, fields=tuple(payload))
        if problems:
            raise ValueError("refused, the LM did not answer: " + "; ".join(problems))
        repo.set_run_fields(ctx.db, ctx.run_id, config=cfg.stored())
        ctx.cfg = cfg
        return "LM settings now " + "; ".join(
            f"{section}: " + ", ".join(f"{k} = {getattr(getattr(cfg, section), k)}" for k in LM_SETTINGS
                                       if getattr(getattr(cfg, section), k) is not None) for section in payload)

    def _new_human(self, parent: Optional[Candidate], content: Any, cmd: Command) -> str:
        from engine.state import SINGLE, content_hash, deterministic_id, to_evaluator

        ctx = self.ctx
        if not isinstance(content, dict):
            content = {SINGLE: content} if ctx.single_text else {ctx.components[0]: content}
        if set(content) != set(ctx.components):
            raise ValueError(f"the candidate must have the components {', '.join(ctx.components)}")
        # the id derives from the command: re-applied after a crash, it finds its own row
        cand = Candidate(id=deterministic_id(ctx.run_id, "command", cmd.id), run_id=ctx.run_id, content=content, content_hash=content_hash(content),
                         origin=Origin.HUMAN, parent_ids=[parent.id] if parent else [], step=ctx.step_index,
                         author=cmd.author, reason=cmd.reason, started_at=utcnow(),
                         frontier_version=ctx.state.frontier_version)
        problem = ctx.evals.executor.validate(to_evaluator(content, ctx.single_text))
        if problem:
            ctx.set_status(cand, CandidateStatus.FAILED, f"invalid candidate (validate): {problem}")
            raise ValueError(f"{cand.id} is invalid: {problem}")
        ctx.save(cand)
        self.validate_candidate(cand.id)
        saved = ctx.state.candidates[cand.id]
        mean = f"{saved.val_mean:.4g}" if saved.val_mean is not None else "n/a"
        return f"new candidate {cand.id} (validation mean {mean})"
