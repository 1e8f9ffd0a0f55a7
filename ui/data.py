"""The studio's cached reads: ``st.cache_data`` wrappers around ``storage.queries``.

What the cache does not guarantee: a value may be up to ``ttl`` seconds old. Heavy reads
(candidates, validation scores, steps) are keyed by a *version token* taken from the run row
(metric calls, proposals, steps, frontier version, status), so they are re-read only when
the run has changed, and a refresh of an idle run costs one cheap query. Every function
returns plain data (dicts, DataFrames) — never ORM objects.
"""

from __future__ import annotations

import functools
import os
import threading

import pandas as pd
import streamlit as st

from storage import frontier as frontier_rows, queries
from storage.states import ACTIVE as ACTIVE_STATES
from ui import analysis
from ui.frontier_view import degenerate, is_kept, kept_view
from storage.db import Database, default_url, open_db

LIVE_TTL = 1.0  # seconds: the live fragment refreshes every 2 s, so each refresh reads the run row once
STEER_TTL = 0.25  # commands and comments: live fragments refresh every 0.5 s, so others see them within 2 s
HEAVY_TTL = 600.0  # token-keyed entries stay until the run changes (or ten minutes pass)


def db_url() -> str:
    return os.environ.get("REFRACT_DB") or default_url()


@st.cache_resource(show_spinner=False)
def _db(url: str) -> Database:
    return open_db(url)


def get_db() -> Database:
    return _db(db_url())


def version_token(run: dict) -> str:
    """Changes whenever the run records something the dashboard shows (an applied pin or veto
    changes no counter of the run: ``commands_done`` is in the token for them)."""
    return ":".join(str(run.get(k)) for k in ("metric_calls", "proposals_total", "steps_done", "frontier_version",
                                                "status", "best_candidate_id", "cost_usd", "commands_done"))


def frontier_token(run: dict) -> str:
    """Changes when the frontier can: a validation pass ended (the run's ``frontier_version``,
    bumped by each), a command was applied (a veto), the status or the best changed. Not with
    each metric call: at 10,000 candidates × 500 examples the frontier is 2.5 M scores, and a live
    run records a metric call many times a second."""
    return ":".join(str(run.get(k)) for k in ("frontier_version", "status", "best_candidate_id", "commands_done"))


_REUSED = "_refract_reused"  # session_state: this session's token-keyed reads, as last unpickled


def reused(fn):
    """A token-keyed cached read (``fn(url, run_id, token, *rest)``) whose value, once
    ``st.cache_data`` has unpickled it, is reused by the rest of the script run and the fragment
    reruns after it while the token is the same: a dashboard asked for one run's candidates and
    steps eight times a run, and each hit unpickled a copy (0.7 s at 10,000 candidates and 2,500
    steps). One value per read and run: a new token replaces the old. ``forget_reused`` (each
    full script run, ``app.py``) starts afresh, so a cleared cache is read again as before.
    Read-only: the pages never modify the frames they get."""
    @functools.wraps(fn)
    def wrapper(url: str, run_id: str, token: str, *rest):
        try:
            memo = st.session_state.setdefault(_REUSED, {})
        except Exception:  # noqa: BLE001 -- outside a script run (a benchmark's direct call): no reuse
            return fn(url, run_id, token, *rest)
        key = (fn.__name__, url, run_id, rest)
        hit = memo.get(key)
        if hit is not None and hit[0] == token:
            return hit[1]
        value = fn(url, run_id, token, *rest)
        memo[key] = (token, value)
        return value

    wrapper.clear = fn.clear
    return wrapper


def forget_reused() -> None:
    """A full script run starts with no reused reads (``reused``)."""
    st.session_state.pop(_REUSED, None)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def run_overview(url: str, run_id: str) -> dict | None:
    return queries.run_overview(_db(url), run_id)


@reused
@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=64)
def candidate_rows(url: str, run_id: str, token: str) -> pd.DataFrame:
    return queries.candidate_rows(_db(url), run_id)


