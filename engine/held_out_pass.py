"""The held-out audit: the seed and the final best on the test set, which the search never saw.

It runs for every run that ends with a best (completed, stopped by a person, stopped by a
metric-call, dollar, time or step budget). Its evaluations are recorded (split "test") but
never charged to ``max_metric_calls``, and the evaluator's ``lm()`` calls during it are allowed
even after the dollar or time budget stopped the search: they are recorded with purpose
``test`` and their dollars go to the run's ``test_cost_usd``, not to ``cost_usd`` (which the
dollar budget caps). The validation–test gap (best validation mean minus best test mean) is
the overfitting audit.
"""

from __future__ import annotations

from typing import Optional

from storage import repo

from engine.search.frontier import mean
from engine.state import deterministic_id

ENDINGS_WITH_A_TEST = ("completed", "stopped")


def _mean(results: dict) -> Optional[float]:
    return mean(r.score for r in results.values()) if results else None


def held_out_pass(ctx, status: str, best_id: Optional[str]) -> dict:
    """Run fields to record: ``test_mean`` and ``seed_test_mean`` (empty when there is no test
    set, no best, or the run failed)."""
    if not (best_id and ctx.test_keys and status in ENDINGS_WITH_A_TEST):
        return {}
    seed_id = deterministic_id(ctx.run_id, "seed")
    fields = {"test_mean": _mean(ctx.evals.evaluate(ctx.state.candidates[best_id], ctx.test_keys, kind="test",
                                                     charge=False))}
    seed = ctx.state.candidates.get(seed_id) or repo.find_candidate(ctx.db, seed_id)
    if seed is not None and seed.content:
        fields["seed_test_mean"] = _mean(ctx.evals.evaluate(seed, ctx.test_keys, kind="test", charge=False))
    return fields


def audit_line(run) -> Optional[str]:
    """The held-out audit in one line (CLI ``status``, the dashboard), or None before a test
    pass. ``run`` is a Run row or its dict."""
    get = run.get if isinstance(run, dict) else lambda name: getattr(run, name, None)
    test, seed, val = get("test_mean"), get("seed_test_mean"), get("best_val_mean")
    if test is None:
        return None
    parts = [f"held-out test: seed {seed:.4f} → best {test:.4f}" if seed is not None else f"held-out test: best {test:.4f}"]
    if val is not None:
        parts.append(f"validation {val:.4f}, validation–test gap {val - test:+.4f}")
    parts.append(f"test pass LM cost ${get('test_cost_usd') or 0:.4f}, outside the budget")
    return "; ".join(parts)
