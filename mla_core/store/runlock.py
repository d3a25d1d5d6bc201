"""One benchmark at a time on this machine: a lock file beside the history store (no torch here).

`<history path>.lock` (mla_core.store.paths.default_path() + ".lock"; where that folder cannot be
written, a file in the system's temporary folder named after it) is locked with
`fcntl.flock(LOCK_EX)` by every run, from the command line and from the app alike: flock locks
belong to an open file, so two processes, and two threads of one server, exclude each other, and
the kernel drops the lock when its holder dies (kill -9 included): a lock is never left stale.
The holder writes who it is (pid, host, source, start time) into the file, so that a second run
can say what it waits for. Platforms without fcntl (Windows) get the per-process lock only.

    with machine_lock(source="cli", wait=False):   # BenchBusy at once if another run holds it
        ...
    holder()  -> {"pid", "host", "source", "started"} of the live holder, or None
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
import threading
import time

from .errors import BenchBusy, BenchCancelled
from .paths import default_path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

POLL_S = 0.2
SOURCES = ("cli", "app", "api")


def lock_path(history_path: str | None = None) -> str:
    """The lock file beside the history store (or, where its folder is not writable, in the
    temporary folder)."""
    path = (history_path or default_path()) + ".lock"
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        pass
    if os.access(folder, os.W_OK) or (os.path.exists(path) and os.access(path, os.W_OK)):
        return path
    tag = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"mla-explorer-bench-{tag}.lock")


def _describe(info: dict | None) -> str:
    if not info:
        return "another benchmark is running on this machine"
    who = {"cli": "from the command line", "app": "from the app", "api": "from Python"}.get(info.get("source"), "")
    since = info.get("started", "")
    return (f"another benchmark is running on this machine ({who}, pid {info.get('pid')}"
            + (f", since {since}" if since else "") + ")")


def pid_alive(pid) -> bool:
    """Whether a process of this id runs on this host (signal 0)."""
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError, TypeError):
        return False
    return True


def holder(history_path: str | None = None) -> dict | None:
    """Who holds the lock now (as written in the lock file), or None. Reads the file only: it never
    takes the lock, so it cannot make a starting run fail."""
    try:
        with open(lock_path(history_path), encoding="utf-8") as f:
            text = f.read(4096)
    except OSError:
        return None
    try:
        info = json.loads(text) if text.strip() else None
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    if info.get("host") == socket.gethostname() and not pid_alive(info.get("pid")):
        return None  # its process is gone (and with it the lock)
    return info


@contextlib.contextmanager
def machine_lock(source: str = "api", wait: bool | float = False, cancel: threading.Event | None = None,
                 history_path: str | None = None):
    """Hold the machine's benchmark lock for the `with` block.

    `wait`: False raises BenchBusy at once when another run holds it; True waits; a number waits
    that many seconds. `cancel` (a threading.Event) ends a wait with BenchCancelled. Yields the
    holder record written into the lock file."""
    info = {"pid": os.getpid(), "host": socket.gethostname(), "source": source if source in SOURCES else "api",
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    if fcntl is None:
        yield info
        return
    path = lock_path(history_path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise BenchBusy(f"cannot open the benchmark lock {path}: {e.strerror or e}") from None
    try:
        deadline = None if wait is True else time.monotonic() + (0.0 if wait is False else max(0.0, float(wait)))
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if cancel is not None and cancel.is_set():
                    raise BenchCancelled("benchmark cancelled while it waited for the other run; nothing was "
                                         "allocated") from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise BenchBusy(_describe(holder(history_path)) + "; wait for it to finish (one run at a time, "
                                    "so that two runs do not measure each other)") from None
                time.sleep(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic())))
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
        except OSError:
            pass  # who holds it is a courtesy; the lock itself is what counts
        try:
            yield info
        finally:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
