"""One way to tell a user what was wrong with their input: ``field: reason`` lines.

``validation_reasons`` turns a pydantic ``ValidationError`` into such lines in our own words
(no pydantic wording, no documentation links); ``reasons_of`` does it for any error the
command line reports, so every command speaks alike and exits with code 2.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

_REASONS = {
    "greater_than_equal": lambda c, v: f"must be at least {c['ge']:g}, not {v!r}",
    "greater_than": lambda c, v: f"must be greater than {c['gt']:g}, not {v!r}",
    "less_than_equal": lambda c, v: f"must be at most {c['le']:g}, not {v!r}",
    "less_than": lambda c, v: f"must be less than {c['lt']:g}, not {v!r}",
    "finite_number": lambda c, v: f"must be a finite number, not {v!r}",
    "int_parsing": lambda c, v: f"must be a whole number, not {v!r}",
    "int_from_float": lambda c, v: f"must be a whole number, not {v!r}",
    "int_type": lambda c, v: f"must be a whole number, not {v!r}",
    "float_parsing": lambda c, v: f"must be a number, not {v!r}",
    "float_type": lambda c, v: f"must be a number, not {v!r}",
    "bool_parsing": lambda c, v: f"must be true or false, not {v!r}",
    "bool_type": lambda c, v: f"must be true or false, not {v!r}",
    "string_type": lambda c, v: f"must be text, not {type(v).__name__}",
    "string_too_short": lambda c, v: "must not be empty" if c.get("min_length") == 1 else
                                     f"must have at least {c['min_length']} characters",
    "string_too_long": lambda c, v: f"must have at most {c['max_length']} characters",
    "literal_error": lambda c, v: f"must be one of {c['expected']}, not {v!r}",
    "extra_forbidden": lambda c, v: "unknown field (check the spelling)",
    "missing": lambda c, v: "missing",
}


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 60 else text[:57] + "…"


def validation_reasons(exc: ValidationError, prefix: str = "") -> list[str]:
    """``field: reason`` for each problem pydantic found (``prefix`` names the enclosing table)."""
    lines = []
    for err in exc.errors():
        field = prefix + ".".join(str(p) for p in err["loc"])
        word = _REASONS.get(err["type"])
        msg = word(err.get("ctx") or {}, _short(err.get("input"))) if word else err["msg"].removeprefix("Value error, ")
        # checks across fields (model validators) have no location: their message starts with the field
        lines.append(f"{field}: {msg}" if field.strip(".") else msg)
    return lines


def reasons_of(exc: BaseException) -> list[str]:
    """The ``field: reason`` lines of an error the command line reports."""
    from storage.errors import NotFound

    text = str(exc).strip()
    if isinstance(exc, ValidationError):
        return validation_reasons(exc)
    if isinstance(exc, NotFound):
        for field in ("run", "candidate"):
            if text.startswith(f"no {field} "):
                return [f"{field}: {text}"]
    return text.splitlines() or [type(exc).__name__]
