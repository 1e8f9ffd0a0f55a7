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
from typing import Iterable, Optional

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
    val_rows: list[tuple]  # (candidate_id, example_pk, score) of the accepted candidates on the validation split
    per_example: dict[str, tuple[int, float, float]]  # non-test example key -> (candidates, lowest, highest)
    train_means: dict[str, tuple[float, int]]  # candidate -> (mean, evaluations) on the training split
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
                   steps=raw["steps"], lm_calls=raw["lm_calls"], commands=raw["commands"], val_rows=raw["val_scores"],
                   per_example={examples[pk][0]: (n, lo, hi) for pk, n, lo, hi in raw["per_example"]
                                if pk in examples and examples[pk][1] != "test"},
                   train_means={c: (float(m), n) for c, m, n in raw["train_means"]},
                   eval_seconds=(float(raw["eval_seconds"][0] or 0.0), int(raw["eval_seconds"][1] or 0)),
                   now=now or datetime.now(timezone.utc))

    def __post_init__(self) -> None:
        self.by_id = {c["id"]: c for c in self.candidates}
        self.val_split = "val" if any(s == "val" for _, s in self.examples.values()) else "train"
        self.val_keys = [k for k, s in self.examples.values() if s == self.val_split]
        self.test_keys = [k for k, s in self.examples.values() if s == "test"]
        self.n_train = sum(1 for _, s in self.examples.values() if s == "train")
        self.seed_id = next((c["id"] for c in self.candidates if c["origin"] == "seed"), None)
        # the validation matrix: accepted candidates (rows, oldest first) × validation examples, NaN where not
        # scored; filled by pandas' codes (a Python loop over 10^5 scores is most of the time of a big run)
        order = {c["id"]: i for i, c in enumerate(self.candidates)}
        self.val_ids = sorted({cid for cid, _, _ in self.val_rows if cid in order}, key=order.get)
        val_pks = [pk for pk, (_, split) in self.examples.items() if split == self.val_split]
        self.matrix = np.full((len(self.val_ids), len(val_pks)), np.nan)
        if self.val_rows:
            frame = pd.DataFrame(self.val_rows, columns=["c", "pk", "score"])
            frame = frame[frame["c"].isin(self.val_ids) & frame["pk"].isin(val_pks)]
            rows = pd.Categorical(frame["c"], categories=self.val_ids).codes
            cols = pd.Categorical(frame["pk"], categories=val_pks).codes
            self.matrix[rows, cols] = frame["score"].to_numpy(dtype=float)

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

    def scores_of(self, ids: Iterable[str]) -> dict[str, dict[str, float]]:
        """{candidate: {validation example: score}} of some rows of the matrix (what it scored on)."""
        index = {c: i for i, c in enumerate(self.val_ids)}
        keys, out = np.array(self.val_keys, dtype=object), {}
        for cid in ids:
            values = self.matrix[index[cid]]
            scored = ~np.isnan(values)
            out[cid] = dict(zip(keys[scored].tolist(), values[scored].tolist()))
        return out

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
