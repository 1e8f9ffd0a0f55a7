"""A deterministic synthetic run, for the studio's benchmark and tests.

``generate_run`` writes a finished-looking run straight into the database through the same
tables the engine fills: examples, candidates (accepted, rejected, failed; seed, reflection,
merge and human origins; pinned and vetoed ones), evaluations with side information (text,
sub-scores for two objectives, the odd image and error), reflection LM calls, steps with
timeline events, commands and comments, and the frontier the engine keeps
(``tests.support.synthetic_live``, which also advances such a run). Everything is drawn from ``random.Random(seed)``
(42 by default) and ids are derived from the run id, so two calls with the same arguments
produce the same rows. It never runs an evaluator or an LM.
"""

from __future__ import annotations

import base64
import hashlib
import random
import struct
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import insert, update

from storage.db import Database
from storage.models import Candidate, Command, Comment, Evaluation, Example, LMCall, Run, Step

T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=timezone.utc)
RULES = [
    "Answer with the number only.", "Show the arithmetic before the answer.", "Check units twice.",
    "Prefer the shortest correct answer.", "Never repeat the question.", "Use the JSON format {\"answer\": …}.",
    "Read every number in the question before computing.", "If unsure, estimate then verify.",
    "Round to two decimals only at the end.", "Quote the relevant sentence first.",
]


def tiny_png(r: int, g: int, b: int, size: int = 8) -> str:
    """Base64 of a solid-colour PNG, to exercise image side information without Pillow."""
    raw = b"".join(b"\x00" + bytes([r, g, b]) * size for _ in range(size))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return base64.b64encode(png).decode()


def _cid(run_id: str, n: int) -> str:
    return "c" + hashlib.sha1(f"{run_id}/{n}".encode()).hexdigest()[:10]


def _content_hash(content: dict) -> str:
    return hashlib.sha256(repr(sorted(content.items())).encode()).hexdigest()


