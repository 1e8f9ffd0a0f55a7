"""Every ``REFRACT_*`` environment variable, declared once: its name, what it does and how its
value is read. ``value(NAME)`` reads one (None when unset or blank: the reader's own default
applies); a bad value is one error, ``NAME: reason``. ``problems()`` lists the bad values of the
whole environment: ``python -m engine`` and the studio check them before anything else runs.

Declared here, below the engine and the studio, because the storage layer reads two of them
(``REFRACT_DB``, ``REFRACT_DATA``) and every layer may import storage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional


class SettingError(ValueError):
    """A bad value of a ``REFRACT_*`` variable: the message is ``NAME: reason``."""


def _text(raw: str) -> str:
    return raw


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a number of seconds") from None
    if not value >= 0:
        raise ValueError(f"{raw!r} must be 0 (no limit) or a positive number of seconds")
    return value


def _fraction(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a number (a gain such as 0.02)") from None


def _whole(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a whole number") from None
        if value < minimum:
            raise ValueError(f"{value} is below {minimum}")
        return value

    return parse


def _switch(raw: str) -> bool:
    if raw not in ("0", "1"):
        raise ValueError(f"{raw!r} must be 0 or 1")
    return raw == "1"


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    what: str


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("REFRACT_DB", _text, "the database URL (default: SQLite in the data folder)"),
    Setting("REFRACT_DATA", _text, "the folder of the default SQLite database and other local data"),
    Setting("REFRACT_STUDIO_QUERY_SECONDS", _seconds, "the time limit of one studio database statement (0: none)"),
    Setting("REFRACT_STUDIO_URL", _text, "the studio's address, for the links the Python API prints"),
    Setting("REFRACT_API_KEYS", _text, "the environment variables a run may name as an LM key, and their servers"),
    Setting("REFRACT_MIN_HELD_OUT_GAIN", _fraction, "the team's minimum held-out gain over the seed"),
    Setting("REFRACT_WORKER_RUNS", _whole(1), "runs one engine worker runs at once"),
    Setting("REFRACT_WORKER", _switch, "0: the studio starts no engine worker"),
    Setting("REFRACT_ALLOW_NO_SIGN_IN", _switch, "1: serve the studio beyond loopback without sign-in"),
    Setting("REFRACT_LM_MODEL", _text, "the reflection LM of a new run, instead of the one found"),
    Setting("REFRACT_LM_PLUGINS", _text, "modules that register LM providers through litellm"),
    Setting("REFRACT_MODELS", _text, "the folder of the local model's file"),
    Setting("REFRACT_LOCAL_CTX", _whole(512), "the local model's context window in tokens"),
    # read by the team deployment's scripts (scripts/team/), declared here so that none is unknown
    Setting("REFRACT_SECRETS", _text, "the team studio's secrets file (sign-in and roles)"),
    Setting("REFRACT_ADDRESS", _text, "the interface the team studio listens on"),
    Setting("REFRACT_PORT", _whole(1), "the port the team studio listens on"),
)}


def value(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """The value of ``name`` as its declaration reads it; None when unset or blank."""
    setting = SETTINGS[name]  # a KeyError here is a programming error: declare the variable above
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return None
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise SettingError(f"{name}: {exc}") from None


def problems(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """``NAME: reason`` for every declared variable with a bad value, and for a ``REFRACT_*``
    variable that is not declared but close to one that is (a misspelt setting would otherwise be
    ignored without a word; other names are left alone: a plugin or a test may read its own)."""
    env = os.environ if environ is None else environ
    out = []
    for name in SETTINGS:
        try:
            value(name, env)
        except SettingError as exc:
            out.append(str(exc))
    for name in sorted(env):
        if name.startswith("REFRACT_") and name not in SETTINGS:
            close = [known for known in SETTINGS if _near(name, known)]
            if close:
                out.append(f"{name}: not a Refract setting (did you mean {close[0]}?)")
    return out


def _near(a: str, b: str) -> bool:
    """Two names one edit apart (a letter left out, added, changed: a misspelt setting)."""
    if abs(len(a) - len(b)) > 1:
        return False
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1] <= 1
