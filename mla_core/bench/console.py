"""The benchmark command line's console pieces (a progress bar, SIGTERM as a cancel, one-line
errors), apart from its parser so that `bench` and `bench --profile` share them without
importing each other."""
from __future__ import annotations

import argparse
import contextlib
import signal
import threading
import time


class _Bar:
    """A one-line progress bar on stderr (\\r-redrawn); cleared before any error line."""

    def __init__(self, stream, enabled: bool):
        self.stream = stream
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.drawn = False

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        width = 24
        fill = int(width * done / max(total, 1))
        text = f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {time.perf_counter() - self.t0:5.1f}s {label}"
        self.stream.write(text[:110].ljust(110))
        self.stream.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 110 + "\r")
            self.stream.flush()
            self.drawn = False


@contextlib.contextmanager
def _cancel_on_sigterm(cancel: threading.Event):
    """While running, SIGTERM sets `cancel`: the run stops at the next repetition, frees its
    memory and exits 2 with one line (only from the main thread, where signals arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda signum, frame: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:600]


def _short(text) -> str:
    text = str(text)
    return repr(text if len(text) <= 30 else text[:27] + "...")


def _int(name: str, minimum: int, maximum: int):
    def parse(text: str) -> int:
        t = str(text).strip().replace("_", "")
        if not t.isdigit() or len(t) > 12:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {_short(text)}")
        v = int(t)
        if not minimum <= v <= maximum:
            raise argparse.ArgumentTypeError(f"{name} must be between {minimum:,} and {maximum:,}, got {v:,}")
        return v

    parse.__name__ = name
    return parse
