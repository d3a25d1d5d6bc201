"""Errors of the microbenchmark (no torch here).

All are `mla_core.errors.MLAError`, so the command line turns them into exit status 2 with one
line on stderr and the app into `st.error`, like every other bad input.
"""
from __future__ import annotations

from ..errors import MLAError


class BenchError(MLAError):
    """A benchmark request that cannot run or a run that could not finish (one line)."""


class DeviceUnavailable(BenchError):
    """The requested device is not present in this torch build or on this machine."""


class OversizeRequest(BenchError):
    """The requested shapes would not fit in the device's free memory (refused before allocating)."""


class OutOfMemory(BenchError):
    """The device ran out of memory during a run; the run's tensors have been freed."""


class BenchBusy(BenchError):
    """Another benchmark holds the lock (one run at a time: this process's, and the machine's
    lock file beside the history, mla_core.bench.runlock)."""


class UntrustedRun(BenchError):
    """The run finished but was disturbed beyond trust (mla_core.bench.disturbance); not kept."""


class BenchCancelled(BenchError):
    """The caller's cancel event was set; the run stopped and its tensors were freed."""


class InvalidResult(BenchError):
    """An imported result JSON that does not match the result schema."""
