"""A run as one self-contained HTML file that anyone can open without a network.

``build_report(db, run_id)`` returns the page: the summary, the score over the budget, the
Pareto frontier, the lineage tree, the reported candidate (the approved one, else the best) with
its diff against the seed and whether its gain over the seed is real, its per-example scores
beside the seed's, the run's analysis (``engine.analyze``: its findings, and its last written
diagnosis), the command log, the comments and feedback, and last the config (its datasets
by size, its evaluator folded). plotly.js is inlined once; there are no external scripts, styles,
fonts or images, and a Content-Security-Policy forbids loading any. Every string from the run (candidate
and LM text, names, reasons, comments, config values) goes through ``html.escape``: it is shown
as text, never interpreted as HTML. Built from ``export_run``'s document, the same facts as an export.
"""

from __future__ import annotations

import difflib
import json
from html import escape
from typing import Any, Iterable, Optional

import plotly.io as pio

from storage import repo
from storage.db import Database

from engine.records.export import export_run
from engine.records.report_figures import lineage_tree, score_over_budget

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data:; font-src data:")
STYLE = """body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#111827}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}td,th{border:1px solid #e5e7eb;padding:.25rem .5rem;
text-align:left;vertical-align:top}pre{background:#f9fafb;border:1px solid #e5e7eb;padding:.75rem;white-space:pre-wrap;
font-size:.8rem}.add{background:#dcfce7}.del{background:#fee2e2}.muted{color:#6b7280}h2{margin-top:2rem}"""


def e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _num(value: Optional[float], fmt: str = ".4f") -> str:
    return "n/a" if value is None else format(value, fmt)


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """An HTML table; no header row when ``header`` is empty."""
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table>{f'<thead><tr>{head}</tr></thead>' if head else ''}<tbody>{body}</tbody></table>"


def build_report(db: Database, run_id: str) -> str:
    doc = export_run(db, run_id)
    approved = repo.get_run(db, run_id).approved_candidate_id
    cands = {c["id"]: c for c in doc["candidates"]}
    seed = next((c for c in doc["candidates"] if c["origin"] == "seed"), None)
    shown_id = approved or doc["best"]["candidate_id"]
    shown = cands.get(shown_id)
    which = "approved" if approved else "best"
    parts = [_summary(doc, approved)]
    parts.append(_section("Score over the budget", _figure(score_over_budget(doc), first=True)))
    parts.append(_section("Pareto frontier", _frontier(doc)))
    parts.append(_section("Lineage", _figure(lineage_tree(doc, shown_id), first=False)))
    parts.append(_section(f"The {which} candidate", _approval(doc, approved) + _candidate(shown, seed, which)))
    parts.append(_section("Is the gain real?", _gain(db, run_id, shown_id)))
    parts.append(_section("Per-example scores", _per_example(doc, shown, seed)))
    parts.append(_section("Analysis", _analysis(db, run_id)))
    parts.append(_section("Command log", _commands(doc)))
    parts.append(_section("Comments and feedback", _comments(doc)))
    parts.append(_section("Config", _config(doc["run"]["config"])))  # last: the results come first
    title = f"Refract run {doc['run']['name']} ({run_id})"
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\"><title>{e(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{e(title)}</h1>{''.join(parts)}</body></html>")


def _section(title: str, body: str) -> str:
    return f"<section><h2>{e(title)}</h2>{body}</section>"


def _figure(fig, first: bool) -> str:
    # the first figure carries plotly.js itself (from the installed package), the others reuse it
    return pio.to_html(fig, full_html=False, include_plotlyjs=True if first else False,
                       config={"displaylogo": False})


def _summary(doc: dict, approved: Optional[str]) -> str:
    run, t, best = doc["run"], doc["run"]["totals"], doc["best"]
    rows = [("status", f"{run['status']}" + (f" — {run['status_reason']}" if run["status_reason"] else "")),
            ("owner", run["owner"]), ("created", _when(run["created_at"])), ("finished", _when(run["finished_at"])),
            ("metric calls", t["metric_calls"]), ("cost", f"${t['cost_usd']:.4f}"), ("steps", t["steps"]),
            ("proposals", f"{t['proposals']['total']} ({t['proposals']['improved']} improved)"),
            ("best candidate", f"{best['candidate_id']} (validation mean {_num(best['val_mean'])})"),
            ("test mean", f"{_num(best['test_mean'])} (seed {_num(best['seed_test_mean'])})"),
            ("approved candidate", approved or "none")]
    branch = (run["config"] or {}).get("branch")
    if branch:
        rows.append(("branch of", f"run {branch['run']}, from {', '.join(branch['candidates'])}"))
    return _section("Summary", _table((), rows))


