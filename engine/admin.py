"""What only an admin may do: delete a run, and grant or revoke roles. The studio, the CLI
(``python -m engine delete | grant | revoke | roles``) and any other caller go through these
functions, which check the role themselves (``engine.access.check``: a refusal is recorded) and
record what was done (``storage.admin``: the record outlives a deleted run).

A run is deleted only when it is finished and no worker holds it: a running, paused or queued
run is refused with "stop it first" (a stop is one command, and a queued run is cancelled at
once), so a worker never has a run vanish in the middle of a step.
"""

from __future__ import annotations

import re
from typing import Optional

from storage import admin as store
from storage.db import Database
from storage.models import RoleGrant

from engine.access import Actor, check, local_actor

GRANTABLE = ("viewer", "editor", "admin")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_DOMAIN = re.compile(r"^@[^@\s]+\.[^@\s]+$")


class AdminError(ValueError):
    """Bad input for an admin action; ``str()`` is ``field: reason``."""


def delete_run(db: Database, run_id: str, actor: Optional[Actor] = None, reason: str = "") -> dict[str, int]:
    """Delete a finished run and every row that belongs to it (``storage.admin.delete_run``);
    returns the rows deleted per table. ``actor`` None: the trusted CLI under the name ``cli``.
    Raises ``Refused`` for a non-admin, ``Conflict`` for a run that is not finished."""
    actor = actor or local_actor("cli")
    check(db, actor, "delete_run", run_id)
    return store.delete_run(db, run_id, actor.name, reason)


def branches_note(db: Database, run_id: str) -> str:
    """What deleting ``run_id`` does to its branches, in a sentence ("" when it has none)."""
    from storage.branches import branches_of

    kids = [k["id"] for k in branches_of(db, run_id)]
    if not kids:
        return ""
    return (f"run {run_id} has {len(kids)} branch(es) ({', '.join(kids)}): they stay whole, with their candidates and "
            "evaluations, and say that their base run was deleted")


def normalise_rule(rule: str) -> str:
    """A grant's rule as it is compared (lower case, trimmed): an e-mail address, an @domain or a
    claim value (no ``@``). ``AdminError`` says which form was meant and what is wrong."""
    text = (rule or "").strip().lower()
    if not text:
        raise AdminError("rule: give an e-mail address, an @domain or a claim value")
    if len(text) > 200:
        raise AdminError("rule: at most 200 characters")
    if text.startswith("@"):
        if not _DOMAIN.match(text):
            raise AdminError(f"rule: {text!r} is not a domain; write it as @example.com")
    elif "@" in text and not _EMAIL.match(text):
        raise AdminError(f"rule: {text!r} is not an e-mail address (name@example.com)")
    return text


def grant(db: Database, rule: str, role: str, actor: Optional[Actor] = None, reason: str = "") -> Optional[str]:
    """Give everyone ``rule`` matches the role ``role`` (viewer, editor or admin), in addition to
    the secrets file's rules; returns the role the rule was granted before (None: none)."""
    actor = actor or local_actor("cli")
    check(db, actor, "manage_roles")
    label = (role or "").strip().lower()
    if label not in GRANTABLE:
        raise AdminError(f"role: {role!r} is not a role; one of {', '.join(GRANTABLE)}")
    return store.set_grant(db, normalise_rule(rule), label, actor.name, reason)


def revoke(db: Database, rule: str, actor: Optional[Actor] = None, reason: str = "") -> str:
    """Remove the grant of ``rule``; returns the role it gave. The secrets file's rules are not
    grants and stay (that is what keeps its admins from being locked out)."""
    actor = actor or local_actor("cli")
    check(db, actor, "manage_roles")
    return store.remove_grant(db, normalise_rule(rule), actor.name, reason)


def grants(db: Database) -> list[RoleGrant]:
    """Every grant (reading them needs no role: the studio uses them to resolve everyone's role)."""
    return store.list_grants(db)


def grant_pairs(db: Database) -> list[tuple[str, str]]:
    """``(rule, role)`` of every grant, for ``RoleMap.with_grants``."""
    return [(g.rule, g.role) for g in store.list_grants(db)]


def admin_actions(db: Database, actor: Actor, limit: int = 200) -> list:
    """The record of run deletions and role changes, newest first; admins only (it names people)."""
    check(db, actor, "manage_roles")
    return store.list_admin_actions(db, limit)

