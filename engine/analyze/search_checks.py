"""Findings about the search itself: proposals that are wasted or repeat, a stalled best,
minibatches that cannot show an improvement, degenerate and neglected frontier members."""

from __future__ import annotations

import re
from collections import Counter
from math import ceil

import numpy as np

from engine.analyze.degenerate import CONSTANT, TRIVIAL_WINS, degenerate_in_matrix
from engine.analyze.finding import INFO, SEVERE, WARNING, Action, Finding, plural, share
from engine.analyze.records import RunRecords
from storage.run_figures import proposal_counts
from storage.states import Cause

TOL = 1e-9
REPEAT_REASONS = ("repeats an earlier proposal for this parent", "unusable answer: the answer is unchanged")


def reason_group(reason: str) -> str:
    """A candidate's reason without its numbers and particulars, so that alike reasons count
    together: ``no improvement on the minibatch (1 vs parent 2)`` → ``no improvement on the minibatch``."""
    text = (reason or "").split(";")[0].strip()
    if text.startswith("invalid candidate (validate):"):
        return "invalid candidate (validate): " + text.split(":", 1)[1].strip()[:80]
    text = re.sub(r"\s*\([^)]*\d[^)]*\)", "", text)  # "(1 vs parent 2)", "(step 3)"
    return text[:120] or "no reason recorded"


def top_reasons(cands: list[dict], n: int = 3) -> list[tuple[str, int]]:
    return Counter(reason_group(c["reason"]) for c in cands).most_common(n)


def _reasons_text(reasons: list[tuple[str, int]]) -> str:
    return "; ".join(f"{r} ×{n}" for r, n in reasons)


def _feedback(recs: RunRecords, text: str, why: str) -> list[Action]:
    best = recs.run.get("best_candidate_id")
    if not best or recs.finished:
        return []
    return [Action("feedback", f"Add feedback on {best} for its next reflections", {"candidate_id": best, "text": text},
                   why)]


def _interrupted(cand: dict) -> bool:
    """Cut by a pause, a stop or the time limit: its cause says so (a run recorded before causes
    were stored says it in its reason only)."""
    cause = cand.get("cause") or ""
    return cause == Cause.INTERRUPTED or (not cause and (cand["reason"] or "").startswith("interrupted"))


def proposal_findings(recs: RunRecords) -> list[Finding]:
    """Repeats (an LM that says the same thing again) and other wasted proposals, with the
    parse / valid / improved rates over the proposals whose reflection has answered."""
    props = [c for c in recs.proposals() if c["status"] != "proposed"]
    run = recs.run
    # the rates' one definition, as the dashboard and `engine status` count them (storage.run_figures)
    tally = proposal_counts(run, int(run.get("proposals_reflecting") or 0))
    if len(props) < 4:
        return []
    failed = [c for c in props if c["status"] == "failed"]
    repeats = [c for c in failed if c["reason"].startswith(REPEAT_REASONS)]
    other = [c for c in failed if c not in repeats and not _interrupted(c)]
    counts = {"proposals": tally.answered, "parsed": tally.parsed, "valid": tally.valid, "improved": tally.improved,
              "repeats": len(repeats), "retried": tally.retried, "failed": len(failed)}
    out = []
    if len(repeats) >= max(4, len(props) / 3):
        severe = len(repeats) >= 0.5 * len(props) and len(props) >= 6
        kinds = Counter("unchanged answer" if "unchanged" in c["reason"] else "an earlier proposal" for c in repeats)
        out.append(Finding(
            "repeating_lm", SEVERE if severe else WARNING,
            f"{share(len(repeats), len(props))} proposals repeated a text already tried, after asking the LM again "
            f"({', '.join(f'{k} ×{n}' for k, n in kinds.most_common())}); {plural(counts['retried'], 'retry', 'retries')} in all",
            "The reflection LM says the same thing again: those proposals cost LM calls and test nothing. A higher "
            "temperature, feedback that asks for a different approach, or a stronger reflection model helps.",
            {"candidates": [c["id"] for c in repeats[:20]], "counts": counts}, weight=len(repeats) / len(props),
            actions=_feedback(recs, "Your recent answers repeated versions already tried for this candidate. Write a "
                              "substantially different version that addresses the failing examples.",
                              "Analyze: the reflection LM repeats itself")
            + [Action("branch", "Branch with a hotter reflection LM",
                      {"settings": {"reflection_lm.temperature": min(1.5, _temperature(recs) + 0.4)}},
                      "Analyze: the reflection LM repeats itself")]))
    usable = 1 - len(other) / len(props)
    if len(other) >= 3 and usable < 0.75:
        reasons = top_reasons(other)
        out.append(Finding(
            "wasted_proposals", SEVERE if usable < 0.5 and len(props) >= 8 else WARNING,
            f"{share(len(other), len(props))} proposals failed before any test: {_reasons_text(reasons)}",
            f"Rates over {tally.answered} answered proposals: parsed {tally.parsed}, valid {tally.valid}, improved "
            f"{tally.improved}. An answer without a fenced block or a text validate() refuses costs an LM call and "
            "tests nothing; a reflection model that fits the artifact kind, or a clearer objective, helps.",
            {"candidates": [c["id"] for c in other[:20]], "counts": counts, "reasons": dict(reasons)},
            weight=1 - usable))
    return out


