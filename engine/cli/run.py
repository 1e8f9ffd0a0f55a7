"""The ``run`` verb of the command line: a config run to its end in the foreground, with a
progress bar, a summary, and Ctrl-C that pauses the run after its step. Its exit code says how
the run ended (``exit_code``)."""

from __future__ import annotations

import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from storage import repo
from storage.db import open_db
from storage.states import RunStatus


def cmd_run(args) -> int:
    from engine.lm.starting import warm_lm_in_background

    from engine.config import load_config
    from engine.lm.check import check_run_lms
    from engine.runs import submit_run

    cfg = load_config(args.config, allow_outside_files=args.allow_outside_files)
    # litellm's import takes seconds of CPU: begun now, it overlaps starting the sandbox pool and
    # evaluating the seed, instead of delaying the first reflection (a config file's LM always
    # needs litellm: only the Python API can name a callable). Begun after the config is read
    # (0.13 s), so that a config with a mistake exits before the import begins (a process that
    # leaves during it leaves with os._exit: engine.__main__).
    warm_lm_in_background()
    say_default_model(cfg)
    # The check of the run's LMs needs litellm, whose import (begun above) outlasts everything
    # else here: meanwhile the evaluator is checked in the sandbox, the database opened, the
    # modules of the run imported and its sandbox processes spawned, so that the seed is
    # evaluated soon after the import, not 1.5 s after it.
    from engine.sandbox.probe import check_evaluator

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lm-check")
    checked = pool.submit(check_run_lms, cfg)  # or the field says why not: no run is stored
    stock = spawn_ahead(cfg)
    try:
        check_evaluator(cfg)
        db = open_db(args.db)
        import engine.worker  # noqa: F401
        checked.result()
    except BaseException:
        if stock is not None:
            stock.close()
        # the error is printed now, not after the LM check's import
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    worker = foreground_worker(db)
    run_id = submit_run(db, cfg, owner=args.author, evaluator_checked=True, held_by=(worker.id, worker.lease_seconds))
    print(f"run {run_id}", flush=True)
    return run_foreground(db, cfg, run_id, worker, quiet=args.quiet, stock=stock)


def spawn_ahead(cfg):
    """A ``WarmStock`` spawning the run's sandbox processes now (its pool takes them), or None
    for a Dask executor."""
    if cfg.executor.backend != "local":
        return None
    from engine.sandbox import spec_from_config
    from engine.sandbox.warm import WarmStock

    return WarmStock(spec_from_config(cfg.executor), size=cfg.executor.workers, refill=False)


def foreground_worker(db):
    """The worker of a run this process runs itself: the run is submitted already held by it
    (``submit_run(..., held_by=…)``), so that a studio's worker on the same database never takes it."""
    from engine.worker import Worker

    return Worker(db, worker_id=f"cli-{uuid.uuid4().hex[:8]}")


def run_foreground(db, cfg, run_id: str, worker, quiet: bool = False, stock=None) -> int:
    """Run ``run_id`` (of config ``cfg``), submitted held by ``worker`` (``foreground_worker``),
    here to its end, with a progress bar; Ctrl-C pauses it. The exit code of
    ``python -m engine run``. ``stock``: sandbox processes spawned for it (``spawn_ahead``),
    closed when the run ends."""
    worker.stock = stock
    finished = threading.Event()

    def body() -> None:
        try:
            worker.run_claimed(run_id)
        finally:
            if stock is not None:  # after the run's pool has closed (engine.sandbox.warm)
                stock.close()
            finished.set()

    threading.Thread(target=body, daemon=True, name="refract-run").start()
    try:
        _progress(db, run_id, cfg, finished, quiet=quiet)
    except KeyboardInterrupt:
        return _interrupted(db, run_id, finished)
    code = print_summary(db, run_id)
    if code == EXIT_LM_PAUSED:
        print(f"The engine paused run {run_id}: its reflection LM kept failing (exit code {EXIT_LM_PAUSED}). Fix the LM "
              f"settings, then continue it with `python -m engine resume {run_id}` and a worker.", file=sys.stderr)
    return code


def _interrupted(db, run_id: str, finished: threading.Event) -> int:
    """Ctrl-C: a pause command, which cuts the step in flight as a pause from the studio does (a
    reflection of a local model is not waited for), and then leaves the run ``paused`` (the person
    stopped it: it is not left ``running`` for a worker to pick up). A second Ctrl-C leaves at
    once; the run then stays ``running`` and a worker resumes it once this process's lease lapses."""
    from engine.commands import send_command

    print(f"\nInterrupted: pausing run {run_id}; the step in flight is cut, as a pause from the studio cuts it "
          "(Ctrl-C again to leave at once).", file=sys.stderr, flush=True)
    send_command(db, run_id, "pause", author="cli", reason="Ctrl-C in `engine run`")
    try:
        while not finished.wait(0.5):  # an event, not Thread.join: a join cut by Ctrl-C lies (CPython 3.11)
            pass
    except KeyboardInterrupt:
        print(f"Left at once: run {run_id} is still 'running'; an engine worker resumes it once this "
              "process's lease lapses.", file=sys.stderr)
        return 130
    run = repo.get_run(db, run_id)
    if run.status != RunStatus.PAUSED:  # it ended as the step ended: nothing was left to pause
        return print_summary(db, run_id)
    print(f"Run {run_id} is paused; continue it with `python -m engine resume {run_id}` and a worker "
          "(`python -m engine worker`).", file=sys.stderr)
    return 130


