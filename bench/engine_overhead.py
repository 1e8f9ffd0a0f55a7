"""Engine overhead: everything except LM and evaluator time, for one wide step.

Method (ratios measured in one run): a 4×2 step (every improving child validated) and a 4×1
step of the default shape for P × K > 1, on 50 validation examples with 4 workers, a simulated
1 s reflection LM and a 50 ms evaluator. A step's phases are sequential — parents on their
minibatches, the reflections (concurrent), the children on their minibatches, a merge's LM call
when the siblings conflict, the merged child's test, the validation passes — so its ideal
wall-clock, if the engine cost nothing, is the sum of the phases' ideal times: 1 s for an LM
phase, and for an evaluation phase the time W workers take to run its evaluations back to back
(each as long as the evaluator itself measured it: a 50 ms sleep lasts longer on a loaded
machine, and that is the evaluator's time, not the engine's). Overhead = measured − ideal, in
seconds and as a share of the measured wall-clock; the ideal at a nominal 50 ms is shown too.
Each shape runs ``--runs`` times, alternating, and the median run is reported with the spread
(the machine is shared: a run's seconds move with the load). A second table splits the median
run's overhead by phase: how much later than its ideal each phase ended after the one before.
With ``--before TREE`` (a checkout of the engine to compare with) every round runs the steps in
a fresh process of each tree, alternating, and both are reported.

    .venv/bin/python bench/engine_overhead.py --before /tmp/base   →   docs/benchmarks-engine.md
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from itertools import count
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# --tree: the engine measured (a child process of --before); this tree by default
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv else ROOT
sys.path.insert(0, str(TREE))

from engine.config import parse_config  # noqa: E402
from engine.lm.client import LMClient  # noqa: E402
from engine.runs import submit_run  # noqa: E402
from tests.support.scripted_lm import install_script  # noqa: E402
from engine.worker import Worker  # noqa: E402
from storage import repo  # noqa: E402
from storage.db import Database  # noqa: E402

# the evaluator measures its own time: what an ideal engine would still have to wait for
EVALUATOR = '''
import time
def evaluate(candidate, example):
    t0 = time.perf_counter()
    if example["delay"]:
        time.sleep(example["delay"])
    ok = example["word"] in candidate.split()
    return (1.0 if ok else 0.0), {"expected": example["word"], "evaluator_seconds": time.perf_counter() - t0}
'''
LM_SECONDS, EVAL_SECONDS, WORKERS, N_VAL = 1.0, 0.05, 4, 50
_counter = count()


def script(messages, params):
    """Append a fresh word: every proposal differs, as a real LM's would."""
    prompt = messages[1]["content"]
    m = re.search(r"## Current version\n(`{3,})\n(.*?)\n\1", prompt, re.S)
    current = m.group(2) if m else ""
    return f"```\n{current} w{next(_counter) % 50}\n```"


SHAPES = {  # label -> [search] keys of the step measured
    "4×2, accept = \"all\"": {"parents_per_step": 4, "proposals_per_parent": 2, "accept": "all",
                               "merge_siblings": False},
    "4×1, the default shape for P × K > 1": {"parents_per_step": 4, "proposals_per_parent": 1},
}
PHASES = ("parents' minibatches", "reflections", "children's minibatch tests", "the merge's LM call",
          "the merged child's test", "validation passes")


