"""A custom reflection prompt (``[reflection_lm] prompt_template``) with named placeholders.

GEPA's ``reflection_prompt_template`` has ``<curr_param>`` and ``<side_info>``; here the
placeholders are ``{candidate}`` (the current text of the component being rewritten) and
``{side_info}`` (the minibatch feedback as Markdown), both required, plus the optional
``{objective}``, ``{background}`` and ``{component}``. GEPA's two spellings are accepted too, so a
GEPA template ports unchanged. Placeholders are replaced as plain text, so braces elsewhere (JSON
in the template) need no escaping. The answer is parsed as usual: the new text in a fence.
"""

from __future__ import annotations

import re

REQUIRED = ("candidate", "side_info")
OPTIONAL = ("objective", "background", "component")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(REQUIRED + OPTIONAL) + r")\}")
GEPA_SPELLINGS = {"<curr_param>": "{candidate}", "<side_info>": "{side_info}"}


def _normalised(template: str) -> str:
    for gepa, ours in GEPA_SPELLINGS.items():
        template = template.replace(gepa, ours)
    return template


def check_template(template: str) -> str:
    """The template, or ValueError naming the missing placeholders."""
    text = _normalised(template)
    missing = [f"{{{name}}}" for name in REQUIRED if f"{{{name}}}" not in text]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}; a reflection prompt template must contain "
                         "{candidate} and {side_info} (optional: {objective}, {background}, {component})")
    return template


def fill_template(template: str, *, candidate: str, side_info: str, objective: str, background: str,
                  component: str) -> str:
    """The user message: each placeholder replaced once by its value, in one pass (a value
    that itself contains ``{side_info}`` is not expanded again)."""
    values = {"candidate": candidate, "side_info": side_info, "objective": objective, "background": background,
              "component": component}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _normalised(template))