def generate_run(db: Database, n_candidates: int = 60, n_val: int = 20, n_train: int = 30, seed: int = 42,
                 run_id: str | None = None, status: str = "completed", accept_rate: float = 0.5,
                 name: str | None = None, owner: str = "synthetic", parents: int = 2, proposals: int = 2) -> str:
    """Write one synthetic run with about ``n_candidates`` candidates; return its id."""
    rng = random.Random(seed)
    run_id = run_id or f"rsyn{seed:04d}{n_candidates:05d}"
    k = parents * proposals
    config = {
        "name": name or f"Synthetic {n_candidates}×{n_val}",
        "objective": "Answer grade-school arithmetic word problems correctly.",
        "artifact_kind": "a system prompt and few-shot examples, plain text",
        "seed_candidate": {"system_prompt": "You are a careful math tutor.", "few_shot": "Q: 2+2? A: 4"},
        "evaluator": "def evaluate(candidate, example):\n    return 1.0, {}\n",
        "search": {"parents_per_step": parents, "proposals_per_parent": proposals, "minibatch_size": 3,
                   "selection": "pareto"},
        "budget": {"max_metric_calls": None, "max_cost_usd": None, "max_seconds": None},
        "reflection_lm": {"model": "openai/gpt-4.1-mini"},
        "executor": {"backend": "local", "workers": 8},
    }
    examples = [dict(run_id=run_id, key=f"train-{i}", split="train", position=i,
                     payload={"question": f"What is {i} + {i * 3}?", "answer": str(4 * i)}) for i in range(n_train)]
    examples += [dict(run_id=run_id, key=f"val-{j}", split="val", position=n_train + j,
                      payload={"question": f"A train leaves at {j}:00 … how far after {j % 7 + 1} h?",
                               "answer": str(60 * (j % 7 + 1))}) for j in range(n_val)]
    difficulty = [rng.random() for _ in range(n_val)]
    budget_calls = 0
    cands: list[dict] = []
    evals: list[dict] = []
    calls: list[dict] = []
    steps: list[dict] = []
    skills: dict[str, list[float]] = {}
    content_of: dict[str, dict] = {}
    accepted_ids: list[str] = []
    total_cost = 0.0
    tokens_in = tokens_out = 0

    def validate(cid: str, skill: list[float], at: datetime) -> float:
        nonlocal budget_calls
        total = 0.0
        for j in range(n_val):
            p = max(0.0, min(1.0, skill[j] - difficulty[j] * 0.5))
            score = 1.0 if rng.random() < p else round(rng.random() * 0.4, 3)
            info: dict[str, Any] = {"output": f"The answer is {60 * (j % 7 + 1) if score == 1.0 else rng.randint(1, 500)}",
                                    "expected": str(60 * (j % 7 + 1)),
                                    "scores": {"accuracy": score, "brevity": round(1 - skill[j] * 0.4 + rng.random() * 0.2, 3)}}
            error = None
            if rng.random() < 0.01:
                error = "Traceback (most recent call last):\n  File \"evaluator.py\", line 3\nValueError: no number in output"
                score, info = 0.0, {"stderr": error}
            elif j == 0 and rng.random() < 0.2:
                info["plot"] = {"__image__": "png", "data": tiny_png(int(255 * score), 80, 160)}
            evals.append(dict(run_id=run_id, candidate_id=cid, example_pk=None, _key=f"val-{j}",
                              content_hash=content_of[cid]["_hash"], score=score, side_info=info, error=error,
                              seconds=round(0.2 + rng.random(), 3), cost_usd=0.0, cached=False,
                              created_at=at))
            budget_calls += 1
            total += score
        return total / n_val

    def add_candidate(n: int, origin: str, parent_ids: list[str], step: int, status: str, at: datetime,
                      component: str | None, content: dict, **extra) -> str:
        cid = _cid(run_id, n)
        content = dict(content)
        content_of[cid] = {**content, "_hash": _content_hash(content)}
        cands.append(dict(id=cid, run_id=run_id, content=content, content_hash=content_of[cid]["_hash"],
                          origin=origin, parent_ids=parent_ids, component=component, step=step, status=status,
                          created_at=at, started_at=at, finished_at=at + timedelta(seconds=8), **extra))
        return cid

    # seed
    seed_content = dict(config["seed_candidate"])
    seed_id = add_candidate(0, "seed", [], 0, "accepted", T0, None, seed_content, author="")
    skills[seed_id] = [0.35 + rng.random() * 0.2 for _ in range(n_val)]
    cands[-1]["val_mean"] = validate(seed_id, skills[seed_id], T0 + timedelta(seconds=5))
    cands[-1]["val_count"] = n_val
    accepted_ids.append(seed_id)

    n = 1
    step_index = 0
    while n < n_candidates:
        step_index += 1
        start = T0 + timedelta(seconds=30 * step_index)
        pool = [c for c in accepted_ids if c != "_"]
        weights = [sum(skills[c]) ** 3 for c in pool]
        chosen = rng.choices(pool, weights=weights, k=parents)
        events: list[dict] = []
        proposal_ids, step_accepted = [], []
        step_calls_before, step_cost = budget_calls, 0.0
        for parent in chosen:
            for _ in range(proposals):
                if n >= n_candidates:
                    break
                t_prop = start + timedelta(seconds=rng.random() * 3)
                merge = step_index % 25 == 0 and len(accepted_ids) > 3 and not proposal_ids
                human = step_index % 40 == 0 and not proposal_ids and not merge
                comp = ["system_prompt", "few_shot"][n % 2]
                base = dict(content_of[parent])
                base.pop("_hash")
                origin, parent_ids, lm_call_id = "reflection", [parent], None
                if merge:
                    other = rng.choice([c for c in accepted_ids if c != parent])
                    parent_ids = [parent, other]
                    origin = "merge"
                    o = content_of[other]
                    base["few_shot"] = o["few_shot"]
                elif human:
                    origin = "human"
                base[comp] = base[comp] + "\n" + rng.choice(RULES) + (" (edited by a person)" if human else "")
                r = rng.random()
                cstatus = "accepted" if r < accept_rate else ("failed" if r > 0.96 else "rejected")
                if not human:
                    t_in, t_out = rng.randint(900, 2400), rng.randint(120, 600)
                    cost = round(t_in * 4e-7 + t_out * 1.6e-6, 6)
                    total_cost += cost
                    step_cost += cost
                    tokens_in += t_in
                    tokens_out += t_out
                    answer = (f"The minibatch shows errors on multi-step problems.\n```\n{base[comp]}\n```"
                              if cstatus != "failed" else "I think the prompt is fine as it is.")
                    calls.append(dict(run_id=run_id, purpose="merge" if merge else "reflection",
                                      candidate_id=_cid(run_id, n), step=step_index, model="openai/gpt-4.1-mini",
                                      messages=[{"role": "system", "content": "You improve text artifacts."},
                                                {"role": "user", "content": f"Objective: …\nCurrent `{comp}`:\n```\n"
                                                 f"{content_of[parent][comp]}\n```\nFeedback:\n- val-3: expected 180, got 120\n"
                                                 "<script>alert('not html')</script>"}],
                                      answer=answer, tokens_in=t_in, tokens_out=t_out, cost_usd=cost,
                                      seconds=round(2 + rng.random() * 6, 2), cached=False,
                                      error=None if cstatus != "failed" else "no fenced block in the answer",
                                      started_at=t_prop))
                    lm_call_id = len(calls)  # its position; _write maps it to the row id
                    # seconds from the step's start, as the engine records them (engine.evaluation.Timeline)
                    events.append({"kind": "lm", "start": (t_prop - start).total_seconds(),
                                   "end": (t_prop - start).total_seconds() + calls[-1]["seconds"], "candidate_id": _cid(run_id, n)})
                extra: dict[str, Any] = dict(author="ana" if human else "", lm_call_id=lm_call_id,
                                             reason="" if cstatus != "failed" else "the LM answer had no fenced block")
                skill = [min(1.0, s + (rng.random() * 0.25 if rng.random() < 0.3 else -rng.random() * 0.08))
                         for s in skills[parent]]
                if merge:
                    skill = [max(a, b) for a, b in zip(skill, skills[parent_ids[1]])]
                cid = add_candidate(n, origin, parent_ids, step_index, cstatus, t_prop, comp, base, **extra)
                n += 1
                proposal_ids.append(cid)
                if cstatus == "failed":
                    continue
                mb = rng.sample(range(n_train), 3)
                pscore = round(sum(rng.random() for _ in mb), 3)
                cscore = round(pscore + (0.5 if cstatus == "accepted" else -0.3), 3)
                cands[-1].update(parent_minibatch_score=pscore, minibatch_score=cscore,
                                 minibatch_keys=[f"train-{i}" for i in mb])
                t_eval = (t_prop - start).total_seconds() + 8
                for i in mb:
                    evals.append(dict(run_id=run_id, candidate_id=cid, example_pk=None, _key=f"train-{i}",
                                      content_hash=content_of[cid]["_hash"], score=round(rng.random(), 3),
                                      side_info={"output": "…", "feedback": "wrong unit"}, error=None,
                                      seconds=0.3, cost_usd=0.0, cached=False, created_at=t_prop))
                    budget_calls += 1
                events.append({"kind": "minibatch", "start": t_eval, "end": t_eval + 2, "candidate_id": cid, "n": 3})
                if cstatus == "accepted":
                    skills[cid] = skill
                    cands[-1]["val_mean"] = validate(cid, skill, t_prop + timedelta(seconds=12))
                    cands[-1]["val_count"] = n_val
                    accepted_ids.append(cid)
                    step_accepted.append(cid)
                    events.append({"kind": "validation", "start": t_eval + 2, "end": t_eval + 9, "candidate_id": cid,
                                   "n": n_val})
        end = start + timedelta(seconds=22)
        steps.append(dict(run_id=run_id, index=step_index, parent_ids=chosen,
                          parent_reasons={p: "frontier sample" for p in chosen}, proposal_ids=proposal_ids,
                          accepted_ids=step_accepted, applied_command_ids=[], metric_calls=budget_calls - step_calls_before,
                          cost_usd=round(step_cost, 6), started_at=start, ended_at=end, seconds=22.0,
                          predicted_speedup=round(1.6 + k * 0.2, 2), worker_utilisation=round(0.4 + rng.random() * 0.5, 2),
                          events=events))

    by_id = {c["id"]: c for c in cands}
    best = max((c for c in cands if c.get("val_mean") is not None), key=lambda c: c["val_mean"])
    pinned = accepted_ids[len(accepted_ids) // 3] if len(accepted_ids) > 3 else None
    vetoed = accepted_ids[len(accepted_ids) // 2] if len(accepted_ids) > 3 else None
    if pinned:
        by_id[pinned]["pinned"] = True
    if vetoed and vetoed != best["id"]:
        by_id[vetoed]["vetoed"] = True
    n_props = len(cands) - 1
    run = dict(id=run_id, name=config["name"], owner=owner, config=config, status=status,
               created_at=T0 - timedelta(seconds=5), started_at=T0,
               finished_at=T0 + timedelta(seconds=30 * step_index + 25) if status == "completed" else None,
               metric_calls=budget_calls, cost_usd=round(total_cost, 6), tokens_in=tokens_in, tokens_out=tokens_out,
               seconds=30.0 * step_index + 25, steps_done=step_index, proposals_total=n_props,
               proposals_parsed=sum(1 for c in cands if c["status"] != "failed" and c["origin"] != "seed"),
               proposals_valid=sum(1 for c in cands if c["status"] != "failed" and c["origin"] != "seed"),
               proposals_improved=len(accepted_ids) - 1, frontier_version=len(accepted_ids),
               best_candidate_id=best["id"], best_val_mean=best["val_mean"])
    run["config"]["budget"]["max_metric_calls"] = int(budget_calls * 1.25)
    val_scores: dict[str, dict[str, float]] = {}
    for e in evals:
        if e["_key"].startswith("val-"):
            val_scores.setdefault(e["candidate_id"], {})[e["_key"]] = e["score"]
    for c in cands:  # what a validation pass records besides the mean
        if c["id"] in val_scores:
            c["val_min"], c["val_max"] = min(val_scores[c["id"]].values()), max(val_scores[c["id"]].values())
    _write(db, run, examples, cands, evals, calls, steps)
    _write_interventions(db, run_id, pinned, vetoed, best["id"])
    from tests.support.synthetic_live import keep_frontier  # the engine's kept frontier, as it would have written it

    keep_frontier(db, run_id, accepted_ids, val_scores, vetoed if vetoed != best["id"] else None, run["frontier_version"])
    return run_id


def _write(db: Database, run: dict, examples: list, cands: list, evals: list, calls: list, steps: list) -> None:
    with db.write() as s:
        s.execute(insert(Run), [run])
        s.execute(insert(Example), examples)
        pks = {key: pk for key, pk in s.execute(
            Example.__table__.select().with_only_columns(Example.key, Example.pk).where(Example.run_id == run["id"]))}
        call_ids = [row[0] for row in s.execute(insert(LMCall).returning(LMCall.id, sort_by_parameter_order=True),
                                                calls)] if calls else []
        defaults = dict(pinned=False, vetoed=False, reason="", author="", lm_call_id=None, component=None,
                        parent_minibatch_score=None, minibatch_score=None, minibatch_keys=[], val_mean=None,
                        val_count=0, val_cut_short="", frontier_version=0)
        rows = []
        for c in cands:
            row = {**defaults, **c}
            if row["lm_call_id"] is not None:  # a 1-based position in ``calls`` until now
                row["lm_call_id"] = call_ids[row["lm_call_id"] - 1]
            rows.append(row)
        s.execute(insert(Candidate), rows)
        for e in evals:
            e["example_pk"] = pks[e.pop("_key")]
        for i in range(0, len(evals), 20_000):
            s.execute(insert(Evaluation), evals[i:i + 20_000])
        s.execute(insert(Step), steps)
        s.execute(update(Run).where(Run.id == run["id"]).values(best_candidate_id=run["best_candidate_id"]))


def _write_interventions(db: Database, run_id: str, pinned: str | None, vetoed: str | None, best: str) -> None:
    t = T0 + timedelta(minutes=3)
    with db.write() as s:
        if pinned:
            s.add(Command(run_id=run_id, kind="pin", payload={"candidate_id": pinned}, author="ana",
                          reason="good on the unit questions", created_at=t, status="applied", applied_at=t,
                          applied_step=4, result="pinned"))
        if vetoed:
            s.add(Command(run_id=run_id, kind="veto", payload={"candidate_id": vetoed}, author="ben",
                          reason="answers every question with 0", created_at=t, status="applied", applied_at=t,
                          applied_step=5, result="vetoed"))
        s.add(Comment(run_id=run_id, candidate_id=best, author="ana", created_at=t,
                      text="Best so far. <b>Not bold</b>: comments are text."))
        s.add(Comment(run_id=run_id, candidate_id=best, author="ben", kind="feedback", created_at=t,
                      text="Too verbose; keep the JSON format."))