def one_step(lm_latency: float, eval_delay: float, search: dict, workers: int = WORKERS, n_val: int = N_VAL) -> dict:
    global _counter
    _counter = count()  # every step's proposals append the same words (a run's merge then goes the same way)
    install_script(script, latency=lm_latency)
    rows = [{"id": f"e{i}", "word": f"w{i}", "delay": eval_delay} for i in range(n_val)]
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{tmp}/bench.db")
        db.create_all()
        cfg = parse_config({"name": "overhead", "seed_candidate": "w0", "evaluator": EVALUATOR, "dataset": rows,
                            "search": {"minibatch_size": 3, "improvement": "improvement_or_equal", **search},
                            "budget": {"max_metric_calls": 10_000, "max_steps": 1},
                            "reflection_lm": {"model": "scripted/bench"},
                            "executor": {"workers": workers, "timeout_seconds": 30}})
        run_id = submit_run(db, cfg)
        lm = LMClient(cache_dir=Path(tmp) / "lm-cache")  # a private cache: every call pays its latency
        Worker(db, lease_seconds=60, lm=lm).run_forever(threading.Event(), once=True)
        step = repo.list_steps(db, run_id)[0]
        keys = {e.pk: e.key for e in repo.get_examples(db, run_id)}
        own = {(e.candidate_id, keys[e.example_pk]): e.side_info.get("evaluator_seconds", eval_delay)
               for e in repo.evaluations_for(db, run_id) if not e.cached}
        db.dispose()
    phases = split_phases(step, own, lm_latency, workers)
    nominal = sum(-(-p["evaluations"] // workers) * eval_delay if p["lm"] is None else p["lm"] * lm_latency
                  for p in phases.values())
    return {"step_seconds": step.seconds, "metric_calls": step.metric_calls, "phases": phases,
            "ideal": sum(p["ideal"] for p in phases.values()), "nominal_ideal": nominal,
            "proposals": len(step.proposal_ids), "accepted": len(step.accepted_ids)}


def split_phases(step, evaluator_seconds: dict, lm_latency: float, workers: int) -> dict:
    """Per phase present in the step, in order: when it ended (seconds from the step's start),
    its ideal time and its evaluations. An evaluation phase's ideal is the makespan of its
    evaluations (their evaluator-measured times, in the order they were dispatched) on W
    workers; an LM phase's, one LM latency per LM call in a row (the reflections are concurrent)."""
    reflected = {e["candidate_id"] for e in step.events if e["kind"] == "lm" and e.get("purpose") == "reflection"}

    def phase(e) -> str:
        if e["kind"] == "lm":
            return PHASES[1] if e.get("purpose") == "reflection" else PHASES[3]
        if e["kind"] == "validation":
            return PHASES[5]
        if e["candidate_id"] in step.parent_ids:
            return PHASES[0]
        return PHASES[2] if e["candidate_id"] in reflected else PHASES[4]

    grouped: dict[str, list[dict]] = {}
    for e in sorted(step.events, key=lambda e: e["start"]):
        grouped.setdefault(phase(e), []).append(e)
    out = {}
    for name in PHASES:
        events = grouped.get(name)
        if not events:
            continue
        if events[0]["kind"] == "lm":
            ideal, lm = lm_latency, 1
        else:
            ideal, lm = makespan([evaluator_seconds.get((e["candidate_id"], e.get("example")), 0.0) for e in events],
                                 workers), None
        out[name] = {"end": max(e["end"] for e in events), "ideal": ideal, "evaluations": len(events) if lm is None else 0,
                     "lm": lm}
    return out


def makespan(durations: list[float], workers: int) -> float:
    """How long ``workers`` take to run ``durations`` in this order, each on the first free worker."""
    free = [0.0] * workers
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free) if durations else 0.0


def lost_by_phase(run: dict) -> list[tuple[str, float]]:
    """(phase, seconds lost): how much later than its ideal each phase ended after the previous
    one ended (negative when it overlapped the previous one), and the step's close; they sum to
    the overhead."""
    lost, previous = [], 0.0
    for name, p in run["phases"].items():
        lost.append((name, p["end"] - previous - p["ideal"]))
        previous = p["end"]
    lost.append(("closing the step", run["step_seconds"] - previous))
    return lost


def overhead(run: dict) -> float:
    return run["step_seconds"] - run["ideal"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs of each step, alternating (the median is reported)")
    ap.add_argument("--before", help="a checkout of the engine to compare with, run in processes of its own")
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one round, printed as JSON
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_round(1)))
        return
    loads = [os.getloadavg()[0]]
    trees = {"before": Path(args.before), "after": ROOT} if args.before else {"": ROOT}
    rounds: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            rounds[name].append(_child(tree) if args.before else one_round(0 if rounds[name] else 1))
        loads.append(os.getloadavg()[0])
    write(rounds, loads, args.no_write)


def one_round(warm_ups: int) -> dict:
    """Each step once (after ``warm_ups`` rounds of instant steps: imports, the first sandbox
    spawn, litellm), and each with an instant LM and evaluator."""
    for _ in range(warm_ups):
        for search in SHAPES.values():
            one_step(0.0, 0.0, search)
    return {label: {"real": one_step(LM_SECONDS, EVAL_SECONDS, search), "instant": one_step(0.0, 0.0, search)}
            for label, search in SHAPES.items()}


def _child(tree: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "--tree", str(tree)], cwd=tree, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])


NOTES = """What the engine no longer waits for (each with a test that fails on the code before): a worker's next
task is sent to it as soon as its result is read, before the engine records the result, and a run alone hands its
evaluations straight to its pool (a worker idled 1.7 ms between two evaluations, 0.2 ms since); the writers of one
process take turns on a lock before SQLite's (a writer that met SQLite's lock slept 1–5 ms or more in its busy
handler); the LM cache is read by one thread with an open connection and written after the answer went back (its
connection per reflection thread cost 8 ms, its write 10 ms, both before the child's test); a recent candidate's
recorded results come from memory (the parents' minibatch results were read three or four times per step); the
children passed over are marked while the validation pass runs. What is left: the reflections' own writes and
reads before each request (about 5 ms of CPU per proposal, one after another under the GIL, so a 4-wide step's last
request leaves 20–30 ms after its first), a millisecond per evaluation in the sandbox round trip (its worker's wake-up
on a busy machine), and the children's tests, which start as their answers arrive.

The same comparison run earlier at load 0.1–4.2 (mean 1.5, commit f05ce30): 4×1 0.138 s (4.7 %) → 0.096 s (3.3 %),
4×2 0.300 s (4.7 %) → 0.216 s (3.5 %). So the 0.1 s target for a 4-wide step is met on a quieter machine and missed
at a load of about 4 on 2 cores (each phase of the 4×1 step ended 1–12 ms later than in the earlier run); 3 % of the step
was missed in both runs, by 0.3 and 1.6 points. In both, this branch's engine cut the overhead by 28–43 %."""


