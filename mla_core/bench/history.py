"""A local SQLite store of benchmark runs and imported results (stdlib sqlite3; no torch).

Where: `MLA_EXPLORER_HISTORY` (a file path) if set, else `var/history.sqlite3` beside the
`mla_core` package (the repository root's `var/`, which git ignores).

Tables:
    runs     id, saved_at (UTC ISO 8601), created (the result's), source ('local' | 'import'),
             label, device_kind, device_name, torch_version, dtype, n_results, sha256 of the
             JSON, json (the whole validated result)
    results  run_id -> runs.id (ON DELETE CASCADE), idx, and the flat fields the page charts
             and export_csv writes (kernel, dtype, batch, context, heads, kv_heads, median_s, ...)

Durability and concurrency:
- WAL journal and a 10 s busy timeout: two app sessions (threads or processes) saving at once
  both land; a writer waits for the other's transaction instead of failing.
- Every save is one `BEGIN IMMEDIATE ... COMMIT` transaction: the run row and its result rows
  land together or not at all. A process killed mid-write leaves the rows committed before it
  intact and no partial run (SQLite rolls the unfinished transaction back on the next open).
- A file that is not a readable SQLite database (or fails `PRAGMA quick_check`) is renamed to
  `<name>.corrupt-<UTC timestamp>` (never deleted or overwritten), a fresh store is created,
  and a notice is queued: `pop_notices()` returns it (the CLI prints it, the page shows it),
  and a `HistoryWarning` is issued.

Every function opens its own short-lived connection, so they are safe from any thread.
Errors: BenchError (one line) for an unknown id, a bad label or source, an unreadable path;
InvalidResult for a result that fails `validate_result`.
"""
from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import hashlib
import io
import json
import os
import sqlite3
import threading
import time
import warnings

from .errors import BenchError
from .schema import validate_result

ENV_VAR = "MLA_EXPLORER_HISTORY"
BUSY_TIMEOUT_S = 10.0
MAX_LABEL = 200
SOURCES = ("local", "import")
STORE_VERSION = 1

CSV_COLUMNS = (
    "run_id", "run_label", "run_created", "source", "device_kind", "device_name", "kernel", "dtype", "batch",
    "context", "heads", "kv_heads", "median_s", "min_s", "reps", "bytes", "flops", "achieved_GBps",
    "achieved_TFLOPs", "predicted_s", "predicted_bound", "max_rel_err",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    saved_at TEXT NOT NULL,
    created TEXT,
    source TEXT NOT NULL CHECK (source IN ('local', 'import')),
    label TEXT,
    device_kind TEXT,
    device_name TEXT,
    torch_version TEXT,
    dtype TEXT,
    n_results INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    kernel TEXT NOT NULL,
    dtype TEXT NOT NULL,
    batch INTEGER,
    context INTEGER,
    heads INTEGER,
    kv_heads INTEGER,
    median_s REAL NOT NULL,
    min_s REAL NOT NULL,
    reps INTEGER,
    bytes INTEGER NOT NULL,
    flops INTEGER NOT NULL,
    achieved_GBps REAL,
    achieved_TFLOPs REAL,
    predicted_s REAL,
    predicted_bound TEXT,
    max_rel_err REAL,
    PRIMARY KEY (run_id, idx)
);
CREATE INDEX IF NOT EXISTS results_kernel ON results(kernel);
"""

_RESULT_FIELDS = CSV_COLUMNS[6:]

# Tests set this to a callable run inside the write transaction, after the run row and before
# its result rows, to kill a writer mid-write. None in normal use.
_mid_write_hook = None

_notices: list[str] = []
_notices_lock = threading.Lock()


class HistoryWarning(UserWarning):
    """A history database was found corrupt and moved aside."""


def default_path() -> str:
    """MLA_EXPLORER_HISTORY, else <repo>/var/history.sqlite3."""
    env = os.environ.get(ENV_VAR)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "var", "history.sqlite3")


def pop_notices() -> list[str]:
    """Notices (corrupt stores moved aside) since the last call; clears them."""
    with _notices_lock:
        out = list(_notices)
        _notices.clear()
    return out


def _notice(text: str) -> None:
    with _notices_lock:
        _notices.append(text)
    warnings.warn(text, HistoryWarning, stacklevel=3)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    # WAL is a property of the file: set once, every later connection finds it. Switching needs
    # a moment alone with the file, so two sessions creating the store at once may have to
    # retry; that is contention, never a sign of corruption.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode != "wal":
                mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            mode = "busy"
        if mode == "wal":
            break
        if time.monotonic() > deadline:
            raise BenchError(f"the history store stayed busy for {BUSY_TIMEOUT_S:g} s (journal mode {mode})")
        time.sleep(0.02)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")


def _refuse_foreign(conn: sqlite3.Connection) -> None:
    """Raise BenchError when the file is some other program's SQLite database (read-only checks)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    ours = {"runs", "results"} <= names if version != 0 else not (names - {"runs", "results", "sqlite_sequence"})
    if not ours:
        raise BenchError("the history file is an SQLite database of something else, not an MLA explorer "
                         f"history store; set {ENV_VAR} to another path")


