"""The page's closing analysis, "Why the numbers are what they are" (docs/benchmarks-batching.md):
its words fixed, its figures computed from the results of ``bench/batching.py``."""

from __future__ import annotations

import statistics

from bench.time_to_quality import TASK_NAMES, async_merges, best_of_range, disagreements, ttq_summary


def limits(results: list[dict]) -> list[str]:
    """Time to quality split into steps × seconds per step (incremental task, seeds that reached
    it): how many steps a shape needed and how long each took, against 1×1."""
    lines = ["| configuration | seconds per step | steps to quality | time to quality (s) |", "|---|---|---|---|"]
    for name in ["1×1", "2×2 all", "4×1 all", "4×1 merge", "4×1 default", "async C=4", "async C=4 merge",
                 "async C=4 rebase"]:
        rows = [r for r in results if r["config"] == name and r.get("task", "lines") == "lines"
                and r.get("ttq") is not None and r.get("steps")]
        if not rows:
            continue
        per = statistics.mean(r["wall"] / r["steps"] for r in rows)
        steps = statistics.mean(r["ttq"] / (r["wall"] / r["steps"]) for r in rows)
        lines.append(f"| {name} | {per:.2f} | {steps:.1f} | {statistics.mean(r['ttq'] for r in rows):.1f} |")
    return lines


def step_bound(results: list[dict]) -> str:
    """The runtime model's ceiling on 4×1 merge's time to quality: even if every step's merge
    carried all four children's fixes (four 1×1 steps' worth), it is 4 × T(1×1 step) / T(4×1 merge step)."""
    from engine.runtime.model import Latencies, Shape, sync_step

    rows = [r for r in results if r["config"] == "1×1" and r.get("latencies") and r.get("task", "lines") == "lines"]
    if not rows:
        return ""
    lat = Latencies(**{k: (statistics.mean(r["latencies"][k] for r in rows) if isinstance(v, float) else v)
                       for k, v in rows[0]["latencies"].items() if k != "merge_lm"}, merge_lm=0.0)
    t1, _ = sync_step(Shape(), lat)
    t4, _ = sync_step(Shape(4, 1, merge_siblings=True), lat)
    return (f"At the latencies measured in the 1×1 runs (LM {lat.lm:.2f} s, evaluator {lat.eval * 1000:.0f} ms, "
            f"{lat.accept * 100:.0f} % of proposals improving) the runtime model gives a 1×1 step {t1:.2f} s and a 4×1 "
            f"merge step with a three-way merge {t4:.2f} s, so even a step whose merge carried four 1×1 steps' fixes "
            f"would reach the quality at most {4 * t1 / t4:.1f}× sooner, if its fixes were worth what a 1×1 step's "
            f"are{_beyond_bound(results, 4 * t1 / t4)}")


def _beyond_bound(results: list[dict], bound: float) -> str:
    """The seeds of the synchronous 4-wide shapes that beat ``bound``, in words: a merge whose fixes
    were worth more than four of the 1×1 run's steps."""
    ref = {r["seed"]: r["ttq"] for r in results if r["config"] == "1×1" and r.get("task", "lines") == "lines"
           and r.get("ttq")}
    beat = [f"{r['config']} seed {r['seed']} {ref[r['seed']] / r['ttq']:.1f}×" for r in results
            if r.get("task", "lines") == "lines" and r["config"] in ("4×1 merge", "4×1 default") and r.get("ttq")
            and ref.get(r["seed"]) and ref[r["seed"]] / r["ttq"] > bound]
    if not beat:
        return ""
    return (" (a seed beats it when one merge carries fixes worth more than four of its 1×1 run's steps: "
            + ", ".join(beat) + ")")


def merge_paths(results: list[dict], task: str) -> str:
    rows = [r for r in results if r.get("task", "lines") == task and r.get("merges")]
    three = sum(r["merges"].get("three_way", 0) for r in rows)
    lm = sum(r["merges"].get("lm", 0) for r in rows)
    return f"{three} three-way and {lm} LM merges"