def _frontier_key(run: dict) -> tuple:
    """``frontier_view``'s arguments after the url for ``run``: id, token, kept, frontier type."""
    frontier_type = ((run.get("config") or {}).get("search") or {}).get("frontier", "instance")
    return run["id"], frontier_token(run), is_kept(run), frontier_type


def frontier_of(url: str, run: dict) -> analysis.FrontierView:
    """The run's frontier as it stands (``frontier_view`` keyed for ``run``)."""
    return frontier_view(url, *_frontier_key(run))


def frontier_matrix_of(url: str, run: dict, ids: list[str], examples: list[str] | None = None) -> pd.DataFrame:
    """``frontier_matrix`` of ``ids`` (on ``examples``, else all) keyed for ``run``."""
    return frontier_matrix(url, *_frontier_key(run), tuple(ids), tuple(examples) if examples is not None else None)


def degenerate_of(url: str, run: dict) -> pd.DataFrame:
    """``degenerate_members`` keyed for ``run``."""
    return degenerate_members(url, *_frontier_key(run))


@reused
@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=16)
def frontier_view(url: str, run_id: str, token: str, kept: bool, frontier_type: str) -> analysis.FrontierView:
    """The run's frontier, read again only when it can have changed (``token`` is a
    ``frontier_token``). ``kept``: from the rows the engine keeps (two statements, a few hundred
    rows: ``ui.frontier_view``); else computed from the validation scores (a run recorded by an
    older release: read incrementally, ``val_scores``), the small candidates × examples matrix
    cached rather than the long table of evaluations."""
    if kept:
        entries, aggregates = frontier_rows.kept_frontier(_db(url), run_id)
        return kept_view(entries, aggregates, frontier_type)
    cands = candidate_rows(url, run_id, token)
    view = analysis.frontier(val_scores(url, run_id, token), cands)
    view.aggregates = cands.loc[cands["status"] == "accepted", list(frontier_rows.FRONTIER_CANDIDATE_COLUMNS)]
    if frontier_type == "instance":
        return view
    typed = analysis.typed_members(view, queries.val_objectives(_db(url), run_id), frontier_type)
    typed.aggregates = view.aggregates
    return typed


