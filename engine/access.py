"""Who may do what: the three roles, how a signed-in identity gets one, and the check every
action passes on the server side.

The check lives here and is called by the command layer itself (``engine.commands``,
``engine.runs.submit_run``, ``engine.worker.jobs.request_job``), the code path the studio and the
CLI share, so hiding a button is never the only guard: a request forged in a browser reaches the
same check and is refused, and the refusal is recorded (``storage.access``).

Roles (each includes the ones before it):

- **viewer**: read everything, comment.
- **editor**: also create runs (which runs their evaluator code), steer runs, approve candidates,
  try an evaluator, test an LM connection.
- **admin**: everything, including deleting runs and managing roles.

Who is what, in one resolution order (README "Sign-in and roles"): a person gets the highest role
that any rule gives them, whether the rule is in the ``[roles]`` table of
``.streamlit/secrets.toml`` (the bootstrap, parsed by ``RoleMap.from_config``) or a grant an admin
made in the studio or with ``python -m engine grant`` (``engine.roles``, table ``rolegrant``);
else the table's ``default``. Grants only add: nobody the file names can be lowered or locked out
from the studio. Without sign-in the studio is in local mode and everyone who reaches it acts as
an admin; the CLI and the Python API act as admin too (whoever can run them can write the
database directly).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Iterable, Mapping, Optional

from storage import access as store
from storage.db import Database
from storage.states import CommandKind


class Role(IntEnum):
    NONE = 0  # signed in, but no rule gives this person a role: turned away
    VIEWER = 1
    EDITOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


# the least role each action needs; an action not listed here is refused (a typo never opens a door)
NEEDS: dict[str, Role] = {
    "comment": Role.VIEWER,
    "create_run": Role.EDITOR, "try_evaluator": Role.EDITOR, "check_lm": Role.EDITOR,
    "analyze": Role.EDITOR,  # the written diagnosis: one LM call on the run's account
    **{kind.value: Role.EDITOR for kind in CommandKind},  # every command, approve included
    "delete_run": Role.ADMIN, "manage_roles": Role.ADMIN,
}
# actions that run code or spend money, limited per person and hour (``RoleMap`` holds the numbers)
RATE_LIMITED = {"create_run": "runs", "try_evaluator": "try_evaluator"}
DEFAULT_PER_HOUR = {"runs": 30, "try_evaluator": 120}


class Refused(PermissionError):
    """An action the actor's role or rate limit does not allow; the message says why and what to do."""


@dataclass(frozen=True)
class Actor:
    """The person acting: ``name`` is what the records carry (the e-mail when signed in)."""

    name: str
    role: Role
    signed_in: bool = False

    def may(self, action: str) -> bool:
        return self.role >= NEEDS.get(action, Role.ADMIN)


def local_actor(name: str) -> Actor:
    """The CLI, the Python API and the studio in local mode: full rights under the given name."""
    return Actor(name=name, role=Role.ADMIN)


