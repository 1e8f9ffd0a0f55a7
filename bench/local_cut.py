"""Benchmark: a reflection on the local model cut in the middle of its answer (a pause, a stop or
the time limit), with the runtime told that its answer was abandoned and, as before that, not told.

Each run sends a request for a long answer through ``LMClient.complete`` with an ``Interrupt``,
sets the interrupt 3 s later (the answer is being written by then) and measures, from that
moment: when the call returned to its caller, when the runtime was free again, and when a
one-token request sent right after the cut had its answer (what the next step, or a resumed run,
waits for). *Not told* is the runtime as it was before ``engine.lm.abandon``: the same call with
the abandon event hidden from it, so it writes the dropped answer to its end. The two alternate,
so that outside load hits both. Writes its section of docs/benchmarks-local-lm.md.

Run: ``.venv/bin/python bench/local_cut.py`` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.lm.client import LMClient  # noqa: E402  (first: litellm's offline price map)
from engine.lm import abandon  # noqa: E402
from engine.config import LOCAL_MODEL, LMConfig  # noqa: E402
from engine.interrupt import Interrupt  # noqa: E402
from bench.studio import write_section  # noqa: E402

OUT = ROOT / "docs" / "benchmarks-local-lm.md"
RUNS = 3
CUT_AFTER_S = 3.0
ANSWER_TOKENS = 400
SCRIPT = "bench/local_cut.py"


def one_cut(client: LMClient, told: bool, run: int) -> dict:
    cfg = LMConfig(model=LOCAL_MODEL, max_tokens=ANSWER_TOKENS, temperature=0.7)
    story = [{"role": "user", "content": "Write a Python module with a linked-list class of twenty methods, each "
                                         f"with a docstring and examples. Name the module draft_{run}_{told}."}]
    cancel, cut_at = Interrupt(), []

    def cut() -> None:
        cut_at.append(time.monotonic())
        cancel.set("cut by the benchmark")

    threading.Timer(CUT_AFTER_S, cut).start()
    hidden = abandon.current
    if not told:
        abandon.current = lambda: None  # the runtime as before: never told
    try:
        result = client.complete(cfg, story, cancel=cancel)
    finally:
        abandon.current = hidden
    returned = time.monotonic() - cut_at[0]
    assert result.error_kind == "interrupted", (result.error, result.seconds, result.tokens_out, result.text[:200])
    nxt = client.complete(cfg.model_copy(update={"max_tokens": 16, "temperature": 0.0}),
                          [{"role": "user", "content": f"Say yes ({run}, {told}, {time.time_ns()})."}])
    assert nxt.ok, nxt.error
    return {"returned": returned, "next": time.monotonic() - cut_at[0]}


def main() -> None:
    load_at_start = os.getloadavg()[0]
    client = LMClient(Path(tempfile.mkdtemp()) / "cache")
    client.complete(LMConfig(model=LOCAL_MODEL, max_tokens=16), [{"role": "user", "content": "hi"}])  # load the model
    rows: dict[bool, list[dict]] = {True: [], False: []}
    for run in range(RUNS):
        for told in (False, True):
            rows[told].append(one_cut(client, told, run))
            print(told, rows[told][-1], flush=True)
    med = {told: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for told, rs in rows.items()}
    ratio = med[False]["next"] / med[True]["next"]
    lines = [
        f"<!-- {SCRIPT} {RUNS} runs: begin (written by the benchmark) -->",
        "## A reflection cut in the middle of its answer",
        "",
        f"Produced by `{SCRIPT}` on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, 1-minute load average "
        f"{load_at_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end). A request for a long answer "
        f"(up to {ANSWER_TOKENS} tokens) through `LMClient.complete`, interrupted {CUT_AFTER_S:.0f} s after it was "
        "sent, while the answer is being written, as a pause, a stop or a run's time limit interrupts a "
        "reflection; then a short request (16 tokens at most). *Told*: the runtime learns that the answer was abandoned "
        "(`engine.lm.abandon`) and stops writing it; *not told*: as before, it writes the dropped answer to its "
        f"end. Seconds from the interrupt, medians of {RUNS} runs each, the two alternating:",
        "",
        "| runtime | the interrupted call returned (s) | the next request answered (s) |",
        "| --- | ---: | ---: |",
    ]
    for told, label in ((False, "not told (before)"), (True, "told (now)")):
        lines.append(f"| {label} | {med[told]['returned']:.2f} | {med[told]['next']:.2f} |")
    lines += [
        "",
        f"The caller was free at once either way; the runtime was not: a request sent after the cut was answered "
        f"{ratio:.0f}× sooner when the runtime was told ({med[True]['next']:.2f} s against "
        f"{med[False]['next']:.2f} s). A prompt being read when the interrupt comes is still read whole (the "
        "runtime hands over nothing before the first token), which for a reflection prompt of 700 tokens is "
        "up to about 18 s on one core.",
        f"<!-- {SCRIPT} {RUNS} runs: end -->",
    ]
    write_section(OUT, f"{RUNS} runs", "\n".join(lines), script=SCRIPT)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