def _check_and_init(conn: sqlite3.Connection) -> None:
    ok = conn.execute("PRAGMA quick_check").fetchone()[0]
    if ok != "ok":
        raise sqlite3.DatabaseError(f"quick_check: {ok}")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version == 0 and names - {"runs", "results", "sqlite_sequence"}:
        raise BenchError("the history file is an SQLite database of something else, not an MLA explorer "
                         f"history store; set {ENV_VAR} to another path")
    if version != 0:
        # The tables must be ours: a foreign SQLite file is left alone, not moved or changed.
        if not {"runs", "results"} <= names:
            raise BenchError("the history file is an SQLite database of something else, not an MLA explorer "
                             f"history store; set {ENV_VAR} to another path")
        if version != STORE_VERSION:
            raise BenchError(f"history store version {version} is not the one this code reads ({STORE_VERSION})")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {STORE_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _move_aside(path: str, why: str) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    target = f"{path}.corrupt-{stamp}"
    n = 1
    while os.path.exists(target):
        target = f"{path}.corrupt-{stamp}-{n}"
        n += 1
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, target + suffix)
    _notice(f"history store {path} was unreadable ({why}); moved it to {target} and started a new one")
    return target


_open_lock = threading.Lock()


def _unreadable(path: str) -> bool:
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error:
        return True
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        return conn.execute("PRAGMA quick_check").fetchone()[0] != "ok"
    except sqlite3.OperationalError as e:
        return not ("locked" in str(e) or "busy" in str(e))
    except sqlite3.DatabaseError:
        return True
    finally:
        conn.close()


@contextlib.contextmanager
def _connect(path: str | None = None):
    path = path or default_path()
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create the history folder {folder}: {e.strerror or e}") from None
    conn = None
    for attempt in range(3):
        why = None
        try:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            _refuse_foreign(conn)  # before anything writes: WAL mode alone changes the file's header
            _configure(conn)
            _check_and_init(conn)
            break
        except BenchError:
            conn.close()
            raise
        except sqlite3.OperationalError as e:
            if conn is not None:
                conn.close()
                conn = None
            if "locked" in str(e) or "busy" in str(e):
                raise BenchError(f"history store {path} is busy: {e}") from None
            if "unable to open" in str(e):
                raise BenchError(f"cannot open the history store {path}: {e}") from None
            if "readonly" in str(e) or "read-only" in str(e) or not _writable(path):
                # A healthy store we may not write to is not corrupt: never move it aside.
                raise BenchError(f"the history store {path} is read-only ({e}); set {ENV_VAR} to a writable path") from None
            why = str(e)
        except sqlite3.DatabaseError as e:  # "file is not a database", malformed, quick_check
            if conn is not None:
                conn.close()
                conn = None
            why = str(e)
        if attempt == 2:
            raise BenchError(f"history store {path} is still unreadable after moving the old file aside: {why}")
        with _open_lock:
            # Another session may have moved it aside and started a new store meanwhile: move
            # only a file that is still unreadable now.
            if os.path.exists(path) and _unreadable(path):
                try:
                    _move_aside(path, why)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise BenchError(f"history store {path} is unreadable ({why}) and could not be moved aside: "
                                     f"{e.strerror or e}") from None
    try:
        yield conn
    except sqlite3.OperationalError as e:
        if "readonly" in str(e):
            raise BenchError(f"the history store {path} is read-only; set {ENV_VAR} to a writable path") from None
        raise BenchError(f"history store {path}: {e}") from None
    except sqlite3.DatabaseError as e:
        raise BenchError(f"history store {path} is damaged: {e}") from None
    finally:
        conn.close()


