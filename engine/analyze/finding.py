"""What Analyze says about a run: findings, each with evidence, a severity and actions.

A finding is computed from the run's own records (no LM). Its evidence names what it was
computed from (candidate ids, example keys, step indexes, LM call ids, counts) so that a
reader, or the written diagnosis, can check it. Its actions are ordinary commands
(``engine.commands.KINDS``), or ``branch`` (a new run from a candidate with other settings),
proposed, never sent by Analyze itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERE, WARNING, INFO = "severe", "warning", "info"
SEVERITIES = (SEVERE, WARNING, INFO)

# Causes before symptoms: of two findings of one severity, the one earlier here is named first
# (an evaluator that gives no signal explains a stalled search, not the other way round).
KINDS = (
    "uninformative_evaluator", "repeating_lm", "wasted_proposals", "noisy_evaluator", "degenerate_members",
    "small_valset", "no_signal_minibatches", "constant_side_info", "saturated_examples", "overfitting",
    "stalled", "neglected_member", "lm_bound", "evaluator_bound", "budget_forecast",
)


@dataclass
class Action:
    """One click: a command of ``kind`` with ``payload`` (sent with ``reason``), or a branch."""

    kind: str  # veto | pin | feedback | budget | branch
    label: str
    payload: dict = field(default_factory=dict)
    reason: str = ""


@dataclass
class Finding:
    kind: str  # one of KINDS
    severity: str  # SEVERE | WARNING | INFO
    title: str  # one sentence, with the numbers
    detail: str = ""  # what it means and what to do
    evidence: dict[str, Any] = field(default_factory=dict)  # candidates, examples, steps, lm_calls, counts
    actions: list[Action] = field(default_factory=list)
    weight: float = 0.0  # within one kind and severity: larger first (how much of the run it concerns)
    id: str = ""  # F1, F2 … in the order shown; set by ``order``

    def to_dict(self) -> dict:
        return asdict(self)


def order(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then causes before symptoms (KINDS), then the larger; numbered F1…"""
    ranked = sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), KINDS.index(f.kind), -f.weight))
    for i, f in enumerate(ranked, 1):
        f.id = f"F{i}"
    return ranked


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def share(n: int, total: int) -> str:
    return f"{n} of {total}" + (f" ({n / total:.0%})" if total else "")
