"""Findings as text and as JSON, for ``python -m engine analyze`` and the written diagnosis."""

from __future__ import annotations

from engine.analyze.finding import Finding

MARK = {"severe": "!!", "warning": "! ", "info": "  "}


def as_json(run_id: str, findings: list[Finding], diagnosis: dict | None = None) -> dict:
    """{"run", "findings": [...], "diagnosis"}; each finding with studio links to its evidence."""
    out = []
    for f in findings:
        d = f.to_dict()
        d["links"] = ([f"/candidate?run={run_id}&candidate={c}" for c in f.evidence.get("candidates", []) if c]
                      + [f"/explain?run={run_id}&step={s}" for s in f.evidence.get("steps", [])[:10]])
        out.append(d)
    return {"run": run_id, "findings": out, "diagnosis": diagnosis}


def evidence_line(f: Finding) -> str:
    """The evidence in one line: ids, examples, steps, counts."""
    ev, parts = f.evidence, []
    for name in ("candidates", "examples", "steps"):
        items = [str(x) for x in ev.get(name, []) if x is not None]
        if items:
            parts.append(f"{name} {', '.join(items[:6])}" + (f" … ({len(items)})" if len(items) > 6 else ""))
    counts = ev.get("counts") or {}
    if counts:
        parts.append(", ".join(f"{k} {v}" for k, v in counts.items()))
    return "; ".join(parts)


def action_command(run_id: str, kind: str, payload: dict, reason: str) -> str:
    """The CLI command that does what an action's button does."""
    why = f' --reason "{reason}"'
    if kind in ("veto", "pin"):
        return f"python -m engine {kind} {run_id} {payload['candidate_id']}{why}"
    if kind == "feedback":
        return f'python -m engine feedback {run_id} {payload["candidate_id"]} "{payload["text"]}"'
    if kind == "budget":
        return f"python -m engine budget {run_id} " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in payload.items()) + why
    # a branch of the best (no candidate named) or of the candidate the action names
    settings = " ".join(f"--set {k}={str(v).lower() if isinstance(v, bool) else v}"
                        for k, v in (payload.get("settings") or {}).items())
    return " ".join(p for p in ("python -m engine branch", run_id, payload.get("candidate_id") or "", settings) if p)


def as_text(run_id: str, findings: list[Finding]) -> str:
    if not findings:
        return f"run {run_id}: nothing to report (no finding)"
    lines = [f"run {run_id}: {len(findings)} finding(s), most severe first"]
    for f in findings:
        lines.append(f"{MARK[f.severity]} {f.id} [{f.severity}] {f.title}")
        if f.detail:
            lines.append(f"     {f.detail}")
        ev = evidence_line(f)
        if ev:
            lines.append(f"     evidence: {ev}")
        for a in f.actions:
            lines.append(f"     → {a.label}: {action_command(run_id, a.kind, a.payload, a.reason)}")
    return "\n".join(lines)