ANALYSIS_TEMPLATE = """## Why the numbers are what they are

**Budgets hold.** Every evaluation reserves its metric call before it is dispatched, a step is planned so that its
slots' minibatch tests plus one validation pass fit in what is left (at the tail, the rest is spent in one step),
an asynchronous proposal starts only with a block of calls for its minibatch tests while one validation pass stays
free, and an LM call reserves 1.5 × the most expensive call so far against the dollar cap. GEPA 0.1.4 checks its
budget between iterations and overshoots by up to the whole last iteration (see its rows: 8×1 validates every
improving child of 8 proposals after the check).

**Time to quality, and what limits it.** A merge no longer needs an LM call when the children changed different
lines: on the incremental task the runs made {paths_lines}; on the overlapping task {paths_grouped}. So a 4×1 merge
step costs one LM latency plus its evaluation waves, and its one validation pass carries the fixes of up to four
children. Split into steps and seconds per step (incremental task, seeds that reached the quality):

{limits}

A wider step needs fewer steps but each step is longer: the minibatch tests of four proposals queue on W = 4
workers, then the merge's test and one validation pass. {bound}; and a step's merge carries four fixes only when all
four children improved and fixed different failures (a proposal fixes one or two of what its three-example
minibatch showed, siblings of different parents see different failures, and some "fixes" drop another rule). 4×
sooner on average is therefore out of reach on this task with W = 4 and a 1 s LM; what got closest is said in the
targets above. On the overlapping task most merges conflict and go to the LM, a second LM latency per step, and the
advantage of 4×1 merge shrinks accordingly.

**Quality at the same budget** (the first table). The validation pass (16 calls) is the expensive part of a
proposal; a lineage advances one validated candidate at a time. With `accept = all` a wide step validates every
improving child; they each carry one or two fixes and sit on the frontier side by side, so the next step's parents
fork into separate lineages that never combine. `best` and `top_k` spend fewer validation passes per step but throw
fixes away. Sibling merge validates one child with all the step's fixes: several fixes per validation pass, one
lineage. Asynchronously without merging, every proposal in flight starts from a frontier up to one proposal old and
its improving children fork lineages: {async_plain}. With `merge_siblings`
improving children queue, and one turn at a time merges the waiting ones (once two wait, or the first has waited
half a proposal) with the current best, three-way or by the LM on a conflict, and validates that one merge: the
lineage stays one and a validation pass carries one to three fixes. Before the queue each improving child was
re-based and validated as it arrived, several passes side by side, so a merge was written over a best that another
pass then replaced and forked it: in the previous run of this benchmark 25 of 39 such merges were kept after
validation and the shape reached the 1×1 quality on 1 of 3 seeds (best val 0.771); with the queue, see the tables.
What still costs it budget: a proposal starts from the best as it is when a slot frees, up to a proposal old, so
some of its fixes repeat what another proposal added meanwhile, and its merge then adds nothing. Freeing a slot
as soon as a proposal's reflection ended (the next one reflects while the first is tested and validated) kept the LM
busier but made that worse: in a 12-seed trial such runs reached the 1×1 quality on 7 seeds, against 10 when a
proposal holds its slot until it is done, so it was not kept. `async C=4 rebase` (`merge = true`) validates the child first and then
the merge, two passes per improvement.

**Repeatability.** Time to quality moves a lot between runs, more than scores at the full budget. Two runs of
this benchmark before the present one (the code before the queue, load 8–20; then with it, idle) had 1×1 at 12.7 s
and 9.6 s and 4×1 merge at 2.11× and 1.62× sooner; the 9.6 s came from seed 2's 1×1 run, which then ended at 0.792
and reached 0.95 × that after 3.0 s. Later changes to the reflection prompt (it shows earlier attempts'
results) change what the simulated LM answers: the same seed's 1×1 run then ended at 0.906, and at 0.938 once
ties on the validation mean went to the descendant; in the present run it ends at {seed2_base}. With 16 validation examples one example is 0.06 of the score, so a target is reached or
missed by one example; a 12-seed check of 1×1, 4×1 merge and async C=4 merge is in `docs/benchmarks.md`. What held
in every run: 4×1 merge reaches the quality on every seed of the incremental task, asynchronous shapes without
merging do not, and no shape reaches it 4× sooner on average over the seeds. Synchronous runs repeat exactly, except where an early-stopped
validation pass paid for a different number of evaluations already running (then the last steps can differ);
asynchronous runs depend on timing throughout.

**Against GEPA 0.1.4** (same task, LM and evaluator): its evaluator runs in threads of the optimizer's process, with
no sandbox round trip, and it spends more calls than the budget (its overshoot column: {gepa_over}); its 4×1
and 8×1 lose quality against its own 1×1, and none of its shapes reached the 1×1 quality on every seed.

**Predicted vs measured.** The runtime model replays the schedule (`engine/runtime/sim.py`) with the LM latency,
evaluator latency, acceptance rate, share of merges that needed the LM and the shares (4)–(6) below, measured in the
run; it charges nothing for
the engine's own work (database writes, prompt building, thread hand-offs), which grows with the machine's load (see
the load average above): the prediction is optimistic by the engine's overhead. Its
time to quality (the section above) takes that overhead from the 1×1 run and counts improvements that reach the best.
Three things it once missed: (1) merge success. Nearly every merge passes its minibatch test, fewer are accepted after
validation ({async_merges}); the model now takes the share accepted after validation. A merge that loses a gain on
its test is never validated: the engine merges its children with the best one by one, or validates a child alone
when its own merge fails too (a fork). Until 2026-12-07 the model charged a lost merge a validation pass and
dropped its children; as the deterministic replay puts the first lost merge on a run's first merge, that delayed the
early gains that decide the time to quality (incremental async C=4 merge then +24 %, async C=8 merge +39 %).
(2) Keeping the best of several children. Improvements differ in size (a common failure mode is worth several
rare ones, and about half the children that improved on their minibatch did not raise the best of a 1×1 run at all,
by the model's count); a step that validates the child with the largest minibatch gain first
gains the largest of n, {best4} a mean improvement for n = 4 on these tasks. Counting one improvement per step, the
model had `4×1 best` at +44 % and no time to quality for several synchronous runs that reached it. (3) Forks. An
asynchronous child validated on top of a best that another validation replaced while it ran forks off the new best:
only one of the two can be the best. The model counted both, and said async C=8 reaches the quality when the engine's
runs never did. Whether a run reaches the quality at all, the model and the engine now disagree on {disagree}. What
still limits it: the quality is a handful of uneven jumps (3–5 new bests on a 1×1 run), so one lucky or unlucky child
moves a seed's time by a step or more, and the errors are means over the one to three seeds where both reached the
quality; *best of n* for n beyond four (8×1 all) is about the largest of a handful of
measured jumps; and the model counts a forked child as no gain at all, where the
engine's best still rises when the fork turns out better: for the asynchronous shapes without merging its gains are a
lower bound. Measured by hand on 2026-12-07 from the raw rows of that day (not by the benchmark): on the asynchronous
merge rows the model's seconds per metric call, up to the time to quality, were within a few milliseconds of the
runs' (incremental C=4 26 against 27 ms), so what it gets wrong is the number of calls the runs needed: their first
validations carried more improvements than the model credits (2.5–5.4 on the incremental task against 2).
Three more things it missed until 2026-12-08, now measured in each run and replayed: (4) retries. A proposal whose
first answer is unusable is asked again, one more LM call; a synchronous step waits for that slot, so a four-wide
step with one retried slot in four takes a second LM latency (the keywords task's synchronous wide rows were then
predicted 34–43 % too fast). (5) A three-way merge is tested only on the examples its siblings fixed, not on their
whole minibatches, so a step spends fewer metric calls than the model charged and a run takes more steps (the merges
here were tested on {merge_test} of their siblings' examples, on average). (6) A parent's minibatch results already
known are not paid again ({parent_share} of them paid here, wide shapes). The whole-run predictions of the first
tables (mean error per configuration, incremental and keywords tasks) went from −43 … +5 % (the run of 2026-12-05,
the model of 2026-12-07) to {after_whole}. Also found then: the keywords task's simulated LM could not answer a
retry (it read only the retry's last message, which holds no version), so every retry failed after a whole LM
call; it answers it now, which is one reason this page's keywords rows differ from the run of 2026-12-05.

## Reproducibility of the asynchronous schedule with a fixed seed

What still holds: proposal *n*'s random choices (its parent sample, its minibatch) come from generators derived
from (seed, *n*); its candidate id from (run, step, slot, parent, sibling index); its LM request only from its
prompt and sample index (so a repeated request is answered from the LM cache). Two proposals that start from the
same frontier are therefore identical, every choice is recorded (the frontier version each proposal saw, why its
parent was chosen), and with C = 1 the run *is* the synchronous 1×1 run. What does not hold: which frontier proposal
*n* sees, and which best an improving child is re-based onto, depend on which earlier proposals have finished, i.e.
on LM and evaluator timing, so two runs with the same seed can diverge (the spread of the async rows comes partly
from that). A resumed asynchronous run keeps every closed step; the proposals of steps not yet closed are redone
from the frontier as it is then, re-using any evaluation already paid for.

## The options, in short

| `[search]` | effect |
|---|---|
| `accept = "all"` | every improving child of a step pays a validation pass, most promising (largest minibatch gain) first |
| `accept = "best"` / `"top_k"` (`top_k = N`) | only the best / N best do; the others are kept as rejected with the reason "improved on its minibatch but not selected"; `top_k` ≥ the batch warns at load (it equals `all`) |
| `merge_siblings = true` | two or more improving children are combined — by a line-level three-way merge over their parent (no LM call) when they changed different lines, else by the reflection LM (purpose `merge`) for the conflicting component; the merge (origin `sibling_merge`, `merge_path` `three_way` or `lm`) is tested on their examples and validated instead of them only if it keeps every child's gains, else the accept rule applies. Asynchronously: each improving child is combined with the current best the same way |
| `merge = true` | the system-aware merge: two frontier members combined by a three-way merge over a common ancestor (never the LM); synchronously after a step, asynchronously after each validated child (at most `max_merges`) |
| `schedule = "async"` | no step barrier; C = P×K proposals in flight; every C proposals started form a step; P×K = 1 warns (it equals `sync`); `accept` does not apply (no step to choose in) |
| `max_score = …` | enables early-stopped validation passes; a stopped pass records why in `val_cut_short` |
"""


