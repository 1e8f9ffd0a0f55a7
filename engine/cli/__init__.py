"""The headless command line: ``python -m engine COMMAND …`` (see ``--help``).

Every command takes ``--db URL`` (default: REFRACT_DB, else SQLite under data/). Steering
commands go through ``engine.commands.send_command``, the same code path as the studio.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from pathlib import Path

from storage import leases, repo
from storage.attached import waiting_note
from storage.db import open_db
from storage.errors import StorageError

from engine.cli.run import cmd_run, print_summary, say_default_model


def _db(args):
    return open_db(args.db)


def cmd_submit(args) -> int:
    from engine.config import load_config
    from engine.lm.check import check_run_lms
    from engine.runs import submit_run

    cfg = load_config(args.config, allow_outside_files=args.allow_outside_files)
    say_default_model(cfg)
    check_run_lms(cfg)  # each LM answers one short request, or the field says why not: no run is stored
    print(f"run {submit_run(_db(args), cfg, owner=args.author)}")
    return 0


def cmd_validate(args) -> int:
    """Every check ``submit`` makes (the config, its files, its LMs answering, the evaluator
    loaded in the sandbox), without storing anything."""
    from engine.config import load_config
    from engine.lm.check import check_run_lms
    from engine.sandbox.probe import check_evaluator

    cfg = load_config(args.config, allow_outside_files=args.allow_outside_files)
    check_run_lms(cfg)
    check_evaluator(cfg)
    counts = ", ".join(f"{len(rows)} {name}" for name, rows in
                       (("training", cfg.dataset), ("validation", cfg.valset), ("test", cfg.testset)) if rows)
    print(f"valid: {cfg.mode} run {cfg.name!r}" + (f" ({counts} examples)" if counts else ""))
    return 0


HALTS = ("pause", "stop")  # commands that cut the step in flight (engine/interrupt.py)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"give a whole number of at least 1, not {text!r}")
    return int(text)


def cmd_worker(args) -> int:
    from engine.worker import Worker

    stop = threading.Event()
    worker = Worker(_db(args), lease_seconds=args.lease, poll_seconds=args.poll, max_runs=args.runs)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.parent:  # started by a studio: end with it (engine.worker.supervisor)
        from engine.worker.supervisor import end_with_parent

        end_with_parent(args.parent, stop)
    print(f"worker {worker.id} on {_db(args).safe_url}", file=sys.stderr, flush=True)
    try:
        worker.run_forever(stop, once=args.once)
    except KeyboardInterrupt:
        pass
    return 0


def cmd_status(args) -> int:
    db = _db(args)
    if not args.run:
        for r in repo.list_runs(db):
            best = f"{r.best_val_mean:.4f}" if r.best_val_mean is not None else "-"
            print(f"{r.id}  {r.status:9}  best {best:>7}  calls {r.metric_calls:>6}  ${r.cost_usd:.4f}  {r.name}")
        return 0
    return print_summary(db, args.run)


def cmd_export(args) -> int:
    from engine.records.export import export_run

    if args.approved:  # just the approved candidate's text
        from engine.cli.review import approved_text, write

        write(args.out, approved_text(_db(args), args.run))
        print(f"wrote {args.out}")
        return 0
    doc = export_run(_db(args), args.run)
    try:
        Path(args.out).write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    except OSError as exc:
        raise UserError(f"--out: cannot write {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {args.out}")
    return 0


def cmd_import(args) -> int:
    from engine.datasets import TooDeep, read_json
    from engine.records.export import import_run

    try:
        doc = read_json(_read_flag_file("file", args.file))
    except json.JSONDecodeError as exc:
        raise UserError(f"file: cannot read {args.file}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except TooDeep as exc:
        raise UserError(f"file: cannot read {args.file}: {exc}") from None
    print(f"run {import_run(_db(args), doc)}")
    return 0


def cmd_import_gepa(args) -> int:
    from engine.records.gepa_import import import_gepa_run

    run_id = import_gepa_run(_db(args), args.run_dir)
    print(f"run {run_id} (imported from {args.run_dir}; open it in the studio to browse its lineage and frontier)")
    return 0


def cmd_blame(args) -> int:
    from engine.records.blame import blame, format_text

    lines = blame(_db(args), args.run, args.candidate)
    print(json.dumps(lines, indent=1, ensure_ascii=False) if args.json else format_text(lines))
    return 0


def cmd_check_lm(args) -> int:
    from engine.lm.check import check_lm_command

    return check_lm_command(args.model)


def cmd_send(args) -> int:
    from engine.commands import send_command

    payload: dict = {}
    if getattr(args, "candidate", None):
        payload["candidate_id"] = args.candidate
    if args.command == "edit" or args.command == "inject":
        payload["content"] = _read_flag_file("--file", args.file)
        if getattr(args, "component", None):
            payload["component"] = args.component
    if args.command == "feedback":
        payload["text"] = args.text
    if args.command == "budget":
        for name in ("max_metric_calls", "max_cost_usd", "max_seconds", "stop_at_score", "max_steps"):
            value = getattr(args, name)
            if value is not None:
                payload[name] = value
        if not payload:
            raise UserError("budget: give at least one of --max-metric-calls, --max-cost-usd, --max-seconds, "
                            "--stop-at-score, --max-steps")
    if args.command == "lm":
        settings = {k: v for k, v in (("model", args.model), ("api_base", args.api_base),
                                      ("api_key_env", args.api_key_env)) if v is not None}
        if not settings:
            raise UserError("lm: give at least one of --model, --api-base, --api-key-env")
        payload[f"{args.which}_lm"] = settings
    db = _db(args)
    if args.command == "comment":
        repo.get_run(db, args.run)  # an unknown run is named as such, before its candidate
        cand = repo.get_candidate(db, args.candidate)
        if cand.run_id != args.run:
            raise UserError(f"candidate: {cand.id} belongs to run {cand.run_id}, not {args.run}")
        if not args.text.strip():
            raise UserError("text: the comment is empty")
        print(f"comment {repo.add_comment(db, args.run, args.candidate, args.author, args.text)}")
        return 0
    cid = send_command(db, args.run, args.command, payload, author=args.author, reason=args.reason)
    beat = leases.latest_worker_beat(db)
    note = "" if beat else " (no engine worker has run yet: it is applied when one starts)"
    run = repo.get_run(db, args.run)
    waiting = waiting_note({**run.model_dump(), "commands_pending": 1})
    if waiting:  # a run started from Python whose process is gone: no worker will apply it
        note = f". {waiting}"
    elif run.attached_to:
        note = " by the Python process that runs it"
    when = "the step in flight is cut within seconds" if args.command in HALTS else "applied at the next step boundary"
    print(f"command {cid} ({args.command}) queued; {when}{note}")
    return 0


class UserError(ValueError):
    """Bad input on the command line; ``str()`` is ``field: reason``."""


def _read_flag_file(flag: str, path: str) -> str:
    from engine.datasets import read_text_file

    try:
        return read_text_file(Path(path))
    except OSError as exc:
        raise UserError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None


def _add_steering(add) -> None:
    """The steering verbs: each sends one command (``cmd_send``), applied at the next step boundary
    (pause and stop first cut the step in flight)."""
    for name in ("pause", "resume", "step", "stop"):
        when = "now: the step in flight is cut" if name in HALTS else "at the next step boundary"
        add(name, cmd_send, f"{name} a run ({when})").add_argument("run")
    for name in ("pin", "unpin", "veto", "unveto"):
        sp = add(name, cmd_send, f"{name} a candidate")
        sp.add_argument("run")
        sp.add_argument("candidate")
    for name in ("feedback", "comment"):
        sp = add(name, cmd_send, f"attach {name} to a candidate")
        sp.add_argument("run")
        sp.add_argument("candidate")
        sp.add_argument("text")
    sp = add("edit", cmd_send, "a new human candidate from an edited one")
    sp.add_argument("run")
    sp.add_argument("candidate")
    sp.add_argument("--file", required=True)
    sp.add_argument("--component")
    sp = add("inject", cmd_send, "a wholly new human candidate")
    sp.add_argument("run")
    sp.add_argument("--file", required=True)
    sp = add("budget", cmd_send, "change the budgets of a run")
    sp.add_argument("run")
    sp.add_argument("--max-metric-calls", type=int)
    sp.add_argument("--max-cost-usd", type=float)
    sp.add_argument("--max-seconds", type=float)
    sp.add_argument("--stop-at-score", type=float)
    sp.add_argument("--max-steps", type=int)
    sp = add("lm", cmd_send, "change a paused run's LM settings (each LM answers one short request before they apply)")
    sp.add_argument("run")
    sp.add_argument("--which", choices=("reflection", "task", "judge"), default="reflection")
    sp.add_argument("--model")
    sp.add_argument("--api-base", help="an OpenAI-compatible server's address; \"\" clears it")
    sp.add_argument("--api-key-env", help="the NAME of the variable holding the key; \"\" clears it")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="Refract engine: batched reflective optimization")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name, fn, help_):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--db", default=None, help="SQLAlchemy URL (default: REFRACT_DB, else SQLite under data/)")
        sp.add_argument("--author", default="cli", help="who is doing this (recorded)")
        sp.set_defaults(fn=fn)
        return sp

    sp = add("run", cmd_run, "run a config to completion in the foreground")
    sp.add_argument("--quiet", action="store_true")
    add("submit", cmd_submit, "queue a run for a worker")
    add("validate", cmd_validate, "check a config as submit would, without queueing it")
    for name in ("run", "submit", "validate"):
        sub.choices[name].add_argument("config")
        sub.choices[name].add_argument("--allow-outside-files", action="store_true",
                                       help="the files the config names may lie outside its folder")
    sp = add("worker", cmd_worker, "claim queued runs and run them until stopped")
    sp.add_argument("--once", action="store_true", help="exit when no run is waiting")
    sp.add_argument("--lease", type=float, default=15.0, help="lease seconds (a dead worker's run is resumed after it)")
    sp.add_argument("--poll", type=float, default=0.25,
                    help="seconds between looks for work when idle (a command on a paused run waits at most this)")
    sp.add_argument("--runs", type=_positive_int, default=None,
                    help="runs to run at once (default: REFRACT_WORKER_RUNS, else half the cores, at least 2)")
    sp.add_argument("--parent", type=_positive_int, default=None,
                    help="the pid of the studio that started this worker: the worker stops when it is gone")
    add("status", cmd_status, "list runs, or show one").add_argument("run", nargs="?")
    sp = add("export", cmd_export, "write a run as one JSON document")
    sp.add_argument("run")
    sp.add_argument("--out", required=True)
    sp.add_argument("--approved", action="store_true", help="write only the approved candidate's text")
    from engine.cli.review import add_review

    add_review(add, lambda fn: lambda args: fn(args, _db(args)))
    from engine.cli.branch import add_branch

    add_branch(add, lambda fn: lambda args: fn(args, _db(args)))
    from engine.cli.admin import add_admin

    add_admin(add, lambda fn: lambda args: fn(args, _db(args)))
    from engine.health import add_health

    add_health(add)
    add("import", cmd_import, "load an exported run").add_argument("file")
    add("import-gepa", cmd_import_gepa, "load a GEPA run directory (run_dir; JSON and text only) as a finished run"
        ).add_argument("run_dir")
    sp = add("blame", cmd_blame, "who wrote each line of a candidate (the best one by default)")
    sp.add_argument("run")
    sp.add_argument("candidate", nargs="?")
    sp.add_argument("--json", action="store_true", help="a JSON list of {component, line_no, text, candidate_id, step, origin}")
    add("check-lm", cmd_check_lm, "test the connection to a model").add_argument("model", nargs="?")
    _add_steering(add)
    for sp in sub.choices.values():
        if not any(a.dest == "reason" for a in sp._actions):
            sp.add_argument("--reason", default="", help="why (recorded with the command)")
    return p


def main(argv: list[str] | None = None) -> int:
    from engine.commands import CommandError
    from engine.config import ConfigError

    from pydantic import ValidationError

    from engine.user_errors import reasons_of

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ConfigError, CommandError, UserError, StorageError, ValidationError, ValueError, OSError) as exc:
        # one format for every command: a line "error: field: reason" per problem, exit code 2
        for line in reasons_of(exc):
            print(f"error: {line}", file=sys.stderr)
    return 2
