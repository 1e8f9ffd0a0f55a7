"""The real-LM figures the README quotes are what the committed raw rows give (bench/real_lm_report.py)."""

import statistics
from pathlib import Path

import pytest

from bench.real_lm import raw_rows
from bench.real_lm_report import paired_differences, paired_interval, summarize, summed_gains

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _rows(*names: str) -> list[dict]:
    return [row for name in names for row in raw_rows(DOCS / name)]


def _figures(rows: list[dict]) -> tuple[float, float, float, float]:
    """(Refract's summed mean gain over GEPA's, paired mean, its 95 % interval), as the page computes them."""
    _, refract, gepa = summed_gains(summarize(rows))
    diffs = paired_differences(rows)
    return (refract / gepa, statistics.fmean(diffs), *paired_interval(diffs))


def _readme() -> str:
    return (DOCS.parent / "README.md").read_text()


@pytest.mark.parametrize("raw,figures,quoted", [
    (("benchmarks-real-lm-b8065cb.jsonl",), (1.25, 0.11, -0.06, 0.28),
     ("1.25× GEPA's summed", "paired +0.11 [−0.06, +0.28]")),
    (("benchmarks-real-lm-63a0857.jsonl", "benchmarks-real-lm-b8065cb.jsonl"), (1.39, 0.13, 0.02, 0.23),
     ("1.39×, paired +0.13 [+0.02, +0.23]",)),
    (("benchmarks-real-lm-ef237f1.jsonl",), (1.13, 0.07, -0.03, 0.17),
     ("1.13× GEPA's summed", "paired +0.07 [−0.03, +0.17]")),
    (("benchmarks-real-lm-6ba36a1.jsonl",), (1.39, 0.15, -0.01, 0.32),
     ("1.39× GEPA's summed", "paired +0.15 [−0.01, +0.32]")),
    (("benchmarks-real-lm-9d4c4bb.jsonl",), (1.20, 0.09, -0.0, 0.2),
     ("1.20× GEPA's", "paired +0.09 [−0.00, +0.20]")),
    (("benchmarks-real-lm-6ba36a1.jsonl", "benchmarks-real-lm-9d4c4bb.jsonl"), (1.29, 0.12, 0.03, 0.22),
     ("1.29×, paired +0.12 [+0.03, +0.22]",)),
    (("benchmarks-real-lm-e09e744.jsonl",), (1.16, 0.08, -0.07, 0.22),
     ("1.16× GEPA's summed, paired +0.08 [−0.07, +0.22]",)),
    (("benchmarks-real-lm-6ba36a1.jsonl", "benchmarks-real-lm-9d4c4bb.jsonl", "benchmarks-real-lm-e09e744.jsonl"),
     (1.24, 0.11, 0.03, 0.19), ("1.24×, paired +0.11 [+0.03, +0.19]",)),
], ids=["run-10", "runs-9-and-10-pooled", "run-11", "run-12", "run-13", "runs-12-and-13-pooled", "run-14",
        "runs-12-to-14-pooled"])
def test_run_figures_in_the_readme(raw, figures, quoted):
    """Summed ratio and paired difference with its interval, as the README quotes them for each run."""
    ratio, mean, lo, hi = _figures(_rows(*raw))
    assert (round(ratio, 2), round(mean, 2), round(lo, 2), round(hi, 2)) == figures
    readme = _readme()
    assert all(q in readme for q in quoted), [q for q in quoted if q not in readme]


def test_retry_wording_figures_in_the_readme():
    """The README's figures for the retry after an unchanged prose answer (bench/retry_dev.py's raw rows)."""
    from bench.retry_dev import summary

    s = summary(_rows("benchmarks-retry-dev.jsonl"))
    before, now = s["list"], s["sentences"]
    assert (before["copies_prompt"], before["retries"], now["copies_prompt"], now["retries"]) == (12, 16, 0, 15)
    assert now["tokens"] < before["tokens"] / 2 and now["above_seed"] == 2 * before["above_seed"]
    readme = _readme()
    assert "in 12 of 16 retries on the development prompt task; asked this way, in none of 15" in readme
    assert "twice as many of its answers scored above the seed" in readme