@reused
@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=32)
def frontier_matrix(url: str, run_id: str, token: str, kept: bool, frontier_type: str,
                    ids: tuple[str, ...], examples: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The validation scores of the candidates ``ids`` (``frontier_view``'s arguments first) on
    ``examples`` (else all) as a candidates × examples matrix, in that order (what a heatmap
    draws): one read of those cells only, when the frontier is kept."""
    if not kept:
        view = frontier_view(url, run_id, token, False, frontier_type)
        rows = view.matrix.reindex([c for c in ids if c in view.matrix.index])
        return rows if examples is None else rows.reindex(columns=list(examples))
    long = frontier_rows.scores_of(_db(url), run_id, ids, examples)
    if long.empty:
        return pd.DataFrame()
    wide = long.pivot_table(index="candidate_id", columns="example", values="score", aggfunc="max")
    wide = wide.reindex(columns=sorted(wide.columns, key=analysis.natural_key))
    return wide.reindex([c for c in ids if c in wide.index])


@reused
@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=16)
def degenerate_members(url: str, run_id: str, token: str, kept: bool, frontier_type: str) -> pd.DataFrame:
    """The frontier's degenerate members (id, val_mean, seed_mean, why), with ``frontier_view``'s
    arguments: from the kept frontier and the candidates' aggregates (``ui.frontier_view.degenerate``:
    reading scores only where they decide), or from the whole matrix of an older run."""
    view = frontier_view(url, run_id, token, kept, frontier_type)
    if not kept:
        from ui.interventions import degenerate_members as over_matrix

        return over_matrix(candidate_rows(url, run_id, token), view.matrix, list(view.best_on[view.best_on > 0].index))
    db = _db(url)

    def rows(ids: list[str]) -> dict:
        long = frontier_rows.scores_of(db, run_id, ids)
        return {c: dict(zip(g["example"], g["score"])) for c, g in long.groupby("candidate_id")}

    return degenerate(view, rows, lambda ids, above: frontier_rows.holding_above(db, run_id, ids, above))


REREAD_IDS = 1000  # evaluation ids read again at each incremental read (see ``val_scores``)


class _Scores:
    """A run's validation scores as last read, and the last evaluation id read."""

    def __init__(self) -> None:
        self.lock, self.last_id, self.parts = threading.Lock(), 0, []


@st.cache_resource(show_spinner=False, max_entries=8)
def _scores_of(url: str, run_id: str) -> _Scores:
    return _Scores()


def val_scores(url: str, run_id: str, token: str) -> pd.DataFrame:
    """The run's validation scores, read incrementally: after the first read only the
    evaluations recorded since (a live run's new validation pass: hundreds of rows, not the
    2.5 M of a 10,000-candidate run). The last ``REREAD_IDS`` ids are read again each time: on
    PostgreSQL an insert can commit after one with a higher id was read; a score read twice
    changes nothing (the frontier takes each pair's maximum). A run that is no longer active is
    read whole once more, so what a finished run shows is exact."""
    store = _scores_of(url, run_id)
    finished = token.split(":")[1] not in ACTIVE_STATES  # the status field of ``frontier_token``
    with store.lock:
        since = 0 if finished else max(0, store.last_id - REREAD_IDS)
        new, last = queries.val_scores_since(_db(url), run_id, since)
        store.parts = [new] if since == 0 else store.parts + [new]
        if len(store.parts) > 32:  # many small reads: one frame again
            store.parts = [pd.concat(store.parts, ignore_index=True)]
        store.last_id = max(store.last_id if since else 0, last)
        return pd.concat(store.parts, ignore_index=True) if len(store.parts) > 1 else store.parts[0]


def steps_of(url: str, run: dict) -> pd.DataFrame:
    """The run's steps (``step_rows`` keyed for ``run``)."""
    return step_rows(url, run["id"], version_token(run), run.get("status") in ACTIVE_STATES)


class _Steps:
    """A run's steps as last read: the ended ones are final (``queries.step_rows``)."""

    def __init__(self) -> None:
        self.lock, self.ended_through, self.frame = threading.Lock(), -1, None


@st.cache_resource(show_spinner=False, max_entries=8)
def _steps_of(url: str, run_id: str) -> _Steps:
    return _Steps()


@reused
@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=64)
def step_rows(url: str, run_id: str, token: str, active: bool = True) -> pd.DataFrame:
    """The run's steps, read incrementally while it is ``active``: the steps up to the last one
    seen ended are kept, the later ones read again (a live run's new step: one row, not the
    2,500 of a 10,000-candidate run). A run that is no longer active is read whole once more."""
    store = _steps_of(url, run_id)
    with store.lock:
        after = store.ended_through if active and store.frame is not None else -1
        new = queries.step_rows(_db(url), run_id, after)
        kept = store.frame[store.frame["index"] <= after] if after >= 0 else None
        frame = new if kept is None or kept.empty else kept if new.empty else pd.concat([kept, new], ignore_index=True)
        ended = frame["ended_at"].notna().to_numpy()
        # the steps end in order: the ended prefix is final
        first_open = len(frame) if ended.all() else int(ended.argmin())
        store.ended_through = int(frame["index"].iloc[first_open - 1]) if first_open else -1
        store.frame = frame
        return frame


@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=16)
def pair_evaluations(url: str, run_id: str, a: str, b: str, token: str) -> list[dict]:
    """``storage.compare_queries.pair_evaluations`` of two candidates, re-read when the run changed."""
    from storage.compare_queries import pair_evaluations as pairs

    return pairs(_db(url), run_id, a, b)


@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=16)
def objective_means(url: str, run_id: str, token: str) -> pd.DataFrame:
    return queries.objective_means(_db(url), run_id)


@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=64)
def example_keys(url: str, run_id: str, split: str = "val") -> list[str]:
    return queries.example_keys(_db(url), run_id, split)


