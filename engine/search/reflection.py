"""The reflection prompt and the parsing of its answer (docs/design.md §2 step 3).

The prompt states the objective, the background, what *kind* of artifact this is (a small
model otherwise answers with code *about* the artifact), the current text, the minibatch side
information rendered as readable Markdown, human feedback, and earlier proposals for the same
parent that must not be repeated. Side information is shortened to fit the context window;
the candidate text never is.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Optional

from engine.lm.images import ImageCollector
from engine.search.reflection_template import fill_template

SYSTEM = (
    "You improve {kind} by reflecting on evaluation feedback. "
    "Answer with ONE fenced code block (```) that contains the complete new version of the "
    "{kind_short} and nothing else: no explanations inside the fence, no placeholders. "
    "You may write one short sentence before the fence about what you changed."
)
# The instructions of a reflection are the same for every reflection of a run, so they open the
# prompt (the system message) with the objective, background and kind after them: a local runtime
# then reuses that processed prefix from one call to the next instead of reading it again.
# The rules first: asked to compare the failing outputs with what was expected and write down the
# rules the current version misses, the local 1.5B model gave a usable, better answer far more often
# than when asked to name one change on a `Change:` line first, which it often answered with that
# line alone (no new version) or with a rewording of the same text (docs/benchmarks-real-lm.md: one
# reflection per minibatch on the four development tasks, six minibatches each).
TASK = (
    "Study the feedback: compare each low-scoring example's output with what was expected, work out the "
    "rules of the task that the current version misses (the exact form of the answer too), and write the "
    "complete new {kind_short} so that it follows them while keeping what already works. Rewording what is "
    "already there seldom changes a score. Give it in one fenced code block — only {kind}, nothing else "
    "inside the fence."
)
# the closing reminder stays at the end, where a small model looks last; constant too
REMINDER = ("## Task\nOne fenced code block holding the complete new {kind_short} ({kind}), with what the failing "
            "examples need added.")

# What the artifact is when the run does not say (no artifact_kind, as in a GEPA program): the
# kind of the current version, said once where the prompt describes it. "A prompt, code or
# configuration" made a 1.5B model answer a regular expression with Python code that uses one.
DEFAULT_KIND = "the same kind of text as the current version"
KEEP_KIND = ("Keep its kind: a regular expression stays a regular expression, code stays code, a prompt stays a "
             "prompt, prose stays prose.")

MAX_FIELD_CHARS = 4000
INLINE_CHARS = 300  # longest value a compact rendering keeps on its field's line


@dataclass
class ExampleFeedback:
    key: str
    score: float
    example: Any
    side_info: dict
    error: Optional[str] = None


@dataclass
class ReflectionPrompt:
    messages: list[dict]
    shortened: bool  # side information was cut to fit the context window


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more characters cut]"


def _render_value(value: Any, limit: int) -> str:
    if isinstance(value, str):
        return _fence(_clip(value, limit))
    return _fence(_clip(json.dumps(value, indent=2, ensure_ascii=False, default=str), limit), "json")


def _inline(value: Any, limit: int) -> Optional[str]:
    """``value`` on one line (strings as they are, unless blank-edged; the rest as compact JSON),
    or None when that line would hold a newline or be longer than ``INLINE_CHARS`` or ``limit``."""
    plain = isinstance(value, str) and value and value == value.strip()
    text = value if plain else json.dumps(value, ensure_ascii=False, default=str)
    return text if "\n" not in text and len(text) <= min(INLINE_CHARS, limit) else None


def render_feedback(fb: ExampleFeedback, limit: int = MAX_FIELD_CHARS, compact: bool = False) -> str:
    """One example's evaluation as Markdown: input, score, error, every side-info field
    (images already replaced by markers: ``ImageCollector.strip``). ``compact`` puts short
    one-line values on their field's line instead of in a block of their own, and leaves out of the
    example its empty fields, an ``id`` equal to the key and any field the side information
    repeats with the same value (an evaluator that echoes its input and expected output): the same
    facts in about half the tokens, for a small model that reads slowly."""
    fields = []
    example = fb.example
    if compact and isinstance(example, dict):  # what the header or the side information already says
        example = {k: v for k, v in example.items() if v not in ("", None) and not (k == "id" and str(v) == fb.key)
                   and not (k in fb.side_info and fb.side_info[k] == v)} or None
    if example is not None:
        fields.append(("Input / expected", example))
    if fb.error:
        fields.append(("Error", fb.error))
    for name, value in fb.side_info.items():
        fields.append((name, value[-limit:] if name == "traceback" and fb.error else value))
    parts = [f"### Example `{fb.key}` — score {fb.score:.4g}"]
    for name, value in fields:
        short = _inline(value, limit) if compact else None
        parts.append(f"**{name}:** {short}" if short is not None else f"**{name}:**\n" + _render_value(value, limit))
    return ("\n" if compact else "\n\n").join(parts)


def build_prompt(*, kind: str, objective: str, background: str, component: str, components: list[str],
                 current_text: str, feedback: list[ExampleFeedback], human_feedback: list[str],
                 tried: list[str | tuple[str, str]], max_chars: int | None = None, template: Optional[str] = None,
                 vision: bool = False, compact: bool = False) -> ReflectionPrompt:
    """Build the messages of one reflection. ``max_chars`` bounds the whole prompt; only the
    side-information section is shortened to meet it. With ``template`` (a checked
    ``prompt_template``) the user message is that template filled in. Images in the feedback
    become content parts when ``vision``, else the text says they were left out. ``compact``:
    see ``render_feedback``. ``tried``: earlier texts for the same parent, each bare or with
    what became of it (``PoolState.tried_outcomes``).

    Order: everything constant across a run's reflections comes first (the system message with
    the instructions, then objective, background and kind), then the current version, the
    feedback, human feedback and earlier attempts, then a short constant reminder."""
    images = ImageCollector(vision)
    feedback = [replace(fb, example=images.strip(fb.example), side_info=images.strip(fb.side_info)) for fb in feedback]
    given = kind.strip()
    kind = given or DEFAULT_KIND
    kind_short = "artifact"
    what = f"the component `{component}` of a multi-part candidate ({', '.join(components)})" if len(components) > 1 else "the candidate"
    head = []
    if objective.strip():
        head.append("## Objective\n" + objective.strip())
    if background.strip():
        head.append("## Background\n" + background.strip())
    head.append(f"## What you are improving\n{what}, which is {kind}. Your answer must be exactly that kind of thing."
                if given else f"## What you are improving\n{what}. {KEEP_KIND}")
    head.append("## Current version\n" + _fence(current_text))
    tail = []
    if human_feedback:
        tail.append("## Human feedback (from the people steering this run — follow it)\n" +
                    "\n".join(f"- {f}" for f in human_feedback))
    if tried:
        tail.append("## Already tried for this version (do not repeat these)\n" +
                    "\n\n".join(_render_tried(t, current_text, compact) for t in tried[-3:]))
    tail.append(REMINDER.format(kind=kind, kind_short=kind_short))
    fixed = "\n\n".join(head + tail)
    blocks = [render_feedback(fb, compact=compact) for fb in feedback]
    shortened = False
    if max_chars is not None:
        room = max_chars - len(fixed) - 200
        blocks, shortened = _fit(feedback, blocks, room, compact)
    body = "## Evaluation feedback on a minibatch\n\n" + ("\n\n".join(blocks) or "(no feedback)")
    if shortened:
        body += "\n\n(Some feedback was shortened to fit the model's context window.)"
    if template is not None:
        user = fill_template(template, candidate=current_text, side_info=body, objective=objective.strip(),
                             background=background.strip(), component=component)
    else:
        user = "\n\n".join(head + [body] + tail)
    system = SYSTEM.format(kind=given or "a text artifact", kind_short=kind_short)
    if template is None:
        system += "\n\n" + TASK.format(kind=kind, kind_short=kind_short)
    return ReflectionPrompt([{"role": "system", "content": system}, {"role": "user", "content": images.content(user)}],
                            shortened)


def _render_tried(tried: str | tuple[str, str], current: str, compact: bool) -> str:
    """An earlier text for this parent, and what became of it when known (a bare text: not).
    ``compact``: only its changed lines when that is much shorter than the whole text (a module
    with one line changed), for a small model that reads slowly."""
    text, outcome = (tried, "") if isinstance(tried, str) else tried
    changed = _changed_lines(current, text) if compact else None
    if changed is not None and len(changed) <= DIFF_SHARE * len(text):
        block = "Changed lines (- removed, + added):\n" + _fence(changed, "diff")
    else:
        block = _fence(_clip(text, 1500))
    return f"{block}\nResult: {outcome}" if outcome else block


DIFF_SHARE = 0.6  # show a tried text as its changed lines only when they are at most this share of it


def _changed_lines(old: str, new: str) -> Optional[str]:
    """The lines ``new`` removed from and added to ``old``, without positions (hunks apart by a
    "…" line); None when nothing changed."""
    hunks: list[list[str]] = []
    for line in difflib.unified_diff(old.split("\n"), new.split("\n"), lineterm="", n=0):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            hunks.append([])
        elif hunks:
            hunks[-1].append(line)
    return "\n…\n".join("\n".join(h) for h in hunks if h) or None


def _fit(feedback: list[ExampleFeedback], blocks: list[str], room: int, compact: bool) -> tuple[list[str], bool]:
    if sum(len(b) for b in blocks) <= room:
        return blocks, False
    for limit in (1500, 600, 200, 80):
        blocks = [render_feedback(fb, limit, compact) for fb in feedback]
        if sum(len(b) for b in blocks) <= room:
            return blocks, True
    while blocks and sum(len(b) for b in blocks) > room:
        blocks = blocks[:-1]
    return blocks, True


# A local model's answer: the `Change:` line and the fences, then the new version, which may grow
# to a few times the current one (a token is at least one character, so characters bound tokens).
ANSWER_OVERHEAD_TOKENS = 64
ANSWER_GROWTH = 3
MIN_ANSWER_TOKENS = 128


def answer_token_cap(current_text: str, configured: int) -> int:
    """``max_tokens`` of a reflection on a small local model: room for the `Change:` line and a
    new version up to ``ANSWER_GROWTH`` times the current one's length, at least
    ``MIN_ANSWER_TOKENS``, never more than the configured cap. A rambling answer then stops
    early (each generated token costs ~60 ms on 2 cores) while a real rewrite still fits."""
    fitted = ANSWER_OVERHEAD_TOKENS + ANSWER_GROWTH * len(current_text)
    return min(configured, max(MIN_ANSWER_TOKENS, fitted))


# the closing fence starts a line, possibly the line right after the opening one ("```\n```")
_OPEN = re.compile(r"^(`{3,})[^\n`]*\n", re.M)


# a small model's slip: the `Change:` line in a fenced block of its own, before the real one
# ("```\nChange: …\n```\n```\nnew version\n```": taken whole, the new version held two fence lines)
_CHANGE_BLOCK = re.compile(r"^(`{3,})[^\n`]*\n[ \t]*(Change:[^\n]*)\n+\1[ \t]*\n(?=\s*`{3,})", re.M)


def _fenced_block(answer: str) -> Optional[str]:
    """The text between the first opening fence and the LAST closing fence of the same length
    (as GEPA does), so an artifact that itself contains fenced blocks — a prompt with examples
    in code fences — survives whole. A fenced block holding only the `Change:` line is read as
    that line. An unclosed fence takes the rest of the answer, but for a closing fence of another
    length on its last line (a 1.5B model opened with four backticks and closed with three)."""
    answer = _CHANGE_BLOCK.sub(lambda m: m.group(2) + "\n", answer, count=1)
    m = _OPEN.search(answer)
    if m is None:
        return None
    ticks, body = m.group(1), answer[m.end():]
    closes = list(re.finditer(rf"^{ticks}[ \t]*$", body, re.M))
    if closes:
        return body[: closes[-1].start()]
    return re.sub(r"\n`{3,}[ \t]*\n*\Z", "", body)


UNCHANGED = "the answer is unchanged from the current version"
NO_FENCE = "the answer has no fenced code block"
# a small model's slip, after a prompt that asks for a `Change:` line before the fence (seen on slugify)
CHANGE_ONLY = "the fenced block holds only the `Change:` line, not a new version"


@dataclass
class ParsedAnswer:
    text: Optional[str]
    fenced: bool
    reason: str = ""  # why it is not usable, when text is None


def is_code(text: str) -> bool:
    """Whether the artifact is program code, as far as can be told without the run saying so:
    Python source that defines or imports something (a one-word prompt parses as Python too)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))
               for node in tree.body)


