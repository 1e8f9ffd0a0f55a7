"""The ``branch`` verb of the command line: a new run from candidates of another run, with
settings changed (``engine.branch``), queued for a worker or run here (``--foreground``)."""

from __future__ import annotations

import json
import sys

from storage import branches
from storage.db import Database

from engine.branch import branch_config, changes, parse_overrides


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    if isinstance(value, list) and len(text) > 60:
        return f"{len(value)} rows"
    return text if len(text) <= 60 else text[:57] + "…"


def cmd_branch(args, db: Database) -> int:
    from engine.lm.check import check_run_lms
    from engine.reuse import reuse_bases
    from engine.cli.run import foreground_worker, run_foreground, say_default_model
    from engine.runs import submit_run

    cfg = branch_config(db, args.run, args.candidate, parse_overrides(args.set or []),
                        allow_outside_files=args.allow_outside_files)
    say_default_model(cfg)
    check_run_lms(cfg)  # as submit: each LM answers one short request, or the field says why not; nothing stored
    base = branches.run_configs(db, [args.run])[args.run]
    worker = foreground_worker(db) if args.foreground else None
    run_id = submit_run(db, cfg, owner=args.author, held_by=(worker.id, worker.lease_seconds) if worker else None)
    seeds = ", ".join(cfg.branch.candidates)
    print(f"run {run_id}: a branch of run {args.run} from {seeds}", flush=True)
    for name, old, new in changes(base, cfg.stored()):
        print(f"  {name}: {_short(old)} → {_short(new)}")
    bases, note = reuse_bases(db, cfg)
    print("evaluations of the same text and example that run " + " or ".join(bases) + " recorded are reused, not paid"
          if bases else f"nothing is reused: {note}", file=sys.stderr)
    if args.foreground:
        return run_foreground(db, cfg, run_id, worker, quiet=args.quiet)
    print("queued; `python -m engine worker` (or the studio) runs it", file=sys.stderr)
    return 0


def add_branch(add, with_db) -> None:
    """Register ``branch`` on the CLI's parser (``add`` as in ``engine.cli``)."""
    sp = add("branch", with_db(cmd_branch), "a new run from candidates of a run, with any setting changed")
    sp.add_argument("run", help="the base run")
    sp.add_argument("candidate", nargs="*",
                    help="the candidates to start from (the first is the seed, the others a seed population); "
                         "default: the run's best")
    sp.add_argument("--set", action="append", metavar="NAME=VALUE",
                    help="change a setting, e.g. --set search.parents_per_step=4 (a TOML value, else text); repeat it")
    sp.add_argument("--foreground", action="store_true", help="run it here to its end, as `run` does")
    sp.add_argument("--quiet", action="store_true", help="with --foreground: no progress bar")
    sp.add_argument("--allow-outside-files", action="store_true",
                    help="files named by --set *_file=… may lie outside the working folder")