@st.cache_data(ttl=HEAVY_TTL, show_spinner=False, max_entries=64)
def validation_size(url: str, run_id: str) -> int:
    """How many examples a full validation pass has ("val", or "train" when the run has no
    validation set): a candidate validated on fewer cannot be the run's best."""
    return len(queries.example_keys(_db(url), run_id, "val")) or len(queries.example_keys(_db(url), run_id, "train"))


@st.cache_data(ttl=2.0, show_spinner=False)
def runs_table(url: str):
    return queries.runs_table(_db(url))


def run_config(url: str, run_id: str) -> dict | None:
    """Not cached: used once, on a button press."""
    return queries.run_config(_db(url), run_id)


@st.cache_data(ttl=2.0, show_spinner=False)
def role_grants(url: str) -> list[tuple[str, str]]:
    """The database's role grants as (rule, role): a change reaches every session within 2 s."""
    from engine.admin import grant_pairs

    return grant_pairs(_db(url))


@st.cache_data(ttl=2.0, show_spinner=False)
def worker_status(url: str) -> dict | None:
    return queries.worker_status(_db(url))


@st.cache_data(ttl=2.0, show_spinner=False, max_entries=256)
def candidate_detail(url: str, candidate_id: str, token: str) -> dict | None:
    return queries.candidate_detail(_db(url), candidate_id)


@st.cache_data(ttl=STEER_TTL, show_spinner=False)
def command_log(url: str, run_id: str) -> pd.DataFrame:
    return queries.command_log(_db(url), run_id)


@st.cache_data(ttl=STEER_TTL, show_spinner=False, max_entries=256)
def candidate_live(url: str, run_id: str, candidate_id: str) -> dict | None:
    return queries.candidate_live(_db(url), run_id, candidate_id)


def forget_steering() -> None:
    """After this session sent a command or a comment: its own next read is fresh."""
    command_log.clear()
    candidate_live.clear()
    run_overview.clear()


@st.cache_data(ttl=5.0, show_spinner=False)
def compare_runs(url: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    return queries.compare_runs(_db(url), run_ids)


def live_snapshot(run_id: str) -> tuple[dict | None, pd.DataFrame, pd.DataFrame]:
    """What the live dashboard fragment reads: (run, candidates, steps). At most 3 queries."""
    url = db_url()
    run = run_overview(url, run_id)
    if run is None:
        return None, pd.DataFrame(), pd.DataFrame()
    return run, candidate_rows(url, run_id, version_token(run)), steps_of(url, run)


def frontier_snapshot(run_id: str) -> tuple[dict | None, analysis.FrontierView | None]:
    """What the frontier fragment reads: (run, frontier; its ``aggregates`` are the accepted
    candidates' flags and means). At most 3 queries (the run, the kept frontier's entries and
    aggregates); the heatmap's rows and the degenerate members are read apart (``frontier_matrix``,
    ``degenerate_members``), each once per frontier version."""
    url = db_url()
    run = run_overview(url, run_id)
    if run is None:
        return None, None
    return run, frontier_of(url, run)


def controls_snapshot(run_id: str) -> tuple[dict | None, pd.DataFrame]:
    """What the run-controls fragment reads: (run, commands). At most 2 queries (a 3rd, the
    worker heartbeat, only while commands are pending)."""
    url = db_url()
    return run_overview(url, run_id), command_log(url, run_id)


def log_snapshot(run_id: str) -> tuple[pd.DataFrame, dict | None, pd.DataFrame]:
    """What the command-log fragment reads: (commands, run, steps). At most 3 queries."""
    url = db_url()
    log, run = command_log(url, run_id), run_overview(url, run_id)
    steps = steps_of(url, run) if run is not None else pd.DataFrame()
    return log, run, steps


def candidate_snapshot(run_id: str, candidate_id: str) -> dict | None:
    """What the candidate's live state reads: its flags, the run's status, its comments and the
    commands about it (``queries.candidate_live``: 3 statements)."""
    return candidate_live(db_url(), run_id, candidate_id)
