"""Analyze: what is wrong with a run and what to do, from the run's own records.

Layer 1 (this package, no LM): ``analyze(db, run_id)`` computes findings (``finding.Finding``),
each with its evidence, a severity and the commands that act on it, most severe first and
causes before symptoms. Layer 2 (``diagnosis``): the run's reflection LM writes the two or three
things most worth doing from those findings alone, as a draft that cites them. The studio's
Analyze panel, ``python -m engine analyze`` and the report show both.
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional

from storage.db import Database

from engine.analyze import evaluator_checks, pace, search_checks
from engine.analyze.finding import Finding, order
from engine.analyze.records import RunRecords

CHECKS = (
    evaluator_checks.evaluator_signal, search_checks.proposal_findings, evaluator_checks.noisy_gains,
    search_checks.degenerate, evaluator_checks.small_valset, search_checks.no_signal_minibatches,
    evaluator_checks.constant_side_info, evaluator_checks.overfitting, search_checks.stalled,
    search_checks.neglected, pace.bound, pace.forecast,
)


def analyze_records(recs: RunRecords) -> list[Finding]:
    """Every check over one run's records, ordered (``finding.order``)."""
    return order([f for check in CHECKS for f in check(recs)])


def analyze(db: Database, run_id: str, now: Optional[datetime] = None) -> list[Finding]:
    """The findings of run ``run_id``; ``storage.errors.NotFound`` for an unknown run."""
    recs = RunRecords.load(db, run_id, now)
    if recs is None:
        from storage.errors import NotFound

        raise NotFound(f"run: no run with id {run_id!r}")
    return analyze_records(recs)