def _gain(db: Database, run_id: str, cand_id: Optional[str]) -> str:
    """The reported candidate's gain over the seed (``engine.gain``), and what approving it should hear."""
    from engine.gain import VERDICTS, held_out_gain

    g = held_out_gain(db, run_id, cand_id) if cand_id else None
    if g is None:
        return "<p class=\"muted\">The seed and this candidate share no evaluated example.</p>"
    where = "held-out test set" if g.held_out else "validation set (not held out: the search selected on it)"
    rows = [("gain over the seed", f"{g.gain:+.4f} on the {where}, over {g.n} examples"),
            ("95 % interval (paired bootstrap)", f"{g.low:+.4f} … {g.high:+.4f}: {VERDICTS[g.verdict].lower()}"),
            ("examples won", ", ".join(g.wins) or "none"), ("examples lost", ", ".join(g.losses) or "none"),
            ("tied", g.ties), ("validation–test gap", _num(g.gap, "+.4f")),
            ("minimum gain to approve", "none set" if g.min_gain is None else f"{g.min_gain:+.4f} ({g.min_gain_from})")]
    return _table((), rows) + "".join(f"<p>⚠ {e(w)}</p>" for w in g.warnings())


def _frontier(doc: dict) -> str:
    if not doc["frontier"]:
        return "<p class=\"muted\">No validated candidate yet.</p>"
    counts: dict[str, int] = {}
    for entry in doc["frontier"]:
        for cid in entry["candidate_ids"]:
            counts[cid] = counts.get(cid, 0) + 1
    means = {c["id"]: c["val_mean"] for c in doc["candidates"]}
    members = _table(("candidate", "best on (examples)", "validation mean"),
                     ((cid, n, _num(means.get(cid))) for cid, n in sorted(counts.items(), key=lambda kv: -kv[1])))
    per_example = _table(("example", "best score", "held by"),
                         ((x.get("example_id") or x.get("objective"), _num(x["best_score"]), ", ".join(x["candidate_ids"]))
                          for x in doc["frontier"]))
    return f"<p>{doc['frontier_type']} frontier: {len(counts)} member(s).</p>{members}{per_example}"


def _approval(doc: dict, approved: Optional[str]) -> str:
    """Who approved the candidate, when and why (the last applied ``approve`` command)."""
    last = [c for c in doc["commands"] if c["kind"] == "approve" and c["status"] == "applied"]
    if not approved or not last:
        return ""
    c = last[-1]
    return f"<p>Approved by {e(c['author'] or 'someone')} on {e(_when(c['applied_at']))}: {e(c['reason'])}</p>"


def _when(stamp: Optional[str]) -> str:
    """An export timestamp (``…T08:59:55.000000Z``) as people read it."""
    return f"{stamp[:10]} {stamp[11:19]} UTC" if stamp else "n/a"


def _candidate(cand: Optional[dict], seed: Optional[dict], which: str) -> str:
    if cand is None:
        return f"<p class=\"muted\">No {e(which)} candidate.</p>"
    out = [f"<p>{e(cand['id'])} · {e(cand['origin'])} · step {cand['step']} · validation mean "
           f"{_num(cand['val_mean'])}</p>"]
    for name, text in cand["content"].items():
        out.append(f"<h3>{e(name)}</h3><pre>{e(text)}</pre>")
        before = (seed or {}).get("content", {}).get(name, "")
        out.append(f"<p class=\"muted\">diff against the seed</p>{_diff(before, text)}")
    return "".join(out)


def _diff(before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "seed", "candidate", lineterm="", n=2)
    rows = []
    for line in lines:
        cls = "add" if line.startswith("+") and not line.startswith("+++") else \
              "del" if line.startswith("-") and not line.startswith("---") else ""
        rows.append(f"<span class=\"{cls}\">{e(line)}</span>" if cls else e(line))
    return "<pre>" + ("\n".join(rows) or "(identical to the seed)") + "</pre>"


