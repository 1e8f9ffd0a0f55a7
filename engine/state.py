"""The engine's in-memory view of a run's candidate pool, rebuilt from the database.

Only accepted candidates (and pinned ones) with validation scores compete in selection;
vetoed candidates never do. Everything here can be derived from the database, which is what
makes a killed run resumable: ``PoolState.load`` is all a restarted worker needs.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from storage import repo
from storage.db import Database
from storage.models import Candidate
from storage.states import CandidateStatus, Cause, Origin

from engine.search.frontier import Frontier, compute_frontier, mean, mean_scores
from engine.search.kept_frontier import Changes, KeptFrontier
from engine.search.lineage import ancestors
from engine.search.frontier_types import objective_scores
from engine.search.selection import PoolView

SINGLE = "text"  # the component name of a single-text candidate
ENGINE_MADE = (Origin.REFLECTION, Origin.MERGE, Origin.SIBLING_MERGE)  # made within a step (redone if it is)


def content_hash(content: dict) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _nothing_new(c: Candidate) -> bool:
    """An answer that repeated an earlier proposal for its parent, or gave no new version of it (its
    text unchanged, or only a `Change:` line)."""
    return c.cause in (Cause.REPEAT, Cause.UNUSABLE)


def deterministic_id(*parts: Any) -> str:
    """Ids of engine-made candidates are derived from (run, step, slot…), so a resumed step
    finds the rows it already wrote instead of paying for them again."""
    return "c" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:15]


def to_evaluator(content: dict, single_text: bool) -> Any:
    return content[SINGLE] if single_text else dict(content)


@dataclass
class PoolState:
    val_keys: list[str]
    scores: dict[str, dict[str, float]] = field(default_factory=dict)  # accepted id -> key -> score
    candidates: dict[str, Candidate] = field(default_factory=dict)  # every candidate of the run
    full: set[str] = field(default_factory=set)  # ids validated on every validation example
    last_chosen: dict[str, int] = field(default_factory=dict)
    frontier_version: int = 0
    claimed: set[tuple[str, str]] = field(default_factory=set)  # (parent id, content hash) proposed
    lock: threading.RLock = field(default_factory=threading.RLock)
    objectives: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # id -> key -> side_info["scores"]
    frontier_type: str = "instance"  # [search] frontier: what selection's frontier is kept over
    top_score: Optional[float] = None  # the highest validation score of any candidate (minibatch.top_score)
    # and the lowest: with only the highest, a run whose seed scored 0 everywhere and whose first
    # child scored 1 on every example of its minibatch had no known "right" (the top score needs a
    # lower one seen), so that child's minibatches were never drawn again when it aced them
    low_score: Optional[float] = None
    # the frontier written for the studio (engine.search.kept_frontier), once ``keep_frontier``
    # started it; and the lock that keeps its writes in the order of its changes
    kept: Optional[KeptFrontier] = None
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def load(cls, db: Database, run_id: str, val_keys: list[str], before_step: int) -> "PoolState":
        """Rebuild from the database; candidates of an unfinished step (``step >= before_step``
        made by reflection or merge) are left out: the step is redone, finding their rows."""
        state = cls(val_keys=val_keys)
        pk_to_key = {ex.pk: ex.key for ex in repo.get_examples(db, run_id)}
        valset = set(val_keys)
        for cand in repo.list_candidates(db, run_id):
            state.candidates[cand.id] = cand
        accepted = [c for c in state.candidates.values()
                    if c.status == CandidateStatus.ACCEPTED and not (c.origin in ENGINE_MADE and c.step >= before_step)]
        for ev in repo.evaluations_for(db, run_id, [c.id for c in accepted]):
            key = pk_to_key.get(ev.example_pk)
            if key in valset:
                state.scores.setdefault(ev.candidate_id, {})[key] = ev.score
                state.top_score = ev.score if state.top_score is None else max(state.top_score, ev.score)
                state.low_score = ev.score if state.low_score is None else min(state.low_score, ev.score)
                if objective_scores(ev.side_info):
                    state.objectives.setdefault(ev.candidate_id, {})[key] = objective_scores(ev.side_info)
        for c in accepted:
            state.scores.setdefault(c.id, {})
            if len(state.scores[c.id]) == len(val_keys):
                state.full.add(c.id)
        for step in repo.list_steps(db, run_id):
            for pid in step.parent_ids:
                state.last_chosen[pid] = max(state.last_chosen.get(pid, -1), step.index)
        state.frontier_version = repo.get_run(db, run_id).frontier_version  # it goes on counting
        return state

    # -- the frontier kept for the studio ------------------------------------------------

    def keep_frontier(self) -> None:
        """Start keeping the frontier of ``frontier_type`` over the pool as it is (a run that
        starts or resumes); its first ``frontier_changes`` are every entry."""
        with self.lock:
            self.kept = KeptFrontier(self.frontier_type, self.scores)
            self.kept.rebuild([c for c in self.eligible_ids() if self.scores[c]], self.objectives)

    def set_eligible(self, cid: str, eligible: bool) -> None:
        """A veto (False) or an unveto (True) of ``cid`` was applied: the kept frontier follows,
        and the frontier version moves when it can have changed."""
        with self.lock:
            if self.kept is not None and self.scores.get(cid):
                if eligible:
                    self.kept.add(cid, self.objectives.get(cid, {}))
                else:
                    self.kept.remove(cid)
                self.frontier_version += 1

    def frontier_changes(self) -> tuple[Changes, int]:
        """What changed in the kept frontier since the last call, and the frontier version it
        describes (call it holding ``write_lock`` and write what it returns before releasing it)."""
        with self.lock:
            return (self.kept.take_changes() if self.kept is not None else Changes({}, {})), self.frontier_version

    # -- derived views -------------------------------------------------------------------

    def eligible_ids(self) -> list[str]:
        with self.lock:
            return [cid for cid in self.scores if not self.candidates[cid].vetoed]

    def view(self, step: int) -> PoolView:
        with self.lock:
            eligible = {cid: dict(self.scores[cid]) for cid in self.eligible_ids() if self.scores[cid]}
            pinned = {cid for cid, c in self.candidates.items() if c.pinned and not c.vetoed and cid in self.scores}
            order = {cid: self._tie_key(cid) for cid in eligible}
            objectives = {cid: self.objectives.get(cid, {}) for cid in eligible}
            seeds = [c for c in self.candidates.values() if c.origin == Origin.SEED and c.id in self.scores]
            seed = min(seeds, key=lambda c: (mean(self.scores[c.id].values()), c.content_hash), default=None)
            misses, no_new_text = self._rut_counts(step)
            return PoolView(scores=eligible, order=order, pinned=pinned, last_chosen=dict(self.last_chosen), step=step,
                            objectives=objectives, frontier_type=self.frontier_type,
                            seed_scores=dict(self.scores[seed.id]) if seed else {},
                            misses=misses, no_new_text=no_new_text,
                            heirs=self._heirs(eligible))

    def _heirs(self, eligible) -> dict[str, str]:
        """Per eligible candidate its nearest eligible ancestor along first parents (the seed for
        a first child): where a rut's weight goes (``selection.ParetoSelector``)."""
        out = {}
        for cid in eligible:
            seen, c = {cid}, self.candidates.get(cid)
            while c is not None and c.parent_ids and c.parent_ids[0] not in seen:
                pid = c.parent_ids[0]
                if pid in eligible:
                    out[cid] = pid
                    break
                seen.add(pid)
                c = self.candidates.get(pid)
        return out

    def frontier(self) -> Frontier:
        with self.lock:
            return compute_frontier({c: self.scores[c] for c in self.eligible_ids()})

    def best(self) -> tuple[Optional[str], Optional[float]]:
        """The best fully validated, non-vetoed candidate by mean validation score (ties: see
        ``_tie_key``)."""
        with self.lock:
            full = {c: self.scores[c] for c in self.eligible_ids() if c in self.full}
            means = mean_scores(full)
            if not means:
                return None, None
            cid = max(sorted(means, key=lambda c: (self._tie_key(c), c)), key=lambda c: means[c])
            return cid, means[cid]

    def _rut_counts(self, before_step: int) -> tuple[dict[str, int], dict[str, int]]:
        """Per parent, for the selection's rut weight (``selection.rut_weight``): how many of its latest
        reflective children (of steps before ``before_step``, by step) did not improve, counted back
        to its last child that did, and how many of those brought no new text (a repeat of an earlier
        proposal for it, or its own text unchanged).

        Skipped proposals (no LM call) do not count; an answer that was no new version (unchanged, no
        fence) does: on a real-LM prompt task the local model answered one parent's prompt unchanged
        24 times in a row, and that parent kept every slot. An answer with no new text halves the
        weight at once: on the frozen regex task a tired best lent its weight to the seed, whose
        reflections wrote one text again and again (18 and 22 times on two seeds), two LM calls
        each, refused before any test."""
        missed = self._latest_misses(before_step)
        return ({pid: len(kids) for pid, kids in missed.items()},
                {pid: sum(map(_nothing_new, kids)) for pid, kids in missed.items()})

    def _latest_misses(self, before_step: int) -> dict[str, list[Candidate]]:
        """Per parent, the children ``_rut_counts`` counts, latest first."""
        children: dict[str, list[Candidate]] = {}
        for c in self.candidates.values():
            answered = c.content or (c.lm_call_id is not None and c.cause in (Cause.UNUSABLE, Cause.NO_FENCE))
            if c.origin == Origin.REFLECTION and c.step < before_step and c.parent_ids and answered:
                children.setdefault(c.parent_ids[0], []).append(c)
        out = {}
        for pid, kids in children.items():
            kids.sort(key=lambda c: (c.step, c.content_hash))
            missed = []
            for c in reversed(kids):
                if c.improved or c.status == CandidateStatus.ACCEPTED:
                    break
                missed.append(c)
            out[pid] = missed
        return out

    def _tie_key(self, cid: str) -> tuple[int, str]:
        """Which of two candidates with the same validation scores is preferred (lower first):
        the one with more ancestors, then the lower content hash. A descendant that matched its
        ancestor's scores holds the ancestor's text plus a change that improved on a minibatch;
        an asynchronous merge of the best with three more children, kept as the best's equal,
        otherwise lost to the best by hash, and the next proposals forked the shorter text.
        Never the id, which hashes the run id: two runs with one seed choose alike."""
        return (-len(ancestors(self.candidates, cid)), self.candidates[cid].content_hash)

    def add_scored(self, cand: Candidate, scores: dict[str, float],
                   objectives: Optional[dict[str, dict[str, float]]] = None) -> None:
        with self.lock:
            self.candidates[cand.id] = cand
            self.scores[cand.id] = dict(scores)
            if scores:
                top, low = max(scores.values()), min(scores.values())
                self.top_score = top if self.top_score is None else max(self.top_score, top)
                self.low_score = low if self.low_score is None else min(self.low_score, low)
            self.objectives[cand.id] = {k: v for k, v in (objectives or {}).items() if v}
            if len(scores) == len(self.val_keys):
                self.full.add(cand.id)
            if self.kept is not None and scores and not cand.vetoed:
                self.kept.add(cand.id, self.objectives[cand.id])
            self.frontier_version += 1

    def tried_texts(self, parent_id: str, before_step: int) -> list[str]:
        """Texts proposed for this parent in the steps before ``before_step`` (whatever became
        of them), oldest first. Not the current step's: which sibling finishes first depends on
        thread timing, and a sibling's text seen by one proposal and not by the other would make
        the run differ between two runs with one seed (its prompt, and the component it rewrites,
        as it did under load). A proposal that failed before it had a text tried nothing."""
        return [c.content[c.component] for c in self._tried(parent_id, before_step)]

    def tried_outcomes(self, parent_id: str, before_step: int) -> list[tuple[str, str]]:
        """The texts of ``tried_texts`` that were tested, each once, with what became of it
        ("no improvement on the minibatch (…); worst: …", "improved", …), for the prompt. A text
        `validate` refused is left out: shown as a version, a small model copied it (a fence
        holding only its `Change:` line, five times in a row)."""
        outcome: dict[str, str] = {}
        for c in self._tried(parent_id, before_step):
            if c.status != CandidateStatus.FAILED:
                outcome.setdefault(c.content[c.component], c.reason)
        return list(outcome.items())

    def _tried(self, parent_id: str, before_step: int) -> list[Candidate]:
        with self.lock:
            tried = [c for c in self.candidates.values()
                     if parent_id in c.parent_ids and c.origin == "reflection" and c.component
                     and c.content.get(c.component) and c.step < before_step]
        # by step, then content: not by the order racing proposal threads finished in, so the
        # prompt (and with it the LM cache key) is the same in every run with this seed
        tried.sort(key=lambda c: (c.step, c.content_hash, c.id))
        return tried

    def claim(self, parent_id: str, chash: str) -> bool:
        """Reserve a proposal's text for a parent; False if it was already proposed for that
        parent (earlier, or by a sibling running at the same time)."""
        with self.lock:
            known = {c.content_hash for c in self.candidates.values() if parent_id in c.parent_ids}
            parent = self.candidates.get(parent_id)
            if chash in known or (parent_id, chash) in self.claimed or (parent and parent.content_hash == chash):
                return False
            self.claimed.add((parent_id, chash))
            return True