# A prose artifact is a text in words (a prompt, a help text); a notation is not (a regular
# expression, code, a config): its share of characters that are neither letters, digits nor spaces.
# On the real-LM tasks' seeds and best candidates: prompts and help texts 2-16 % (a help text's
# `--flag [PATH...]` lines are the most), regular expressions 70-80 %, Python 20-35 %, JSON 20-30 %.
PROSE_SYMBOLS = 0.2


def is_prose(text: str) -> bool:
    """Whether the artifact is written in words rather than in a notation: not code (``is_code``)
    and at most ``PROSE_SYMBOLS`` of its non-space characters are neither letters nor digits."""
    chars = [c for c in text if not c.isspace()]
    if not chars or is_code(text):
        return False
    return sum(not c.isalnum() for c in chars) <= PROSE_SYMBOLS * len(chars)


def parse_answer(answer: str, current_text: str, require_fence: bool = True) -> ParsedAnswer:
    """Take the new text from the fenced block (first opening to last closing fence). An
    unclosed fence (answer cut by the token cap) takes the rest. Empty, unchanged or (with require_fence) unfenced answers are
    not usable: the reason says which."""
    block = _fenced_block(answer or "")
    if block is not None:
        text, fenced = _without_change_line(block.strip("\n"), current_text), True
    elif require_fence:
        return ParsedAnswer(None, False, NO_FENCE)
    else:
        text, fenced = (answer or "").strip(), False
    if not text.strip():
        return ParsedAnswer(None, fenced, CHANGE_ONLY if block and block.strip() else "the answer is empty")
    if text.strip() == current_text.strip():
        return ParsedAnswer(None, fenced, UNCHANGED)
    return ParsedAnswer(text, fenced)


