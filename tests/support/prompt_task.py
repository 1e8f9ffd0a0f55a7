"""A prompt-tuning task for tests: support tickets, and one scripted LM that is the task LM, the
judge and the reflection LM (test code, not product).

The task LM answers with the bare label only when the system prompt asks for "label only";
otherwise it answers in a sentence that names billing tickets "refund request". The judge gives a
bare label 10/10 and anything else 3/10. The reflection LM proposes ``BETTER``.
"""

from __future__ import annotations

ROWS = [{"text": "I was charged twice", "label": "billing"}, {"text": "The app crashes", "label": "bug"},
        {"text": "How do I export my data?", "label": "question"}, {"text": "Refund my last invoice", "label": "billing"}]
BETTER = "Answer with the label only: billing, bug or question."
LABELS = {r["label"] for r in ROWS}


def script(messages: list[dict], params: dict) -> str:
    system = messages[0]["content"]
    if params["model"].endswith("task"):
        label = next(r["label"] for r in ROWS if r["text"] in messages[-1]["content"])
        return label if "label only" in system else f"Category: {'refund request' if label == 'billing' else label} ticket"
    if system.startswith("You grade an answer"):
        bare = messages[-1]["content"].rsplit("The answer:\n", 1)[1].strip() in LABELS
        return "SCORE: 10\nREASON: terse." if bare else "SCORE: 3\nREASON: too wordy."
    return f"Asking for the bare label.\n```\n{BETTER}\n```"


def config(*assertions: dict, **over) -> dict:
    """A prompt run's config over ``ROWS`` with this LM as every model (``assertions``, or one
    icontains of the label); ``over`` replaces top-level entries."""
    data = {"name": "tickets", "seed_candidate": "Classify the support ticket.", "dataset": ROWS,
            "prompt_evaluator": {"user": "Ticket: {text}", "assert": list(assertions) or [{"type": "icontains", "value": "{label}"}]},
            "task_lm": {"model": "scripted/task", "num_retries": 0, "temperature": 0.0},
            "reflection_lm": {"model": "scripted/reflect", "num_retries": 0},
            "search": {"parents_per_step": 1, "proposals_per_parent": 1, "minibatch_size": 2},
            "budget": {"max_metric_calls": 40}, "executor": {"workers": 2, "timeout_seconds": 20}}
    data.update(over)
    return data
