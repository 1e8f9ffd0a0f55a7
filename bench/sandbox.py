"""Benchmark of the evaluator sandbox; writes docs/benchmarks-sandbox.md.

Measures, in one run on this machine:
1. the median per-evaluation overhead of a warm sandboxed LocalPool over a plain in-process
   call, for a trivial evaluator (target <= 5 ms);
2. the throughput of a CPU-bound evaluator with 1, 2 and 4 workers, as a speed-up over the
   same evaluator called in-process (target >= 0.8 x workers, up to the core count);
3. the cold start of one worker: spawn, sandbox, interpreter, evaluator compiled (target <= 300 ms);
4. the CPU time of one CPU-bound evaluation inside the sandbox vs in-process (unaffected by load);
5. for reference, the per-evaluation overhead of the Dask executor on a LocalCluster.

Run: .venv/bin/python bench/sandbox.py
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.executor import EvalTask  # noqa: E402
from engine.sandbox import isolation  # noqa: E402
from engine.sandbox.pool import LocalPool  # noqa: E402
from engine.sandbox.worker_process import SandboxSpec, WorkerProcess  # noqa: E402

TRIVIAL = "def evaluate(candidate):\n    return 1.0\n"
CPU_BOUND = ("def evaluate(candidate):\n    total = 0\n    for i in range(600_000):\n"
             "        total += i % 7\n    return float(total % 3)\n")
# the same loop, returning the CPU seconds it used: a ratio that other load cannot distort
CPU_TIMED = ("import time\ndef evaluate(candidate):\n    t0 = time.process_time()\n    total = 0\n"
             "    for i in range(600_000):\n        total += i % 7\n    return time.process_time() - t0\n")
SPEC = SandboxSpec(timeout_seconds=60, memory_mb=512)
OUT = ROOT / "docs" / "benchmarks-sandbox.md"


def in_process(source: str):
    namespace: dict = {}
    exec(compile(source, "evaluator.py", "exec"), namespace)
    return namespace["evaluate"]


def overhead(n: int = 1000) -> tuple[float, float]:
    fn = in_process(TRIVIAL)
    plain = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn("x")
        plain.append(time.perf_counter() - t0)
    pool = LocalPool(SPEC, TRIVIAL, 1)
    pool.wait_ready()
    try:
        for _ in range(50):  # warm-up
            pool.submit(EvalTask("x")).result()
        sandboxed = []
        for _ in range(n):
            t0 = time.perf_counter()
            pool.submit(EvalTask("x")).result()
            sandboxed.append(time.perf_counter() - t0)
    finally:
        pool.close()
    return statistics.median(plain), statistics.median(sandboxed)


def throughput(pool: LocalPool, n: int) -> float:
    t0 = time.perf_counter()
    for f in [pool.submit(EvalTask("x")) for _ in range(n)]:
        assert f.result().error is None
    return n / (time.perf_counter() - t0)


def speedups(worker_counts=(1, 2, 4), rounds: int = 3) -> tuple[float, dict]:
    """Median over rounds of (pool rate / in-process serial rate), each round measuring the
    serial baseline right before the pools, so that load from other processes hits both."""
    pools = {w: LocalPool(SPEC, CPU_BOUND, w) for w in worker_counts}
    try:
        for pool in pools.values():
            pool.wait_ready()
            throughput(pool, pool.workers)  # warm-up
        bases, ratios = [], {w: [] for w in worker_counts}
        for _ in range(rounds):
            base = serial_rate(10)
            bases.append(base)
            for w, pool in pools.items():
                ratios[w].append(throughput(pool, 8 * w) / base)
        return statistics.median(bases), {w: statistics.median(r) for w, r in ratios.items()}
    finally:
        for pool in pools.values():
            pool.close()


def serial_rate(n: int) -> float:
    fn = in_process(CPU_BOUND)
    t0 = time.perf_counter()
    for _ in range(n):
        fn("x")
    return n / (time.perf_counter() - t0)


def cpu_cost(n: int = 15) -> tuple[float, float]:
    """Median CPU seconds of one CPU-bound evaluation: in-process, and inside a sandboxed worker."""
    fn = in_process(CPU_TIMED)
    pool = LocalPool(SPEC, CPU_TIMED, 1)
    pool.wait_ready()
    try:
        plain, boxed = [], []
        for _ in range(n):
            plain.append(fn("x"))
            boxed.append(pool.submit(EvalTask("x")).result().score)
        return statistics.median(plain), statistics.median(boxed)
    finally:
        pool.close()


def cold_start(n: int = 10) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = WorkerProcess(SPEC, TRIVIAL)
        times.append(time.perf_counter() - t0)
        proc.close()
    return statistics.median(times)


def dask_overhead(n: int = 200) -> float | None:
    try:
        from engine.sandbox.dask_executor import DaskExecutor
    except ImportError:
        return None
    ex = DaskExecutor(SPEC, TRIVIAL, "local", 1)
    try:
        for _ in range(20):
            ex.submit(EvalTask("x")).result()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            ex.submit(EvalTask("x")).result()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        ex.close()


def main() -> None:
    cores = os.cpu_count() or 1
    mode = isolation.mode(SPEC)
    plain, sandboxed = overhead()
    over_ms = (sandboxed - plain) * 1000
    load_before = os.getloadavg()[0]
    base, ratio = speedups()
    rows = [(w, r * base, r, 0.8 * min(w, cores)) for w, r in ratio.items()]
    cpu_plain, cpu_boxed = cpu_cost()
    cold_ms = cold_start() * 1000
    dask = dask_overhead()
    ok = lambda good: "yes" if good else "**no**"  # noqa: E731
    lines = [
        "# Evaluator sandbox benchmark",
        "",
        f"Generated by `bench/sandbox.py` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC — "
        f"{cores} cores, Python {platform.python_version()}, isolation `{mode}`"
        f"{' (bubblewrap, uid 65534)' if mode == 'bwrap' and os.geteuid() == 0 else ''}. "
        f"All ratios come from this one run; 1-minute load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after (other processes compete for the same cores).",
        "",
        "| measure | value | target | met |",
        "| --- | --- | --- | --- |",
        f"| median per-evaluation overhead, warm pool vs in-process (trivial evaluator) | "
        f"{over_ms:.2f} ms ({sandboxed * 1000:.2f} ms vs {plain * 1e6:.1f} µs) | ≤ 5 ms | {ok(over_ms <= 5)} |",
        f"| cold start of one worker (spawn, sandbox, compile evaluator; median of 10) | {cold_ms:.0f} ms | "
        f"≤ 300 ms | {ok(cold_ms <= 300)} |",
    ]
    # Wall-clock throughput ratios mean nothing when other work competes for the cores
    # (1 worker has come out at 0.7x and 1.5x in-process on the same busy machine).
    busy = load_before > 0.5 * cores
    for w, rate, speedup, target in rows:
        lines.append(f"| CPU-bound throughput, {w} worker{'s' if w > 1 else ''} | {rate:.1f} evals/s = "
                     f"{speedup:.3f} × in-process serial ({base:.1f}/s; median of 3 rounds) | ≥ {target:.1f} × | "
                     f"{'not judged: machine busy' if busy else ok(speedup >= target)} |")
    lines.append(f"| CPU time of one CPU-bound evaluation, sandboxed / in-process (load-independent) | "
                 f"{cpu_boxed * 1000:.1f} ms / {cpu_plain * 1000:.1f} ms = {cpu_boxed / cpu_plain:.2f} | — | — |")
    if dask is not None:
        lines.append(f"| for reference: Dask LocalCluster, median round trip of a trivial evaluation | "
                     f"{dask * 1000:.2f} ms | — | — |")
    lines += ["", "Throughput targets stop growing at the core count: 4 workers on "
              f"{cores} cores cannot beat {cores} cores. The throughput ratios are wall-clock and so depend on "
              "what else runs on the machine (see the load average); the CPU-time row shows what the sandbox "
              "itself costs a computation.", ""]
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