@pytest.mark.parametrize("raw", ["benchmarks-real-lm-6ba36a1.jsonl", "benchmarks-real-lm-9d4c4bb.jsonl"],
                         ids=["run-12", "run-13"])
def test_no_best_prompt_carries_the_reflection_prompt(raw):
    """The README's "no best prompt carried copies of the reflection prompt" (runs 12 and 13's raw rows)."""
    from bench.retry_dev import PROMPT_SECTIONS

    bests = [r["best"] for r in _rows(raw) if r["system"] == "refract" and r["task"] == "price_prompt"]
    assert len(bests) == 5 and not any(x in b for b in bests for x in PROMPT_SECTIONS + ("```",))
    assert "no best prompt carried copies of the reflection prompt" in _readme()


def test_the_ceiling_ratios_in_the_readme():
    """A search that reached the whole answer on every run: its summed gain over GEPA's, runs 11 and 12."""
    def ceiling_ratio(name: str) -> float:
        rows = _rows(name)
        seeds = {r["task"]: r["test"] for r in rows if r["system"] == "seed"}
        _, _, gepa = summed_gains(summarize(rows))
        return sum(1 - t for t in seeds.values()) / gepa

    assert round(ceiling_ratio("benchmarks-real-lm-6ba36a1.jsonl"), 1) == 2.0
    assert round(ceiling_ratio("benchmarks-real-lm-ef237f1.jsonl"), 2) == 1.53
    assert "2.0× GEPA's summed in run 12 and 1.53× in run 11" in _readme()


def test_runs_12_and_13_task_by_task_as_the_readme_says():
    """Run 13 at or above GEPA on every task; runs 12 and 13 pooled ahead on three and 0.02 behind on the code task."""
    def lead(*names: str) -> dict[str, float]:
        s = summarize(_rows(*names))
        return {t: s[(t, "refract")]["gain"] - s[(t, "gepa")]["gain"] for t, system in s if system == "gepa"}

    assert all(d >= 0 for d in lead("benchmarks-real-lm-9d4c4bb.jsonl").values())
    pooled = lead("benchmarks-real-lm-6ba36a1.jsonl", "benchmarks-real-lm-9d4c4bb.jsonl")
    assert round(pooled.pop("human_size_code"), 2) == -0.02 and all(d > 0 for d in pooled.values())
    assert "ahead on the text, prompt and regex tasks and 0.02 behind on the code task" in _readme()


def test_runs_12_to_14_pooled_task_by_task_as_the_readme_says():
    """Runs 12, 13 and 14 pooled: ahead on the text, prompt and regex tasks, 0.08 behind on the code task."""
    s = summarize(_rows("benchmarks-real-lm-6ba36a1.jsonl", "benchmarks-real-lm-9d4c4bb.jsonl",
                        "benchmarks-real-lm-e09e744.jsonl"))
    lead = {t: s[(t, "refract")]["gain"] - s[(t, "gepa")]["gain"] for t, system in s if system == "gepa"}
    assert round(lead.pop("human_size_code"), 2) == -0.08 and all(d > 0 for d in lead.values())
    assert "ahead on the text, prompt and regex\ntasks and 0.08 behind on the code task" in _readme()


def test_run_14s_one_best_prompt_with_the_reflection_prompts_examples_as_the_page_says():
    """Run 14: one best prompt of five (seed 39) holds a copy of the examples the reflection prompt showed."""
    bests = {r["seed"]: r["best"] for r in _rows("benchmarks-real-lm-e09e744.jsonl")
             if r["system"] == "refract" and r["task"] == "price_prompt"}
    assert [seed for seed, b in bests.items() if "```" in b or "### Example" in b] == [39]
    page = (DOCS / "benchmarks-real-lm.md").read_text()
    assert "of five (seed 39) carries a copy of the examples the reflection prompt showed" in page
