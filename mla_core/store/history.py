"""A local SQLite store of benchmark runs and imported results (stdlib sqlite3; no torch).

Where: `MLA_EXPLORER_HISTORY` (a file path) if set, else `var/history.sqlite3` beside the
`mla_core` package (the repository root's `var/`, which git ignores).

Tables:
    runs     id, saved_at (UTC ISO 8601), created (the result's), source ('local' | 'import'),
             label, device_kind, device_name, torch_version, dtype, n_results, sha256 of the
             JSON, json (the whole validated result), disturbed (1 / 0 / NULL = not known),
             disturbed_reasons (JSON list of one-line reasons; mla_core.store.disturbance)
    results  run_id -> runs.id (ON DELETE CASCADE), idx, and the flat fields the page charts
             and export_csv writes (kernel, dtype, batch, context, heads, kv_heads, median_s, ...)
    notices  id, created, kind, text, acknowledged: what every session must be told until
             someone acknowledges it (a corrupt store moved aside)
    starts   id, started_at, pid, host, source ('cli' | 'app' | 'api'), what, finished_at,
             outcome: a row per measurement, written when it starts and closed when it ends,
             so that a run cut short by a dying process is reported at the next start
             (`interrupted_runs()`)
A store of version 1 without the newer columns and tables gets them on its next writable open.

Durability and concurrency:
- WAL journal and a 10 s busy timeout: two app sessions (threads or processes) saving at once
  both land; a writer waits for the other's transaction instead of failing.
- Every save is one `BEGIN IMMEDIATE ... COMMIT` transaction: the run row and its result rows
  land together or not at all. A process killed mid-write leaves the rows committed before it
  intact and no partial run (SQLite rolls the unfinished transaction back on the next open).
- Only a file that fails SQLite's integrity check (not a database, malformed, or `PRAGMA
  quick_check` not ok; checked again alone before anything moves) is renamed to
  `<name>.corrupt-<UTC timestamp>` (never deleted or overwritten), a fresh store is created,
  and a notice naming the new path is queued: `pop_notices()` returns it (the CLI prints it, the
  page shows it), it is written into the new store for every session until acknowledged, and a
  `HistoryWarning` is issued. A full disk, a read-only mount, an I/O error or a busy file never
  moves a store: the error is reported and the file left as it is.

Faults, each with its own message (one line):
- disk full (SQLITE_FULL, ENOSPC, or SQLITE_IOERR_SHMSIZE while the disk has under 1 MiB free:
  SQLite cannot size the WAL index of a store it opens): a save raises StoreFull "disk full:
  ... nothing was saved and the store was left as it is"; the transaction is rolled back and
  the original error reported (never the rollback's); nothing half-written. Reading goes on
  through a read-only connection (`immutable=1` where the WAL index cannot be made) and never
  says that nothing was saved; `disk_full()` lets a page say so before anyone saves.
- read-only store (file or folder not writable, read-only mount): runs are read through a
  read-only connection (`mode=ro`, or `immutable=1` where the WAL index cannot be created);
  saving, deleting and acknowledging raise StoreReadOnly.
- a run whose JSON no longer matches its sha256, or whose result rows no longer match its JSON:
  `damaged` (the reason) in list_runs; get_run raises BenchError; export_json and export_csv
  mark it (`damaged` / run_damaged) and export_json leaves its body out.

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
import errno
import os
import socket
import sqlite3
import threading
import time
import urllib.parse
import warnings

from .errors import BenchError
from .paths import ENV_VAR, default_path
from .runlock import pid_alive
from .schema import PROFILE_OPS, validate_result


class StoreFull(BenchError):
    """The disk (or the store's size limit) is full: nothing was saved."""


class StoreReadOnly(BenchError):
    """The store can be read but not written."""

BUSY_TIMEOUT_S = 10.0
MAX_LABEL = 200
SOURCES = ("local", "import")
STORE_VERSION = 1
# An I/O error while the store's disk has less free than this is a full disk (SQLite reports a
# full disk as SQLITE_IOERR_SHMSIZE when it cannot size the WAL index of a store it opens).
FULL_BELOW_BYTES = 1 << 20

CSV_COLUMNS = (
    "run_id", "run_label", "run_created", "source", "device_kind", "device_name", "kernel", "dtype", "batch",
    "context", "heads", "kv_heads", "median_s", "min_s", "reps", "bytes", "flops", "achieved_GBps",
    "achieved_TFLOPs", "predicted_s", "predicted_bound", "max_rel_err", "run_disturbed", "run_damaged",
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
    json TEXT NOT NULL,
    disturbed INTEGER,
    disturbed_reasons TEXT
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
CREATE TABLE IF NOT EXISTS notices (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    acknowledged TEXT
);
CREATE TABLE IF NOT EXISTS starts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    pid INTEGER,
    host TEXT,
    source TEXT,
    what TEXT,
    finished_at TEXT,
    outcome TEXT
);
"""
# Added after version 1 first shipped: created on the next writable open of an older store.
_NEW_COLUMNS = {"runs": (("disturbed", "INTEGER"), ("disturbed_reasons", "TEXT"))}
_NEW_TABLES = ("notices", "starts")
_OUR_TABLES = {"runs", "results", "sqlite_sequence", *_NEW_TABLES}

_RESULT_FIELDS = CSV_COLUMNS[6:-2]

# Tests set this to a callable run inside the write transaction, after the run row and before
# its result rows, to kill a writer mid-write. None in normal use.
_mid_write_hook = None
# Tests set this to a callable given each new writable connection (e.g. to set SQLite's
# max_page_count and so fill the "disk"). None in normal use.
_connect_hook = None

_notices: list[str] = []
_notices_lock = threading.Lock()


class HistoryWarning(UserWarning):
    """A history database was found corrupt and moved aside."""


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
    ours = {"runs", "results"} <= names if version != 0 else not (names - _OUR_TABLES)
    if not ours:
        raise BenchError("the history file is an SQLite database of something else, not an MLA explorer "
                         f"history store; set {ENV_VAR} to another path")


def _check_and_init(conn: sqlite3.Connection) -> None:
    ok = conn.execute("PRAGMA quick_check").fetchone()[0]
    if ok != "ok":
        raise FailedCheck(f"quick_check: {ok}")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version == 0 and names - _OUR_TABLES:
        raise BenchError("the history file is an SQLite database of something else, not an MLA explorer "
                         f"history store; set {ENV_VAR} to another path")
    if version != 0:
        # The tables must be ours: a foreign SQLite file is left alone, not moved or changed.
        if not {"runs", "results"} <= names:
            raise BenchError("the history file is an SQLite database of something else, not an MLA explorer "
                             f"history store; set {ENV_VAR} to another path")
        if version != STORE_VERSION:
            raise BenchError(f"history store version {version} is not the one this code reads ({STORE_VERSION})")
        _upgrade(conn, names)
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


def _missing(conn: sqlite3.Connection, names: set) -> bool:
    if not set(_NEW_TABLES) <= names:
        return True
    for table, cols in _NEW_COLUMNS.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if any(c not in have for c, _ in cols):
            return True
    return False


def _upgrade(conn: sqlite3.Connection, names: set) -> None:
    """Add the columns and tables newer than the store (additive: older code still reads it)."""
    if not _missing(conn, names):
        return

    def work():
        for table, cols in _NEW_COLUMNS.items():
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            for col, kind in cols:
                if col not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {col} {kind}")
        for statement in _SCHEMA.split(";"):
            if any(f"CREATE TABLE IF NOT EXISTS {t} " in statement for t in _NEW_TABLES):
                conn.execute(statement)

    _transaction(conn, work)


def _transaction(conn: sqlite3.Connection, work):
    """`work()` inside BEGIN IMMEDIATE ... COMMIT. On any error the transaction is rolled back if
    SQLite has not already done so (it has, after a full disk), and the original error raised:
    never "cannot rollback - no transaction is active" in its place."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = work()
        conn.execute("COMMIT")
        return out
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
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
    text = (f"history store {path} failed its integrity check ({why}); moved it to {target} and started a new "
            "one (the old file is kept there, not deleted)")
    _notice(text)
    with _notices_lock:
        _pending_notices.append(text)
    return target


_pending_notices: list[str] = []  # moved-aside notices still to be written into the new store


_open_lock = threading.Lock()


class FailedCheck(sqlite3.DatabaseError):
    """SQLite's `PRAGMA quick_check` found the file damaged."""


def _is_damage(e: BaseException) -> bool:
    """The file itself fails SQLite's integrity check: not a database (SQLITE_NOTADB), malformed
    (SQLITE_CORRUPT), or quick_check's answer. Only this moves a store aside: a full disk, a
    read-only mount, an I/O error or a busy file never does."""
    if isinstance(e, FailedCheck):
        return True
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    text = str(e)
    return "file is not a database" in text or "malformed" in text


def _check_file(path: str) -> BaseException | None:
    """Open `path` alone and run quick_check: the damage error when the file fails it, else None
    (sound, or not checkable now: busy, a full disk, an I/O error: none of which is damage)."""
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        ok = conn.execute("PRAGMA quick_check").fetchone()[0]
        return None if ok == "ok" else FailedCheck(f"quick_check: {ok}")
    except sqlite3.Error as e:
        return e if _is_damage(e) else None
    finally:
        conn.close()


def _free_bytes(path: str) -> int | None:
    """Bytes free to this user on the store's file system, or None when unknown."""
    folder = os.path.dirname(path) or "."
    while folder and not os.path.exists(folder):
        folder = os.path.dirname(folder)
    try:
        st = os.statvfs(folder or ".")
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def _is_full(e: BaseException, path: str | None = None) -> bool:
    """A full disk: SQLITE_FULL or ENOSPC; or an I/O error (SQLite cannot size its WAL index, the
    -shm file, on a full disk: SQLITE_IOERR_SHMSIZE) while the file system has under
    FULL_BELOW_BYTES (1 MiB) free."""
    code = getattr(e, "sqlite_errorcode", None)
    if (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or "disk is full" in str(e) or \
            getattr(e, "errno", None) == errno.ENOSPC:
        return True
    io_error = (code is not None and code & 0xFF == sqlite3.SQLITE_IOERR) or "disk I/O error" in str(e)
    if io_error and path is not None:
        free = _free_bytes(path)
        return free is not None and free < FULL_BELOW_BYTES
    return False


def _is_readonly(e: BaseException) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF == sqlite3.SQLITE_READONLY) or "readonly" in str(e) or \
        "read-only" in str(e) or getattr(e, "errno", None) in (errno.EROFS, errno.EACCES, errno.EPERM)


def _cannot_read(path: str, e: BaseException) -> BenchError:
    """Reading failed on a full disk or an I/O error: says so, and never that something was not saved."""
    if _is_full(e, path):
        return BenchError(f"cannot read the history store {path}: the disk is full ({str(e) or e.__class__.__name__}); "
                          "free some space (the store was left as it is)")
    return BenchError(f"cannot read the history store {path} ({str(e) or e.__class__.__name__}); it was left as it is")


def _full(path: str, e: BaseException) -> StoreFull:
    free = _free_bytes(path)
    room = "" if free is None else f"; {free:,} bytes free on its disk"
    return StoreFull(f"disk full: the history store {path} could not grow ({str(e) or e.__class__.__name__}{room}); "
                     f"nothing was saved and the store was left as it is: free some space or set {ENV_VAR} to "
                     "another disk")


def disk_full(path: str | None = None) -> bool:
    """Whether the store's disk has under FULL_BELOW_BYTES (1 MiB) free (a save would fail with StoreFull), for a
    page to say so before anyone tries; False when unknown."""
    free = _free_bytes(path or default_path())
    return free is not None and free < FULL_BELOW_BYTES


def _readonly(path: str) -> StoreReadOnly:
    return StoreReadOnly(f"the history store {path} is read-only: its runs can be read but nothing can be saved; "
                         f"set {ENV_VAR} to a writable path")


def writable(path: str | None = None) -> bool:
    """Whether runs can be saved to the store at `path` (its file, or its folder for a new one)."""
    return _writable(path or default_path())


def _open_readonly(path: str, why: str = "read-only ") -> sqlite3.Connection:
    """A read-only connection: `mode=ro`, else `immutable=1` (a WAL store on a read-only mount or a
    full disk, where SQLite cannot create or size the -shm index). `why` names the store in the
    final error ("read-only ", or "" where the disk is full)."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path))
    last = None
    for query in ("?mode=ro", "?mode=ro&immutable=1"):
        try:
            conn = sqlite3.connect(uri + query, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as e:
            last = e
            continue
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            _refuse_foreign(conn)
            ok = conn.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                conn.close()
                raise BenchError(f"the history store {path} is damaged ({ok[:120]}) and read-only, so it cannot be "
                                 f"moved aside; set {ENV_VAR} to another path")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, STORE_VERSION):
                conn.close()
                raise BenchError(f"history store version {version} is not the one this code reads ({STORE_VERSION})")
            return conn
        except BenchError:
            raise
        except sqlite3.Error as e:
            conn.close()
            last = e
    if last is not None and why != "read-only ":
        raise _cannot_read(path, last)
    raise BenchError(f"cannot read the {why}history store {path}: {last}")


def _store_error(path: str, e: sqlite3.DatabaseError, write: bool = True) -> BenchError:
    """The one-line error for what SQLite raised while a connection was in use: the disk full
    (for a reader: that it cannot read, never that nothing was saved), the store read-only,
    another operational error, or a damaged file."""
    if isinstance(e, sqlite3.OperationalError):
        if _is_full(e, path):
            return _full(path, e) if write else _cannot_read(path, e)
        if _is_readonly(e):
            return _readonly(path)
        return BenchError(f"history store {path}: {e}")
    return BenchError(f"history store {path} is damaged: {e}")


@contextlib.contextmanager
def _connect(path: str | None = None, write: bool = True):
    """A connection to the store. `write=False`: reading is all the caller does, so a store that
    cannot be written (read-only, or on a full disk) is opened read-only instead of refused.

    Only a file that fails SQLite's integrity check is moved aside (`_is_damage`, checked again
    alone under a lock); a full disk, a read-only store, an I/O error or a busy file raises its
    own one-line error and leaves the file as it is."""
    path = path or default_path()
    if not _writable(path):
        if write:
            raise _readonly(path)
        with _reading(path, _open_readonly(path)) as conn:
            yield conn
        return
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        if _is_full(e, path):
            raise (_full(path, e) if write else _cannot_read(path, e)) from None
        raise BenchError(f"cannot create the history folder {folder}: {e.strerror or e}") from None
    conn = None
    for attempt in range(3):
        try:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            _refuse_foreign(conn)  # before anything writes: WAL mode alone changes the file's header
            if _connect_hook is not None:
                _connect_hook(conn)
            _configure(conn)
            _check_and_init(conn)
            break
        except BenchError:
            if conn is not None:
                conn.close()
            raise
        except sqlite3.Error as e:
            if conn is not None:
                conn.close()
                conn = None
            if "locked" in str(e) or "busy" in str(e):
                raise BenchError(f"history store {path} is busy: {e}") from None
            if not _is_damage(e):  # the disk, the mount or the file system: the store is left as it is
                if not write:
                    with _reading(path, _open_readonly(path, "read-only " if _is_readonly(e) else "")) as ro:
                        yield ro
                    return
                if _is_full(e, path):
                    raise _full(path, e) from None
                if _is_readonly(e) or not _writable(path):
                    raise _readonly(path) from None
                raise BenchError(f"cannot open the history store {path} ({e}); it was left as it is") from None
            why = str(e)
        if attempt == 2:
            raise BenchError(f"history store {path} still fails its integrity check after the old file was moved "
                             f"aside: {why}")
        with _open_lock:
            # Another session may have moved it aside and started a new store meanwhile: move
            # only a file that fails the check again now, alone.
            if os.path.exists(path) and _check_file(path) is not None:
                try:
                    _move_aside(path, why)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise BenchError(f"history store {path} fails its integrity check ({why}) and could not be "
                                     f"moved aside: {e.strerror or e}") from None
    try:
        _record_pending_notices(conn)
        yield conn
    except sqlite3.DatabaseError as e:
        raise _store_error(path, e, write) from None
    finally:
        conn.close()


@contextlib.contextmanager
def _reading(path: str, conn: sqlite3.Connection):
    """A read-only connection in use: SQLite's errors as one line (a reader's), closed after."""
    try:
        yield conn
    except sqlite3.DatabaseError as e:
        raise _store_error(path, e, write=False) from None
    finally:
        conn.close()


def _record_pending_notices(conn: sqlite3.Connection) -> None:
    """Write moved-aside notices into the (new) store, so that every session sees them until one
    acknowledges them. A notice that cannot be written stays queued for the next open."""
    with _notices_lock:
        pending = list(_pending_notices)
    if not pending:
        return
    try:
        _transaction(conn, lambda: conn.executemany(
            "INSERT INTO notices (created, kind, text) VALUES (?, 'moved-aside', ?)", [(_now(), t) for t in pending]))
    except sqlite3.Error:
        return
    with _notices_lock:
        for t in pending:
            if t in _pending_notices:
                _pending_notices.remove(t)


def _writable(path: str) -> bool:
    folder = os.path.dirname(path) or "."
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            return False
        return os.access(folder, os.W_OK) or all(os.path.exists(path + s) and os.access(path + s, os.W_OK)
                                                 for s in ("-wal", "-shm"))
    while folder and not os.path.exists(folder):  # a store yet to be made: its nearest existing folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return os.access(folder or ".", os.W_OK)


def _flat(result: dict) -> list[tuple]:
    kind = result.get("kind", "kernels")
    if kind == "collectives":
        # One row per (op, size): kernel = the op, bytes = the size, achieved_GBps = busbw.
        return [(i, r["op"], r["dtype"], None, None, None, None, r["median_s"], r["min_s"], r.get("reps"), r["bytes"],
                 0, r["busbw_GBps"], None, None, None, None) for i, r in enumerate(result["results"])]
    if kind != "kernels":
        return []  # engine runs and profiles: the whole result is in runs.json
    rows = []
    for i, r in enumerate(result["results"]):
        s = r["shape"]
        rows.append((i, r["kernel"], r["dtype"], s.get("batch"), s.get("context"), s.get("heads"), s.get("kv_heads"),
                     r["median_s"], r["min_s"], r.get("reps"), r["bytes"], r["flops"], r.get("achieved_GBps"),
                     r.get("achieved_TFLOPs"), r.get("predicted_s"), r.get("predicted_bound"), r.get("max_rel_err")))
    return rows


def save_run(result, source: str = "local", label: str | None = None, *, path: str | None = None) -> int:
    """Validate `result` (dict, or JSON text/bytes for an import) and store it; returns its id.

    One transaction: the run row and its result rows land together. Its `disturbed` block
    (mla_core.store.disturbance), if any, is kept in the disturbed columns. Raises InvalidResult
    for a result that fails the schema, BenchError for a bad source or label, StoreFull on a full
    disk, StoreReadOnly on a store that cannot be written (nothing is saved in either case)."""
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
    block = data.get("disturbed") if isinstance(data.get("disturbed"), dict) else None
    disturbed = None if block is None else int(bool(block.get("disturbed")))
    reasons = None if block is None else json.dumps(list(block.get("reasons") or []))
    with _connect(path) as conn:
        def work():
            cur = conn.execute(
                "INSERT INTO runs (saved_at, created, source, label, device_kind, device_name, torch_version, dtype, "
                "n_results, sha256, json, disturbed, disturbed_reasons) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (_now(), data.get("created"), source, label, dev.get("kind"), dev.get("name"), dev.get("torch_version"),
                 dev.get("dtype"), _count(data), digest, text, disturbed, reasons))
            run_id = cur.lastrowid
            if _mid_write_hook is not None:
                _mid_write_hook()
            conn.executemany(
                "INSERT INTO results (run_id, idx, kernel, dtype, batch, context, heads, kv_heads, median_s, min_s, "
                "reps, bytes, flops, achieved_GBps, achieved_TFLOPs, predicted_s, predicted_bound, max_rel_err) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run_id, *row) for row in _flat(data)])
            return run_id

        run_id = _transaction(conn, work)
    return int(run_id)


def _count(data: dict) -> int:
    """n_results of a run: its results, an engine run's points, a profile's op rows."""
    if data.get("kind") == "profile":
        return sum(len(data["ops"].get(k) or []) for k in PROFILE_OPS)
    return len(data.get("results") or data.get("points") or [])


_RUN_COLUMNS = ("id, saved_at, created, source, label, device_kind, device_name, torch_version, dtype, n_results, "
                "disturbed, disturbed_reasons")


def _run_row(cur, row) -> dict:
    out = dict(zip([c[0] for c in cur.description], row))
    out["disturbed"] = None if out.get("disturbed") is None else bool(out["disturbed"])
    try:
        out["disturbed_reasons"] = json.loads(out["disturbed_reasons"]) if out.get("disturbed_reasons") else []
    except ValueError:
        out["disturbed_reasons"] = ["(the stored reasons are unreadable)"]
    return out


def _damage(conn, run_id: int, text, sha: str) -> str | None:
    """Why a stored run cannot be trusted (its JSON or its result rows changed since it was
    saved), or None."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if not isinstance(raw, bytes):
        return "its JSON is missing"
    if hashlib.sha256(raw).hexdigest() != sha:
        return "its JSON no longer matches the sha256 stored with it (changed on disk since it was saved)"
    try:
        body = json.loads(raw)
        expected = _flat(body)
    except (TypeError, ValueError, KeyError) as e:
        return f"its JSON cannot be read ({str(e)[:80]})"
    rows = conn.execute(f"SELECT idx, {', '.join(_RESULT_FIELDS)} FROM results WHERE run_id = ? ORDER BY idx",
                        (run_id,)).fetchall()
    if [tuple(r) for r in rows] != [tuple(r) for r in expected]:
        return "its result rows no longer match its JSON (changed on disk since it was saved)"
    return None


