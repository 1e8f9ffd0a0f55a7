"""The admin verbs of the command line: ``delete``, ``grant``, ``revoke`` and ``roles``
(``engine.admin`` does the work and the recording; the CLI acts as an admin under ``--author``)."""

from __future__ import annotations

from storage.db import Database

from engine.access import local_actor


def cmd_delete(args, db: Database) -> int:
    from engine.admin import branches_note, delete_run

    note = branches_note(db, args.run)
    counts = delete_run(db, args.run, local_actor(args.author), args.reason)
    rows = sum(counts.values()) + 1
    print(f"deleted run {args.run} ({rows} rows: " + ", ".join(f"{n} {t}" for t, n in counts.items() if n)
          + "); the deletion is recorded (`python -m engine roles --log`)")
    if note:
        print(f"note: {note}")
    return 0


def cmd_grant(args, db: Database) -> int:
    from engine.admin import grant, normalise_rule

    before = grant(db, args.rule, args.role, local_actor(args.author), args.reason)
    rule = normalise_rule(args.rule)
    print(f"{rule}: {args.role.lower()}" + (f" (was {before})" if before else ""))
    return 0


def cmd_revoke(args, db: Database) -> int:
    from engine.admin import normalise_rule, revoke

    was = revoke(db, args.rule, local_actor(args.author), args.reason)
    print(f"{normalise_rule(args.rule)}: grant of {was} removed (the secrets file's [roles] still apply)")
    return 0


def cmd_roles(args, db: Database) -> int:
    from engine.admin import admin_actions, grants

    if args.log:
        for a in admin_actions(db, local_actor(args.author)):
            why = f" ({a.reason})" if a.reason else ""
            print(f"{a.created_at:%Y-%m-%d %H:%M:%S}  {a.actor:<24} {a.action:<10} {a.subject}  {a.detail}{why}")
        return 0
    rows = grants(db)
    if not rows:
        print("no grants in this database (the [roles] table of the secrets file applies alone)")
    for g in rows:
        print(f"{g.rule:<40} {g.role:<7} granted by {g.granted_by or '-'} on {g.created_at:%Y-%m-%d}")
    return 0


def add_admin(add, with_db) -> None:
    """Register the admin verbs on the CLI's parser (``add`` as in ``engine.cli``)."""
    sp = add("delete", with_db(cmd_delete), "delete a finished run and all its rows (recorded; stop a running run first)")
    sp.add_argument("run")
    sp = add("grant", with_db(cmd_grant), "give an e-mail address, an @domain or a claim value a role (viewer, editor, admin)")
    sp.add_argument("rule")
    sp.add_argument("role")
    sp = add("revoke", with_db(cmd_revoke), "remove a role granted with `grant` (the secrets file's rules stay)")
    sp.add_argument("rule")
    sp = add("roles", with_db(cmd_roles), "list the granted roles (or, with --log, run deletions and role changes)")
    sp.add_argument("--log", action="store_true", help="the record of run deletions and role changes, newest first")
