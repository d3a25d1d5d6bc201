"""Result files on disk (stdlib only): refuse an `--out` that cannot be written before minutes of
measuring, and write a result JSON atomically with the user's umask.

Every command that writes a result (`bench`, `bench collectives`, `bench import`) uses these, so
none of them imports another's command line for it.
"""
from __future__ import annotations

import json
import os
import tempfile

from .errors import BenchError


def check_out(path: str) -> None:
    """Raise BenchError (one line) when `path` cannot be written: a folder, a missing folder that
    cannot be made (one level, like the README's out/), a folder that is not writable."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise BenchError(f"--out {path} is a folder; give a file name")
    if not os.path.isdir(folder):
        try:
            os.mkdir(folder)
        except OSError as e:
            raise BenchError(f"--out: cannot create folder {folder}: {e.strerror or e}") from None
    if not os.access(folder, os.W_OK):
        raise BenchError(f"--out: folder {folder} is not writable")


def umask() -> int:
    """The process umask: from /proc (no change of state), else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: str, result: dict) -> None:
    """Write `result` as indented JSON (no NaN) atomically: a temporary file in the same folder,
    then a rename over `path`; mode 0666 less the umask (mkstemp's 0600 is not kept). Raises
    BenchError (one line) when the file cannot be written; nothing half-written is left."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".bench-", suffix=".json", dir=folder)
        try:
            os.fchmod(fd, 0o666 & ~umask())
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2, allow_nan=False)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        raise BenchError(f"cannot write {path}: {e.strerror or e}") from None
