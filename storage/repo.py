"""Repository: the write and read functions the engine and the studio share.

Contract:
- Every function opens its own transaction (``db.write()`` begins IMMEDIATE on SQLite), so
  each call is atomic; callers never think about locking.
- Run totals change only through ``_bump`` (``UPDATE … SET n = n + :d``), so concurrent
  writers (engine threads, a CLI command, the studio) never lose an update.
- ``record_evaluations`` is idempotent per (candidate, example): a second call returns the
  existing row and charges nothing. That, plus deterministic candidate ids, is what lets a
  killed run resume without paying twice.
- Reads go through ``db.read()`` (the read-only reader; no time limit: the engine's reads must
  finish). Reads inside a write function see that transaction.
- Functions return detached ORM objects or plain values; ``NotFound`` for unknown ids.
- Not atomic across calls: a reader may see a run between two of them (e.g. a candidate
  before its evaluations). ``storage.transfer.insert_run`` writes a whole run at once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Iterable, Optional

from sqlalchemy import func, update
from sqlmodel import select

from storage.db import Database
from storage.errors import InvalidTransition, NotFound
from storage.models import (
    Candidate,
    Command,
    Comment,
    Evaluation,
    Example,
    LMCall,
    Run,
    Step,
    utcnow,
)
from storage.states import CommandKind, CommandStatus, LMCallStatus, RunStatus
from storage.transitions import move_run, set_candidate_status, transition_run  # noqa: F401  (repo.* for callers)

# ---------------------------------------------------------------- runs


def create_run(db: Database, name: str, owner: str, config: dict, examples: Iterable[tuple[str, str, Any]],
               run_id: str | None = None, status: RunStatus = RunStatus.QUEUED,
               held_by: tuple[str, float] | None = None, attached_to: str | None = None) -> str:
    """Insert a run and its examples ((key, split, payload) triples) in one transaction. A
    config with a ``branch`` table makes the run a branch of that table's ``run``.

    ``held_by`` (worker id, lease seconds): the run is stored running and leased to that
    worker, as ``storage.leases.claim_run`` would leave it. A foreground run needs this: queued
    first and claimed after, a studio's worker polling the same database could take it between
    the two writes. ``attached_to``: a run of a Python process (``storage.attached``)."""
    held: dict[str, Any] = {"attached_to": attached_to}
    if held_by:
        now = utcnow()
        status = RunStatus.RUNNING
        held.update(started_at=now, lease_owner=held_by[0], heartbeat_at=now,
                    lease_expires_at=now + timedelta(seconds=held_by[1]))
    with db.write() as s:
        run = Run(name=name, owner=owner, config=config, status=RunStatus(status).value,
                  branch_of=(config.get("branch") or {}).get("run"), **held)
        if run_id:
            run.id = run_id
        s.add(run)
        s.flush()
        for pos, (key, split, payload) in enumerate(examples):
            s.add(Example(run_id=run.id, key=key, split=split, position=pos, payload=payload))
        return run.id


def get_run(db: Database, run_id: str) -> Run:
    with db.read() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise NotFound(f"no run with id {run_id!r}; `python -m engine status` lists runs")
        return run


def list_runs(db: Database) -> list[Run]:
    with db.read() as s:
        return list(s.exec(select(Run).order_by(Run.created_at.desc())))


def bump_run(db: Database, run_id: str, **deltas: float) -> None:
    """Atomically add deltas to run counters (metric_calls=1, cost_usd=0.002, …)."""
    with db.write() as s:
        _bump(s, run_id, deltas)


def _bump(s, run_id: str, deltas: dict) -> None:
    deltas = {k: v for k, v in deltas.items() if v}
    if deltas:
        # no session objects to keep in step (counters are read fresh): skip the ORM's synchronization
        s.exec(update(Run).where(Run.id == run_id).values(**{k: getattr(Run, k) + v for k, v in deltas.items()})
               .execution_options(synchronize_session=False))


def set_run_fields(db: Database, run_id: str, **fields: Any) -> None:
    """Set run fields other than its status (``transition_run`` is the only way to change it)."""
    if "status" in fields:
        raise ValueError("set_run_fields cannot change a run's status; use transition_run")
    with db.write() as s:
        s.exec(update(Run).where(Run.id == run_id).values(**fields))


def get_examples(db: Database, run_id: str, split: str | None = None) -> list[Example]:
    with db.read() as s:
        q = select(Example).where(Example.run_id == run_id)
        if split:
            q = q.where(Example.split == split)
        return list(s.exec(q.order_by(Example.position)))


# ---------------------------------------------------------------- candidates


def get_candidate(db: Database, candidate_id: str) -> Candidate:
    with db.read() as s:
        cand = s.get(Candidate, candidate_id)
        if cand is None:
            raise NotFound(f"no candidate with id {candidate_id!r}")
        return cand


def find_candidate(db: Database, candidate_id: str) -> Optional[Candidate]:
    with db.read() as s:
        return s.get(Candidate, candidate_id)


def save_candidate(db: Database, cand: Candidate) -> Candidate:
    """Insert or update (merge) a candidate row. A new row is inserted with the status it has;
    an existing row keeps its stored status: a candidate's status changes only through
    ``set_candidate_status``, which checks the move."""
    with db.write() as s:
        stored = s.get(Candidate, cand.id)
        before = stored.status if stored is not None else None
        merged = s.merge(cand)
        if before is not None:
            merged.status = before
        s.flush()
        return merged


def update_candidate(db: Database, candidate_id: str, **fields: Any) -> None:
    """Set ``fields`` of a candidate (not its status: ``set_candidate_status``)."""
    if "status" in fields:
        raise InvalidTransition(f"candidate {candidate_id}: its status changes through set_candidate_status")
    with db.write() as s:
        s.exec(update(Candidate).where(Candidate.id == candidate_id).values(**fields))


def list_candidates(db: Database, run_id: str, statuses: Iterable[str] | None = None) -> list[Candidate]:
    with db.read() as s:
        q = select(Candidate).where(Candidate.run_id == run_id)
        if statuses:
            q = q.where(Candidate.status.in_(list(statuses)))
        return list(s.exec(q.order_by(Candidate.created_at)))


# ---------------------------------------------------------------- evaluations


def known_evaluations(db: Database, run_id: str, candidate_id: str, content_hash: str,
                      example_pks: list[int]) -> tuple[dict[int, Evaluation], dict[int, Evaluation]]:
    """In two queries: this candidate's own evaluations on ``example_pks``, and evaluations of
    the same content by other candidates (the cache), each keyed by example pk."""
    with db.read() as s:
        own = {e.example_pk: e for e in s.exec(select(Evaluation).where(
            Evaluation.candidate_id == candidate_id, Evaluation.example_pk.in_(example_pks)))}
        missing = [pk for pk in example_pks if pk not in own]
        cached = {}
        if missing:
            for e in s.exec(select(Evaluation).where(Evaluation.run_id == run_id, Evaluation.content_hash == content_hash,
                                                     Evaluation.example_pk.in_(missing), Evaluation.cached == False)):  # noqa: E712
                cached.setdefault(e.example_pk, e)
        return own, cached


def record_evaluations(db: Database, items: list[tuple[Evaluation, bool]]) -> list[tuple[Evaluation, bool]]:
    """Insert (evaluation, metric_call) pairs in one transaction and charge each run one metric
    call per inserted row whose ``metric_call`` is True (False: cached, or the held-out test
    pass). Idempotent per (candidate, example): an evaluation that exists already is returned
    as it is and charges nothing. ``ev.cost_usd`` (the evaluator's own lm() calls) is
    attribution only: those calls were charged when their LMCall rows were recorded.
    Returns (row, inserted) per item, in order."""
    out = []
    with db.write() as s:
        # one query for the rows that exist and one batched INSERT: a busy step writes hundreds
        # of evaluations, and a statement per row was most of the engine's own time
        cids = {ev.candidate_id for ev, _ in items}
        pks = {ev.example_pk for ev, _ in items}
        seen = {(e.candidate_id, e.example_pk): e for e in s.exec(select(Evaluation).where(
            Evaluation.candidate_id.in_(cids), Evaluation.example_pk.in_(pks)))}
        for ev, _ in items:
            key = (ev.candidate_id, ev.example_pk)
            if key in seen:
                out.append((seen[key], False))
                continue
            seen[key] = ev
            s.add(ev)
            out.append((ev, True))
        s.flush()
        by_run: dict[str, int] = {}
        for (ev, metric_call), (_, inserted) in zip(items, out):
            if inserted and metric_call:
                by_run[ev.run_id] = by_run.get(ev.run_id, 0) + 1
        for run_id, n in by_run.items():
            _bump(s, run_id, {"metric_calls": n})
    return out


def parent_training_errors(db: Database, run_id: str) -> tuple[int, int, Optional[Evaluation]]:
    """(evaluations, failed ones, the first failed one) of the run's accepted candidates on
    training examples: what the reflection LM reads. Counted in SQL (no side information read)."""
    on_train = (Evaluation.run_id == run_id, Candidate.id == Evaluation.candidate_id, Candidate.status == "accepted",
                Example.pk == Evaluation.example_pk, Example.split == "train")
    with db.read() as s:
        n, failed = s.exec(select(func.count(), func.count(Evaluation.error)).where(*on_train)).one()
        first = s.exec(select(Evaluation).where(*on_train, Evaluation.error != None)  # noqa: E711
                       .order_by(Evaluation.id).limit(1)).first() if failed else None
        return n, failed, first


def evaluations_for(db: Database, run_id: str, candidate_ids: Iterable[str] | None = None) -> list[Evaluation]:
    with db.read() as s:
        q = select(Evaluation).where(Evaluation.run_id == run_id)
        if candidate_ids is not None:
            q = q.where(Evaluation.candidate_id.in_(list(candidate_ids)))
        return list(s.exec(q))


# ---------------------------------------------------------------- LM calls


def dollars_column(purpose: str) -> str:
    """The run total an LM call's dollars go to: the held-out test pass (purpose ``test``) has
    its own, ``test_cost_usd``, which the dollar budget never sees; every other call ``cost_usd``."""
    return "test_cost_usd" if purpose == "test" else "cost_usd"


def record_lm_call(db: Database, call: LMCall) -> int:
    """Insert a finished LM call (a cache hit, or a call refused before any request) and add
    it, its tokens and dollars to the run's totals (the dollars of the held-out test pass,
    purpose ``test``, to ``test_cost_usd``: the dollar budget never sees them)."""
    with db.write() as s:
        s.add(call)
        s.flush()
        if call.run_id:
            _bump(s, call.run_id, {dollars_column(call.purpose): call.cost_usd, "tokens_in": call.tokens_in, "tokens_out": call.tokens_out,
                                   "lm_calls": 1, "lm_calls_failed": int(call.status == LMCallStatus.FAILED)})
        return call.id


def lm_calls_for(db: Database, run_id: str) -> list[LMCall]:
    """Every LM call of a run, in the order they were recorded."""
    with db.read() as s:
        return list(s.exec(select(LMCall).where(LMCall.run_id == run_id).order_by(LMCall.id)))


def get_lm_call(db: Database, call_id: int) -> Optional[LMCall]:
    with db.read() as s:
        return s.get(LMCall, call_id)


# ---------------------------------------------------------------- steps


def get_or_create_step(db: Database, run_id: str, index: int) -> Step:
    with db.write() as s:
        step = s.exec(select(Step).where(Step.run_id == run_id, Step.index == index)).first()
        if step is None:
            step = Step(run_id=run_id, index=index)
            s.add(step)
            s.flush()
        return step


def save_step(db: Database, step: Step) -> None:
    with db.write() as s:
        s.merge(step)


def list_steps(db: Database, run_id: str) -> list[Step]:
    with db.read() as s:
        return list(s.exec(select(Step).where(Step.run_id == run_id).order_by(Step.index)))


def completed_steps(db: Database, run_id: str) -> int:
    with db.read() as s:
        return s.exec(select(func.count()).select_from(Step).where(Step.run_id == run_id, Step.ended_at != None)).one()  # noqa: E711


# ---------------------------------------------------------------- commands and comments


def add_command(db: Database, run_id: str, kind: str, payload: dict, author: str, reason: str = "",
                client_token: str | None = None) -> int:
    """Queue a command; its id. A ``client_token`` already used on this run raises Conflict
    (the unique index refuses it, so two processes racing with one token get one row)."""
    with db.write() as s:
        if s.get(Run, run_id) is None:
            raise NotFound(f"no run with id {run_id!r}")
        cmd = Command(run_id=run_id, kind=kind, payload=payload, author=author, reason=reason, client_token=client_token)
        s.add(cmd)
        s.flush()
        return cmd.id


def cancel_queued_run(db: Database, run_id: str, author: str, reason: str, client_token: str | None = None) -> int | None:
    """Stop a run that no worker has started: in one transaction the run becomes ``stopped``
    (only if it is still queued and unleased, so it cannot race a worker's claim) and the stop
    command is recorded as applied. The command's id, or None when a worker has it (then the
    stop goes through the engine like any command)."""
    now = utcnow()
    free = (Run.lease_expires_at == None) | (Run.lease_expires_at < now)  # noqa: E711
    who = author or "someone"
    with db.write() as s:
        # locked as a worker's claim locks it (SQLite: BEGIN IMMEDIATE already serialises both)
        if s.exec(select(Run.id).where(Run.id == run_id, Run.status == RunStatus.QUEUED.value, free)
                  .with_for_update()).first() is None:
            return None
        move_run(s, run_id, RunStatus.STOPPED, f"cancelled by {who} before a worker started it", finished_at=now)
        cmd = Command(run_id=run_id, kind=CommandKind.STOP.value, payload={}, author=author, reason=reason,
                      client_token=client_token, status=CommandStatus.APPLIED.value, applied_at=now, result="run cancelled before it started")
        s.add(cmd)
        s.flush()
        return cmd.id


def close_run_commands(db: Database, run_id: str, status: str) -> int:
    """A run just ended (``status``): its pending pause and stop commands can no longer apply;
    close them, saying why, instead of leaving them pending for ever. How many were closed."""
    closes = {CommandKind.STOP: (CommandStatus.APPLIED, f"the run had already ended ({status})"),
              CommandKind.PAUSE: (CommandStatus.REJECTED, f"the run ended ({status}) before the pause applied")}
    with db.write() as s:
        pending = (Command.run_id == run_id, Command.status == CommandStatus.PENDING.value)
        return sum(s.exec(update(Command).where(*pending, Command.kind == kind.value)
                          .values(status=st.value, applied_at=utcnow(), result=why)).rowcount for kind, (st, why) in closes.items())


def command_with_token(db: Database, run_id: str, client_token: str) -> Command | None:
    with db.read() as s:
        return s.exec(select(Command).where(Command.run_id == run_id, Command.client_token == client_token)).first()


def pending_commands(db: Database, run_id: str) -> list[Command]:
    with db.read() as s:
        return list(s.exec(select(Command).where(Command.run_id == run_id, Command.status == CommandStatus.PENDING.value)
                           .order_by(Command.id)))


def finish_command(db: Database, command_id: int, status: CommandStatus, result: str, step: int | None) -> None:
    with db.write() as s:
        s.exec(update(Command).where(Command.id == command_id)
               .values(status=CommandStatus(status).value, result=result, applied_at=utcnow(), applied_step=step))


def list_commands(db: Database, run_id: str) -> list[Command]:
    with db.read() as s:
        return list(s.exec(select(Command).where(Command.run_id == run_id).order_by(Command.id)))


def add_comment(db: Database, run_id: str, candidate_id: str, author: str, text: str, kind: str = "comment") -> int:
    with db.write() as s:
        if s.get(Candidate, candidate_id) is None:
            raise NotFound(f"no candidate with id {candidate_id!r}")
        c = Comment(run_id=run_id, candidate_id=candidate_id, author=author, text=text, kind=kind)
        s.add(c)
        s.flush()
        return c.id


def list_comments(db: Database, run_id: str, candidate_id: str | None = None, kind: str | None = None) -> list[Comment]:
    with db.read() as s:
        q = select(Comment).where(Comment.run_id == run_id)
        if candidate_id:
            q = q.where(Comment.candidate_id == candidate_id)
        if kind:
            q = q.where(Comment.kind == kind)
        return list(s.exec(q.order_by(Comment.id)))
