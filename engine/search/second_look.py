"""A second look at a child that ties its parent on the minibatch (docs/design.md §2 step 4).

A minibatch of three says little when the parent fails most examples: a child that fixes two
of sixteen tests ties "0 vs parent 0" on three it still fails, and strict improvement throws it
away (on a real-LM code task two of twelve children were better on the training set and were
rejected so). When evaluations are cheap beside a reflection, a tie is worth a few more metric
calls: the child and its parent are scored on more training examples, and the child passes if
it is strictly better on all the examples it was judged on. It is the same rule on a larger
sample, never a looser one: a child that lost anything on the minibatch gets no second look.

"Cheap" is measured, not configured: the second look may cost at most ``SHARE`` of this run's
mean reflection time (its evaluations, run ``workers`` at a time, at this run's mean seconds
per metric call), so a prompt task whose every evaluation is a task-LM call gets a short one
or none, and a unit test of a few milliseconds gets ``MAX_EXAMPLES``.
"""

from __future__ import annotations

import threading
import zlib

TOL = 1e-12
SHARE = 0.25  # of one reflection's mean seconds
MAX_EXAMPLES = 6  # more training examples at most (twice the default minibatch)
# a reflection quicker than this (a scripted LM, a fast hosted model) gets no second look: the
# next proposal settles a tie as cheaply, and a run's decisions then never hang on timings
MIN_LM_SECONDS = 2.0


class Pace:
    """This run's mean seconds per reflection LM call and per metric call, as measured."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lm, self._eval = [0, 0.0], [0, 0.0]

    def note_lm(self, seconds: float) -> None:
        with self._lock:
            self._lm[0] += 1
            self._lm[1] += seconds

    def note_eval(self, seconds: float) -> None:
        with self._lock:
            self._eval[0] += 1
            self._eval[1] += seconds

    def means(self) -> tuple[float | None, float | None]:
        with self._lock:
            return tuple(s / n if n else None for n, s in (self._lm, self._eval))


def looks_again(parent_results: dict, results: dict, keys: list[str]) -> bool:
    """A tie on ``keys`` with nothing lost: the child's total equals the parent's and no example
    got worse (a child that fixes one example and breaks another is judged as it is)."""
    p_total = sum(parent_results[k].score for k in keys)
    c_total = sum(results[k].score for k in keys)
    return abs(c_total - p_total) <= TOL and all(results[k].score >= parent_results[k].score - TOL for k in keys)


def affordable(pace: Pace, workers: int) -> tuple[float | None, float | None]:
    """(seconds of metric calls, run ``workers`` at a time, that ``SHARE`` of a reflection pays
    for; this run's mean seconds per metric call), or (None, None) while either mean is unknown
    or reflections take less than ``MIN_LM_SECONDS``. The second look's rule, and the runner-up's."""
    lm_s, eval_s = pace.means()
    if lm_s is None or eval_s is None or lm_s < MIN_LM_SECONDS:
        return None, None
    return SHARE * lm_s * max(1, workers), eval_s


def extra_keys(child_id: str, train_keys: list[str], judged: list[str], parent_known: set[str],
               pace: Pace, workers: int) -> list[str]:
    """The training examples of the second look: those the parent is already scored on first
    (they cost the child's call only), each group in an order of the child's own (the same
    when a step is redone); as many as ``SHARE`` of a reflection pays for, at most
    ``MAX_EXAMPLES``. Empty when either mean is still unknown, or reflections take less than
    ``MIN_LM_SECONDS``."""
    allowed, eval_s = affordable(pace, workers)
    if allowed is None:
        return []
    order = sorted((k for k in train_keys if k not in judged),
                   key=lambda k: (k not in parent_known, zlib.crc32(f"{child_id}:{k}".encode())))
    chosen, spent = [], 0.0
    for k in order:
        cost = eval_s * (1 if k in parent_known else 2)
        if len(chosen) == MAX_EXAMPLES or spent + cost > allowed + TOL:
            break
        chosen.append(k)
        spent += cost
    return chosen
