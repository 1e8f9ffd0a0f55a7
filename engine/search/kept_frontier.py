"""The frontier the engine keeps in the database for the studio (table ``frontier``, and each
candidate's ``frontier_examples`` / ``frontier_entries``).

Why: computing the frontier from the evaluations reads every validation score, 2.5 M of them at
10,000 candidates × 500 examples, which no page can do in a second. The engine holds those
scores in memory anyway (``PoolState``), so it keeps the frontier up to date as facts arrive — a
validation pass adds a candidate, a veto removes one, an unveto adds it back — and writes only
what changed (``storage.frontier.write_frontier``): a few hundred rows for the page to read.

Entries are those of ``engine.search.frontier_types``: ``(example key, None)`` for every
validation example, always (the studio's heatmap is per example), and with a frontier type other
than ``instance`` the entries of that type too (``(None, objective)`` means, ``(example,
objective)`` pairs). Per entry: the best value of the eligible candidates, who holds it (ties
within ``TOL``, as ``compute_frontier``: a value more than ``TOL`` above the best replaces the
holders) and the lowest value. Per candidate: how many examples and how many entries of the
run's type it holds.

Contract: ``add`` and ``remove`` change the frontier as ``compute_frontier`` over the eligible
candidates would have it (up to scores closer than ``TOL`` yet unequal, which it groups by
arrival order, ``compute_frontier`` by id); ``take_changes`` returns what changed since the last
call and forgets it. Not thread-safe: ``PoolState`` calls it under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from engine.search.frontier_types import extra_entries

TOL = 1e-9
Key = tuple[Optional[str], Optional[str]]  # (example key, objective name), one of them may be None


@dataclass
class Entry:
    best: float
    lowest: float
    holders: set[str] = field(default_factory=set)


@dataclass
class Changes:
    """What to write: entries by key as (best, lowest, holders) (None: the entry is gone, no
    eligible candidate has it), candidates' (examples, entries) held; ``full``: every entry and
    count is here, and rows and counts not named are to be cleared (after a rebuild). Plain
    values, not the live entries: they are written outside the pool's lock."""

    entries: dict[Key, Optional[tuple[float, float, int]]]
    counts: dict[str, tuple[int, int]]
    full: bool = False

    def __bool__(self) -> bool:
        return bool(self.entries or self.counts or self.full)