def _writable(path: str) -> bool:
    folder = os.path.dirname(path) or "."
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return False
    return os.access(folder, os.W_OK)


def _flat(result: dict) -> list[tuple]:
    kind = result.get("kind", "kernels")
    if kind == "collectives":
        # One row per (op, size): kernel = the op, bytes = the size, achieved_GBps = busbw.
        return [(i, r["op"], r["dtype"], None, None, None, None, r["median_s"], r["min_s"], r.get("reps"), r["bytes"],
                 0, r["busbw_GBps"], None, None, None, None) for i, r in enumerate(result["results"])]
    if kind != "kernels":
        return []  # engine runs: the whole result is in runs.json
    rows = []
    for i, r in enumerate(result["results"]):
        s = r["shape"]
        rows.append((i, r["kernel"], r["dtype"], s.get("batch"), s.get("context"), s.get("heads"), s.get("kv_heads"),
                     r["median_s"], r["min_s"], r.get("reps"), r["bytes"], r["flops"], r.get("achieved_GBps"),
                     r.get("achieved_TFLOPs"), r.get("predicted_s"), r.get("predicted_bound"), r.get("max_rel_err")))
    return rows


def save_run(result, source: str = "local", label: str | None = None, *, path: str | None = None) -> int:
    """Validate `result` (dict, or JSON text/bytes for an import) and store it; returns its id.

    One transaction: the run row and its result rows land together. Raises InvalidResult for a
    result that fails the schema, BenchError for a bad source or label."""
    if source not in SOURCES:
        raise BenchError(f"source must be 'local' or 'import', got {source!r}")
    if label is not None:
        if not isinstance(label, str):
            raise BenchError("label must be text")
        label = " ".join(label.split())
        if len(label) > MAX_LABEL:
            raise BenchError(f"label is longer than {MAX_LABEL} characters")
        label = label or None
    data = validate_result(result, kind=None)
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    dev = data["device"]
    with _connect(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(
                "INSERT INTO runs (saved_at, created, source, label, device_kind, device_name, torch_version, dtype, "
                "n_results, sha256, json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (_now(), data.get("created"), source, label, dev.get("kind"), dev.get("name"), dev.get("torch_version"),
                 dev.get("dtype"), len(data.get("results") or data.get("points") or []), digest, text))
            run_id = cur.lastrowid
            if _mid_write_hook is not None:
                _mid_write_hook()
            conn.executemany(
                "INSERT INTO results (run_id, idx, kernel, dtype, batch, context, heads, kv_heads, median_s, min_s, "
                "reps, bytes, flops, achieved_GBps, achieved_TFLOPs, predicted_s, predicted_bound, max_rel_err) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run_id, *row) for row in _flat(data)])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return int(run_id)


def list_runs(*, path: str | None = None, kind: str | None = None) -> list[dict]:
    """Stored runs, newest first: id, saved_at, created, source, label, device_kind,
    device_name, torch_version, dtype, n_results, kind ('kernels', 'collectives', 'engine';
    the result's own field, from the stored JSON) (no result bodies). `kind` keeps only that kind."""
    with _connect(path) as conn:
        cur = conn.execute("SELECT id, saved_at, created, source, label, device_kind, device_name, torch_version, "
                           "dtype, n_results, coalesce(json_extract(json, '$.kind'), 'kernels') AS kind "
                           "FROM runs ORDER BY id DESC")
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, row)) for row in cur.fetchall()]
    return rows if kind is None else [r for r in rows if r["kind"] == kind]