def _per_example(doc: dict, cand: Optional[dict], seed: Optional[dict]) -> str:
    ids = {c["id"] for c in (cand, seed) if c}
    scores: dict[tuple[str, str], float] = {}
    for ev in doc["evaluations"]:
        if ev["candidate_id"] in ids:
            scores[(ev["candidate_id"], ev["example_id"])] = ev["score"]
    rows = []
    for ex in doc["examples"]:
        ours = scores.get(((cand or {}).get("id"), ex["id"]))
        base = scores.get(((seed or {}).get("id"), ex["id"]))
        if ours is not None or base is not None:
            rows.append((ex["id"], ex["split"], _num(base, ".3f"), _num(ours, ".3f")))
    if not rows:
        return "<p class=\"muted\">No evaluations recorded.</p>"
    return _table(("example", "split", "seed", "reported candidate"), rows)


def _commands(doc: dict) -> str:
    if not doc["commands"]:
        return "<p class=\"muted\">No commands.</p>"
    rows = ((c["created_at"], c["author"], c["kind"], json.dumps(c["payload"], ensure_ascii=False)[:300], c["reason"],
             c["status"], c["result"]) for c in reversed(doc["commands"]))
    return _table(("when", "who", "command", "payload", "why", "status", "result"), rows)


def _comments(doc: dict) -> str:
    """The comments, and the feedback sent on candidates: read by the next reflections on it, or
    still waiting (sent too late: the run ended before a reflection on that candidate)."""
    rows = [(c["created_at"], c["author"], c["candidate_id"], c["kind"], c["text"]) for c in doc["comments"]]
    attached = {(c["candidate_id"], c["author"], c["text"]) for c in doc["comments"] if c["kind"] == "feedback"}
    for c in doc["commands"]:
        p = c["payload"] or {}
        if c["kind"] == "feedback" and (p.get("candidate_id"), c["author"], p.get("text")) not in attached:
            state = "never read: the run ended before it was applied" if c["status"] == "pending" else c["status"]
            rows.append((c["created_at"], c["author"], p.get("candidate_id"), f"feedback ({state})", p.get("text")))
    if not rows:
        return "<p class=\"muted\">No comments or feedback.</p>"
    return _table(("when", "who", "candidate", "kind", "text"), sorted(rows, key=lambda r: r[0] or "", reverse=True))


def _config(config: dict) -> str:
    """The run's settings; its datasets by size (the rows are in the export), its evaluator folded."""
    shown = {k: (f"{len(v)} rows (the rows are in the export)" if k in ("dataset", "valset", "testset") and v else v)
             for k, v in config.items() if k != "evaluator"}
    source = config.get("evaluator") or ""
    folded = (f"<details><summary>the evaluator ({len(source.splitlines())} lines)</summary><pre>{e(source)}</pre>"
              "</details>") if source else ""
    return f"<pre>{e(json.dumps(shown, indent=2, ensure_ascii=False))}</pre>{folded}"


def _analysis(db: Database, run_id: str) -> str:
    """The findings computed from the run's records (for a finished run: its last analysis) and
    the last written diagnosis, as recorded."""
    from engine.analyze import analyze
    from engine.analyze.diagnosis import from_call
    from engine.analyze.report_text import evidence_line
    from storage.analyze_queries import last_diagnosis

    findings = analyze(db, run_id)
    if not findings:
        return "<p class=\"muted\">No finding: nothing to report about this run.</p>"
    table = _table(("", "severity", "finding", "what it means", "evidence"),
                   ((f.id, f.severity, f.title, f.detail, evidence_line(f)) for f in findings))
    draft = from_call(last_diagnosis(db, run_id), findings)
    if draft is None:
        return table + "<p class=\"muted\">No written diagnosis was asked for.</p>"
    items = "".join(f"<li>{e(i['text'])}</li>" for i in draft["items"])
    return (table + f"<h3>Last written diagnosis</h3><p class=\"muted\">A draft by {e(draft['model'])}, from the "
            "findings of the time (their numbers may have moved since); nothing in it was applied.</p>"
            f"<ol>{items}</ol>")