def _temperature(recs: RunRecords) -> float:
    return float(((recs.run.get("config") or {}).get("reflection_lm") or {}).get("temperature", 0.7))


def best_by_step(recs: RunRecords) -> list[tuple[int, float]]:
    """(step, best validation mean so far) after each step: the fully validated, non-vetoed
    candidates, as the engine's best."""
    n_val = len(recs.val_keys)
    means = sorted((c["step"] if c["origin"] != "seed" else 0, c["val_mean"]) for c in recs.candidates
                   if c["status"] == "accepted" and not c["vetoed"] and c["val_mean"] is not None
                   and (c["val_count"] or 0) >= n_val)
    done = [s["index"] for s in recs.steps if s["ended_at"] is not None]
    out, best, i = [], None, 0
    for step in [0] + done:
        while i < len(means) and means[i][0] <= step:
            best = means[i][1] if best is None else max(best, means[i][1])
            i += 1
        if best is not None:
            out.append((step, best))
    return out


def stalled(recs: RunRecords) -> list[Finding]:
    """No validated improvement of the best for several steps, and what the proposals of those
    steps failed on."""
    curve = best_by_step(recs)
    if len(curve) < 4:
        return []
    top = curve[-1][1]
    if top >= recs.max_score() - TOL or (recs.budget.get("stop_at_score") is not None
                                         and top >= float(recs.budget["stop_at_score"]) - TOL):
        return []
    last_rise = next(step for step, value in curve if value >= top - TOL)
    since = curve[-1][0] - last_rise
    if since < 3:
        return []
    late = [c for c in recs.proposals() if c["step"] > last_rise and c["status"] != "proposed"]
    reasons = top_reasons([c for c in late if c["status"] != "accepted"])
    below = sum(1 for c in late if c["status"] == "accepted")
    # a symptom, never severe by itself: its causes (an evaluator without signal, a repeating LM …) are
    return [Finding(
        "stalled", WARNING,
        f"No validated improvement of the best for {since} steps (best {top:.3f} since step {last_rise})",
        f"Of the {len(late)} proposals since, {below} were validated without beating the best; the others: "
        f"{_reasons_text(reasons) or 'none'}.",
        {"steps": [s for s, _ in curve if s > last_rise][:50], "counts": {"steps": since, "proposals": len(late)},
         "reasons": dict(reasons), "candidates": [recs.run.get("best_candidate_id")] if recs.run.get("best_candidate_id") else []},
        weight=since, actions=_feedback(recs, "The last proposals did not improve: " + (_reasons_text(reasons) or "")
                                        + ". Try a different approach to the failing examples.", "Analyze: stalled"))]


def no_signal_minibatches(recs: RunRecords) -> list[Finding]:
    """Proposals tested on a minibatch their parent already aced: under strict improvement a
    child cannot beat a perfect parent there, so the test carries no signal."""
    tested = [c for c in recs.proposals() if c["minibatch_score"] is not None and c["minibatch_keys"]]
    top = recs.max_score()
    aced = [c for c in tested if c["parent_minibatch_score"] is not None
            and c["parent_minibatch_score"] >= len(c["minibatch_keys"]) * top - TOL]
    if len(tested) < 4 or len(aced) < max(3, 0.3 * len(tested)):
        return []
    strict = recs.search.get("improvement", "strict") == "strict"
    settings = {"search.skip_perfect_score": True, "search.max_score": top,
                "search.minibatch_size": min(len(recs.per_example), int(recs.search["minibatch_size"]) * 2)}
    return [Finding(
        "no_signal_minibatches", SEVERE if strict and len(aced) >= 0.6 * len(tested) and len(tested) >= 6 else WARNING,
        f"{share(len(aced), len(tested))} children were tested on a minibatch their parent already aced",
        ("Under strict improvement a child cannot beat a perfect parent on those examples, so the test" if strict else
         "The test") + " says nothing: skip_perfect_score (with max_score) spares the LM call, a larger minibatch "
        "gives the child something to fix.",
        {"candidates": [c["id"] for c in aced[:20]], "counts": {"tested": len(tested), "aced": len(aced)}},
        weight=len(aced) / len(tested),
        actions=[Action("branch", "Branch skipping perfect parents, with a larger minibatch", {"settings": settings},
                        "Analyze: minibatches carry no signal")])]


