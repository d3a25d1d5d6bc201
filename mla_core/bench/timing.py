"""The one clock every measurement reads, and the repetition loop around it.

CUDA and MPS run asynchronously: a clock read without a synchronise times the launch, not the
work (docs/model.md, "Measuring on the local device"). `SyncClock` is the only place this package
reads time:
    cuda   torch.cuda.synchronize(); start event .record() ... end event .record();
           torch.cuda.synchronize(); start.elapsed_time(end)        (ROCm goes through torch.cuda)
    mps    torch.mps.synchronize(); perf_counter() ... torch.mps.synchronize(); perf_counter()
    cpu    perf_counter() ... perf_counter()                        (nothing to synchronise)

`measure` runs warm-up calls, then timed repetitions until `reps` or until `budget_s` is spent
(at least `min_reps`), calling `flush` (zeroing a buffer larger than the GPU L2) before each
repetition, outside the timed region. Every call of the measured function, warm-up included,
sits between `clock.start()` and `clock.stop()`.

Why not `torch.utils.benchmark.Timer`: it times blocks of many back-to-back calls, with no hook
to clear the L2 between repetitions outside the timed region, and it would hide the synchronise
that tests must be able to see. The statistics are the same: median and best of many.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .errors import BenchCancelled

_now = time.perf_counter  # the host clock (a module name so that tests can watch it)


class SyncClock:
    """Synchronise, then read the clock. One instance per run; `kind` is cuda, mps or cpu."""

    def __init__(self, kind: str):
        if kind not in ("cuda", "mps", "cpu"):
            raise ValueError(f"unknown device kind {kind!r}")
        self.kind = kind
        self._t0 = 0.0
        self._events = None

    def sync(self) -> None:
        if self.kind == "cuda":
            torch.cuda.synchronize()
        elif self.kind == "mps":
            torch.mps.synchronize()

    def start(self) -> None:
        self.sync()
        if self.kind == "cuda":
            if self._events is None:
                self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._events[0].record()
        else:
            self._t0 = _now()

    def stop(self) -> float:
        """Seconds since `start`, after the device finished the work queued in between."""
        if self.kind == "cuda":
            self._events[1].record()
            self.sync()
            return self._events[0].elapsed_time(self._events[1]) / 1e3
        self.sync()
        return _now() - self._t0


def make_clock(kind: str) -> SyncClock:
    """The clock for a device kind (tests patch this to watch every clock read)."""
    return SyncClock(kind)


@dataclass(frozen=True)
class Timing:
    times_s: tuple[float, ...]  # timed repetitions, in order
    warmup: int  # warm-up calls made

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)


def measure(fn: Callable[[], object], clock: SyncClock, *, warmup: int, reps: int, min_reps: int,
            budget_s: float, flush: Callable[[], object] | None = None, cancel=None) -> Timing:
    """Time `fn()` on `clock` (see the module docstring). Raises BenchCancelled when `cancel`
    (a threading.Event) is set between calls; whatever `fn` raises propagates."""
    return measure_interleaved([fn], clock, warmup=warmup, reps=reps, min_reps=min_reps, budget_s=budget_s,
                               flush=flush, cancel=cancel)[0]


def measure_interleaved(fns: list[Callable[[], object]], clock: SyncClock, *, warmup: int, reps: int,
                        min_reps: int, budget_s: float, flush: Callable[[], object] | None = None,
                        cancel=None) -> list[Timing]:
    """Time several functions in alternation (a, b, a, b, ...), so that a busy spell of the
    machine hits all of them alike: the way to compare two implementations of one operation.
    The budget covers all of them together."""
    def timed_call(fn) -> float:
        _check_cancel(cancel)
        if flush is not None:
            flush()  # outside the timed region
        clock.start()
        fn()
        return clock.stop()

    done_warmup = 0
    for _ in range(warmup):
        t = sum(timed_call(fn) for fn in fns)
        done_warmup += 1
        if t > budget_s / 2:  # one heavy call is warm-up enough; keep the budget for timing
            break
    times: list[list[float]] = [[] for _ in fns]
    spent = 0.0
    while len(times[0]) < reps:
        for fn, ts in zip(fns, times):
            t = timed_call(fn)
            ts.append(t)
            spent += t
        if len(times[0]) >= min_reps and spent >= budget_s:
            break
    return [Timing(tuple(ts), done_warmup) for ts in times]


def _check_cancel(cancel) -> None:
    if cancel is not None and cancel.is_set():
        raise BenchCancelled("benchmark cancelled")
