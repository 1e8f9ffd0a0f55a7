"""The new-run form's speed-up prediction: one adapter over ``engine.runtime.model`` so that the
page does not depend on that module's data classes."""

from __future__ import annotations

from engine.runtime.model import Latencies, Shape, predict_speedup, predict_step_speedup


def predicted(parents: int, per_parent: int, workers: int, accept_rate: float, lm_seconds: float,
              eval_seconds: float, minibatch: int, n_val: int, accept_rule: str = "all") -> tuple[float, float]:
    """(step speed-up T(1)·k/T(k) of docs/design.md §5, metric-call throughput relative to 1×1)."""
    shape = Shape(parents=parents, per_parent=per_parent, accept=accept_rule)
    lat = Latencies(lm=lm_seconds, eval=eval_seconds, accept=accept_rate, minibatch=minibatch, n_val=n_val,
                    workers=workers)
    return predict_step_speedup(shape, lat), predict_speedup(shape, lat)