def get_run(run_id: int, *, path: str | None = None) -> dict:
    """The stored run: its list_runs fields plus `result` (the whole result dict).
    Raises BenchError for an unknown id."""
    run_id = _check_id(run_id)
    with _connect(path) as conn:
        cur = conn.execute("SELECT id, saved_at, created, source, label, device_kind, device_name, torch_version, "
                           "dtype, n_results, json FROM runs WHERE id = ?", (run_id,))
        row = cur.fetchone()
        if row is None:
            raise BenchError(f"no stored run with id {run_id}")
        cols = [c[0] for c in cur.description]
    out = dict(zip(cols, row))
    out["result"] = _body(run_id, out.pop("json"))
    return out


def _body(run_id: int, text) -> dict:
    """A stored run's result; a body damaged on disk is reported, not raised as a JSON error."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise BenchError(f"stored run #{run_id} is damaged ({str(e)[:80]}); delete it") from None


def delete_run(run_id: int, *, path: str | None = None) -> bool:
    """Delete a run and its result rows; True if it existed."""
    run_id = _check_id(run_id)
    with _connect(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            n = conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return n > 0


def _check_id(run_id) -> int:
    if isinstance(run_id, bool) or not isinstance(run_id, int) or run_id < 1:
        raise BenchError(f"a run id is a positive whole number, got {run_id!r}")
    return run_id


def _ids(ids, conn) -> list[int]:
    if ids is None:
        return [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY id")]
    ids = [_check_id(i) for i in ids]
    known = set()
    if ids:
        marks = ",".join("?" * len(ids))
        known = {r[0] for r in conn.execute(f"SELECT id FROM runs WHERE id IN ({marks})", ids)}
    missing = [i for i in ids if i not in known]
    if missing:
        raise BenchError(f"no stored run with id {missing[0]}")
    return ids


def export_json(ids=None, *, path: str | None = None) -> str:
    """The runs `ids` (all when None) as one JSON document:
    {"store_version": 1, "exported": ..., "runs": [{"id", "saved_at", "source", "label", "result"}]}.
    Each `result` passes `validate_result` and can be imported again."""
    with _connect(path) as conn:
        runs = []
        for i in _ids(ids, conn):
            row = conn.execute("SELECT id, saved_at, source, label, json FROM runs WHERE id = ?", (i,)).fetchone()
            runs.append({"id": row[0], "saved_at": row[1], "source": row[2], "label": row[3],
                         "result": _body(row[0], row[4])})
    return json.dumps({"store_version": STORE_VERSION, "exported": _now(), "runs": runs}, indent=2)


def _cell(v):
    # Spreadsheet formula injection: a text cell starting with = + - @ is prefixed with '.
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return "" if v is None else v


def export_csv(ids=None, *, path: str | None = None) -> str:
    """The results of runs `ids` (all when None) as CSV, one row per result, CSV_COLUMNS."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    with _connect(path) as conn:
        for i in _ids(ids, conn):
            run = conn.execute("SELECT id, label, created, source, device_kind, device_name FROM runs WHERE id = ?",
                               (i,)).fetchone()
            for row in conn.execute(f"SELECT {', '.join(_RESULT_FIELDS)} FROM results WHERE run_id = ? ORDER BY idx",
                                    (i,)):
                w.writerow([_cell(v) for v in (*run, *row)])
    return buf.getvalue()