class KeptFrontier:
    """The frontier over the eligible candidates, kept incrementally (see the module)."""

    def __init__(self, frontier_type: str, scores: Mapping[str, Mapping[str, float]]) -> None:
        self.frontier_type = frontier_type
        self.scores = scores  # PoolState.scores, shared: candidate id -> example key -> score
        self.extra: dict[str, dict[Key, float]] = {}  # candidate id -> its entries beyond the scores
        self.eligible: set[str] = set()
        self.entries: dict[Key, Entry] = {}
        self.held: dict[str, list[int]] = {}  # candidate id -> [examples held, entries of the type held]
        self._dirty: set[Key] = set()
        self._dirty_counts: set[str] = set()
        self._full = False

    # -- what counts -------------------------------------------------------------------

    def typed(self, key: Key) -> bool:
        """Whether an entry belongs to the run's frontier type (parents are sampled over those)."""
        example, objective = key
        if objective is None:
            return self.frontier_type in ("instance", "hybrid")
        if example is None:
            return self.frontier_type in ("objective", "hybrid")
        return self.frontier_type == "cartesian"

    def _values(self, cid: str) -> dict[Key, float]:
        out: dict[Key, float] = {(k, None): v for k, v in self.scores.get(cid, {}).items()}
        out.update(self.extra.get(cid, {}))
        return out

    def _value(self, cid: str, key: Key) -> Optional[float]:
        example, objective = key
        if objective is None:
            return self.scores.get(cid, {}).get(example)
        return self.extra.get(cid, {}).get(key)

    def _hold(self, cid: str, key: Key, delta: int) -> None:
        counts = self.held.setdefault(cid, [0, 0])
        if key[1] is None:
            counts[0] += delta
        if self.typed(key):
            counts[1] += delta
        self._dirty_counts.add(cid)

    # -- changes -----------------------------------------------------------------------

    def add(self, cid: str, objectives: Optional[Mapping[str, Mapping[str, float]]] = None) -> None:
        """``cid`` competes (validated, or un-vetoed) with its scores in ``scores`` and its
        ``objectives`` (example key -> name -> value)."""
        self.extra[cid] = extra_entries(objectives or {}, self.frontier_type)
        self.eligible.add(cid)
        for key, v in self._values(cid).items():
            e = self.entries.get(key)
            self._dirty.add(key)
            if e is None:
                self.entries[key] = Entry(v, v, {cid})
                self._hold(cid, key, +1)
                continue
            if v > e.best + TOL:
                for h in e.holders:
                    self._hold(h, key, -1)
                e.best, e.holders = v, {cid}
                self._hold(cid, key, +1)
            elif v >= e.best - TOL and cid not in e.holders:
                e.holders.add(cid)
                self._hold(cid, key, +1)
            e.lowest = min(e.lowest, v)

    def remove(self, cid: str) -> None:
        """``cid`` no longer competes (vetoed): every entry it held or was the lowest on is
        looked at again over the candidates left."""
        if cid not in self.eligible:
            return
        self.eligible.discard(cid)
        for key, v in self._values(cid).items():
            e = self.entries.get(key)
            if e is not None and (cid in e.holders or v <= e.lowest):
                self._rescan(key)

    def rebuild(self, eligible: Iterable[str], objectives: Mapping[str, Mapping[str, Mapping[str, float]]]) -> None:
        """From nothing, over ``eligible`` (a run resumed from the database); the next changes
        are ``full``."""
        self.entries.clear()
        self.held.clear()
        self.eligible.clear()
        self.extra.clear()
        for cid in sorted(eligible):  # by id, as compute_frontier
            self.add(cid, objectives.get(cid, {}))
        self._full = True

    def _rescan(self, key: Key) -> None:
        values = {c: v for c in self.eligible if (v := self._value(c, key)) is not None}
        old = self.entries.pop(key)
        self._dirty.add(key)
        if values:
            best = max(values.values())
            self.entries[key] = Entry(best, min(values.values()), {c for c, v in values.items() if v >= best - TOL})
        new = self.entries[key].holders if key in self.entries else set()
        for h in old.holders - new:
            self._hold(h, key, -1)
        for h in new - old.holders:
            self._hold(h, key, +1)

    def counts(self, cid: str) -> tuple[int, int]:
        """(examples, entries of the run's type) that ``cid`` holds the best value on."""
        examples, entries = self.held.get(cid, (0, 0))
        return examples, entries

    def take_changes(self) -> Changes:
        """What changed since the last call (everything after a ``rebuild``), then forgotten."""
        if self._full:
            keys, cids = set(self.entries), set(self.held)
        else:
            keys, cids = self._dirty, self._dirty_counts
        snap = {k: (e.best, e.lowest, len(e.holders)) if (e := self.entries.get(k)) else None for k in keys}
        out = Changes(snap, {c: self.counts(c) for c in cids}, self._full)
        self._dirty, self._dirty_counts, self._full = set(), set(), False
        return out


def keep_from_records(db, run_id: str) -> None:
    """Write a run's kept frontier, and its candidates' lowest and highest validation scores, from
    its records, as a resumed engine writes them at its start: for a run that no engine runs (an
    imported one), so that the studio reads it as it reads the others."""
    from engine.state import PoolState
    from storage import frontier as frontier_rows, repo

    run = repo.get_run(db, run_id)
    examples = repo.get_examples(db, run_id)
    val_keys = [e.key for e in examples if e.split == "val"] or [e.key for e in examples if e.split == "train"]
    state = PoolState.load(db, run_id, val_keys, before_step=10 ** 9)  # a finished run: every candidate counts
    # the studio's reading of a config without the key (a stored config always has it)
    state.frontier_type = ((run.config or {}).get("search") or {}).get("frontier", "instance")
    state.keep_frontier()
    frontier_rows.set_val_range(db, {cid: (min(s.values()), max(s.values())) for cid, s in state.scores.items()
                                     if s and state.candidates[cid].val_min is None})
    changes, version = state.frontier_changes()
    frontier_rows.write_frontier(db, run_id, changes.entries, changes.counts, version, changes.full)
