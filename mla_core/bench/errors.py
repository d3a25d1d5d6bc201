"""Errors of the torch measurement (no torch here).

The family's base and the errors the store shares with every run (`BenchError`, `BenchBusy`,
`BenchCancelled`, `InvalidResult`) live in `mla_core.store.errors` and are importable from here
too; the ones below are raised by a measurement only. All are `mla_core.errors.MLAError`: exit
status 2 with one line on the command line, `st.error` in the app.
"""
from __future__ import annotations

from ..store.errors import BenchBusy, BenchCancelled, BenchError, InvalidResult

__all__ = ["BenchError", "BenchBusy", "BenchCancelled", "InvalidResult", "DeviceUnavailable", "OversizeRequest",
           "OutOfMemory", "UntrustedRun"]


class DeviceUnavailable(BenchError):
    """The requested device is not present in this torch build or on this machine."""


class OversizeRequest(BenchError):
    """The requested shapes would not fit in the device's free memory (refused before allocating)."""


class OutOfMemory(BenchError):
    """The device ran out of memory during a run; the run's tensors have been freed."""


class UntrustedRun(BenchError):
    """The run finished but was disturbed beyond trust (mla_core.store.disturbance); not kept."""
