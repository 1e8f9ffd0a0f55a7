"""What ``optimize_anything`` returns: GEPA's ``GEPAResult`` fields, plus Refract's own.

``candidates`` are the run's candidates validated on the whole validation set (accepted, in the
order they were made; vetoed ones included, as they were validated), each in GEPA's dict form:
a run whose seed is one text holds ``{"current_candidate": text}`` (``_str_candidate_key``),
and ``best_candidate`` unwraps it. ``best_idx`` is the index of the highest
``val_aggregate_scores`` (the run's best when several tie), so
``val_aggregate_scores[best_idx] == max(val_aggregate_scores)`` always holds. A candidate whose
validation pass stopped early (it could not reach the frontier, or the budget ran out) is not
among them: ``partially_validated`` lists those, with the mean over the examples they were
evaluated on. ``val_subscores`` and ``per_val_instance_best_candidates`` are keyed by the
validation example's index, as in GEPA; ``frontier`` by its id, Refract's way.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional

STR_CANDIDATE_KEY = "current_candidate"  # GEPA's key for a candidate that is one text
STUDIO_URL = "http://127.0.0.1:8501"


@dataclass
class OptimizeResult:
    candidates: list[dict] = field(default_factory=list)
    parents: list[list[Optional[int]]] = field(default_factory=list)  # [None] for the seed, as GEPA writes it
    val_aggregate_scores: list[float] = field(default_factory=list)
    val_subscores: list[dict[int, float]] = field(default_factory=list)  # validation index -> score, per candidate
    per_val_instance_best_candidates: dict[int, set[int]] = field(default_factory=dict)
    discovery_eval_counts: list[int] = field(default_factory=list)  # metric calls spent when each was made
    val_aggregate_subscores: Optional[list[dict[str, float]]] = None  # mean of each side_info["scores"] objective
    per_objective_best_candidates: Optional[dict[str, set[int]]] = None
    objective_pareto_front: Optional[dict[str, float]] = None
    best_outputs_valset: Optional[dict] = None  # GEPA's; the outputs are in each evaluation's side information
    total_metric_calls: Optional[int] = None
    num_full_val_evals: Optional[int] = None
    run_dir: Optional[str] = None
    seed: Optional[int] = None
    _str_candidate_key: Optional[str] = None
    chosen_idx: Optional[int] = None  # the run's own best, when it is among the top scores
    # Refract's own
    run_id: str = ""
    status: str = ""
    status_reason: str = ""
    test_score: Optional[float] = None  # the best candidate's mean on the held-out test set
    cost_usd: float = 0.0
    frontier: dict[str, dict] = field(default_factory=dict)  # example id -> {"best_score", "candidates": [idx]}
    partially_validated: list[dict] = field(default_factory=list)  # {"candidate", "val_mean", "val_count"}
    url: str = ""

    @property
    def num_candidates(self) -> int:
        return len(self.candidates)

    @property
    def num_val_instances(self) -> int:
        return len(self.per_val_instance_best_candidates)

    @property
    def best_idx(self) -> Optional[int]:
        scores = self.val_aggregate_scores
        if not scores:
            return None
        top = max(scores)
        if self.chosen_idx is not None and self.chosen_idx < len(scores) and scores[self.chosen_idx] == top:
            return self.chosen_idx
        return scores.index(top)

    @property
    def best_candidate(self) -> Any:
        return None if self.best_idx is None else self._unwrap(self.candidates[self.best_idx])

    @property
    def best_score(self) -> Optional[float]:
        return None if self.best_idx is None else self.val_aggregate_scores[self.best_idx]

    @property
    def best_refiner_prompt(self) -> None:
        """GEPA's refiner is not supported: always None."""
        return None

    def _unwrap(self, candidate: dict) -> Any:
        key = self._str_candidate_key
        return candidate[key] if key is not None and key in candidate else candidate

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: sets as sorted lists, keys as they are (JSON turns the indices into strings)."""
        data = asdict(self)
        data["per_val_instance_best_candidates"] = {k: sorted(v) for k, v in self.per_val_instance_best_candidates.items()}
        if self.per_objective_best_candidates is not None:
            data["per_objective_best_candidates"] = {k: sorted(v) for k, v in self.per_objective_best_candidates.items()}
        data["best_idx"] = self.best_idx
        return data

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "OptimizeResult":
        known = {f.name for f in fields(OptimizeResult)}
        data = {k: v for k, v in d.items() if k in known}
        data["val_subscores"] = [{int(k): v for k, v in row.items()} for row in d.get("val_subscores", [])]
        data["per_val_instance_best_candidates"] = {
            int(k): set(v) for k, v in (d.get("per_val_instance_best_candidates") or {}).items()}
        if d.get("per_objective_best_candidates") is not None:
            data["per_objective_best_candidates"] = {k: set(v) for k, v in d["per_objective_best_candidates"].items()}
        return OptimizeResult(**data)

    def candidate_tree_dot(self) -> str:
        """The lineage as Graphviz DOT: one node per candidate (index and score), an edge from each
        parent; frontier members (best on some validation example) filled, the best one bold."""
        on_front = set().union(*self.per_val_instance_best_candidates.values()) if self.per_val_instance_best_candidates else set()
        lines = ["digraph candidates {", "  node [shape=box, style=rounded];"]
        for i, score in enumerate(self.val_aggregate_scores):
            style = ["rounded"] + (["filled"] if i in on_front else []) + (["bold"] if i == self.best_idx else [])
            lines.append(f'  {i} [label="{i}\\n{score:.4g}", style="{",".join(style)}"'
                         + (', fillcolor="#cfe8ff"' if i in on_front else "") + "];")
        for i, row in enumerate(self.parents):
            lines.extend(f"  {p} -> {i};" for p in row if p is not None)
        lines.append("}")
        return "\n".join(lines)

    def candidate_tree_html(self) -> str:
        """A self-contained HTML page of the lineage (nested lists, no scripts, no network):
        each candidate's index, score and text, escaped."""
        children: dict[Optional[int], list[int]] = {}
        for i, row in enumerate(self.parents):
            children.setdefault(next((p for p in row if p is not None), None), []).append(i)

        def branch(i: int) -> str:
            value = self._unwrap(self.candidates[i])
            text = html.escape(value if isinstance(value, str) else "\n\n".join(f"{k}:\n{v}" for k, v in value.items()))
            mark = " (best)" if i == self.best_idx else ""
            below = "".join(branch(c) for c in children.get(i, []))
            return (f"<li><b>{i}</b> · {self.val_aggregate_scores[i]:.4g}{mark}<pre>{text}</pre>"
                    + (f"<ul>{below}</ul>" if below else "") + "</li>")

        roots = "".join(branch(i) for i in children.get(None, []))
        return ("<!doctype html><html><head><meta charset='utf-8'><title>Candidates</title>"
                "<style>pre{white-space:pre-wrap;margin:.2em 0 .6em}</style></head>"
                f"<body><h1>Candidates of run {html.escape(self.run_id)}</h1><ul>{roots}</ul></body></html>")


GEPAResult = OptimizeResult  # GEPA's name for it


def studio_url(run_id: str) -> str:
    """The run's dashboard (REFRACT_STUDIO_URL when the studio is served elsewhere)."""
    import os

    base = os.environ.get("REFRACT_STUDIO_URL", STUDIO_URL).rstrip("/")
    return f"{base}/dashboard?run={run_id}"


def build_result(db, run_id: str, run_dir: Optional[str] = None) -> OptimizeResult:
    """The result of a run as it stands in the database."""
    from engine.api.result_data import collect

    return collect(db, run_id, run_dir)