def say_default_model(cfg) -> None:
    from engine.config import LOCAL_MODEL

    if cfg.reflection_lm.model == LOCAL_MODEL:
        print(f"reflection LM: {LOCAL_MODEL} (the offline local model; set [reflection_lm] model to use a provider)",
              file=sys.stderr)


def _progress(db, run_id, cfg, finished: threading.Event, quiet: bool) -> None:
    from tqdm import tqdm

    total = cfg.budget.max_metric_calls
    bar = tqdm(total=total, unit="call", desc="metric calls", disable=quiet, file=sys.stderr)
    while not finished.wait(0.5):
        run = repo.get_run(db, run_id)
        bar.n = run.metric_calls
        best = f"{run.best_val_mean:.4f}" if run.best_val_mean is not None else "-"
        bar.set_postfix_str(f"step {run.steps_done} best {best} ${run.cost_usd:.4f}")
    bar.close()


def print_summary(db, run_id) -> int:
    run = repo.get_run(db, run_id)
    steps = repo.list_steps(db, run_id)
    print(f"status {run.status}: {run.status_reason}")
    if run.best_val_mean is not None:
        print(f"best {run.best_val_mean:.4f} (candidate {run.best_candidate_id})")
    from engine.held_out_pass import audit_line

    if audit_line(run):
        print(audit_line(run) + " (the search never saw the test set)")
        from engine.gain import held_out_gain

        gain = held_out_gain(db, run_id)
        if gain is not None and gain.held_out:
            print(gain.line())
    from storage.queries import run_overview
    from storage.run_figures import proposal_counts, running_seconds

    # the dashboard's figures, by the same functions (storage.run_figures)
    counts = proposal_counts(run, run_overview(db, run_id)["proposals_reflecting"])
    print(f"metric calls {run.metric_calls}  cost ${run.cost_usd:.4f}  tokens {run.tokens_in}+{run.tokens_out}  "
          f"running {running_seconds(run):.1f} s  steps {run.steps_done}")
    from engine.lm.journal import run_lm_failures

    print("LM calls: " + (run_lm_failures(db, run) or f"{run.lm_calls}, none failed"))  # the dashboard's line
    notes = [f"{n} {what}" for n, what in ((counts.waiting, "waiting for the reflection LM"),
                                           (counts.unanswered, "got no answer from it")) if n]
    print(f"proposals {counts.total}" + (f" ({', '.join(notes)})" if notes else "")
          + f": of the {counts.answered} answered, parsed {counts.percent(counts.parsed)}, "
          f"valid {counts.percent(counts.valid)}, improved {counts.percent(counts.improved)}; "
          f"{counts.retried} asked the LM again (a retry)")
    pred = [s.predicted_speedup for s in steps if s.predicted_speedup]
    meas = [s.measured_speedup for s in steps if s.measured_speedup]
    if pred and meas:
        print(f"batch speed-up: predicted {sum(pred) / len(pred):.2f}x, measured {sum(meas) / len(meas):.2f}x")
    from engine.runtime.model import run_prediction

    model = run_prediction(db, run_id)
    if model:
        lat = model["latencies"]
        spread = f", spread {lat.lm_spread:.2f}" if lat.lm_spread >= 0.05 else ""  # how much LM calls' times vary
        print(f"wall-clock: measured {model['measured']:.1f} s, predicted {model['predicted']:.1f} s by the runtime model "
              f"(LM {lat.lm:.2f} s{spread}, evaluator {lat.eval * 1000:.0f} ms, {lat.accept:.0%} of proposals improve, "
              f"{lat.n_val} validation examples, {lat.workers} workers); {model['speedup']:.2f}x faster per metric call "
              "than 1×1 predicted")
    return exit_code(run)


EXIT_LM_PAUSED = 3  # not 0: a script must tell "the LM kept failing" from success


def exit_code(run) -> int:
    """0 completed, stopped or paused by a person; 1 failed; EXIT_LM_PAUSED when the engine paused
    the run because the reflection LM kept failing (fix it, then ``python -m engine resume RUN``)."""
    from engine.stopping import paused_for_lm

    if paused_for_lm(run):
        return EXIT_LM_PAUSED
    return 0 if run.status in (RunStatus.COMPLETED, RunStatus.STOPPED, RunStatus.PAUSED) else 1
