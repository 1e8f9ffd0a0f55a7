"""The runtime model of DESIGN.md §1: predicted speed-up of a k-proposal step.

T(1)/T(k) ≈ k·(L_step + a·L_val) / (L_step + q_k·L_val_k), with a the acceptance rate,
q_k = 1-(1-a)^k, L_step the latency of one reflect-and-minibatch cycle and L_val_k the
latency of the validation passes of a step, which grows as ceil(k·a·V / W)·T_eval once the
accepted children's evaluations exceed the W workers.
"""

from __future__ import annotations

import math


def step_seconds(k: int, a: float, l_reflect: float, t_eval: float, minibatch: int, n_val: int, workers: int) -> float:
    """Expected wall-clock of one synchronous step with k concurrent proposals."""
    mb_waves = math.ceil(k * minibatch / workers)  # child minibatch evaluations share the pool
    l_step = l_reflect + mb_waves * t_eval
    q = 1 - (1 - a) ** k
    accepted = max(1.0, k * a) if q > 0 else 0.0
    l_val = math.ceil(accepted * n_val / workers) * t_eval
    return l_step + q * l_val


def predict_speedup(k: int, a: float, l_reflect: float, t_eval: float, minibatch: int, n_val: int, workers: int) -> float:
    """T(1)·k / T(k): how much faster k proposals run in one step than in k sequential steps."""
    t1 = step_seconds(1, a, l_reflect, t_eval, minibatch, n_val, workers)
    tk = step_seconds(k, a, l_reflect, t_eval, minibatch, n_val, workers)
    return k * t1 / tk if tk > 0 else float(k)


def predict_async_throughput_gain(c: int, a: float, l_reflect: float, t_eval: float, minibatch: int, n_val: int,
                                  workers: int) -> float:
    """Proposals per second of an asynchronous schedule with C in flight, relative to 1×1.

    With no barrier each proposal costs its own latency, and C of them overlap until the pool
    saturates: throughput ≈ min(C / L_prop, W / E_prop), E_prop being worker-seconds per proposal.
    """
    l_prop = l_reflect + minibatch * t_eval + a * math.ceil(n_val / workers) * t_eval
    work = (minibatch + a * n_val) * t_eval
    rate_c = min(c / l_prop, workers / work if work > 0 else float("inf"))
    rate_1 = 1 / step_seconds(1, a, l_reflect, t_eval, minibatch, n_val, workers)
    return rate_c / rate_1
