"""A run's records in the shapes the checks read (built once per analysis, no SQL here).

``RunRecords.load`` reads through ``storage.analyze_queries`` (a fixed number of statements;
per-example and per-candidate aggregates are computed by the database) and keeps the
validation scores of the accepted candidates as one matrix, so that a 2,000-candidate run is
analysed in well under a second. The settings are the stored config over the engine's
defaults, read as plain data, so that an imported run (a GEPA run directory) is analysed like
any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

import numpy as np
import pandas as pd

from storage import analyze_queries
from storage.db import Database

from engine.config import BudgetConfig, ExecutorConfig, SearchConfig

COMPETING = "accepted"  # a candidate that competes: validated, on the frontier unless vetoed


@dataclass
class RunRecords:
    run: dict
    search: dict
    budget: dict
    executor: dict
    reflection_model: str
    objective: str
    examples: dict[int, tuple[str, str]]  # pk -> (key, split)
    candidates: list[dict]
    steps: list[dict]
    lm_calls: list[dict]
    commands: list[tuple]
    scores: list[tuple]  # (candidate_id, example_pk, score) of every evaluation
    eval_seconds: tuple[float, int]  # (mean, count) of the latest evaluations that ran
    side_info: list[tuple] = field(default_factory=list)  # (candidate_id, example_pk, canonical JSON)
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @classmethod
    def load(cls, db: Database, run_id: str, now: Optional[datetime] = None) -> Optional["RunRecords"]:
        raw = analyze_queries.run_records(db, run_id)
        if raw is None:
            return None
        recs = cls.from_raw(raw, now)
        sample = recs.side_info_sample()
        if sample:
            recs.side_info = analyze_queries.side_info_of(db, run_id, sample)
        return recs

    @classmethod
    def from_raw(cls, raw: dict, now: Optional[datetime] = None) -> "RunRecords":
        cfg = raw["run"].get("config") or {}
        examples = {pk: (key, split) for pk, key, split in raw["examples"]}
        return cls(run=raw["run"], search={**SearchConfig().model_dump(), **(cfg.get("search") or {})},
                   budget={**BudgetConfig().model_dump(), **(cfg.get("budget") or {})},
                   executor={**ExecutorConfig().model_dump(), **(cfg.get("executor") or {})},
                   reflection_model=str((cfg.get("reflection_lm") or {}).get("model", "")),
                   objective=str(cfg.get("objective") or ""), examples=examples, candidates=raw["candidates"],
                   steps=raw["steps"], lm_calls=raw["lm_calls"], commands=raw["commands"], scores=raw["scores"],
                   eval_seconds=(float(raw["eval_seconds"][0] or 0.0), int(raw["eval_seconds"][1] or 0)),
                   now=now or datetime.now(timezone.utc))

    def __post_init__(self) -> None:
        self.by_id = {c["id"]: c for c in self.candidates}
        self.val_split = "val" if any(s == "val" for _, s in self.examples.values()) else "train"
        self.val_keys = [k for k, s in self.examples.values() if s == self.val_split]
        self.test_keys = [k for k, s in self.examples.values() if s == "test"]
        self.n_train = sum(1 for _, s in self.examples.values() if s == "train")
        self.seed_id = next((c["id"] for c in self.candidates if c["origin"] == "seed"), None)
        frame = pd.DataFrame(self.scores or [], columns=["c", "pk", "score"]).astype({"score": float})
        pks = {name: [pk for pk, (_, s) in self.examples.items() if s == name] for name in ("train", "val", "test")}
        searched = frame[frame["pk"].isin(pks["train"] + pks["val"])]
        # per example (not the test): how many candidates were scored on it, the lowest and the highest score
        agg = searched.groupby("pk")["score"].agg(["count", "min", "max"])
        self.per_example: dict[str, tuple[int, float, float]] = {
            self.examples[pk][0]: (int(n), lo, hi) for pk, (n, lo, hi) in zip(agg.index, agg.to_numpy().tolist())}
        # per candidate, its mean on the training examples (when they are not the validation set)
        self.train_means: dict[str, tuple[float, int]] = {}
        if self.val_split == "val":
            train = frame[frame["pk"].isin(pks["train"])].groupby("c")["score"].agg(["mean", "count"])
            self.train_means = {c: (m, int(n)) for c, (m, n) in zip(train.index, train.to_numpy().tolist())}
        self._matrix(frame[frame["pk"].isin(pks[self.val_split])])

    def _matrix(self, frame: pd.DataFrame) -> None:
        """The validation matrix: accepted candidates (rows, oldest first) × validation examples, NaN
        where not scored, filled by pandas' codes (a Python loop over 10^5 scores is most of the
        time of a big run). An accepted candidate never validated (an import) has no row."""
        val_pks = [pk for pk, (_, split) in self.examples.items() if split == self.val_split]
        accepted = [c["id"] for c in self.candidates if c["status"] == COMPETING]
        frame = frame[frame["c"].isin(accepted)]
        matrix = np.full((len(accepted), len(val_pks)), np.nan)
        rows = pd.Categorical(frame["c"], categories=accepted).codes
        cols = pd.Categorical(frame["pk"], categories=val_pks).codes
        matrix[rows, cols] = frame["score"].to_numpy(dtype=float)
        scored = ~np.isnan(matrix).all(axis=1) if len(val_pks) else np.zeros(len(accepted), dtype=bool)
        self.val_ids = [c for c, ok in zip(accepted, scored) if ok]
        self.matrix = matrix[scored]

    @property
    def run_id(self) -> str:
        return self.run["id"]

    @property
    def finished(self) -> bool:
        return self.run["status"] in ("completed", "stopped", "failed")

    @property
    def single_task(self) -> bool:
        return self.n_train == 0

    def eligible_rows(self) -> np.ndarray:
        """Row indexes of the matrix that parents are chosen from (accepted, not vetoed)."""
        return np.array([i for i, c in enumerate(self.val_ids) if not self.by_id[c]["vetoed"]], dtype=int)

    def proposals(self) -> list[dict]:
        """The reflective proposals (children written by the reflection LM), oldest first."""
        return [c for c in self.candidates if c["origin"] == "reflection"]

    def max_score(self) -> float:
        """The best score one example can get: ``[search] max_score``, else the best seen (at least 1)."""
        if self.search.get("max_score") is not None:
            return float(self.search["max_score"])
        return max([1.0] + [hi for _, _, hi in self.per_example.values()])

    def side_info_sample(self) -> list[str]:
        """The candidates whose side information is compared: the seed, the best, then the most
        recent tested ones (a bounded sample: side information is the heaviest column)."""
        picked = [self.seed_id, self.run.get("best_candidate_id")]
        picked += [c["id"] for c in reversed(self.candidates) if c["status"] in (COMPETING, "rejected")]
        return list(dict.fromkeys(c for c in picked if c))[:analyze_queries.SIDE_INFO_SAMPLE]