def parent_slots(recs: RunRecords, since_step: int) -> Counter:
    """How often each candidate was chosen as a parent in the steps after ``since_step``."""
    return Counter(p for s in recs.steps if s["index"] > since_step for p in (s["parent_ids"] or []))


def _holders(matrix: np.ndarray) -> np.ndarray:
    """Which rows hold the best score (ties included) of each column."""
    with np.errstate(all="ignore"):
        best = np.nanmax(np.where(np.isnan(matrix), -np.inf, matrix), axis=0)
        return ~np.isnan(matrix) & (matrix >= best - TOL)


def degenerate(recs: RunRecords) -> list[Finding]:
    """Frontier members that answer every example alike, or win only where that wins, or sit
    below the seed (``engine.analyze.degenerate``); each one veto away."""
    rows = recs.eligible_rows()
    found = degenerate_in_matrix([recs.val_ids[i] for i in rows], recs.val_keys, recs.matrix[rows],
                                 reference=recs.seed_id)
    if not found:
        return []
    first = min(recs.by_id[c]["step"] for c in found)
    slots = parent_slots(recs, first)
    chosen = sum(slots[c] for c in found)
    # below the seed on average may be a specialist (what a per-example frontier keeps on purpose):
    # only a member that answers alike, or wins only where that wins, is clearly degenerate
    clear = any(d.rule in (CONSTANT, TRIVIAL_WINS) for d in found.values())
    total = sum(slots.values())
    rule = {CONSTANT: "the same score on every example", TRIVIAL_WINS: "wins only where such an answer wins",
            "below_reference": "below the seed on average"}
    lines = [f"{c} ({rule[d.rule]}, mean {d.mean:.3f}, best on {plural(len(d.wins), 'example')})" for c, d in found.items()]
    return [Finding(
        "degenerate_members", SEVERE if clear and total and chosen >= 0.25 * total and chosen >= 2 else WARNING,
        f"{plural(len(found), 'degenerate frontier member')}: " + "; ".join(lines[:4]) + ("…" if len(lines) > 4 else ""),
        f"They hold the best score on some validation example only by answering alike (a regex that matches nothing, an "
        f"empty answer), and were chosen as parents {plural(chosen, 'time')} of {total} since step {first}. Veto them: "
        "they stay visible, and are never a parent again.",
        {"candidates": list(found), "examples": sorted({k for d in found.values() for k in d.wins})[:30],
         "counts": {"members": len(found), "parent_slots": chosen, "all_slots": total}},
        weight=len(found),
        actions=[Action("veto", f"Veto {c}", {"candidate_id": c}, f"Analyze: degenerate frontier member ({rule[d.rule]})")
                 for c, d in list(found.items())[:8]])]


def neglected(recs: RunRecords) -> list[Finding]:
    """Frontier members that alone hold the best score on some example yet were never chosen
    as a parent in the steps since they were validated (at least 4)."""
    rows = recs.eligible_rows()
    alone: Counter = Counter()
    if len(rows):
        holders = _holders(recs.matrix[rows])
        for j in np.flatnonzero(holders.sum(axis=0) == 1):
            alone[recs.val_ids[rows[int(np.flatnonzero(holders[:, j])[0])]]] += 1
    last = max((s["index"] for s in recs.steps if s["ended_at"] is not None), default=0)
    out = []
    for cid, n in alone.most_common():
        c = recs.by_id[cid]
        since = c["step"]
        if last - since < 4 or parent_slots(recs, since)[cid] or c["pinned"]:
            continue
        out.append((cid, n, last - since))
    if not out or recs.finished:
        return []
    cid, n, steps = out[0]
    return [Finding(
        "neglected_member", WARNING if steps >= 8 else INFO,
        f"{plural(len(out), 'frontier member')} alone best on some example never chosen as a parent: "
        + ", ".join(f"{c} (alone best on {plural(k, 'example')}, {s} steps)" for c, k, s in out[:4]),
        "Selection samples members by the examples they hold; pinning one makes it a parent at least every "
        f"{recs.search.get('pin_every', 3)} steps, so what it alone solves gets built on.",
        {"candidates": [c for c, _, _ in out], "counts": {"members": len(out)}}, weight=ceil(steps),
        actions=[Action("pin", f"Pin {c}", {"candidate_id": c}, "Analyze: a neglected frontier member")
                 for c, _, _ in out[:3]])]
