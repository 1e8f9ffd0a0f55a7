"""Is the gain real? A candidate's gain over the seed on the held-out test set, example by
example: the mean difference with a 95 % paired bootstrap interval, the examples it wins and
loses, and the validation–test gap; and the minimum gain under which approving it warns.

The pairs are the examples both candidates were evaluated on (the test pass evaluates the seed
and the final best; a branch's seeds bring their base run's). Without a test set (or without a
test evaluation of the candidate) the same is computed on the validation set and marked as not
held out: the search chose the candidate on those examples, so that gain is optimistic. The
bootstrap draws from a generator with a fixed seed, so the dashboard, the report, the CLI and
the Approve dialog show the same interval for the same run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from storage import repo
from storage.compare_queries import first_seed, pair_evaluations
from storage.db import Database

from engine.state import deterministic_id
from storage import settings

RESAMPLES = 4000
CONFIDENCE = 0.95
TEAM_MIN_GAIN_ENV = "REFRACT_MIN_HELD_OUT_GAIN"  # the team's minimum, when a run sets none
FEW_EXAMPLES = 10  # below this many pairs the interval is wide whatever the gain
VERDICTS = {"real": "The gain is real", "unclear": "Not distinguishable from no gain", "worse": "Worse than the seed"}


@dataclass(frozen=True)
class Gain:
    candidate_id: str
    seed_id: str
    held_out: bool  # True: the test set; False: the validation set (what the search selected on)
    n: int  # examples both were evaluated on
    candidate_mean: float
    seed_mean: float
    low: float  # the 95 % paired bootstrap interval of the gain
    high: float
    wins: list[str] = field(default_factory=list)  # example keys where the candidate scored higher
    losses: list[str] = field(default_factory=list)
    ties: int = 0
    val_mean: Optional[float] = None  # the candidate's validation mean
    min_gain: Optional[float] = None  # approving warns under it
    min_gain_from: str = ""  # "run" ([review] of its config) or "team" (REFRACT_MIN_HELD_OUT_GAIN)

    @property
    def gain(self) -> float:
        return self.candidate_mean - self.seed_mean

    @property
    def gap(self) -> Optional[float]:
        """Validation mean minus test mean: how much of the validation score did not carry over."""
        return None if not self.held_out or self.val_mean is None else self.val_mean - self.candidate_mean

    @property
    def verdict(self) -> str:
        """``real`` (the whole interval above 0), ``worse`` (below 0) or ``unclear``."""
        return "real" if self.low > 0 else "worse" if self.high < 0 else "unclear"

    def warnings(self) -> list[str]:
        """What approving this candidate should be told, in sentences (empty: nothing)."""
        out = []
        where = "held-out test" if self.held_out else "validation"
        if not self.held_out:
            out.append("No held-out test score of this candidate: the gain below is on the validation examples the "
                       "search selected it on, so it is optimistic.")
        if self.min_gain is not None and self.held_out and self.gain < self.min_gain:
            source = "the run's [review] min_held_out_gain" if self.min_gain_from == "run" else \
                f"the team's minimum ({TEAM_MIN_GAIN_ENV})"
            out.append(f"The held-out gain {self.gain:+.3f} is below {source}, {self.min_gain:+.3f}.")
        if self.verdict == "unclear":
            out.append(f"The {where} gain is not distinguishable from none: its 95 % interval "
                       f"({self.low:+.3f} … {self.high:+.3f}) includes 0.")
        elif self.verdict == "worse":
            out.append(f"The candidate scores below the seed on the {where} examples (95 % interval "
                       f"{self.low:+.3f} … {self.high:+.3f}).")
        if self.n < FEW_EXAMPLES:
            out.append(f"Only {self.n} example(s) to compare on: the interval says little.")
        return out

    def line(self) -> str:
        """The gain in one line (CLI, captions)."""
        where = "held-out" if self.held_out else "validation (not held out)"
        text = (f"{where} gain of {self.candidate_id} over the seed: {self.gain:+.4f} (95 % interval {self.low:+.4f} … "
                f"{self.high:+.4f}, paired bootstrap over {self.n} examples): wins {len(self.wins)}, "
                f"loses {len(self.losses)}, ties {self.ties}")
        if self.gap is not None:
            text += f"; validation–test gap {self.gap:+.4f}"
        return text


def paired_interval(diffs: np.ndarray, resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                    seed: int = 0) -> tuple[float, float]:
    """The percentile interval of the mean of ``diffs`` over bootstrap resamples of the pairs."""
    if len(diffs) == 0:
        raise ValueError("diffs: no pairs to resample")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // len(diffs))  # at most ~2 million draws in memory at once
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        means[start:stop] = diffs[rng.integers(0, len(diffs), size=(stop - start, len(diffs)))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def min_held_out_gain(config: dict) -> tuple[Optional[float], str]:
    """(the minimum gain approving warns under, where it comes from: "run", "team" or "")."""
    own = ((config or {}).get("review") or {}).get("min_held_out_gain")
    if own is not None:
        return float(own), "run"
    team = settings.value(TEAM_MIN_GAIN_ENV)
    return (team, "team") if team is not None else (None, "")


def seed_of(db: Database, run_id: str) -> Optional[str]:
    """The run's seed: the first one of a seed population."""
    return first_seed(db, run_id, deterministic_id(run_id, "seed"))


def held_out_gain(db: Database, run_id: str, candidate_id: Optional[str] = None) -> Optional[Gain]:
    """The gain of ``candidate_id`` (default: the run's best) over the seed; None before both
    were evaluated on a common example. Reads the run, the candidate and their evaluations."""
    run = repo.get_run(db, run_id)
    cid = candidate_id or run.best_candidate_id
    seed = seed_of(db, run_id)
    if not cid or not seed:
        return None
    rows = pair_evaluations(db, run_id, seed, cid)
    pairs = [r for r in rows if r["split"] == "test" and r["score_a"] is not None and r["score_b"] is not None]
    held_out = bool(pairs)
    if not pairs:
        val = "val" if any(r["split"] == "val" for r in rows) else "train"
        pairs = [r for r in rows if r["split"] == val and r["score_a"] is not None and r["score_b"] is not None]
    if not pairs:
        return None
    seed_scores = np.array([r["score_a"] for r in pairs], dtype=float)
    cand_scores = np.array([r["score_b"] for r in pairs], dtype=float)
    diffs = cand_scores - seed_scores
    low, high = paired_interval(diffs)
    minimum, source = min_held_out_gain(run.config)
    return Gain(candidate_id=cid, seed_id=seed, held_out=held_out, n=len(pairs),
                candidate_mean=float(cand_scores.mean()), seed_mean=float(seed_scores.mean()), low=low, high=high,
                wins=[r["example"] for r, d in zip(pairs, diffs) if d > 1e-9],
                losses=[r["example"] for r, d in zip(pairs, diffs) if d < -1e-9],
                ties=int(np.sum(np.abs(diffs) <= 1e-9)), val_mean=repo.get_candidate(db, cid).val_mean,
                min_gain=minimum, min_gain_from=source)
