"""Export a run to one JSON document, and import it into any database.

The document is self-describing and secret-free (the config names environment variables,
never keys), and defined once in ``engine.records.document``: exporting writes it through those
models, importing reads it through them and refuses, before anything is written, whatever they
do not hold (``DocumentError``, ``field: reason``). Import keeps run and candidate ids, so export
→ import → export gives the same document. LM calls are referenced by their position in ``lm_calls``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from pydantic import ValidationError

from storage import repo
from storage.db import Database
from storage.models import Candidate, Command, Comment, Evaluation, Example, LMCall, Run, Step
from storage.run_figures import running_seconds
from storage.states import CandidateStatus, CommandKind, CommandStatus, MergePath, Origin
from storage.transfer import insert_run

from engine.records.document import (
    FORMAT, TIME_FORMAT, BestDoc, CandidateDoc, CommandDoc, CommentDoc, Document, EvaluationDoc, ExampleDoc,
    LMCallDoc, LMTotals, Proposals, RunDoc, StepDoc, Totals, importable)
from engine.search.frontier_types import frontier_entries, objective_scores, typed_frontier
from engine.search.kept_frontier import keep_from_records
from engine.state import content_hash
from engine.user_errors import validation_reasons

# refract-run/1 (still imported) counted improved proposals as "accepted" and gave sibling merges
# origin "merge": ``upgraded`` maps both to today's words
OLD_FORMATS = ("refract-run/1",)


class DocumentError(ValueError):
    """A document that is not an export this version can import; one ``field: reason`` per line."""


def iso(dt: Optional[datetime]) -> Optional[str]:
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).strftime(TIME_FORMAT)


def parse_iso(s: Optional[str]) -> Optional[datetime]:
    return datetime.strptime(s, TIME_FORMAT).replace(tzinfo=timezone.utc) if s else None


def _when(stamp: Optional[str]) -> datetime:
    """A timestamp from the document (older documents lack some: then the import time)."""
    return parse_iso(stamp) or datetime.now(timezone.utc)


def export_run(db: Database, run_id: str) -> dict[str, Any]:
    """The run as one document (``engine.records.document``), as plain JSON values."""
    run = repo.get_run(db, run_id)
    examples = repo.get_examples(db, run_id)
    key_of = {e.pk: e.key for e in examples}
    cands = repo.list_candidates(db, run_id)
    evals = sorted(repo.evaluations_for(db, run_id), key=lambda e: (e.candidate_id, key_of.get(e.example_pk, "")))
    calls = repo.lm_calls_for(db, run_id)
    call_pos = {c.id: i for i, c in enumerate(calls)}
    commands = repo.list_commands(db, run_id)
    # commands are numbered by position, so the numbers survive an import into another database
    cmd_pos = {c.id: i for i, c in enumerate(commands)}
    val_keys = [e.key for e in examples if e.split == "val"] or [e.key for e in examples if e.split == "train"]
    val_scores: dict[str, dict[str, float]] = {}
    objectives: dict[str, dict[str, dict[str, float]]] = {}
    for ev in evals:
        k = key_of.get(ev.example_pk)
        if k in val_keys:
            val_scores.setdefault(ev.candidate_id, {})[k] = ev.score
            objectives.setdefault(ev.candidate_id, {})[k] = objective_scores(ev.side_info)
    eligible = [c.id for c in cands if c.status == CandidateStatus.ACCEPTED and not c.vetoed]
    frontier_type = (run.config.get("search") or {}).get("frontier", "instance")
    front = typed_frontier({c: val_scores.get(c, {}) for c in eligible}, objectives, frontier_type)
    return Document(
        format=FORMAT, run=_run_doc(run),
        examples=[ExampleDoc(id=e.key, split=e.split, payload=e.payload) for e in examples],
        candidates=[_candidate_doc(c, val_scores.get(c.id, {}), call_pos.get(c.lm_call_id)) for c in cands],
        evaluations=[EvaluationDoc(candidate_id=e.candidate_id, example_id=key_of.get(e.example_pk), score=e.score,
                                   side_info=e.side_info, error=e.error, cached=e.cached, seconds=round(e.seconds, 6),
                                   cost_usd=e.cost_usd, created_at=iso(e.created_at)) for e in evals],
        lm_calls=[LMCallDoc(purpose=c.purpose, model=c.model, candidate_id=c.candidate_id, example_id=c.example_key,
                            step=c.step, messages=c.messages, answer=c.answer, tokens_in=c.tokens_in,
                            tokens_out=c.tokens_out, cost_usd=c.cost_usd, seconds=round(c.seconds, 6), cached=c.cached,
                            error=c.error, attempt=c.attempt, status=c.status, error_kind=c.error_kind,
                            started_at=iso(c.started_at)) for c in calls],
        steps=[StepDoc(index=s.index, parent_ids=s.parent_ids, parent_reasons=s.parent_reasons,
                       proposal_ids=s.proposal_ids, accepted_ids=s.accepted_ids,
                       applied_command_ids=[cmd_pos[c] for c in s.applied_command_ids if c in cmd_pos],
                       metric_calls=s.metric_calls, started_at=iso(s.started_at), ended_at=iso(s.ended_at),
                       cost_usd=s.cost_usd, seconds=round(s.seconds, 3), predicted_speedup=s.predicted_speedup,
                       measured_speedup=s.measured_speedup, worker_utilisation=s.worker_utilisation)
               for s in repo.list_steps(db, run_id)],
        commands=[CommandDoc(id=cmd_pos[c.id], kind=c.kind, payload=c.payload, author=c.author, reason=c.reason,
                             status=c.status, created_at=iso(c.created_at), applied_at=iso(c.applied_at),
                             applied_step=c.applied_step, result=c.result) for c in commands],
        comments=[CommentDoc(candidate_id=c.candidate_id, author=c.author, text=c.text, kind=c.kind,
                             created_at=iso(c.created_at)) for c in repo.list_comments(db, run_id)],
        frontier_type=frontier_type, frontier=frontier_entries(front, val_keys),
        best=BestDoc(candidate_id=run.best_candidate_id, val_mean=run.best_val_mean, test_mean=run.test_mean,
                     seed_test_mean=run.seed_test_mean, test_cost_usd=run.test_cost_usd),
    ).model_dump()


def _run_doc(run: Run) -> RunDoc:
    return RunDoc(id=run.id, name=run.name, owner=run.owner, config=run.config, status=run.status,
                  status_reason=run.status_reason, created_at=iso(run.created_at), started_at=iso(run.started_at),
                  finished_at=iso(run.finished_at),
                  totals=Totals(metric_calls=run.metric_calls, cost_usd=round(run.cost_usd, 10), tokens_in=run.tokens_in,
                                tokens_out=run.tokens_out, steps=run.steps_done,
                                seconds=round(running_seconds(run), 3),  # running time, as the studio and the CLI say it
                                budget_overshoot=run.budget_overshoot,
                                lm_calls=LMTotals(total=run.lm_calls, failed=run.lm_calls_failed,
                                                  interrupted=run.lm_calls_interrupted),
                                proposals=Proposals(total=run.proposals_total, parsed=run.proposals_parsed,
                                                    valid=run.proposals_valid, improved=run.proposals_improved,
                                                    retried=run.proposals_retried)))


def _candidate_doc(c: Candidate, val_scores: dict[str, float], lm_call: Optional[int]) -> CandidateDoc:
    """A candidate in the document; ``lm_call`` is the position of its LM call in ``lm_calls``."""
    return CandidateDoc(
        id=c.id, parent_ids=c.parent_ids, origin=c.origin, step=c.step, content=c.content, status=c.status,
        reason=c.reason, component=c.component, merge_path=c.merge_path, pinned=c.pinned, vetoed=c.vetoed,
        author=c.author, val_mean=c.val_mean, val_scores=val_scores, val_cut_short=c.val_cut_short,
        minibatch_score=c.minibatch_score, parent_minibatch_score=c.parent_minibatch_score,
        minibatch_keys=c.minibatch_keys, frontier_version=c.frontier_version, created_at=iso(c.created_at),
        started_at=iso(c.started_at), finished_at=iso(c.finished_at), lm_call=lm_call)


def upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """A refract-run/1 document in today's words: the proposals that beat their parent on the
    minibatch are "improved" (they were "accepted", which now means validated only); a merge
    of improving siblings has origin "sibling_merge"; the LM-call totals are counted from its rows;
    retries were not counted (0)."""
    totals = dict(doc["run"]["totals"])
    proposals = dict(totals["proposals"])
    proposals["improved"] = proposals.pop("accepted")
    proposals.setdefault("retried", 0)  # not counted then
    totals["proposals"] = proposals
    calls = doc.get("lm_calls") or []  # one row per call then: the attempt totals follow from the rows
    totals.setdefault("lm_calls", {"total": len(calls), "failed": sum(1 for c in calls if c.get("error")),
                                   "interrupted": 0})
    rejected = {c["id"] for c in doc["candidates"] if c["status"] == CandidateStatus.REJECTED}
    cands = [{**c, "origin": Origin.SIBLING_MERGE.value} if c["origin"] == Origin.MERGE and _sibling_merge(c, rejected)
             else c for c in doc["candidates"]]
    cands = [{**c, "merge_path": _merge_path_of(c)} for c in cands]
    return {**doc, "format": FORMAT, "run": {**doc["run"], "totals": totals}, "candidates": cands}


def _sibling_merge(cand: dict, rejected: set[str]) -> bool:
    """An old "merge" that combined improving siblings: it names the component(s) it changed,
    or its parents were passed over for it. A system-aware merge does neither: it takes each
    component from one of two validated frontier members."""
    return bool(cand.get("component")) or any(p in rejected for p in cand["parent_ids"])


def _merge_path_of(cand: dict) -> str:
    """The merge path of a candidate exported before it was recorded: a merge with an LM call
    was written by the LM; one without took each component from one version (no LM call)."""
    if cand["origin"] not in (Origin.MERGE, Origin.SIBLING_MERGE):
        return ""
    return MergePath.LM.value if cand.get("lm_call") is not None else MergePath.THREE_WAY.value


def import_run(db: Database, doc: Any) -> str:
    """Load an exported run (same ids) into ``db`` in one transaction, once every part of the
    document is checked (``read_document``); Conflict if the run or a candidate id already exists."""
    d = read_document(doc)
    r = d.run
    example_pos = {e.id: pos for pos, e in enumerate(d.examples)}
    hashes = {c.id: content_hash(c.content) for c in d.candidates}
    run_id = insert_run(
        db, _run_row(d),
        examples=[Example(run_id=r.id, key=e.id, split=e.split, position=pos, payload=e.payload)
                  for pos, e in enumerate(d.examples)],
        lm_calls=[_lm_call_row(r.id, c) for c in d.lm_calls],
        candidates=[_candidate_row(r.id, c, hashes[c.id]) for c in d.candidates],
        evaluations=[Evaluation(run_id=r.id, candidate_id=e.candidate_id, example_pk=example_pos.get(e.example_id),
                                content_hash=hashes[e.candidate_id], score=e.score, side_info=e.side_info,
                                error=e.error, cached=e.cached, seconds=e.seconds, cost_usd=e.cost_usd,
                                created_at=_when(e.created_at)) for e in d.evaluations],
        commands=[Command(run_id=r.id, kind=c.kind, payload=c.payload, author=c.author, reason=c.reason,
                          status=c.status, created_at=_when(c.created_at), applied_at=parse_iso(c.applied_at),
                          applied_step=c.applied_step, result=c.result) for c in d.commands],
        steps=[_step_row(r.id, st) for st in d.steps],
        comments=[Comment(run_id=r.id, candidate_id=c.candidate_id, author=c.author, text=c.text,
                          kind=c.kind, created_at=_when(c.created_at)) for c in d.comments])
    keep_from_records(db, run_id)  # the studio reads its frontier as a run's the engine kept
    return run_id


MAX_PROBLEMS = 20  # a document wrong everywhere is told in its first problems, not thousands of lines


def read_document(doc: Any) -> Document:
    """The document checked (``engine.records.document``) and in today's format, or
    ``DocumentError`` with a ``field: reason`` line per problem."""
    if not isinstance(doc, dict):
        raise DocumentError(f"file: not a Refract export (a JSON object with format, run, candidates …) but a JSON "
                            f"{'array' if isinstance(doc, list) else type(doc).__name__}")
    fmt = doc.get("format")
    if fmt in OLD_FORMATS:
        try:
            doc = upgraded(doc)
        except (KeyError, TypeError, AttributeError) as exc:
            raise DocumentError(f"format: a {fmt} document needs run.totals.proposals.accepted and candidates with "
                                f"id, origin, status and parent_ids; {exc!s} is missing or malformed") from None
    elif fmt != FORMAT:
        raise DocumentError(f"format: {fmt!r} is not a Refract export format this version reads ({FORMAT}, or the "
                            f"older {', '.join(OLD_FORMATS)}); export the run again")
    try:
        parsed = Document.model_validate(doc)
    except ValidationError as exc:
        raise DocumentError(_told(validation_reasons(exc))) from None
    problems = importable(parsed) + _config_problems(parsed.run.config)
    if problems:
        raise DocumentError(_told(problems))
    return parsed


def _told(problems: list[str]) -> str:
    more = len(problems) - MAX_PROBLEMS
    return "\n".join(problems[:MAX_PROBLEMS] + ([f"file: … and {more} more problem(s)"] if more > 0 else []))


def _config_problems(config: dict) -> list[str]:
    """The run's config as the engine would read it (the studio, a continued run), its LM keys
    included (``engine.lm.keys``)."""
    from engine.config import RunConfig
    from engine.lm.keys import config_key_problems

    try:
        cfg = RunConfig.model_validate(config)
    except ValidationError as exc:
        return validation_reasons(exc, prefix="run.config.")
    except ValueError as exc:  # a check across fields that raised outside pydantic (the prompt evaluator's)
        return [f"run.config: {exc}"]
    return [f"run.config.{line}" for line in config_key_problems(cfg)]


def _run_row(d: Document) -> Run:
    r, t = d.run, d.run.totals
    p, lm = t.proposals, t.lm_calls or LMTotals()
    return Run(id=r.id, name=r.name, owner=r.owner, config=r.config, status=r.status,
               status_reason=r.status_reason, metric_calls=t.metric_calls, cost_usd=t.cost_usd,
               tokens_in=t.tokens_in, tokens_out=t.tokens_out, seconds=t.seconds, steps_done=t.steps,
               budget_overshoot=t.budget_overshoot, proposals_total=p.total, proposals_parsed=p.parsed,
               proposals_valid=p.valid, proposals_improved=p.improved, proposals_retried=p.retried,
               lm_calls=lm.total, lm_calls_failed=lm.failed, lm_calls_interrupted=lm.interrupted,
               best_candidate_id=d.best.candidate_id, best_val_mean=d.best.val_mean,
               test_mean=d.best.test_mean, seed_test_mean=d.best.seed_test_mean,
               test_cost_usd=d.best.test_cost_usd or 0.0, created_at=_when(r.created_at),
               started_at=parse_iso(r.started_at), finished_at=parse_iso(r.finished_at),
               approved_candidate_id=_approved(d), branch_of=((r.config or {}).get("branch") or {}).get("run"))


def _approved(d: Document) -> Optional[str]:
    """The approved candidate, as the document's last applied ``approve`` command left it (who
    approved it and why stay on that command); None when nothing is approved."""
    approvals = [c for c in d.commands if c.kind == CommandKind.APPROVE and c.status == CommandStatus.APPLIED]
    candidate = approvals[-1].payload.get("candidate_id") if approvals else None
    if candidate is not None and candidate not in {c.id for c in d.candidates}:
        raise DocumentError(f"commands: the approved candidate {candidate} is not among the document's candidates")
    return candidate


def _lm_call_row(run_id: str, c: LMCallDoc) -> LMCall:
    return LMCall(run_id=run_id, purpose=c.purpose, model=c.model, candidate_id=c.candidate_id,
                  example_key=c.example_id, step=c.step, messages=c.messages, answer=c.answer,
                  tokens_in=c.tokens_in, tokens_out=c.tokens_out, cost_usd=c.cost_usd, seconds=c.seconds,
                  cached=c.cached, error=c.error, attempt=c.attempt, status=c.status, error_kind=c.error_kind,
                  started_at=_when(c.started_at))


def _candidate_row(run_id: str, c: CandidateDoc, hash_: str) -> Candidate:
    """A candidate row; ``lm_call_id`` is the position in the document's ``lm_calls``."""
    merge_path = c.merge_path if c.merge_path is not None else _merge_path_of(c.model_dump())
    return Candidate(id=c.id, run_id=run_id, content=c.content, content_hash=hash_, origin=c.origin,
                     parent_ids=c.parent_ids, component=c.component, step=c.step, merge_path=merge_path,
                     status=c.status, reason=c.reason, pinned=c.pinned, vetoed=c.vetoed, author=c.author,
                     val_mean=c.val_mean, val_count=len(c.val_scores), val_cut_short=c.val_cut_short,
                     minibatch_score=c.minibatch_score, parent_minibatch_score=c.parent_minibatch_score,
                     minibatch_keys=c.minibatch_keys, frontier_version=c.frontier_version,
                     created_at=_when(c.created_at), started_at=parse_iso(c.started_at),
                     finished_at=parse_iso(c.finished_at), lm_call_id=c.lm_call)


def _step_row(run_id: str, st: StepDoc) -> Step:
    """A step row; ``applied_command_ids`` are positions in the document's ``commands``."""
    return Step(run_id=run_id, index=st.index, parent_ids=st.parent_ids, parent_reasons=st.parent_reasons,
                proposal_ids=st.proposal_ids, accepted_ids=st.accepted_ids,
                applied_command_ids=st.applied_command_ids, metric_calls=st.metric_calls,
                cost_usd=st.cost_usd, seconds=st.seconds, predicted_speedup=st.predicted_speedup,
                measured_speedup=st.measured_speedup, worker_utilisation=st.worker_utilisation,
                started_at=_when(st.started_at), ended_at=parse_iso(st.ended_at))