@dataclass(frozen=True)
class RoleMap:
    """Roles from e-mail addresses, domains and an ID-token claim.

    Each of ``admins``, ``editors``, ``viewers`` lists rules: ``ana@example.com`` (one address),
    ``@example.com`` (a domain) or any other string (a value of the claim named by ``claim``,
    e.g. a group). A person gets the highest role any rule gives them, else ``default``
    (``"none"`` turns away everyone no rule names)."""

    rules: dict[Role, tuple[str, ...]] = field(default_factory=dict)
    default: Role = Role.VIEWER
    claim: str = ""
    per_hour: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PER_HOUR))

    @classmethod
    def from_config(cls, section: Optional[Mapping[str, Any]]) -> "RoleMap":
        """Parse the ``[roles]`` table; a ``ValueError`` names the bad key (``roles.default: …``)."""
        section = dict(section or {})
        known = {"admins", "editors", "viewers", "default", "claim", "runs_per_hour", "try_evaluator_per_hour"}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ValueError(f"roles.{unknown[0]}: unknown key; the keys are {', '.join(sorted(known))}")
        rules = {}
        for key, role in (("admins", Role.ADMIN), ("editors", Role.EDITOR), ("viewers", Role.VIEWER)):
            values = section.get(key, [])
            if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in values):
                raise ValueError(f"roles.{key}: give a list of e-mail addresses, @domains or claim values")
            rules[role] = tuple(v.strip().lower() for v in values)
        default = str(section.get("default", "viewer")).lower()
        if default not in ("none", "viewer", "editor", "admin"):
            raise ValueError(f"roles.default: {default!r} is not a role; one of none, viewer, editor, admin")
        per_hour = dict(DEFAULT_PER_HOUR)
        for limit in per_hour:
            value = section.get(f"{limit}_per_hour", per_hour[limit])
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"roles.{limit}_per_hour: give a whole number of at least 0, not {value!r}")
            per_hour[limit] = value
        return cls(rules=rules, default=Role[default.upper()], claim=str(section.get("claim", "")), per_hour=per_hour)

    def with_grants(self, grants: Iterable[tuple[str, str]]) -> "RoleMap":
        """This map plus the database's grants, ``(rule, role label)`` pairs: each grant is one
        more rule, so a person still gets the highest role any rule gives."""
        rules = {role: list(self.rules.get(role, ())) for role in (Role.ADMIN, Role.EDITOR, Role.VIEWER)}
        for rule, label in grants:
            rules[Role[label.upper()]].append(rule)
        return RoleMap(rules={r: tuple(v) for r, v in rules.items()}, default=self.default, claim=self.claim,
                       per_hour=dict(self.per_hour))

    def role_of(self, email: str, claims: Optional[Mapping[str, Any]] = None) -> Role:
        email = (email or "").strip().lower()
        domain = "@" + email.rsplit("@", 1)[1] if "@" in email else None
        values = _claim_values((claims or {}).get(self.claim)) if self.claim else set()
        for role in (Role.ADMIN, Role.EDITOR, Role.VIEWER):
            for rule in self.rules.get(role, ()):
                if rule == email or rule == domain or (not rule.startswith("@") and "@" not in rule and rule in values):
                    return role
        return self.default


def _claim_values(value: Any) -> set[str]:
    items: Iterable[Any] = value if isinstance(value, (list, tuple, set)) else [value] if value is not None else []
    return {str(v).strip().lower() for v in items}


def check(db: Database, actor: Actor, action: str, run_id: Optional[str] = None,
          roles: Optional[RoleMap] = None) -> None:
    """Raise ``Refused`` (after recording the refusal) unless ``actor`` may do ``action`` now.

    Rate-limited actions also count what this person did in the last hour, from the database, so
    the limit holds across tabs, studio processes and restarts; ``roles`` gives the limits
    (default: ``DEFAULT_PER_HOUR``)."""
    need = NEEDS.get(action, Role.ADMIN)
    if actor.role < need:
        article = "an" if need.label[0] in "ae" else "a"
        _refuse(db, actor, action, run_id, f"role: {actor.name or 'you'} is {_role_phrase(actor.role)}; "
                f"{action.replace('_', ' ')} needs {article} {need.label}. An admin grants roles on the studio's "
                "Roles page (or with `python -m engine grant`).")
    limit_name = RATE_LIMITED.get(action)
    if limit_name:
        limit = (roles.per_hour if roles else DEFAULT_PER_HOUR)[limit_name]
        done = store.count_last_hour(db, action, actor.name)
        if done >= limit:
            _refuse(db, actor, action, run_id, f"rate limit: {action.replace('_', ' ')} at most {limit} times an "
                    f"hour per person, and {actor.name or 'you'} did {done} in the last hour; wait, or ask an admin "
                    f"to raise roles.{limit_name}_per_hour")


def _role_phrase(role: Role) -> str:
    return "without a role" if role == Role.NONE else ("an " if role.label[0] in "ae" else "a ") + role.label


def _refuse(db: Database, actor: Actor, action: str, run_id: Optional[str], why: str) -> None:
    store.record_refusal(db, actor.name, actor.role.label, action, run_id, why)
    raise Refused(why)
