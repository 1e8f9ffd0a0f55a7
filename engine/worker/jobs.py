"""Running the studio's jobs in the engine worker: trying an evaluator on the seed, testing an
LM connection, Analyze's written diagnosis of a run. Each can take minutes (a sandbox pool, a local model loading), so the studio
never runs them in a page: it queues a ``Job`` (``storage.jobs``) and polls it.

``JobRunner`` runs in a thread of ``python -m engine worker`` next to the runs, one job at a
time. A job's own failure (a bad config, an evaluator that cannot start) is recorded on the job
as ``failed`` with the message; it never stops the worker.
"""

from __future__ import annotations

import io
import logging
import threading
from typing import Callable, Optional

from storage import jobs
from storage.db import Database

from engine.access import Actor, RoleMap, check

log = logging.getLogger("refract.jobs")

TRY_EXAMPLES = 5  # the evaluator is tried on at most this many examples
PREVIEW_EXAMPLES = 3  # a prompt evaluator's preview: the seed prompt on this many examples
TRY_EVALUATOR, CHECK_LM, ANALYZE = "try_evaluator", "check_lm", "analyze"


def tried_examples(cfg, rows: Optional[list], limit: int = TRY_EXAMPLES) -> list[tuple[str, object]]:
    """(label, row) of the examples a try evaluates: the first ``rows`` as the person gave them
    (before any shuffled split), labelled ``row N`` as the new-run preview numbers them, with the
    row's own id when it has one; without ``rows``, the first training and validation examples
    of the config under their keys."""
    from engine.datasets import example_key
    from engine.runs import examples_of

    if rows is None:
        return [(key, row) for key, split, row in examples_of(cfg) if split in ("val", "train")][:limit]
    out = []
    for i, row in enumerate(rows[:limit]):
        key = example_key(row, "train", i)
        out.append((f"row {i + 1}" + ("" if key == f"train-{i}" else f" ({key})"), row))
    return out


def try_evaluator(db: Database, job_id: str, payload: dict) -> dict:
    """Evaluate the seed of ``payload["config"]`` (a stored run config) on the first examples
    (``payload["rows"]``, in the order given, when the studio sends them; see ``tried_examples``;
    at most ``payload["examples"]``, default TRY_EXAMPLES) in the sandbox, recording each result as
    it arrives. {"validate", "results": [...]}. The evaluator's ``lm()`` calls go to the config's
    task LM (and judge) directly: no run exists yet to record or charge them."""
    from engine.config import RunConfig
    from engine.executor import EvalTask
    from engine.sandbox import make_executor

    cfg = RunConfig.model_validate(payload["config"])
    seed = cfg.seed_candidate
    if seed in (None, ""):
        raise ValueError("there is no seed to try: give a seed candidate (the objective-only mode has none)")
    limit = int(payload.get("examples") or TRY_EXAMPLES)
    examples = tried_examples(cfg, payload.get("rows") if cfg.dataset else None, limit)
    out: dict = {"validate": None, "results": [], "examples": len(examples)}
    jobs.update_job(db, job_id, f"starting the sandbox for {len(examples)} example(s)", out)
    executor = make_executor(cfg.executor, cfg.evaluator, _try_lm(cfg))
    try:
        out["validate"] = executor.validate(seed)
        futures = [(key, executor.submit(EvalTask(candidate=seed, example=row if cfg.dataset else None,
                                                  example_key=key))) for key, row in examples]
        for key, fut in futures:
            res = fut.result(timeout=cfg.executor.timeout_seconds + 30)
            out["results"].append({"example": key, "score": res.score, "side_info": res.side_info,
                                   "error": res.error, "seconds": res.seconds})
            jobs.update_job(db, job_id, f"{len(out['results'])} of {len(examples)} example(s) evaluated", out)
    finally:
        executor.close()
    return out


