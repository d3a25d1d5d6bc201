"""4. Memory: the resident size of an app server process after every analytic page has been
opened in a real browser (torch must not be loaded: checked in the process's memory map), and
after a benchmark run from the Benchmark page. Goal: analytic pages under 400 MiB.

Needs Debian's chromium (Playwright drives it); without it the section reports that it was skipped.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from common import ROOT, dump, result

sys.path.insert(0, os.path.join(ROOT, "tests"))
from browser_util import CHROMIUM, LAUNCH_ARGS, app_server, settle as _settle  # noqa: E402

ANALYTIC = ["/", "/concurrency", "/decode-roofline", "/published-figures"]


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status", encoding="utf-8"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def torch_loaded(pid: int) -> bool:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        return any("libtorch" in line for line in f)


def run(tiny: bool = False) -> list[dict]:
    if CHROMIUM is None:
        return [result("server_memory", "skipped", "", note="chromium is not installed")]
    from playwright.sync_api import sync_playwright

    tmp = tempfile.mkdtemp()
    history_path = os.path.join(tmp, "history.sqlite3")
    out = []
    try:
        with app_server(history_path) as (base, proc), sync_playwright() as p:
            start = rss_mib(proc.pid)
            browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for path in ANALYTIC:
                page.goto(base + path + "?model=deepseek-v3&context=131072", wait_until="domcontentloaded")
                _settle(page)
            analytic = rss_mib(proc.pid)
            torch_after_analytic = torch_loaded(proc.pid)
            out.append(result("server_rss_after_analytic_pages", analytic, "MiB", goal="< 400", met=analytic < 400,
                              rss_at_start_MiB=round(start, 1), pages=ANALYTIC))
            out.append(result("torch_loaded_after_analytic_pages", torch_after_analytic, "", goal="False",
                              met=not torch_after_analytic))
            # A benchmark run from the Benchmark page (quick CPU settings).
            page.goto(base + "/measure", wait_until="domcontentloaded")
            _settle(page)
            page.get_by_role("button", name="Set up a run on this machine").click()
            _settle(page)
            if tiny:
                page.get_by_role("spinbutton", name="Bandwidth buffer (MiB)").fill("16")
                page.keyboard.press("Enter")
                _settle(page)
                page.get_by_role("spinbutton", name="Context T (tokens per sequence)").fill("256")
                page.keyboard.press("Enter")
                _settle(page)
            t0 = time.time()
            page.get_by_role("button", name="Run the benchmark").click()
            deadline = time.time() + 300
            while time.time() < deadline:
                time.sleep(1)
                if "finished" in page.inner_text('[data-testid="stMain"]').lower() and not page.locator(
                        '[data-testid="stProgress"]').count():
                    break
            _settle(page)
            after = rss_mib(proc.pid)
            loaded = torch_loaded(proc.pid)
            browser.close()
        from mla_core.store import history

        saved = len(history.list_runs(path=history_path))
        out.append(result("server_rss_after_a_benchmark_run", after, "MiB", note="torch loaded; tensors freed",
                          run_s=round(time.time() - t0, 1), torch_loaded=loaded,
                          runs_saved=saved, met=saved == 1, goal="the run finished and was saved"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run(a.tiny), a.out)
