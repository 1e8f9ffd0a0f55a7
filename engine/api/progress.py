"""The progress bar of a run driven from Python: steps, best score, metric calls, dollars.

``tqdm.auto`` draws a widget in a notebook and text on stderr elsewhere. Everything shown is
read from the database, as the studio reads it.
"""

from __future__ import annotations

import sys

from storage import repo
from storage.db import Database


class ProgressBar:
    def __init__(self, db: Database, run_id: str, enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self.db, self.run_id = db, run_id
        budget = (repo.get_run(db, run_id).config.get("budget") or {}).get("max_metric_calls")
        self.bar = tqdm(total=budget, unit="call", desc=f"run {run_id}", disable=not enabled, mininterval=0.5)
        if enabled:
            from engine.api.result import studio_url

            self.write(f"run {run_id}: watch and steer it in the studio at {studio_url(run_id)}")

    def update(self, waiting: bool = False) -> None:
        """Show the run's counters now; ``waiting``: it is paused and the call waits for a command."""
        run = repo.get_run(self.db, self.run_id)
        self.bar.n = run.metric_calls
        best = f"{run.best_val_mean:.4g}" if run.best_val_mean is not None else "-"
        text = f"step {run.steps_done} · best {best} · ${run.cost_usd:.4f}"
        if waiting:
            text += (f" · {run.status_reason or 'paused'}: waiting for a resume "
                     f"(studio or `python -m engine resume {self.run_id}`)")
        self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(0)  # redraws at most every mininterval

    def write(self, text: str) -> None:
        """A message beside the bar (on stderr, shown even when the bar is off)."""
        self.bar.write(text, file=sys.stderr)

    def close(self) -> None:
        self.update()
        self.bar.close()
