"""Studio benchmark in a real browser → docs/benchmarks-studio.md.

``bench/studio.py`` times the server's build of the run dashboard and the lineage page (AppTest, no
browser). This one times what a person waits for: from the start of the navigation until the page
is drawn whole in headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright, 1440×900),
for a synthetic run (``tests/support/synthetic.py``) at each scale asked, served by a real
``streamlit run app.py`` (``tests/e2e/conftest.py``'s ``start_studio``, no engine worker).

*Drawn whole* is the moment of the last DOM change before a quiet period (300 ms without any DOM
mutation), once all of these hold: Streamlit's script run has started and finished (the app's
``data-test-script-state`` went to ``running`` and is back to ``notRunning``), its status widget is
gone, no skeleton placeholder is left, the page has at least one Plotly chart and every one of them
has drawn its SVG (``.js-plotly-plot .main-svg``), and no exception is shown. A fragment's own
rerun (the page's live parts refresh themselves) only marks elements stale and back: those marks
are not counted as DOM changes.

- *cold*: a studio freshly started (its caches empty, its page modules not yet imported) and a new
  browser context (no cached JavaScript), the first navigation to the page; median of ``--repeat``,
  each on a studio of its own;
- *warm*: reloads of the same page in the same context on the same studio (cached reads, cached
  assets), median of ``--repeat``;
- *after a validation pass*: the run marked running (``bench.studio.live_again``), one candidate
  validated on every example (``tests.support.synthetic_live.add_validated``), then a reload;
  median of ``--repeat``.

The browser's share: when the server's script run started and finished (its ``new_session`` and
``script_finished`` messages, as Chromium received them on the websocket) against when the page was
drawn whole; the CPU seconds of the studio's process and of Chromium's processes during the
navigation (psutil); the bytes the server sent. The number of DOM nodes, SVG elements and Plotly
charts of each page drawn whole. The raw figures go to ``--json`` after each scale.
Screenshots of every page at every scale (scrolled through) go to ``--shots`` (not the repository):
shot the moment a cold load is called drawn whole, again after the warm reloads, and the top once
more 3 s later; the section says how many pixels differ between them.

Usage: .venv/bin/python bench/studio_browser.py [--scales 2000x200,10000x500 | --candidates N --val M]
       [--repeat 3] [--out FILE] [--json FILE] [--shots DIR] [--no-after]
       .venv/bin/python bench/studio_browser.py --from-json FILE   (rewrite the section from a saved run)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
warnings.filterwarnings("ignore")

from bench.studio import live_again, write_section  # noqa: E402
from bench.studio_cpu import browser_pids, cpu_seconds  # noqa: E402
from e2e.conftest import CHROMIUM, LAUNCH_ARGS as BROWSER_ARGS, VIEWPORT, start_studio, stop_studio  # noqa: E402

PAGES = (("dashboard", "run dashboard"), ("lineage", "lineage"))
QUIET_MS = 300
TIMEOUT_MS = 300_000  # a cold 10,000-candidate page on a busy machine: well beyond what it should take
LAUNCH_ARGS = [*BROWSER_ARGS, "--disable-quic", "--disable-component-update", "--disable-sync"]

# Installed in every document before the page's own scripts: the time of the last DOM mutation and
# every change of the script-run state Streamlit writes on its app element (performance.now(), ms
# from the navigation's start). The page's fragments rerun on their own every few seconds, a
# finished run's too (its LM settings every 2 s, its steering parts every 5 s): such a rerun marks
# the fragment's elements stale and back (``data-stale`` and the class that greys them) and flips
# the script state, while what is drawn stays the same; those marks alone are no drawing, and do
# not count as a DOM change. One querySelector per batch of mutations is all the watch adds.
WATCH = """(() => {
  const b = window.__bench = {last: performance.now(), state: null, states: []};
  const marks = (m) => m.type === 'attributes' && (m.attributeName === 'data-stale'
    || m.attributeName === 'data-test-script-state'
    || (m.attributeName === 'class' && m.target.getAttribute('data-testid') === 'stElementContainer'));
  new MutationObserver((ms) => {
    const t = performance.now();
    if (!ms.every(marks)) b.last = t;
    const app = document.querySelector('[data-testid="stApp"]');
    const s = app && app.getAttribute('data-test-script-state');
    if (s && s !== b.state) { b.state = s; b.states.push([s, t]); }
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
})();"""

# Polled every 50 ms: false until the page is drawn whole (see the module's docstring), then what
# the page knows about it. An exception shown on the page ends the wait at once.
DRAWN_WHOLE = """(quiet) => {
  const b = window.__bench;
  const app = document.querySelector('[data-testid="stApp"]');
  if (!b || !app) return false;
  const exc = document.querySelector('[data-testid="stException"]');
  if (exc) return {error: exc.innerText.slice(0, 2000)};
  if (!b.states.some(([s]) => s === 'running') || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid="stStatusWidget"]')) return false;
  if (document.querySelector('[data-testid="stSkeleton"], [data-testid="stAppSkeleton"]')) return false;
  const charts = document.querySelectorAll('[data-testid="stPlotlyChart"]');
  if (!charts.length) return false;
  for (const c of charts) if (!c.querySelector('.js-plotly-plot .main-svg')) return false;
  const now = performance.now();
  if (now - b.last < quiet) return false;
  const i = b.states.findIndex(([s]) => s === 'running');
  const started = b.states[i][1];
  const finished = b.states.slice(i).find(([s]) => s === 'notRunning')[1];  // the page's run, not a fragment's
  return {now, drawn: b.last, started, finished, charts: charts.length,
          nodes: document.getElementsByTagName('*').length,
          svg: document.querySelectorAll('svg, svg *').length};
}"""


class Frames:
    """The server's side of a navigation, from the websocket frames as Chromium's network layer
    receives them (Playwright's ``framereceived``, not delayed by a busy page): when the script
    run started (its first ``new_session``) and finished (``script_finished``, the whole page's
    run, not a fragment's), and the bytes the server sent. Only a websocket opened after the
    navigation began counts: until a reload has closed it, the page before keeps receiving its
    fragments' reruns (each begins with a ``new_session`` too)."""

    def __init__(self, page):
        self.reset(0.0)
        page.on("websocket", self._opened)

    def reset(self, t0: float) -> None:
        self.ws, self.t0, self.started, self.finished, self.bytes = None, t0, None, None, 0

    def _opened(self, ws) -> None:
        self.ws = ws
        ws.on("framereceived", lambda payload: self._frame(ws, payload))

    def _frame(self, ws, payload) -> None:
        t = time.perf_counter() - self.t0
        if ws is not self.ws or isinstance(payload, str):
            return
        self.bytes += len(payload)
        if self.finished is not None:
            return
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = ForwardMsg()
        msg.ParseFromString(payload)
        kind = msg.WhichOneof("type")
        if kind == "new_session" and self.started is None:
            self.started = t
        elif (kind == "script_finished" and self.started is not None
              and msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY):
            self.finished = t


def load(page, frames: Frames, navigate, studio_pid: int, chromium: list[int]) -> dict:
    """One navigation (``navigate()``: a goto or a reload) timed until the page is drawn whole:
    seconds from its start to the last DOM change (``drawn``), to the script run's start and end
    as the server sent them (``started``, ``finished``) and as the page took them in
    (``page_started``, ``page_finished``), and the CPU seconds the studio and Chromium spent meanwhile."""
    s0, b0 = cpu_seconds([studio_pid]), cpu_seconds(chromium)
    t0 = time.perf_counter()
    frames.reset(t0)
    navigate()
    got = page.wait_for_function(DRAWN_WHOLE, arg=QUIET_MS, polling=50, timeout=TIMEOUT_MS).json_value()
    t1 = time.perf_counter()
    s1, b1 = cpu_seconds([studio_pid]), cpu_seconds(chromium)
    if "error" in got:
        raise SystemExit(f"{page.url} raised:\n{got['error']}")
    if frames.finished is None:
        raise SystemExit(f"{page.url}: drawn whole, but no script_finished frame was seen")
    # the page's clock starts with its document, a little after navigate() began: every instant is
    # placed on the benchmark's clock from the end (the check that saw the page drawn whole)
    at = lambda ms: (t1 - t0) - (got["now"] - ms) / 1000  # noqa: E731
    return {"drawn": at(got["drawn"]), "started": frames.started, "finished": frames.finished,
            "page_started": at(got["started"]), "page_finished": at(got["finished"]), "bytes": frames.bytes,
            "cpu_studio": s1 - s0, "cpu_browser": b1 - b0, "charts": got["charts"], "nodes": got["nodes"],
            "svg": got["svg"]}


def screenshots(page, folder: Path, name: str) -> list[str]:
    """The page as it is, scrolled through at once (no wait: what was called drawn whole is what
    is shot), one 1440×900 shot per screen (Streamlit scrolls its main area, not the document)."""
    folder.mkdir(parents=True, exist_ok=True)
    main = page.locator('[data-testid="stMain"]')
    height, view = main.evaluate("el => [el.scrollHeight, el.clientHeight]")
    paths = []
    for i, top in enumerate(range(0, max(1, height), max(1, view - 60))):
        main.evaluate(f"el => el.scrollTo(0, {top})")
        path = folder / f"{name}-{i}.png"
        page.screenshot(path=str(path))
        paths.append(str(path))
    main.evaluate("el => el.scrollTo(0, 0)")
    return paths


def measure_scale(browser, n_cands: int, n_val: int, repeat: int, after: bool, shots: Path) -> dict:
    """Every load of both pages at one scale, on a run generated for it in a folder of its own
    (removed afterwards: 10,000 × 500 is a database of hundreds of MB)."""
    tmp = Path(tempfile.mkdtemp(prefix="refract-bench-browser-"))
    try:
        return measure_run(browser, tmp, n_cands, n_val, repeat, after, shots)
    finally:
        from storage.db import close_all

        close_all()
        shutil.rmtree(tmp, ignore_errors=True)


def measure_run(browser, tmp: Path, n_cands: int, n_val: int, repeat: int, after: bool, shots: Path) -> dict:
    from storage import queries
    from storage.db import open_db
    from tests.support.synthetic import generate_run
    from tests.support.synthetic_live import add_validated

    url = f"sqlite:///{tmp}/bench.db"
    db = open_db(url)
    t = time.perf_counter()
    run_id = generate_run(db, n_candidates=n_cands, n_val=n_val)
    gen_s = time.perf_counter() - t
    # what the generator leaves in this process (the kept frontier add_validated needs) is frozen, so
    # that a collection walking it never delays the handling of the page's frames and checks
    import gc

    gc.collect()
    gc.freeze()
    cands = queries.candidate_rows(db, run_id)
    scale = f"{n_cands}x{n_val}"
    out = {"scale": scale, "candidates": len(cands), "accepted": int((cands.status == "accepted").sum()),
           "val": n_val, "generation_s": gen_s, "pages": {}}
    print(f"{scale}: generated {len(cands):,} candidates in {gen_s:.1f} s", flush=True)

    def context():
        ctx = browser.new_context(viewport=VIEWPORT)
        ctx.add_init_script(WATCH)
        pg = ctx.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        return ctx, pg, Frames(pg)

    chromium = browser_pids()
    for path, _ in PAGES:
        link = f"/{path}?run={run_id}"
        got = out["pages"][path] = {"cold": [], "warm": [], "after": []}
        for i in range(repeat):
            # a studio of its own for each cold load: nothing cached, nothing imported by a page yet
            proc, studio = start_studio(tmp, url, worker=False)
            try:
                ctx, pg, frames = context()
                got["cold"].append(load(pg, frames, lambda: pg.goto(studio.url + link, wait_until="commit"),
                                        proc.pid, chromium))
                print(scale, path, "cold", got["cold"][-1], flush=True)
                if i == repeat - 1:
                    got["shots"] = screenshots(pg, shots, f"{scale}-{path}-cold")
                    for _ in range(repeat):
                        got["warm"].append(load(pg, frames, lambda: pg.reload(wait_until="commit"), proc.pid, chromium))
                        print(scale, path, "warm", got["warm"][-1], flush=True)
                    got["shots"] += screenshots(pg, shots, f"{scale}-{path}-warm")
                    # and the top once more, 3 s later: anything drawn after "drawn whole" shows here
                    pg.wait_for_timeout(3000)
                    got["shots"].append(str(shots / f"{scale}-{path}-warm-later.png"))
                    pg.screenshot(path=got["shots"][-1])
                ctx.close()
            finally:
                stop_studio(proc)

    if after:
        # the run generated completed, made live again (no engine takes a completed run back): from
        # here on the dashboard's fragments refresh themselves as they do for a running run
        live_again(db, run_id)
        proc, studio = start_studio(tmp, url, worker=False)
        try:
            for path, _ in PAGES:
                ctx, pg, frames = context()
                # the first load of the running run fills the caches; each pass then changes what it changes
                load(pg, frames, lambda: pg.goto(f"{studio.url}/{path}?run={run_id}", wait_until="commit"),
                     proc.pid, chromium)
                for _ in range(repeat):
                    add_validated(db, run_id)
                    out["pages"][path]["after"].append(load(pg, frames, lambda: pg.reload(wait_until="commit"),
                                                            proc.pid, chromium))
                    print(scale, path, "after a validation pass", out["pages"][path]["after"][-1], flush=True)
                ctx.close()
        finally:
            stop_studio(proc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="2000x200,10000x500", help="candidates x validation examples, comma-separated")
    ap.add_argument("--candidates", type=int, help="one scale: with --val, in place of --scales")
    ap.add_argument("--val", type=int)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-after", action="store_true", help="skip the loads after a validation pass")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-studio.md"))
    ap.add_argument("--json", default=str(Path(tempfile.gettempdir()) / "refract-studio-browser.json"),
                    help="the raw figures of the run, to rewrite the section later with --from-json")
    ap.add_argument("--shots", default=str(Path(tempfile.gettempdir()) / "refract-studio-browser-shots"))
    ap.add_argument("--from-json", help="write the section from a saved run; measure nothing")
    args = ap.parse_args()

    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
    else:
        if args.candidates or args.val:
            scales = [(args.candidates or 2000, args.val or 200)]
        else:
            scales = [tuple(int(x) for x in s.lower().split("x")) for s in args.scales.split(",")]
        result = run(scales, args.repeat, not args.no_after, Path(args.shots), Path(args.json))
        print(f"raw figures in {args.json}")
    section = render(result)
    write_section(Path(args.out), ",".join(s["scale"] for s in result["scales"]), section, "bench/studio_browser.py")
    print(section)


def run(scales: list[tuple[int, int]], repeat: int, after: bool, shots: Path, raw: Path) -> dict:
    import logging

    from playwright.sync_api import sync_playwright

    logging.getLogger("streamlit").setLevel(logging.ERROR)
    result = {"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "load_start": os.getloadavg()[0],
              "repeat": repeat, "quiet_ms": QUIET_MS, "scales": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        result["chromium"] = browser.version
        try:
            for n_cands, n_val in scales:
                result["scales"].append(measure_scale(browser, n_cands, n_val, repeat, after, shots))
                result["load_end"] = os.getloadavg()[0]
                raw.write_text(json.dumps(result, indent=1))  # a scale that fails later leaves these
        finally:
            browser.close()
    return result


def med(loads: list[dict], key: str) -> float:
    return statistics.median(x[key] for x in loads)


def render(result: dict) -> str:
    keys = ",".join(s["scale"] for s in result["scales"])
    after = any(p["after"] for s in result["scales"] for p in s["pages"].values())
    n = result["repeat"]

    def run_span(loads: list[dict]) -> str:
        return f"{med(loads, 'started'):.2f}–{med(loads, 'finished'):.2f}"

    def tail(loads: list[dict]) -> float:
        return statistics.median(x["drawn"] - x["finished"] for x in loads)

    lines = [
        f"<!-- bench/studio_browser.py {keys}: begin (written by the benchmark; a run at these scales replaces it) -->",
        "## In a browser: until each page is drawn whole",
        "",
        f"Produced by `bench/studio_browser.py --scales {keys}` on {result['date']} ({result['cores']} cores, 1-minute "
        f"load average {result['load_start']:.1f} at the start and {result['load_end']:.1f} at the end; headless "
        f"Chromium {result['chromium']} with software rendering, 1440×900, driven by Playwright; a real "
        "`streamlit run app.py` without its engine worker; SQLite). The same synthetic runs as above "
        "(`tests/support/synthetic.py`, seed 42): "
        + "; ".join(f"{s['candidates']:,} candidates × {s['val']} validation examples ({s['accepted']:,} accepted), "
                    f"generated in {s['generation_s']:.1f} s" for s in result["scales"]) + ".",
        "",
        "Seconds from the start of the navigation until the page is **drawn whole**: the last DOM change before "
        f"{result['quiet_ms']} ms without any, once Streamlit's script run has finished (the app's script state back "
        "to `notRunning`, no status widget), no skeleton placeholder is left and every Plotly chart of the page has "
        "drawn its SVG. *Cold*: a studio freshly started (caches empty; the page's modules are imported by this "
        "first run) and a new browser context (Streamlit's JavaScript fetched and compiled), median of "
        f"{n}, each on a studio of its own. *Warm*: a reload on the same studio and in the same context, median of {n}."
        + (" *After a validation pass*: the run marked running, one candidate validated on every example "
           f"(`add_validated`), then a reload, median of {n}." if after else "")
        + " *Server's script run*: seconds from the start of the navigation to its first and last message "
        "(`new_session`, `script_finished`) as Chromium received them on the websocket; the server sends the "
        "elements while it runs and the browser draws them meanwhile. *Browser after*: from the server's "
        "`script_finished` to drawn whole, the drawing left once the server is done.",
        "",
        "| scale | page | cold (s) | warm (s) |" + (" after a validation pass (s) |" if after else "")
        + " server's script run, cold (s) | server's script run, warm (s) | browser after, cold (s) | "
        "browser after, warm (s) |",
        "| --- | --- | ---: | ---: |" + (" ---: |" if after else "") + " ---: | ---: | ---: | ---: |",
    ]
    for s in result["scales"]:
        for path, name in PAGES:
            p = s["pages"][path]
            cold, warm = p["cold"], p["warm"]
            lines.append(
                f"| {s['candidates']:,} × {s['val']} | {name} | **{med(cold, 'drawn'):.2f}** | **{med(warm, 'drawn'):.2f}** |"
                + (f" **{med(p['after'], 'drawn'):.2f}** |" if after else "")
                + f" {run_span(cold)} | {run_span(warm)} | {tail(cold):.2f} | {tail(warm):.2f} |")
    lines += [
        "",
        "CPU seconds spent during the navigation (until drawn whole) by the studio's process and by Chromium's "
        "processes (psutil; medians), what the server sent on the websocket for a warm load, and the size of the "
        "page drawn whole:",
        "",
        "| scale | page | studio CPU cold (s) | browser CPU cold (s) | studio CPU warm (s) | browser CPU warm (s) | "
        "sent, warm (kB) | DOM nodes | SVG elements | Plotly charts |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in result["scales"]:
        for path, name in PAGES:
            cold, warm = s["pages"][path]["cold"], s["pages"][path]["warm"]
            lines.append(
                f"| {s['candidates']:,} × {s['val']} | {name} | {med(cold, 'cpu_studio'):.2f} | "
                f"{med(cold, 'cpu_browser'):.2f} | {med(warm, 'cpu_studio'):.2f} | {med(warm, 'cpu_browser'):.2f} | "
                f"{med(warm, 'bytes') / 1000:,.0f} | {warm[-1]['nodes']:,} | {warm[-1]['svg']:,} | {warm[-1]['charts']} |")
    big = max(result["scales"], key=lambda s: s["candidates"])
    small = min(result["scales"], key=lambda s: s["candidates"])
    lines += ["", f"Target for reference: each page ≤ 1 s server-side (`bench/studio.py`, AppTest, no browser). What "
              f"the browser adds to it, at {big['candidates']:,} × {big['val']}:", ""]
    for path, name in PAGES:
        cold, warm = big["pages"][path]["cold"], big["pages"][path]["warm"]
        lines.append(
            f"- **{name}**: drawn whole {med(warm, 'drawn'):.2f} s after a reload began, {med(cold, 'drawn'):.2f} s "
            f"cold. The server's script run starts {med(warm, 'started'):.2f} s after the reload began "
            f"({med(cold, 'started'):.2f} s cold: the browser first fetches and compiles Streamlit's JavaScript, the "
            f"studio starts the session) and ends at {med(warm, 'finished'):.2f} s ({med(cold, 'finished'):.2f} s "
            f"cold); the browser then draws for another {tail(warm):.2f} s ({tail(cold):.2f} s cold). Over the whole "
            f"load Chromium spends {med(warm, 'cpu_browser'):.2f} s of CPU ({med(cold, 'cpu_browser'):.2f} s cold), "
            f"the studio {med(warm, 'cpu_studio'):.2f} s ({med(cold, 'cpu_studio'):.2f} s cold).")
    slow = [f"the {name} ({med(big['pages'][path]['warm'], 'drawn'):.2f} s)" for path, name in PAGES
            if med(big["pages"][path]["warm"], "drawn") > 1.0]
    lines += ["", ("Drawn whole later than 1 s after a reload, in this browser: " + " and ".join(slow) + ". "
                   if slow else "Every page is drawn whole within 1 s of a reload, in this browser. ")
              + "On these two cores the browser's drawing (software rendering) and the studio's script run share "
              "the CPU; over a reload Chromium spends "
              + " and ".join(f"{med(big['pages'][path]['warm'], 'cpu_browser') / med(big['pages'][path]['warm'], 'cpu_studio'):.1f}×"
                             f" the studio's CPU for the {name}" for path, name in PAGES) + "."]
    if small is not big:
        grow = []
        for path, name in PAGES:
            a, b = small["pages"][path]["warm"], big["pages"][path]["warm"]
            grow.append(f"the {name} {med(a, 'drawn'):.2f} → {med(b, 'drawn'):.2f} s warm, "
                        f"{a[-1]['nodes']:,} → {b[-1]['nodes']:,} DOM nodes, {med(a, 'bytes') / 1000:,.0f} → "
                        f"{med(b, 'bytes') / 1000:,.0f} kB sent")
        lines[-1] += (f" From {small['candidates']:,} × {small['val']} to {big['candidates']:,} × {big['val']}: "
                      + "; ".join(grow) + ". The pages draw a bounded part of a run (tables a page at a time, the "
                      "heatmap's and the lineage's rows and nodes capped: *Pages and plots the eye can use* above)" + (", so what the browser draws hardly grows with the run (each page's warm time "
                                       "within 25 % of the smaller run's)." if all(
                          med(big["pages"][path]["warm"], "drawn") <= 1.25 * med(small["pages"][path]["warm"], "drawn")
                          for path, _ in PAGES) else "; still, the browser's time grows with the run."))
    same = shots_compared(result)
    if same is not None:
        lines += ["", same]
    lines.append(f"<!-- bench/studio_browser.py {keys}: end -->")
    return "\n".join(lines)


def shots_compared(result: dict) -> str | None:
    """Whether "drawn whole" was the whole page, from the run's screenshots (when they are still
    there): each screen shot the moment a cold load was called drawn whole, against the same screen
    after the warm reloads, and the top of the page against the same 3 s later. Pixels whose grey
    level differs by more than 10 of 255 are counted (anti-aliasing differs by 1 or 2)."""
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return None
    pairs = []
    for s in result["scales"]:
        for path, _ in PAGES:
            shots = [Path(x) for x in s["pages"][path].get("shots", [])]
            cold = [x for x in shots if "-cold-" in x.name]
            pairs += [(c, c.with_name(c.name.replace("-cold-", "-warm-"))) for c in cold]
            pairs += [(x.with_name(x.name.replace("-later", "-0")), x) for x in shots if x.name.endswith("-later.png")]
    if not pairs or not all(a.exists() and b.exists() for a, b in pairs):
        return None
    differing = 0
    for a, b in pairs:
        diff = ImageChops.difference(Image.open(a).convert("L"), Image.open(b).convert("L"))
        differing += sum(diff.point(lambda v: 255 if v > 10 else 0).histogram()[255:])
    return (f"Screenshots (1440×900, each page scrolled through): the {len(pairs)} pairs of screens compared — each "
            "screen at the moment a cold load was called drawn whole against the same screen after the warm "
            "reloads, and the top of each page after the reloads against the same 3 s later — differ in "
            f"{differing:,} pixels (grey level off by more than 10 of 255).")


if __name__ == "__main__":
    main()