def _kind_of(text) -> str:
    """A stored result's own `kind` ('kernels' when it has none: results from before kinds);
    '?' when its JSON cannot be read (the run is reported as damaged)."""
    try:
        body = json.loads(text)
    except (TypeError, ValueError):
        return "?"
    return body.get("kind", "kernels") if isinstance(body, dict) else "?"


def list_runs(*, path: str | None = None, kind: str | None = None) -> list[dict]:
    """Stored runs, newest first: id, saved_at, created, source, label, device_kind,
    device_name, torch_version, dtype, n_results, kind ('kernels', 'collectives', 'engine',
    'profile'; the result's own field, from the stored JSON), disturbed (True / False / None = not known),
    disturbed_reasons (list of lines), damaged (None, or why the run cannot be trusted).
    `kind` keeps only that kind. Reads a read-only store; no result bodies."""
    with _connect(path, write=False) as conn:
        cur = conn.execute(f"SELECT {_RUN_COLUMNS}, json, sha256 FROM runs ORDER BY id DESC")
        out = []
        for row in cur.fetchall():
            run = _run_row(cur, row)
            text = run.pop("json")
            run["kind"] = _kind_of(text)
            if kind is not None and run["kind"] != kind:
                continue
            run["damaged"] = _damage(conn, run["id"], text, run.pop("sha256"))
            out.append(run)
        return out