def analysis(results: list[dict]) -> str:
    return ANALYSIS_TEMPLATE.format(limits="\n".join(limits(results)), bound=step_bound(results),
                                    paths_lines=merge_paths(results, "lines"),
                                    paths_grouped=merge_paths(results, "grouped"), async_merges=async_merges(results),
                                    best4=best_of_range(results, 4), disagree=disagreements(results),
                                    async_plain=async_plain(results), seed2_base=_base_best(results, 2),
                                    gepa_over=gepa_overshoot(results),
                                    merge_test=_mean_latency(results, "merge_test", lambda r: r["merges"]["tried"]),
                                    parent_share=_mean_latency(results, "parent_eval_share",
                                                               lambda r: r["config"] != "1×1"),
                                    after_whole=_wall_errors(results))


def async_plain(results: list[dict]) -> str:
    """How the asynchronous shapes without merging fared on the incremental task, in words."""
    s = ttq_summary(results, "lines")
    best = {n: statistics.mean(r["best_val"] or 0 for r in a["rows"]) for n, a in s.items() if a["rows"]}
    if "1×1" not in best:
        return "(no 1×1 rows)"
    bar = 0.95 * best["1×1"]
    return "; ".join(f"{n} reached the 1×1 quality on {s[n]['reached']} of {s[n]['seeds']} seeds and ended at "
                     f"{best[n]:.3f} ({'above' if best[n] >= bar else 'below'} 0.95 × the 1×1 best, {bar:.3f})"
                     for n in ("async C=4", "async C=8") if n in best)


