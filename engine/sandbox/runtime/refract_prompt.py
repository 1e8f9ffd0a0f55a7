"""The prompt evaluator at run time: ask the task LM, then score its answer with assertions.

A run configured with ``[prompt_evaluator]`` gets a generated ``evaluator.py`` that builds one
``PromptEvaluator`` and calls it (``engine.prompt_evaluator.generate_source``). This module runs
inside the sandbox like any evaluator code; the engine has already checked the configuration
(types, regular expressions, JSON schemas, placeholders), so nothing here re-validates it.

``PromptEvaluator(system, user, assertions, checks)(candidate, example)`` returns
``(score, side_info)``: the score is the weighted mean of the assertions' scores (each 0–1), and
``side_info`` holds the task LM's ``output`` and, per assertion, whether it passed and why, in
words the reflection LM can act on. Only ``json_schema`` needs a package beyond the standard
library (``jsonschema``), imported when such an assertion is used.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

from refract_evaluator import lm

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
EXCERPT = 200
JUDGE_SYSTEM = ("You grade an answer against a rubric. Reply with two lines and nothing else:\n"
                "SCORE: <a whole number from 0 (fails the rubric) to 10 (fully meets it)>\n"
                "REASON: <one sentence>")


def fill(template: str, values: dict, escape: Optional[Callable[[str], str]] = None) -> str:
    """``template`` with each ``{name}`` replaced by ``str(values[name])`` (``escape``d when
    given); braces that are not ``{identifier}`` stay as they are."""
    def one(m: re.Match) -> str:
        if m.group(1) not in values:  # checked on the first rows at load time; a later row may still lack it
            raise KeyError(f"this example has no field {m.group(1)!r}, which the prompt evaluator uses as {m.group(0)}")
        text = values[m.group(1)]
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
        return escape(text) if escape else text
    return PLACEHOLDER.sub(one, template)


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= EXCERPT else text[:EXCERPT] + "…")


def strip_fence(text: str) -> str:
    """The inside of one fenced block around the whole answer (```json … ```), else the answer."""
    m = re.fullmatch(r"\s*```[A-Za-z0-9_-]*\n(.*?)\n?```\s*", text, re.S)
    return m.group(1) if m else text.strip()


def _text_check(kind: str, expected: str, output: str) -> tuple[float, str]:
    said = f"the answer was {_excerpt(output)}"
    if kind == "equals":
        ok = output.strip() == expected.strip()
        return float(ok), f"the answer is exactly {expected!r}" if ok else f"expected exactly {expected!r}; {said}"
    if kind == "contains":
        ok = expected in output
        return float(ok), f"found {expected!r}" if ok else f"expected {expected!r} (same case) in the answer; {said}"
    if kind == "icontains":
        ok = expected.lower() in output.lower()
        return float(ok), f"found {expected!r}" if ok else f"expected {expected!r} (any case) in the answer; {said}"
    at = output.find(expected)
    return (1.0, f"no {expected!r} in the answer") if at < 0 else \
        (0.0, f"expected no {expected!r} in the answer; it appears at character {at}: {said}")


def _json_check(kind: str, schema: Any, output: str) -> tuple[float, str]:
    body = strip_fence(output)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return 0.0, f"expected JSON; the answer is not valid JSON ({exc.msg} at character {exc.pos}): {_excerpt(output)}"
    if kind == "is_json":
        return 1.0, "the answer is valid JSON"
    import jsonschema  # only runs that use json_schema need it

    problems = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.path))
    if not problems:
        return 1.0, "the answer's JSON fits the schema"
    where = "/".join(str(p) for p in problems[0].path) or "the top level"
    return 0.0, f"the answer's JSON does not fit the schema at {where}: {problems[0].message}"


def _python_check(fn: Callable, output: str, example: Any, label: str) -> tuple[float, str]:
    try:
        got = fn(output, example)
    except Exception as exc:  # a failing check scores 0 and says why; the evaluation goes on
        return 0.0, f"the check {label} raised {type(exc).__name__}: {exc}"
    reason = None
    if isinstance(got, tuple) and len(got) == 2:
        got, reason = got
    if isinstance(got, bool) or got is None:
        score = float(bool(got))
    elif isinstance(got, (int, float)):
        score = min(1.0, max(0.0, float(got)))
    else:
        return 0.0, f"the check {label} returned a {type(got).__name__}; it must return a bool or a number 0–1"
    return score, str(reason) if reason is not None else f"the check {label} gave {score:g}"


def _judge(rubric: str, output: str, user: str) -> tuple[float, str]:
    answer = lm([{"role": "system", "content": JUDGE_SYSTEM},
                 {"role": "user", "content": f"Rubric:\n{rubric}\n\nThe question:\n{user}\n\nThe answer:\n{output}"}],
                model="judge", temperature=0.0)
    m = re.search(r"SCORE:\s*(\d+(?:\.\d+)?)", answer)
    if not m:
        return 0.0, f"the judge's reply had no 'SCORE: n' line: {_excerpt(answer)}"
    why = re.search(r"REASON:\s*(.+)", answer)
    score = min(1.0, max(0.0, float(m.group(1)) / 10))
    return score, f"the judge gave {score:g} against the rubric {rubric!r}: " + (why.group(1).strip() if why else "")


class PromptEvaluator:
    """One prompt evaluator. ``assertions`` are dicts {name, type, value, weight, threshold};
    ``checks`` maps the name of each ``python`` assertion to its function (output, example)."""

    def __init__(self, system: str, user: str, assertions: list[dict], checks: Optional[dict] = None) -> None:
        self.system, self.user, self.assertions, self.checks = system, user, assertions, checks or {}

    def values(self, candidate: Any, example: Any) -> dict:
        fields = dict(example) if isinstance(example, dict) else {}
        parts = candidate if isinstance(candidate, dict) else {"candidate": candidate}
        return {**fields, **parts}

    def messages(self, candidate: Any, example: Any) -> list[dict]:
        """The chat the task LM answers: the system message (when not empty) and the user message."""
        values = self.values(candidate, example)
        system, user = fill(self.system, values), fill(self.user, values)
        return ([{"role": "system", "content": system}] if system.strip() else []) + [{"role": "user", "content": user}]

    def score_one(self, a: dict, output: str, example: Any, values: dict, user: str) -> tuple[float, str]:
        kind, value = a["type"], a.get("value")
        if kind in ("equals", "contains", "icontains", "not_contains"):
            return _text_check(kind, fill(str(value), values), output)
        if kind == "regex":
            pattern = fill(str(value), values, escape=re.escape)
            ok = re.search(pattern, output) is not None
            return float(ok), f"matched /{pattern}/" if ok else \
                f"expected a match of /{pattern}/; none in the answer {_excerpt(output)}"
        if kind in ("is_json", "json_schema"):
            return _json_check(kind, value, output)
        if kind == "max_length":
            n = len(output)
            return (1.0, f"{n} characters, at most {value}") if n <= value else \
                (0.0, f"expected at most {value} characters; the answer has {n}")
        if kind == "python":
            return _python_check(self.checks[a["name"]], output, example, a["name"])
        return _judge(fill(str(value), values), output, user)  # llm_rubric

    def __call__(self, candidate: Any, example: Any) -> tuple[float, dict]:
        values = self.values(candidate, example)
        messages = self.messages(candidate, example)
        output = lm(messages)
        results, total, weights = [], 0.0, 0.0
        for a in self.assertions:
            score, reason = self.score_one(a, output, example, values, messages[-1]["content"])
            passed = score >= a.get("threshold", 1.0)
            results.append({"assertion": a["name"], "passed": passed, "score": round(score, 4), "reason": reason})
            total += a["weight"] * score
            weights += a["weight"]
        side = {"output": output, "assertions": results,
                "scores": {r["assertion"]: r["score"] for r in results}}
        return (total / weights if weights else 0.0), side