def verdicts(medians: dict) -> list[str]:
    """Issue 35's targets for a 4-wide step (≤ 0.1 s of overhead, ≤ 3 % of the step), met or
    missed by the median run of this tree's engine; the 4×2 step (eight proposals) beside them."""
    out = ["Issue 35's targets, for a 4-wide step: overhead ≤ 0.1 s and ≤ 3 % of the step (the median run of this "
           "engine; the 4×2 step has eight proposals, held to the same figures for comparison):", ""]
    for (label, engine), med in medians.items():
        if engine == "before":
            continue
        oh = overhead(med)
        share = oh / med["step_seconds"]
        out.append(f"- **{label}**: {oh:.3f} s, {'met' if oh <= 0.1 else 'missed'} "
                   f"({abs(oh - 0.1) * 1000:.0f} ms {'under' if oh <= 0.1 else 'over'}); {share:.1%} of the step, "
                   f"{'met' if share <= 0.03 else 'missed'} ({abs(share - 0.03) * 100:.1f} points "
                   f"{'under' if share <= 0.03 else 'over'}).")
    return out


def write(rounds: dict[str, list[dict]], loads: list[float], no_write: bool) -> None:
    n = len(next(iter(rounds.values())))
    compared = " (`--before`: each round runs the steps in a fresh process of each engine, alternating)" \
        if len(rounds) > 1 else ""
    lines = [
        "# Engine overhead",
        "",
        f"Produced by `bench/engine_overhead.py`: {n} runs of each step{compared}; 2 cores, 1-minute load average "
        f"{min(loads):.1f}–{max(loads):.1f} (mean {statistics.mean(loads):.1f}) while they ran: a shared machine, "
        "where other work lengthens the measured step, so the overhead is pessimistic.",
        "",
        f"One step, {N_VAL} validation examples, {WORKERS} sandboxed workers, SQLite, scripted LM through litellm "
        f"({LM_SECONDS:g} s a call), a {EVAL_SECONDS * 1000:g} ms evaluator. The first step of a run: every parent "
        "is the seed. *Ideal* = the step's phases one after another (parents' minibatches, the reflections, the "
        "children's minibatch tests, the merge's LM call when the siblings conflict — every proposal here appends "
        "to the one line —, the merged child's test, the validation passes): an LM phase takes the LM's latency, "
        "an evaluation phase the time W workers take to run its evaluations back to back, each as long as the "
        "evaluator measured itself (its sleep lasts longer than asked on a loaded machine); *at 50 ms*: each "
        "evaluation as long as asked. Overhead = measured − ideal. The median run of each step, with the range "
        "over the runs in brackets.",
        "",
        "| step | engine | wall-clock (s) | ideal (s) | overhead (s) | share | ideal at 50 ms (s) | "
        "overhead against it (s) | metric calls | proposals | validated | instant LM + evaluator (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    medians = {}
    for label in SHAPES:
        for engine, rs in rounds.items():
            real = sorted((r[label]["real"] for r in rs), key=overhead)
            med = real[len(real) // 2]
            medians[(label, engine)] = med
            share = [overhead(r) / r["step_seconds"] for r in real]
            instant = statistics.median(r[label]["instant"]["step_seconds"] for r in rs)
            lines.append(
                f"| {label} | {engine or 'this one'} | {med['step_seconds']:.3f} | {med['ideal']:.3f} | "
                f"{overhead(med):.3f} ({overhead(real[0]):.3f}–{overhead(real[-1]):.3f}) | "
                f"{overhead(med) / med['step_seconds']:.1%} ({min(share):.1%}–{max(share):.1%}) | "
                f"{med['nominal_ideal']:.3f} | {med['step_seconds'] - med['nominal_ideal']:.3f} | {med['metric_calls']} | "
                f"{med['proposals']} | {med['accepted']} | {instant:.3f} |")
    lines += ["", "The last column is the same step with an instant LM and evaluator (median): the engine's own work "
              "with nothing to overlap it (an upper bound).", "", *verdicts(medians),
              "", "## Where the overhead of the median run goes", "",
              "Each phase: how much later than its ideal it ended, after the phase before it ended (negative when it "
              "overlapped that phase); the rows sum to the overhead.", "",
              "| phase | " + " | ".join(f"{label.split(',')[0]}{', ' + engine if engine else ''}"
                                       for label, engine in medians) + " |",
              "|---|" + "---:|" * len(medians)]
    split = {key: dict(lost_by_phase(med)) for key, med in medians.items()}
    for name in [*PHASES, "closing the step"]:
        if any(name in s for s in split.values()):
            lines.append(f"| {name} | " + " | ".join(f"{s[name] * 1000:+.0f} ms" if name in s else "—"
                                                     for s in split.values()) + " |")
    lines += ["", NOTES, ""]
    text = "\n".join(lines)
    if not no_write:
        (ROOT / "docs" / "benchmarks-engine.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
