"""``python -m engine health``: is the database reachable, and is an engine worker alive on it?

For service managers and load balancers (``scripts/team/health.sh``): exit 0 when the database
answers and at least one worker (of this host with ``--this-host``) beat within ``--max-age``
seconds; 1 otherwise, with one line per worker saying how long ago it beat.
"""

from __future__ import annotations

import socket


def cmd_health(args) -> int:
    from storage.activity import worker_beats
    from storage.db import open_db

    db = open_db(args.db)  # an unreachable database raises StorageError: "error: …", exit 2
    beats = worker_beats(db)
    if args.this_host:
        beats = [b for b in beats if b["host"] == socket.gethostname()]
    print(f"database ok: {db.safe_url}")
    for b in beats:
        where = "stopped" if b["stopped"] else f"on run {b['current_run_id']}" if b["current_run_id"] else "idle"
        print(f"worker {b['id']} (pid {b['pid']} on {b['host']}): heartbeat {b['age_s']:.1f} s ago, {where}")
    alive = [b for b in beats if b["age_s"] <= args.max_age and not b["stopped"]]
    if not alive:
        print(f"unhealthy: no engine worker{' of this host' if args.this_host else ''} beat in the last "
              f"{args.max_age:g} s; start one with `python -m engine worker`")
        return 1
    print(f"healthy: {len(alive)} engine worker(s) alive")
    return 0


def add_health(add) -> None:
    sp = add("health", cmd_health, "check the database and that an engine worker is alive (exit 0 / 1)")
    sp.add_argument("--max-age", type=float, default=30.0, help="seconds since a worker's last heartbeat")
    sp.add_argument("--this-host", action="store_true", help="only workers on this machine")