def get_run(run_id: int, *, path: str | None = None) -> dict:
    """The stored run: its list_runs fields plus `result` (the whole result dict).
    Raises BenchError for an unknown id, or for a damaged run (saying why)."""
    run_id = _check_id(run_id)
    with _connect(path, write=False) as conn:
        cur = conn.execute(f"SELECT {_RUN_COLUMNS}, json, sha256 FROM runs WHERE id = ?", (run_id,))
        row = cur.fetchone()
        if row is None:
            raise BenchError(f"no stored run with id {run_id}")
        out = _run_row(cur, row)
        damage = _damage(conn, run_id, out["json"], out.pop("sha256"))
    if damage:
        raise BenchError(f"stored run #{run_id} is damaged: {damage}; delete it, or export what is left")
    out["damaged"] = None
    out["result"] = _body(run_id, out.pop("json"))
    return out


def _body(run_id: int, text) -> dict:
    """A stored run's result; a body damaged on disk is reported, not raised as a JSON error."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise BenchError(f"stored run #{run_id} is damaged ({str(e)[:80]}); delete it") from None


def delete_run(run_id: int, *, path: str | None = None) -> bool:
    """Delete a run and its result rows; True if it existed. StoreReadOnly on a read-only store."""
    run_id = _check_id(run_id)
    with _connect(path) as conn:
        n = _transaction(conn, lambda: conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount)
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
    {"store_version": 1, "exported": ..., "runs": [{"id", "saved_at", "source", "label",
    "disturbed", "disturbed_reasons", "damaged", "result"}]}. Each `result` passes
    `validate_result` and can be imported again; a damaged run has `damaged` (why) and no result."""
    with _connect(path, write=False) as conn:
        runs = []
        for i in _ids(ids, conn):
            cur = conn.execute("SELECT id, saved_at, source, label, disturbed, disturbed_reasons, json, sha256 "
                               "FROM runs WHERE id = ?", (i,))
            run = _run_row(cur, cur.fetchone())
            damage = _damage(conn, i, run["json"], run.pop("sha256"))
            text = run.pop("json")
            run["damaged"] = damage
            if damage is None:
                run["result"] = _body(i, text)
            runs.append(run)
    return json.dumps({"store_version": STORE_VERSION, "exported": _now(), "runs": runs}, indent=2)