def _base_best(results: list[dict], seed: int) -> str:
    rows = [r for r in results if r["config"] == "1×1" and r.get("task", "lines") == "lines" and r["seed"] == seed]
    return f"{rows[0]['best_val']:.3f}" if rows and rows[0].get("best_val") is not None else "(not run)"


def gepa_overshoot(results: list[dict]) -> str:
    parts = []
    for task, name in TASK_NAMES.items():
        over = [r["overshoot"] for r in results if r["config"].startswith("GEPA") and r.get("task", "lines") == task]
        if over:
            parts.append(f"up to {max(over) * 100:.0f} % on the {name} task")
    return ", ".join(parts) or "not run"


def _mean_latency(results: list[dict], name: str, which) -> str:
    """A measured model input (``Latencies.name``) over the Refract rows ``which`` selects, in %."""
    vals = [r["latencies"][name] for r in results if r.get("latencies") and name in r["latencies"]
            and not r["config"].startswith("GEPA") and which(r)]
    return f"{statistics.mean(vals) * 100:.0f} %" if vals else "(not measured)"


def _wall_errors(results: list[dict]) -> str:
    """The range of the whole-run prediction errors (predicted − measured wall-clock, relative, the
    mean over seeds per configuration) on the incremental and keywords tasks."""
    errs: dict = {}
    for r in results:
        if r.get("predicted") and r.get("task", "lines") in ("lines", "keywords"):
            errs.setdefault((r.get("task", "lines"), r["config"]), []).append(r["predicted"] / r["wall"] - 1)
    means = [statistics.mean(e) for e in errs.values()]
    return f"{min(means) * 100:+.0f} … {max(means) * 100:+.0f} %".replace("-", "−") if means else "—"
