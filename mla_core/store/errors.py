"""Errors of the store and of every benchmark (no torch here).

All are `mla_core.errors.MLAError`, so the command line turns them into exit status 2 with one
line on stderr and the app into `st.error`, like every other bad input. `BenchError` is the
family's base: the measurement's own errors (`mla_core.bench.errors`: an unavailable device, a
request too large, out of memory, an untrusted run) derive from it too, so one `except
BenchError` catches a run and the store it saves to alike.
"""
from __future__ import annotations

from ..errors import MLAError


class BenchError(MLAError):
    """A benchmark or store request that cannot be done, or a run that could not finish (one line)."""


class BenchBusy(BenchError):
    """Another benchmark holds the lock (one run at a time: this process's, and the machine's
    lock file beside the history, mla_core.store.runlock)."""


class BenchCancelled(BenchError):
    """The caller's cancel event was set; the run stopped (or stopped waiting for the lock)."""


class InvalidResult(BenchError):
    """A result, engine file or kernel profile that does not match its schema."""