def _cell(v):
    # Spreadsheet formula injection: a text cell starting with = + - @ is prefixed with '.
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return "" if v is None else v


def export_csv(ids=None, *, path: str | None = None) -> str:
    """The results of runs `ids` (all when None) as CSV, one row per result, CSV_COLUMNS:
    run_disturbed is 'yes: reason; reason', 'no' or empty (not known); run_damaged is why a
    damaged run's rows cannot be trusted (empty when sound)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    with _connect(path, write=False) as conn:
        for i in _ids(ids, conn):
            cur = conn.execute("SELECT id, label, created, source, device_kind, device_name, disturbed, "
                               "disturbed_reasons, json, sha256 FROM runs WHERE id = ?", (i,))
            run = _run_row(cur, cur.fetchone())
            damage = _damage(conn, i, run.pop("json"), run.pop("sha256"))
            disturbed = {None: "", False: "no", True: "yes"}[run["disturbed"]]
            if run["disturbed"] and run["disturbed_reasons"]:
                disturbed += ": " + "; ".join(run["disturbed_reasons"])
            head = [run[c] for c in ("id", "label", "created", "source", "device_kind", "device_name")]
            for row in conn.execute(f"SELECT {', '.join(_RESULT_FIELDS)} FROM results WHERE run_id = ? ORDER BY idx",
                                    (i,)):
                w.writerow([_cell(v) for v in (*head, *row, disturbed, damage)])
    return buf.getvalue()


# --- notices every session sees until acknowledged ---------------------------------------------------

def notices(*, path: str | None = None) -> list[dict]:
    """Unacknowledged notices of the store (id, created, kind, text), oldest first, plus moved-
    aside notices not yet written (a store that could not take them): id None."""
    out = []
    p = path or default_path()
    if os.path.exists(p):
        with _connect(p, write=False) as conn:
            if "notices" in {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}:
                cur = conn.execute("SELECT id, created, kind, text FROM notices WHERE acknowledged IS NULL ORDER BY id")
                out = [dict(zip([c[0] for c in cur.description], r)) for r in cur.fetchall()]
    with _notices_lock:
        out += [{"id": None, "created": None, "kind": "moved-aside", "text": t} for t in _pending_notices]
    return out


def acknowledge_notice(notice_id: int, *, path: str | None = None) -> bool:
    """Mark a notice read (for every session); True if it was open."""
    notice_id = _check_id(notice_id)
    with _connect(path) as conn:
        n = _transaction(conn, lambda: conn.execute(
            "UPDATE notices SET acknowledged = ? WHERE id = ? AND acknowledged IS NULL", (_now(), notice_id)).rowcount)
    return n > 0


# --- measurements started and never finished ------------------------------------------------------------

def begin_run(source: str, what: str, *, path: str | None = None) -> int | None:
    """Record that a measurement starts (pid, host, source 'cli' | 'app' | 'api', what: one line);
    its id, or None where the store cannot be written (the run goes on, untracked)."""
    try:
        with _connect(path) as conn:
            return int(_transaction(conn, lambda: conn.execute(
                "INSERT INTO starts (started_at, pid, host, source, what) VALUES (?, ?, ?, ?, ?)",
                (_now(), os.getpid(), socket.gethostname(), source, " ".join(str(what).split())[:300])).lastrowid))
    except BenchError:
        return None


def end_run(start_id: int | None, outcome: str, *, path: str | None = None) -> None:
    """Close a begin_run row with its outcome ('measured', 'failed: ...', 'cancelled', ...)."""
    if start_id is None:
        return
    try:
        with _connect(path) as conn:
            _transaction(conn, lambda: conn.execute(
                "UPDATE starts SET finished_at = ?, outcome = ? WHERE id = ?",
                (_now(), " ".join(str(outcome).split())[:300], start_id)))
    except BenchError:
        pass


def interrupted_runs(*, path: str | None = None) -> list[dict]:
    """Measurements that started and never finished because their process died (a killed server
    or command line): id, started_at, pid, host, source, what. A row of a live process on this
    host is still running, not listed."""
    p = path or default_path()
    if not os.path.exists(p):
        return []
    with _connect(p, write=False) as conn:
        if "starts" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}:
            return []
        cur = conn.execute("SELECT id, started_at, pid, host, source, what FROM starts WHERE finished_at IS NULL "
                           "ORDER BY id")
        rows = [dict(zip([c[0] for c in cur.description], r)) for r in cur.fetchall()]
    here = socket.gethostname()
    return [r for r in rows if not (r["host"] == here and pid_alive(r["pid"]))]


def acknowledge_interrupted(start_id: int, *, path: str | None = None) -> bool:
    """Mark an interrupted measurement as reported; True if it was open."""
    start_id = _check_id(start_id)
    with _connect(path) as conn:
        n = _transaction(conn, lambda: conn.execute(
            "UPDATE starts SET finished_at = ?, outcome = 'interrupted (its process died)' "
            "WHERE id = ? AND finished_at IS NULL", (_now(), start_id)).rowcount)
    return n > 0
