"""``[prompt_evaluator]``: tune a prompt without writing an evaluator.

The task LM answers a prompt built from the candidate and each example (``system`` and ``user``
templates with ``{placeholders}``); assertions score the answer. The configuration is checked
here, where the user wrote it (every problem is ``field: reason``), and compiled into an ordinary
evaluator (``generate_source``) that runs in the sandbox like any other and imports the runtime
half, ``engine/sandbox/runtime/refract_prompt.py``.
"""

from __future__ import annotations

import ast
import json
import pprint
import re
import textwrap
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
TEXT_TYPES = ("equals", "contains", "icontains", "not_contains", "regex", "llm_rubric")
TYPES = TEXT_TYPES[:5] + ("is_json", "json_schema", "max_length", "python", "llm_rubric")
ROWS_CHECKED = 5  # placeholders are checked against this many first rows of the dataset


class Assertion(BaseModel):
    """One ``[[prompt_evaluator.assert]]``: a check of the task LM's answer, scored 0–1."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: Literal[TYPES]  # type: ignore[valid-type]
    value: Any = Field(None, validate_default=True)
    weight: float = Field(1.0, ge=0)
    name: Optional[str] = Field(None, description="how results name it; the type by default")
    threshold: float = Field(1.0, ge=0, le=1, description="the score at which it counts as passed (llm_rubric, python)")

    @field_validator("weight", "threshold", mode="before")
    @classmethod
    def _no_bool(cls, v: Any, info: ValidationInfo) -> Any:
        from engine.user_errors import refuse_bool_number

        return refuse_bool_number(cls, info.field_name, v)

    @field_validator("value")
    @classmethod
    def _value_fits_type(cls, v: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if kind is None or kind == "is_json":
            return v
        if v is None:
            raise ValueError(f"missing; a {kind} assertion needs a value")
        if kind == "max_length":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError("max_length needs value = a whole number of characters, e.g. value = 200")
            return v
        if kind == "json_schema":
            return _schema(v)
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{kind} needs value = some text" + (" (a Python expression over output and example, "
                             "or a function check(output, example))" if kind == "python" else ""))
        if kind == "regex":
            try:
                re.compile(PLACEHOLDER.sub("x", v))
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        if kind == "python":
            python_form(v)
        return v


def _schema(v: Any) -> dict:
    """A JSON schema given as a table or as JSON text, checked against its meta-schema."""
    import jsonschema

    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON schema: the text is not JSON ({exc.msg})") from None
    if not isinstance(v, dict):
        raise ValueError("not a JSON schema: give a table (or JSON text) such as {type = \"object\"}")
    try:
        jsonschema.Draft202012Validator.check_schema(v)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "the top level"
        raise ValueError(f"not a JSON schema: at {where}, {exc.message}") from None
    return v


def python_form(code: str) -> str:
    """``"expression"`` or ``"function"`` (code that defines ``check(output, example)``);
    ValueError when it is neither."""
    try:
        ast.parse(code.strip(), mode="eval")
        return "expression"
    except SyntaxError:
        pass
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError as exc:
        raise ValueError(f"not Python: {exc.msg} (line {exc.lineno})") from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
        raise ValueError("Python that is not one expression must define check(output, example)")
    return "function"


class PromptEvaluatorConfig(BaseModel):
    """The ``[prompt_evaluator]`` table: the templates and the assertions."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    system: Optional[str] = Field(None, description="the system message; {candidate}, or the components joined")
    user: str = Field(min_length=1, description="the user message, from the example's fields")
    assertions: list[Assertion] = Field(alias="assert", min_length=1)

    @field_validator("assertions")
    @classmethod
    def _named_and_weighed(cls, v: list[Assertion]) -> list[Assertion]:
        seen: dict[str, int] = {}
        for a in v:
            base = a.name or a.type
            seen[base] = seen.get(base, 0) + 1
            a.name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        if not any(a.weight > 0 for a in v):
            raise ValueError("every weight is 0; give at least one assertion a weight above 0")
        return v


