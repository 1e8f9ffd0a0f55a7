"""Which environment variables a run may name as an LM's key, and which servers each may go to.

A run's author writes ``api_key_env`` (a variable's name) and ``api_base`` (a server); the engine
reads that variable and sends its value to that server. Without a check, anyone who may create a
run could have the engine send any of its variables (``REFRACT_DB`` with the database password)
to a server of their own. So the deployment decides, in ``REFRACT_API_KEYS``:

- a comma- or space-separated list of entries ``PATTERN`` or ``PATTERN=API_BASE``; a pattern is a
  variable name or a shell-style pattern (``*_API_KEY``); default ``*_API_KEY``;
- an entry with ``=API_BASE`` ties the variables it names to that server (exactly that URL, up to a
  trailing ``/``); several entries for one pattern allow several servers; an entry without one
  lets its variables go to any server;
- the entries that name a variable exactly take precedence over the patterns that match it;
- a ``REFRACT_*`` variable (the engine's own settings) is never a key, whatever the list says.

``key_refusal`` is the one check: the config's validation (submit, the studio's form, the Python
API, ``check-lm``) answers with it as ``<lm>.api_key_env: reason``, and the LM client asks it
again before it reads a variable, so a run that reached the database another way (an import) sends
nothing either. Only names are looked at here, never values.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Mapping, Optional

SETTING = "REFRACT_API_KEYS"
DEFAULT = "*_API_KEY"
OWN_PREFIX = "REFRACT_"
LM_FIELDS = ("reflection_lm", "task_lm", "judge_lm")


@dataclass(frozen=True)
class KeyRule:
    pattern: str
    api_base: Optional[str]  # None: any server


def _normal(url: str) -> str:
    return url.strip().rstrip("/")


def rules(environ: Optional[Mapping[str, str]] = None) -> list[KeyRule]:
    """The deployment's allow-list (``REFRACT_API_KEYS``, else the default)."""
    raw = (environ if environ is not None else os.environ).get(SETTING)
    text = raw if raw is not None and raw.strip() else DEFAULT
    out = []
    for entry in text.replace(",", " ").split():
        pattern, _, base = entry.partition("=")
        out.append(KeyRule(pattern.strip(), _normal(base) if base.strip() else None))
    return out


def _applicable(name: str, allowed: list[KeyRule]) -> list[KeyRule]:
    exact = [r for r in allowed if r.pattern == name]
    return exact or [r for r in allowed if fnmatch.fnmatchcase(name, r.pattern)]


def bases_for(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[list[str]]:
    """The servers a variable is tied to; None when it may go to any (or is not allowed at all)."""
    found = _applicable(name, rules(environ))
    if not found or any(r.api_base is None for r in found):
        return None
    return sorted({r.api_base for r in found})


def key_refusal(name: Optional[str], api_base: Optional[str],
                environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why the variable ``name`` may not be sent to ``api_base`` (None: it may, or no key is named)."""
    if not name:
        return None
    if name.upper().startswith(OWN_PREFIX):
        return (f"{name} is one of the engine's own settings, never an API key; name the variable that holds "
                "the provider's key (e.g. OPENAI_API_KEY)")
    allowed = rules(environ)
    found = _applicable(name, allowed)
    if not found:
        listed = ", ".join(r.pattern for r in allowed)
        return (f"{name} is not an API key this deployment allows (allowed: {listed}); name one of those, or ask "
                f"an admin to add it to {SETTING}")
    if any(r.api_base is None for r in found):
        return None
    bases = sorted({r.api_base for r in found})
    if api_base is None or _normal(api_base) not in bases:
        where = "no api_base" if api_base is None else f"api_base {api_base}"
        return (f"{name} may only be sent to {' or '.join(bases)} ({SETTING}), not to {where}; set api_base to "
                "one of those, or name another key")
    return None


def config_key_problems(cfg) -> list[str]:
    """``<lm>.api_key_env: reason`` for each LM of a ``RunConfig`` whose key may not go where it is sent."""
    out = []
    for field in LM_FIELDS:
        lm = getattr(cfg, field)
        why = key_refusal(lm.api_key_env, lm.api_base) if lm is not None else None
        if why:
            out.append(f"{field}.api_key_env: {why}")
    return out
