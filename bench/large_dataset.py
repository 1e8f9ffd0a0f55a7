"""What a person gets when they give the New run form a large dataset → docs/benchmarks-large-dataset.md.

A studio (``streamlit run app.py``, no engine worker) on a fresh SQLite database; headless
Chromium opens the New run page and gives it N JSONL rows (about 75 bytes each), two ways:

- **paste**: "paste text", the rows inserted into the Examples box at once (as Ctrl+V inserts the
  clipboard), then the box left (Streamlit sends a text area's value when it loses focus);
- **upload**: "upload a file", the rows as a .jsonl file given to the uploader.

Measured: seconds from giving the rows until the page has answered (the dataset's preview line,
or the message that refuses it, is drawn and the page is idle again), then seconds for one more
edit elsewhere in the form (typing a run name) to come back, which every later change pays. A
page that has not answered after ``--timeout`` seconds is reported as such.

Usage: .venv/bin/python bench/large_dataset.py [--rows 1000 10000 15000] [--timeout 180]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from e2e.conftest import CHROMIUM, LAUNCH_ARGS, VIEWPORT, by_key, start_studio, stop_studio  # noqa: E402
from storage.db import Database  # noqa: E402

OUT = ROOT / "docs" / "benchmarks-large-dataset.md"
LABELS = ("billing", "technical", "account", "shipping")
# measured once, before the paste boxes had a limit (the same script and machine, another run)
BEFORE = """**Before the paste limit** (2026-12-03, load average 16.5 / 11.0 / 8.3): a paste of 1,000 rows answered in
9.3 s and one of 12,000 rows did not answer within 150 s; the upload of 12,000 rows was refused in 2.5 s. The time
is the browser's: Chromium inserts a pasted multi-line text into a text area in time that grows with the square of
its length — in the form's box 47 kB took 2.8 s, 190 kB 27 s and 480 kB 454 s (load 10.6); on a bare page without
Streamlit 94 kB took 3.1 s and 480 kB 140 s; there, with a `maxlength` of 50,000 / 100,000 / 200,000 characters,
a 1.1 MB paste took 1.6 / 4.3 / 26 s (load 5.6).
Streamlit's `max_chars` cuts the value only after the browser has inserted it all. So the form's paste boxes get
the browser's `maxlength` of 50,000 characters (`ui/paste_limit.py`): a longer paste is cut as it is inserted,
the form says so under the box (*refused* above: "the paste box takes 50,000 characters … Upload the file
instead"), and an upload takes up to `limits.max_rows` (10,000) rows; more are refused naming the limit."""


def rows_text(n: int) -> str:
    return "".join(json.dumps({"id": f"t{i}", "text": f"ticket number {i}: my order has not arrived yet",
                               "label": LABELS[i % 4]}) + "\n" for i in range(n))


def _idle(page, timeout_s: float) -> None:
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                           timeout=timeout_s * 1000)


def _answered(page, n: int, timeout_s: float) -> str:
    """Wait until the dataset's preview line or a refusal is drawn; which one."""
    page.wait_for_function(
        """(n) => { const t = document.body.innerText;
                    return t.includes(n.toLocaleString('en-US') + ' examples') || t.includes(n + ' examples')
                        || t.includes('max_rows') || t.includes('the paste box takes'); }""",
        arg=n, timeout=timeout_s * 1000)
    _idle(page, timeout_s)
    text = page.inner_text("body")
    return "preview" if f"{n} examples" in text or f"{n:,} examples" in text else "refused"


def _open_form(browser, url: str, source: str):
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    page.goto(url + "/new")
    page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
    _idle(page, 60)
    by_key(page, "new_reset").get_by_role("button").click()  # the draft the previous measurement left
    _idle(page, 60)
    page.get_by_text(source, exact=True).click()
    _idle(page, 60)
    return ctx, page


def measure(browser, url: str, n: int, how: str, folder: Path, timeout_s: float) -> dict:
    ctx, page = _open_form(browser, url, "paste text" if how == "paste" else "upload a file")
    text = rows_text(n)
    t0 = time.monotonic()
    try:
        if how == "paste":
            box = by_key(page, "new_data_text").locator("textarea")
            box.focus()
            page.keyboard.insert_text(text)  # what Ctrl+V does: the clipboard inserted at once
            box.blur()
        else:
            path = folder / f"rows-{n}.jsonl"
            path.write_text(text)
            by_key(page, "new_data_upload").locator('input[type="file"]').set_input_files(str(path))
        outcome = _answered(page, n, timeout_s)
        given = time.monotonic() - t0
        t1 = time.monotonic()
        name = by_key(page, "new_name").locator("input")
        name.fill(f"large {how} {n}")
        name.blur()
        _idle(page, timeout_s)
        edit = time.monotonic() - t1
    except Exception as exc:  # noqa: BLE001 -- a page that did not answer is the finding
        return {"rows": n, "how": how, "bytes": len(text), "outcome": f"no answer ({type(exc).__name__})",
                "given_s": None, "edit_s": None}
    finally:
        ctx.close()
    return {"rows": n, "how": how, "bytes": len(text), "outcome": outcome, "given_s": given, "edit_s": edit}


def write(results: list[dict], load: tuple[float, float, float]) -> None:
    lines = ["# The New run form with a large dataset", "",
             f"Measured {datetime.now(timezone.utc):%Y-%m-%d} by `bench/large_dataset.py` on this machine "
             f"({os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} while it ran; "
             "other work shared the machine, so compare rows of one run, not absolute seconds across runs).", "",
             "Headless Chromium gives the New run page N JSONL rows of about 75 bytes, pasted into the Examples box "
             "or uploaded as a file. *Answered*: seconds until the preview line (or the refusal) is drawn and the "
             "page is idle; *next edit*: seconds for typing a run name afterwards to come back.", "",
             "| rows | how | size | outcome | answered (s) | next edit (s) |", "| ---: | --- | ---: | --- | ---: | ---: |"]
    for r in results:
        fmt = lambda v: "—" if v is None else f"{v:.1f}"  # noqa: E731
        lines.append(f"| {r['rows']:,} | {r['how']} | {r['bytes'] / 1e6:.2f} MB | {r['outcome']} | {fmt(r['given_s'])} | "
                     f"{fmt(r['edit_s'])} |")
    lines += ["", BEFORE]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1000, 5000, 10_000, 15_000])
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--how", nargs="+", default=["paste", "upload"])
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url = f"sqlite:///{folder}/bench.db"
        Database(url).create_all()
        proc, studio = start_studio(folder, url, worker=False)
        results = []
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                            args=LAUNCH_ARGS)
                for n in args.rows:
                    for how in args.how:
                        results.append(measure(browser, studio.url, n, how, folder, args.timeout))
                        print(results[-1], flush=True)
                browser.close()
        finally:
            stop_studio(proc)
        write(results, os.getloadavg())


if __name__ == "__main__":
    main()