def _try_lm(cfg):
    """The ``lm()`` handler of a try: the run's task LM or judge, cached like a run's calls."""
    from engine.lm.client import LMClient
    from engine.lm.params import evaluator_lm

    client = LMClient()

    def handle(messages: list, model, params: dict, task) -> dict:
        lm_cfg, purpose = evaluator_lm(cfg, model, params)
        res = client.complete(lm_cfg, messages)
        if res.error:
            raise RuntimeError(f"{purpose} LM failed: {res.error}")  # the studio names the LM's field from it
        return {"text": res.text, "cost_usd": res.cost_usd, "tokens_in": res.tokens_in, "tokens_out": res.tokens_out}

    return handle


def check_lm(db: Database, job_id: str, payload: dict) -> dict:
    """``python -m engine check-lm`` in the worker: {"ok", "output"} (what the command prints).
    With ``payload["config"]`` (a stored run config: Start in the studio) every LM of that run
    instead (``engine.lm.check.run_lm_problems``): {"ok", "problems", "output"}."""
    from engine.lm.check import check_lm_command, run_lm_problems

    if "config" in payload:
        from engine.config import RunConfig

        jobs.update_job(db, job_id, "asking each LM of the run for one word")
        problems = run_lm_problems(RunConfig.model_validate(payload["config"]))
        return {"ok": not problems, "problems": problems, "output": "\n".join(problems) or "every LM answered"}
    jobs.update_job(db, job_id, "asking the model for one word (a local model may take a minute to load)")
    buf = io.StringIO()
    code = check_lm_command(payload.get("model") or None, api_base=payload.get("api_base") or None,
                            api_key_env=payload.get("api_key_env") or None, out=buf, err=buf)
    return {"ok": code == 0, "output": buf.getvalue().strip()}


def analyze(db: Database, job_id: str, payload: dict) -> dict:
    """Analyze's written diagnosis of ``payload["run_id"]`` (``engine.analyze.diagnosis``): the
    findings now, then one call to the run's reflection LM, recorded on the run."""
    from engine.analyze import analyze as findings_of
    from engine.analyze.diagnosis import diagnose

    findings = findings_of(db, payload["run_id"])
    jobs.update_job(db, job_id, f"asking the run's reflection LM about {len(findings)} finding(s) "
                    "(a local model may take a minute to load)")
    return diagnose(db, payload["run_id"], findings)


def request_job(db: Database, kind: str, payload: dict, actor: Actor, roles: Optional[RoleMap] = None) -> str:
    """Queue a job for a worker on behalf of ``actor``; its id. Every kind runs code or spends
    money, so the actor must be an editor, and evaluator tries count against the hourly limit
    of ``roles``; a refusal is recorded and raised as ``engine.access.Refused``."""
    if kind not in HANDLERS:
        raise ValueError(f"job: unknown kind {kind!r}; one of {', '.join(HANDLERS)}")
    check(db, actor, kind, roles=roles)
    return jobs.submit_job(db, kind, payload, author=actor.name)


HANDLERS: dict[str, Callable[[Database, str, dict], dict]] = {TRY_EVALUATOR: try_evaluator, CHECK_LM: check_lm,
                                                              ANALYZE: analyze}


class JobRunner:
    """Claims and runs jobs until stopped; ``run_once`` runs at most one (for tests)."""

    def __init__(self, db: Database, worker_id: str, poll_seconds: float = 0.5) -> None:
        self.db, self.worker_id, self.poll_seconds = db, worker_id, poll_seconds

    def run_once(self) -> Optional[str]:
        """Run the oldest pending job, if any; its id."""
        job = jobs.claim_job(self.db, self.worker_id, tuple(HANDLERS))
        if job is None:
            return None
        try:
            result = HANDLERS[job.kind](self.db, job.id, job.payload)
        except Exception as exc:  # noqa: BLE001 -- a job's failure is its outcome, never the worker's
            log.info("job %s (%s) failed: %s", job.id, job.kind, exc)
            # our own refusals (ValueError) read as sentences; anything else keeps its type
            jobs.finish_job(self.db, job.id, None, error=str(exc) if type(exc) is ValueError else f"{type(exc).__name__}: {exc}")
        else:
            jobs.finish_job(self.db, job.id, result)
        return job.id

    def loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                ran = self.run_once()
            except Exception:  # a transient database error: try again after a pause
                log.exception("job runner")
                ran = None
            if ran is None:
                stop.wait(self.poll_seconds)