def _without_change_line(text: str, current_text: str) -> str:
    """A small model sometimes writes the `Change:` line inside the fence, where it would become
    the first line of the new version (seen in a ticket_routing run's best prompt): dropped,
    unless the current version itself starts with such a line."""
    first, _, rest = text.partition("\n")
    if first.startswith("Change:") and not current_text.lstrip().startswith("Change:"):
        return rest.strip("\n")  # "" when that line is all the block holds: no new version at all
    return text


SEED_ROWS = 3  # dataset rows shown when the seed is written from the objective


def seed_request(kind: str, objective: str, background: str, rows: Optional[list] = None) -> str:
    """The request for a first candidate written from the objective alone: the goal, the
    domain context, a few of the inputs it will be evaluated on (the first ``SEED_ROWS`` rows;
    the section is left out without a dataset), and the answer's form. GEPA's headings."""
    kind = kind.strip() or "a text artifact"
    text = f"## Goal\n\n{objective.strip()}\n\n"
    if background.strip():
        text += f"## Domain Context & Constraints\n\n{background.strip()}\n\n"
    if rows is not None:
        shown = "\n".join(f"- Example {i}: {json.dumps(row, ensure_ascii=False, default=str)[:2000]}"
                           for i, row in enumerate(rows[:SEED_ROWS], 1))
        text += f"## Sample Inputs\n\nIt will be evaluated on inputs like these:\n\n{shown}\n\n"
    return text + (f"## Output Format\n\nWrite a first version of {kind} that meets the goal. Give it alone inside "
                   "``` blocks (one fenced code block), with nothing outside the ``` blocks.")


def seed_prompt(kind: str, objective: str, background: str, rows: Optional[list] = None) -> list[dict]:
    """Messages asking the LM to write a first candidate from the objective alone."""
    return [{"role": "system", "content": SYSTEM.format(kind=kind.strip() or "a text artifact", kind_short="artifact")},
            {"role": "user", "content": seed_request(kind, objective, background, rows)}]
