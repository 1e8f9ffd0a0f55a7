"""From Python, notebook style: optimize a text against a plain Python evaluator in this process.

The candidate is the list of keywords that flags a support ticket as urgent. The evaluator
closes over an object of ours (a ``TicketTriage`` that keeps statistics), something a sandboxed
evaluator file could never reach. The run lands in the studio's database: open the URL it
prints to watch it, pin or veto candidates, or pause it, while this script runs.

    python examples/python_api.py                        # the offline local model (`make setup` installs it)
    python examples/python_api.py openai/gpt-4.1-mini    # any litellm model; its key in the environment
    python examples/python_api.py MODEL --db sqlite:///elsewhere.db

The evaluator runs in this process, NOT sandboxed: it is your own code, as in GEPA.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

from engine import optimize_anything  # noqa: E402
from engine.config import LOCAL_MODEL  # noqa: E402
import refract_evaluator as oa  # noqa: E402

TICKETS = [
    {"id": "t1", "text": "The whole site is down and customers cannot pay", "urgent": True},
    {"id": "t2", "text": "How do I change the colour of my invoice template?", "urgent": False},
    {"id": "t3", "text": "Outage in the EU region since 9:00, nothing loads", "urgent": True},
    {"id": "t4", "text": "Please add a dark mode, would be nice", "urgent": False},
    {"id": "t5", "text": "Security: someone logged into our admin account without permission", "urgent": True},
    {"id": "t6", "text": "Where can I download last year's receipts?", "urgent": False},
    {"id": "t7", "text": "Payments fail with error 500 for every customer", "urgent": True},
    {"id": "t8", "text": "Typo on the pricing page", "urgent": False},
]


class TicketTriage:
    """Flags a ticket as urgent when it contains one of the keywords; counts what it saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # evaluations run on several threads at once
        self.seen = 0

    def is_urgent(self, keywords: str, ticket_text: str) -> bool:
        with self.lock:
            self.seen += 1
        words = {w.strip().lower() for w in keywords.replace("\n", ",").split(",") if w.strip()}
        text = ticket_text.lower()
        return any(w in text for w in words)


triage = TicketTriage()


def evaluate(candidate: str, example: dict):
    flagged = triage.is_urgent(candidate, example["text"])
    correct = flagged == example["urgent"]
    if not correct:
        oa.log("should be", "urgent" if example["urgent"] else "not urgent", "but was", "flagged" if flagged else "missed")
    return (1.0 if correct else 0.0), {"ticket": example["text"], "expected_urgent": example["urgent"], "flagged": flagged}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default=LOCAL_MODEL, help=f"reflection LM (default: {LOCAL_MODEL})")
    parser.add_argument("--db", default=None, help="database URL (default: the studio's)")
    args = parser.parse_args(argv)
    result = optimize_anything(
        "refund",
        evaluator=evaluate,
        dataset=TICKETS[:6],
        valset=TICKETS,
        objective="Keywords that flag urgent support tickets (outages, security, failing payments) and no others.",
        background="A ticket is urgent when any keyword occurs in its text (case-insensitive substring).",
        config={"artifact_kind": "a comma-separated list of lowercase keywords on one line",
                "reflection_lm": {"model": args.model},
                "search": {"parents_per_step": 1, "proposals_per_parent": 2, "minibatch_size": 3},
                "budget": {"max_metric_calls": 80, "stop_at_score": 1.0},
                "executor": {"workers": 4}},
        db=args.db,
        name="urgent-ticket keywords (from Python)",
    )
    print(f"{result.status}: best {result.best_score:.2f} with {result.best_candidate!r}")
    print(f"{len(result.candidates)} candidates, {result.total_metric_calls} metric calls, ${result.cost_usd:.4f}; "
          f"the triage object saw {triage.seen} tickets")
    print(f"browse it: {result.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
