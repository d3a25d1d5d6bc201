"""Driving the real app in Debian's chromium (Playwright): shared by tests/test_browser.py and
benchmarks/memory.py. The app is started the way the README's `make app` starts it."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def app_server(history_path: str, log_path: str | None = None, timeout_s: float = 60):
    """Serve app.py on a free loopback port (`python -m ui.serve`, as `make app` does); yields
    (base_url, process). Raises RuntimeError with the log's tail if it does not come up."""
    port = free_port()
    env = dict(os.environ, MLA_EXPLORER_HISTORY=history_path)
    out = open(log_path, "w") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "ui.serve", "--server.port", str(port), "--server.address", "127.0.0.1",
         "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout_s
        while True:
            try:
                if urllib.request.urlopen(base + "/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    tail = open(log_path).read()[-2000:] if log_path else ""
                    raise RuntimeError("the app server did not start:\n" + tail) from None
                time.sleep(0.5)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log_path:
            out.close()


def settle(page, timeout_s: float = 60) -> str:
    """Wait until Streamlit has finished running the script and the page stopped changing;
    returns the main block's text."""
    page.wait_for_selector('[data-testid="stMain"]', timeout=timeout_s * 1000)
    deadline, last, stable = time.time() + timeout_s, None, 0
    while time.time() < deadline:
        running = page.locator('[data-testid="stStatusWidget"]').count()
        text = page.inner_text('[data-testid="stMain"]')
        if not running and text == last and len(text) > 40:
            stable += 1
            if stable >= 3:
                return text
        else:
            stable = 0
        last = text
        time.sleep(0.5)
    return last or ""


def first_chart(page, timeout_s: float = 90) -> None:
    """Scroll to the page's first chart, as a reader does, and wait until it is drawn (ui.charts
    draws a chart only when it comes near the window)."""
    page.wait_for_selector("div.mla-chart", state="attached", timeout=timeout_s * 1000)
    page.locator("div.mla-chart").first.scroll_into_view_if_needed()
    page.wait_for_selector(".js-plotly-plot", timeout=timeout_s * 1000)


def every_chart(page, timeout_s: float = 90) -> int:
    """Scroll to each chart on the page in turn, wait until each is drawn, and scroll back to the
    top; returns how many there are."""
    page.wait_for_selector("div.mla-chart", state="attached", timeout=timeout_s * 1000)
    charts = page.locator("div.mla-chart")
    for i in range(charts.count()):
        chart = charts.nth(i)
        chart.scroll_into_view_if_needed()
        chart.and_(page.locator(".js-plotly-plot")).wait_for(timeout=timeout_s * 1000)
    page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTo(0, 0)")
    return charts.count()
