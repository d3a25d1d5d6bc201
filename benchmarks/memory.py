"""4. Memory: the resident size of an app server process after every analytic page has been
opened in a real browser (torch must not be loaded: checked in the process's memory map), and
after a benchmark run from the Benchmark page. Goal: analytic pages under 400 MiB.

Needs Debian's chromium (Playwright drives it); without it the section reports that it was skipped.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from common import ROOT, dump, result

LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ANALYTIC = ["/", "/concurrency", "/decode-roofline", "/published-figures"]


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status", encoding="utf-8"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def torch_loaded(pid: int) -> bool:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        return any("libtorch" in line for line in f)


def _settle(page, timeout_s=60):
    page.wait_for_selector('[data-testid="stMain"]', timeout=timeout_s * 1000)
    deadline, last, stable = time.time() + timeout_s, None, 0
    while time.time() < deadline:
        text = page.inner_text('[data-testid="stMain"]')
        if not page.locator('[data-testid="stStatusWidget"]').count() and text == last and len(text) > 40:
            stable += 1
            if stable >= 3:
                return text
        else:
            stable = 0
        last = text
        time.sleep(0.5)
    return last or ""


def run(tiny: bool = False) -> list[dict]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return [result("server_memory", "skipped", "", note="chromium is not installed")]
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, MLA_EXPLORER_HISTORY=os.path.join(tmp, "history.sqlite3"))
    proc = subprocess.Popen([sys.executable, "-m", "ui.serve", "--server.port", str(port), "--server.address",
                             "127.0.0.1", "--server.headless", "true"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    out = []
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(base + "/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        start = rss_mib(proc.pid)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS)
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
            os.environ["MLA_EXPLORER_HISTORY"] = env["MLA_EXPLORER_HISTORY"]
            from mla_core.bench import history

            saved = len(history.list_runs())
            out.append(result("server_rss_after_a_benchmark_run", after, "MiB", note="torch loaded; tensors freed",
                              run_s=round(time.time() - t0, 1), torch_loaded=torch_loaded(proc.pid),
                              runs_saved=saved, met=saved == 1, goal="the run finished and was saved"))
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run(a.tiny), a.out)
