"""Steering without Streamlit: sending a command or a comment and saying what happened, checking
an edit before it is sent, budget changes (and continuing a finished run), degenerate frontier
members, and readable rows for the command log and the step table.

Commands go through ``engine.commands.send_command`` and comments through
``storage.repo.add_comment`` — the same code path as the CLI. Nothing here writes a row itself.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from engine.access import Actor, Refused, check
from engine.commands import AlreadySent, CommandError, send_command
from storage import repo
from storage.db import Database
from storage.errors import NotFound, StorageError
from storage.run_figures import running_seconds
from storage.states import ACTIVE, FINISHED  # noqa: F401  (the studio reads them as iv.ACTIVE, iv.FINISHED)

NO_NAME = ("Enter your name under “Who am I” in the sidebar first: every command and comment records who "
           "sent it.")
ALL = "_all"  # check_edit: a problem with the edit as a whole, not one component
BUDGET_FIELDS = ("max_metric_calls", "max_cost_usd", "max_seconds", "stop_at_score", "max_steps")


@dataclass
class Outcome:
    """What became of a command or comment: shown to the user next to the control they used."""

    ok: bool
    message: str
    command_ids: tuple[int, ...] = ()


def send(db: Database, run_id: str, kind: str, payload: Optional[dict], actor: Optional[Actor], reason: str = "",
         client_token: Optional[str] = None) -> Outcome:
    """Queue one command as ``actor`` (whose role the command layer checks); a refusal comes
    back as a message, never an exception. A repeated ``client_token`` (the same submission
    again) queues nothing and says so."""
    if actor is None or not actor.name.strip():
        return Outcome(False, NO_NAME)
    try:
        cid = send_command(db, run_id, kind, payload or {}, reason=(reason or "").strip(),
                           client_token=client_token, actor=actor)
    except AlreadySent as exc:
        return Outcome(True, f"{kind} already queued (command {exc.command_id}): one click sends one command.",
                       (exc.command_id,))
    except (CommandError, NotFound, Refused) as exc:
        return Outcome(False, str(exc))
    except StorageError as exc:
        return Outcome(False, f"The database did not take the command ({exc}); try again.")
    when = ("cuts the step in flight within seconds" if kind in ("pause", "stop")
            else "asks each changed LM one short question, then applies it" if kind == "lm"
            else "applies it at the next step boundary")
    return Outcome(True, f"{kind} queued (command {cid}); the engine {when}.", (cid,))


def comment(db: Database, run_id: str, candidate_id: str, actor: Optional[Actor], text: str) -> Outcome:
    if actor is None or not actor.name.strip():
        return Outcome(False, NO_NAME)
    if not (text or "").strip():
        return Outcome(False, "The comment is empty: write something first.")
    try:
        check(db, actor, "comment", run_id)
        cand = repo.get_candidate(db, candidate_id)
        if cand.run_id != run_id:
            return Outcome(False, f"candidate {candidate_id} belongs to run {cand.run_id}, not {run_id}")
        repo.add_comment(db, run_id, candidate_id, actor.name.strip(), text.strip())
    except Refused as exc:
        return Outcome(False, str(exc))
    except StorageError as exc:
        return Outcome(False, str(exc))
    return Outcome(True, "Comment posted.")


# ---------------------------------------------------------------- edit and inject


def check_edit(original: dict[str, str], edited: dict[str, str], need_change: bool = True) -> dict[str, str]:
    """Problems of an edit, by component (``ALL`` for the edit as a whole); empty when it can be sent."""
    problems = {name: "This component is empty: write its new text (or cancel the edit)."
                for name, text in edited.items() if not (text or "").strip()}
    if not problems and need_change and all(edited.get(k) == v for k, v in original.items()):
        problems[ALL] = "Nothing changed: edit the text before sending."
    return problems


def content_payload(edited: dict[str, str]) -> str | dict[str, str]:
    """A single-text candidate is sent as its text; a multi-component one as the whole dict."""
    return next(iter(edited.values())) if len(edited) == 1 else dict(edited)


def diff_text(old: str, new: str, name: str) -> str:
    return "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), f"before/{name}", f"after/{name}",
                                          lineterm=""))


# ---------------------------------------------------------------- budgets


def budget_payload(values: dict) -> dict:
    """Form values (0 or empty = no limit) as a ``budget`` command payload: every field, None for no limit."""
    out = {}
    for name in BUDGET_FIELDS:
        v = values.get(name)
        out[name] = None if v in (None, 0, 0.0, "") else (int(v) if name in ("max_metric_calls", "max_steps") else float(v))
    return out


def budget_problems(run: dict, payload: dict) -> list[str]:
    """Limits the run has already reached: continuing with them would stop again at once."""
    used = {"max_metric_calls": (run.get("metric_calls") or 0, "metric calls", "{:,.0f}"),
            "max_cost_usd": (run.get("cost_usd") or 0.0, "dollars", "${:,.4f}"),
            "max_seconds": (running_seconds(run, search_only=True), "seconds", "{:,.0f}"),
            "max_steps": (run.get("steps_done") or 0, "steps", "{:,.0f}")}
    problems = []
    for name, (value, label, fmt) in used.items():
        limit = payload.get(name)
        if limit is not None and value >= limit:
            problems.append(f"The run has already used {fmt.format(value)} {label}: give more than that "
                            f"(or 0 for no limit).")
    stop, best = payload.get("stop_at_score"), run.get("best_val_mean")
    if stop is not None and best is not None and best >= stop:
        problems.append(f"The best candidate already scores {best:.3f} ≥ stop-at-score {stop:g}: raise it, "
                        "or set 0 to never stop early.")
    if not any(payload.get(n) for n in ("max_metric_calls", "max_cost_usd", "max_seconds", "max_steps")):
        problems.append("Set at least one limit (metric calls, dollars, seconds or steps), or the run never ends.")
    return problems


def suggested_budget(run: dict) -> dict:
    """Defaults for continuing a finished run: the same allowance again on top of what is used."""
    b = (run.get("config") or {}).get("budget") or {}
    out = {n: b.get(n) for n in BUDGET_FIELDS}
    if b.get("max_metric_calls"):
        out["max_metric_calls"] = (run.get("metric_calls") or 0) + b["max_metric_calls"]
    if b.get("max_cost_usd"):
        out["max_cost_usd"] = round((run.get("cost_usd") or 0.0) + b["max_cost_usd"], 4)
    if b.get("max_seconds"):
        out["max_seconds"] = running_seconds(run, search_only=True) + b["max_seconds"]
    if b.get("max_steps"):
        out["max_steps"] = (run.get("steps_done") or 0) + b["max_steps"]
    if out.get("stop_at_score") is not None and (run.get("best_val_mean") or 0) >= out["stop_at_score"]:
        out["stop_at_score"] = None
    return out


def continue_run(db: Database, run: dict, budget: dict, actor: Optional[Actor], then: Optional[tuple[str, dict, str]] = None,
                 client_token: Optional[str] = None) -> Outcome:
    """Continue a finished run: a new budget, a resume, then optionally one more command
    (kind, payload, reason) — queued in that order, so the engine applies them in that order.
    With a ``client_token`` each of them is sent under the token plus its kind, so the same
    submission twice queues them once."""
    problems = budget_problems(run, budget)
    if problems:
        return Outcome(False, " ".join(problems))
    ids = []
    steps = [("budget", budget, "continue the run"), ("resume", {}, "continue the run")] + ([then] if then else [])
    for kind, payload, reason in steps:
        out = send(db, run["id"], kind, payload, actor, reason, f"{client_token}:{kind}" if client_token else None)
        if not out.ok:
            done = f" (already queued: {', '.join(map(str, ids))})" if ids else ""
            return Outcome(False, out.message + done, tuple(ids))
        ids += out.command_ids
    return Outcome(True, f"Queued a new budget, a resume{' and your ' + then[0] if then else ''} "
                         f"(commands {', '.join(map(str, ids))}): the engine continues the run.", tuple(ids))


# ---------------------------------------------------------------- what the dashboard shows


def degenerate_members(candidates: pd.DataFrame, matrix: pd.DataFrame, members: list[str]) -> pd.DataFrame:
    """The degenerate ones among the frontier ``members``, by Analyze's definition
    (``engine.analyze.degenerate``) over ``matrix`` (candidates × validation examples, as
    ``analysis.FrontierView.matrix``): they hold the best score on some example only by answering
    alike, or sit below the seed on average. Columns: id, val_mean, seed_mean, why."""
    from engine.analyze.degenerate import degenerate_in_matrix

    cols = ["id", "val_mean", "seed_mean", "why"]
    if candidates.empty or matrix.empty or not members:
        return pd.DataFrame(columns=cols)
    live = candidates[~candidates["vetoed"].astype(bool)]
    seeds = [c for c in live.loc[live["origin"] == "seed", "id"] if c in matrix.index]
    # the matrix as it is (a row per candidate), not a dict per row: 5,000 rows took seconds so
    rows = matrix.loc[[c for c in live["id"] if c in matrix.index]]
    rows = rows[rows.notna().any(axis=1)]
    found = degenerate_in_matrix(list(rows.index), list(rows.columns), rows.to_numpy(dtype="float64"),
                                 reference=seeds[0] if seeds else None)
    means = candidates.set_index("id")["val_mean"]
    seed_mean = float(means[seeds[0]]) if seeds else float("nan")
    rows = [(c, float(means[c]), seed_mean, DEGENERATE_WHY[d.rule]) for c, d in found.items() if c in members]
    return pd.DataFrame(rows, columns=cols).sort_values("val_mean").reset_index(drop=True)


DEGENERATE_WHY = {"constant": "the same score on every example", "trivial_wins": "wins only where such an answer wins",
                  "below_reference": "below the seed on average"}


def describe_payload(kind: str, payload: dict) -> str:
    """The object of a command in a few words (texts are cut: the candidate page shows them whole)."""
    p = payload or {}
    if kind == "budget":
        return ", ".join(f"{k}={'none' if v is None else v}" for k, v in p.items()) or "—"
    if kind in ("edit", "inject"):
        content = p.get("content")
        size = sum(len(t) for t in content.values()) if isinstance(content, dict) else len(content or "")
        what = f"{p.get('candidate_id', '')} " if kind == "edit" else ""
        return f"{what}({size:,} characters)"
    if kind == "feedback":
        text = str(p.get("text", ""))
        return f"{p.get('candidate_id', '')}: {text[:60]}{'…' if len(text) > 60 else ''}"
    if kind == "lm":
        return "; ".join(f"{section}: " + ", ".join(f"{k}={v or 'none'}" for k, v in values.items())
                         for section, values in p.items())
    return str(p.get("candidate_id", ""))


def settled(out: Outcome, log: pd.DataFrame) -> Outcome:
    """The outcome of a queued command once the engine applied or rejected it ("pause applied
    (command 12): run paused"): a "pause queued" note must not outlive the pause. As it was
    while the command is pending, or when it is not in ``log`` (the run's command log)."""
    if not out.ok or not out.command_ids or log.empty:
        return out
    rows = log[log["id"].isin(out.command_ids)]
    if rows.empty or (rows["status"] == "pending").any():
        return out
    last = rows.sort_values("id").iloc[-1]
    ok = bool((rows["status"] == "applied").all())
    return Outcome(ok, f"{last['kind']} {last['status']} (command {last['id']}): {last['result'] or ''}".rstrip(": "),
                   out.command_ids)


def log_rows(log: pd.DataFrame) -> pd.DataFrame:
    """The command log as shown: who, when, what, on what, why, status, result, step."""
    if log.empty:
        return pd.DataFrame(columns=["#", "when", "who", "command", "on", "why", "status", "applied at step", "result"])
    return pd.DataFrame({
        "#": log["id"], "when": log["created_at"], "who": log["author"].replace("", "—"), "command": log["kind"],
        "on": [describe_payload(k, p) for k, p in zip(log["kind"], log["payload"])],
        "why": log["reason"], "status": log["status"], "applied at step": log["applied_step"].astype("Int64"),
        "result": log["result"],
    })


def step_rows(steps: pd.DataFrame, log: pd.DataFrame) -> pd.DataFrame:
    """One row per step, newest first: its parents and why each was chosen, the commands applied
    before it, proposals and acceptances, and predicted vs measured speed-up."""
    cols = ["step", "parents (why chosen)", "commands applied", "proposals", "accepted", "metric calls",
            "seconds", "predicted ×", "measured ×"]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    kinds = dict(zip(log["id"], log["kind"])) if not log.empty else {}
    rows = []
    for s in steps.sort_values("index", ascending=False).itertuples(index=False):
        reasons = s.parent_reasons or {}
        parents = "; ".join(f"{p}: {reasons.get(p, '?')}" for p in dict.fromkeys(s.parent_ids or []))
        applied = ", ".join(f"#{c} {kinds.get(c, '')}".strip() for c in (s.applied_command_ids or []))
        rows.append({"step": s.index, "parents (why chosen)": parents, "commands applied": applied,
                     "proposals": len(s.proposal_ids or []), "accepted": len(s.accepted_ids or []),
                     "metric calls": s.metric_calls, "seconds": s.seconds,
                     "predicted ×": s.predicted_speedup, "measured ×": s.measured_speedup})
    return pd.DataFrame(rows, columns=cols)
