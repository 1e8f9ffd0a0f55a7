"""One way to tell a user what was wrong with their input: ``field: reason`` lines.

``validation_reasons`` turns a pydantic ``ValidationError`` into such lines in our own words
(no pydantic wording, no documentation links); ``reasons_of`` does it for any error the
command line reports, so every command speaks alike and exits with code 2.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import ValidationError

def _n(bound: Any) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _kind(value: Any) -> str:
    """A value's type in the words of JSON and TOML."""
    return {dict: "a table (object)", list: "a list", str: "text", bool: "true or false", int: "a whole number",
            float: "a number", type(None): "nothing (null)"}.get(type(value), type(value).__name__)


_REASONS = {
    "greater_than_equal": lambda c, v: f"must be at least {_n(c['ge'])}, not {v!r}",
    "greater_than": lambda c, v: f"must be greater than {_n(c['gt'])}, not {v!r}",
    "less_than_equal": lambda c, v: f"must be at most {_n(c['le'])}, not {v!r}",
    "less_than": lambda c, v: f"must be less than {_n(c['lt'])}, not {v!r}",
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
    "dict_type": lambda c, v: f"must be a table (object), not {_kind(v)}",
    "model_type": lambda c, v: f"must be a table (object), not {_kind(v)}",
    "list_type": lambda c, v: f"must be a list, not {_kind(v)}",
    "too_short": lambda c, v: f"must have at least {c.get('min_length')} item(s)",
    "missing": lambda c, v: "missing",
}


_BY_KIND = {"dict_type", "model_type", "list_type"}  # told by the value's kind, not its text


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 60 else text[:57] + "…"


def validation_reasons(exc: ValidationError, prefix: str = "") -> list[str]:
    """``field: reason`` for each problem pydantic found (``prefix`` names the enclosing table)."""
    lines = []
    for err in exc.errors():
        field = prefix + ".".join(str(p) for p in err["loc"])
        word = _REASONS.get(err["type"])
        value = err.get("input") if err["type"] in _BY_KIND else _short(err.get("input"))
        msg = word(err.get("ctx") or {}, value) if word else err["msg"].removeprefix("Value error, ")
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


def refuse_bool_number(model: type, field: str, value: Any) -> Any:
    """``value`` unchanged, or ValueError when it is true/false for a number field of ``model``
    (pydantic reads ``minibatch_size = true`` as 1): for a ``mode="before"`` field validator."""
    if not isinstance(value, bool):
        return value
    annotation = model.model_fields[field].annotation
    kinds = {a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None)}
    if kinds == {int}:
        raise ValueError(f"must be a whole number, not {value!r}")
    if kinds and kinds <= {int, float}:
        raise ValueError(f"must be a number, not {value!r}")
    return value