def default_system(seed: Any) -> str:
    return "\n\n".join("{" + k + "}" for k in seed) if isinstance(seed, dict) else "{candidate}"


def check_placeholders(pe: PromptEvaluatorConfig, seed: Any, rows: Optional[list]) -> None:
    """Raise ValueError (``prompt_evaluator.<field>: reason``) when a placeholder names neither a
    component of the candidate nor a field of the dataset's first rows, or a component is never
    shown to the task LM."""
    parts = list(seed) if isinstance(seed, dict) else ["candidate"]
    first = (rows or [])[:ROWS_CHECKED]
    for i, row in enumerate(first, 1):
        if not isinstance(row, dict):
            raise ValueError(f"dataset: row {i} is a {type(row).__name__}; a prompt evaluator needs examples with "
                             "named fields (JSON objects, or CSV rows)")
        clash = sorted(set(row) & set(parts))
        if clash:
            raise ValueError(f"dataset: row {i} has a field {clash[0]!r}, which is also a component of the candidate; "
                             "rename one of them")
    system = pe.system if pe.system is not None else default_system(seed)
    texts = [("system", system), ("user", pe.user)] + [
        (f"assert.{i}.value", a.value) for i, a in enumerate(pe.assertions) if a.type in TEXT_TYPES]
    for where, text in texts:
        for name in PLACEHOLDER.findall(text):
            if name in parts:
                continue
            missing = [i for i, row in enumerate(first, 1) if name not in row]
            if not first or missing:
                raise ValueError(f"prompt_evaluator.{where}: {{{name}}} names no {_known(parts, first, missing)}")
    shown = set(PLACEHOLDER.findall(system)) | set(PLACEHOLDER.findall(pe.user))
    unseen = [p for p in parts if p not in shown]
    if unseen:
        raise ValueError(f"prompt_evaluator.system: {{{unseen[0]}}} appears in neither system nor user, so the task "
                         "LM would never see what is being tuned; place it in one of them")


def _known(parts: list[str], first: list, missing: list[int]) -> str:
    comps = ", ".join(parts)
    if not first:
        return f"component ({comps}); this run has no dataset, so there are no example fields"
    fields = ", ".join(sorted({k for row in first for k in row}))
    return f"field of the dataset (row {missing[0]} lacks it; fields: {fields}) nor a component ({comps})"


def generate_source(pe: PromptEvaluatorConfig, seed: Any) -> str:
    """The evaluator a prompt evaluator compiles to: plain Python a user can read and edit."""
    system = pe.system if pe.system is not None else default_system(seed)
    specs = [{"name": a.name, "type": a.type, "value": a.value, "weight": a.weight, "threshold": a.threshold}
             for a in pe.assertions]
    checks = [(f"check_{i}", a) for i, a in enumerate(pe.assertions) if a.type == "python"]
    lines = ['"""Generated from [prompt_evaluator]: the task LM answers the prompt, the assertions score the answer.',
             "", "Eject it to change anything the assertions cannot say: it is an ordinary evaluator.", '"""', "",
             "import json  # noqa: F401  (for python assertions)", "import re  # noqa: F401",
             "", "from refract_prompt import PromptEvaluator", "",
             f"SYSTEM = {system!r}", f"USER = {pe.user!r}", f"ASSERTIONS = {pprint.pformat(specs, sort_dicts=False, width=110)}", ""]
    for fname, a in checks:
        lines += ["", f"def {fname}(output, example):"]
        if python_form(a.value) == "expression":
            lines.append(f"    return {a.value.strip()}")
        else:
            lines += [textwrap.indent(textwrap.dedent(a.value).strip("\n"), "    "), "    return check(output, example)"]
        lines.append("")
    mapping = ", ".join(f"{a.name!r}: {fname}" for fname, a in checks)
    lines += ["", f"PROMPT = PromptEvaluator(SYSTEM, USER, ASSERTIONS, checks={{{mapping}}})", "", "",
              "def evaluate(candidate, example):", "    return PROMPT(candidate, example)", ""]
    return "\n".join(lines)
