"""Tests of the local benchmark history (mla_core.store.history, SQLite): no torch needed."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from mla_core.store import history
from mla_core.store.errors import BenchError, InvalidResult
from mla_core.store.schema import validate_result

ROOT = Path(__file__).resolve().parents[1]


def make_result(tag: int = 0, n_decode: int = 2) -> dict:
    """A schema-valid result, built by hand (the shape of what run_benchmark returns)."""
    results = [
        {"kernel": "copy", "dtype": "fp32", "shape": {"elements": 1024, "buffer_bytes": 4096}, "median_s": 2e-6,
         "min_s": 1.5e-6, "reps": 5, "warmup": 1, "bytes": 8192, "flops": 0, "achieved_GBps": 4.096,
         "achieved_TFLOPs": 0.0},
    ]
    for i in range(n_decode):
        t = 1024 * (i + 1)
        results.append({
            "kernel": "mla_absorbed_decode", "dtype": "fp32",
            "shape": {"batch": 2, "context": t, "query_len": 1, "heads": 16, "kv_lora_rank": 512,
                      "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128},
            "median_s": 1e-3 * (i + 1) + tag * 1e-6, "min_s": 0.9e-3 * (i + 1), "reps": 7, "warmup": 1,
            "bytes": 2 * t * 576 * 4, "flops": 2 * t * 16 * 2176, "achieved_GBps": 1.0, "achieved_TFLOPs": 0.1,
            "predicted_s": 5e-4, "predicted_bound": "compute", "max_rel_err": 1e-6, "rel_err_tolerance": 1e-4,
        })
    return {
        "schema_version": 1, "tool": "mla_core.bench", "created": "2026-01-02T03:04:05Z", "wall_s": 1.0,
        "config": {"device": "cpu", "dtype": "auto", "quick": True, "batches": [2], "contexts": [1024]},
        "device": {"kind": "cpu", "backend": "cpu", "name": f"test cpu {tag}", "torch_version": "2.13.0",
                   "dtype": "fp32", "threads": 2},
        "ceilings": {"copy_GBps": 4.096, "read_GBps": None, "matmul_TFLOPs": None, "predicted_from": None},
        "results": results, "skipped": [], "timing_errors": [], "notes": [],
    }


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "h" / "history.sqlite3"
    monkeypatch.setenv(history.ENV_VAR, str(path))
    history.pop_notices()
    return path


def test_hand_made_result_is_valid():
    validate_result(make_result())


def test_default_path_is_var_beside_the_package(monkeypatch):
    monkeypatch.delenv(history.ENV_VAR, raising=False)
    assert history.default_path() == str(ROOT / "var" / "history.sqlite3")
    monkeypatch.setenv(history.ENV_VAR, "/tmp/x/h.db")
    assert history.default_path() == "/tmp/x/h.db"


def test_save_list_get_delete_round_trip(store):
    a = history.save_run(make_result(1), source="local", label="  first   run ")
    b = history.save_run(json.dumps(make_result(2)).encode(), source="import")
    assert (a, b) == (1, 2) and store.exists()
    runs = history.list_runs()
    assert [r["id"] for r in runs] == [2, 1]  # newest first
    assert runs[1]["label"] == "first run" and runs[0]["source"] == "import" and runs[0]["n_results"] == 3
    got = history.get_run(a)
    assert got["result"] == make_result(1) and got["device_name"] == "test cpu 1"
    assert history.delete_run(a) is True and history.delete_run(a) is False
    with pytest.raises(BenchError, match="no stored run with id 1"):
        history.get_run(a)
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT COUNT(*) FROM results WHERE run_id = 1").fetchone()[0] == 0  # cascaded
        assert conn.execute("SELECT COUNT(*) FROM results WHERE run_id = 2").fetchone()[0] == 3
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_save_refuses_invalid_results_and_stores_nothing(store):
    bad = make_result()
    bad["results"][0]["median_s"] = -1.0
    with pytest.raises(InvalidResult):
        history.save_run(bad)
    with pytest.raises(InvalidResult):
        history.save_run(b'{"schema_version": 1, "x": NaN}', source="import")
    with pytest.raises(BenchError, match="source"):
        history.save_run(make_result(), source="upload")
    with pytest.raises(BenchError, match="label"):
        history.save_run(make_result(), label="x" * 201)
    assert history.list_runs() == []


def test_export_json_and_csv(store):
    ids = [history.save_run(make_result(i), label=label) for i, label in enumerate(["=cmd|' /C calc'!A0", "ok"])]
    doc = json.loads(history.export_json(ids))
    assert [r["id"] for r in doc["runs"]] == ids
    for r in doc["runs"]:
        validate_result(r["result"])  # an export can be imported again
    rows = list(csv.DictReader(io.StringIO(history.export_csv(ids))))
    assert len(rows) == 6 and list(rows[0]) == list(history.CSV_COLUMNS)
    assert rows[0]["run_label"].startswith("'=")  # no spreadsheet formula
    decode = [r for r in rows if r["kernel"] == "mla_absorbed_decode"]
    assert [int(r["context"]) for r in decode] == [1024, 2048, 1024, 2048]
    assert float(decode[1]["median_s"]) == pytest.approx(2e-3)
    assert int(decode[0]["bytes"]) == 2 * 1024 * 576 * 4
    assert history.export_csv([ids[1]]).count("\n") == 4  # header + 3 results
    with pytest.raises(BenchError, match="no stored run with id 99"):
        history.export_json([99])


_WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from tests.test_bench_history import make_result
    from mla_core.store import history
    mode, n = sys.argv[1], int(sys.argv[2])
    if mode == "kill":
        for i in range(n):
            history.save_run(make_result(i), label=f"before {{i}}")
        def pause():
            print("MID-WRITE", flush=True)
            time.sleep(60)
        history._mid_write_hook = pause
        history.save_run(make_result(99, n_decode=50), label="never")
    elif mode == "hold":
        def hold():
            print("HOLDING", flush=True)
            time.sleep(1.0)
        history._mid_write_hook = hold
        history.save_run(make_result(0), label="holder")
        history._mid_write_hook = None
        for i in range(1, n):
            history.save_run(make_result(i), label=f"holder {{i}}")
    else:
        t0 = time.monotonic()
        for i in range(n):
            history.save_run(make_result(i), label=f"{{mode}} {{i}}")
        print(f"DONE {{time.monotonic() - t0:.2f}}", flush=True)
""")


def _writer(tmp_path, store, *args):
    script = tmp_path / "writer.py"
    script.write_text(_WRITER.format(root=str(ROOT)))
    env = {**os.environ, history.ENV_VAR: str(store)}
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def test_a_writer_killed_mid_write_leaves_earlier_rows_and_no_partial_row(tmp_path, store):
    proc = _writer(tmp_path, store, "kill", 3)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "MID-WRITE", proc.stderr.read()
        # The run row of the fourth save is written inside the open transaction; now kill it.
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    runs = history.list_runs()
    assert [r["label"] for r in runs] == ["before 2", "before 1", "before 0"]
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT COUNT(*) FROM runs WHERE label = 'never'").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 3 * 3
        orphans = conn.execute("SELECT COUNT(*) FROM results WHERE run_id NOT IN (SELECT id FROM runs)").fetchone()[0]
        assert orphans == 0
    for r in runs:
        assert history.get_run(r["id"])["result"]["results"][1]["kernel"] == "mla_absorbed_decode"
    assert history.save_run(make_result(7), label="after") == 4
    assert history.pop_notices() == []  # nothing was corrupt


def test_two_concurrent_writers_both_land(tmp_path, store):
    history.list_runs()  # create the store
    holder = _writer(tmp_path, store, "hold", 10)
    try:
        assert holder.stdout.readline().strip() == "HOLDING"
        # The holder keeps a write transaction open for 1 s; the other writer must wait, not fail.
        other = _writer(tmp_path, store, "other", 10)
        out, err = other.communicate(timeout=60)
        holder_out, holder_err = holder.communicate(timeout=60)
    finally:
        for p in (holder,):
            if p.poll() is None:
                p.kill()
    assert other.returncode == 0, err
    assert holder.returncode == 0, holder_err
    waited = float(out.split()[-1])
    assert waited >= 0.3  # it did meet the lock
    labels = [r["label"] for r in history.list_runs()]
    assert len(labels) == 20
    assert sorted(labels) == sorted(["holder"] + [f"holder {i}" for i in range(1, 10)]
                                    + [f"other {i}" for i in range(10)])


def test_threads_of_one_process_write_at_once(tmp_path, monkeypatch):
    """Four sessions saving at once, each time into a store that does not exist yet (the
    creation race: switching a new file to WAL needs it alone), ten times over."""
    for trial in range(10):
        monkeypatch.setenv(history.ENV_VAR, str(tmp_path / f"h{trial}.sqlite3"))
        errors = []

        def work(k):
            try:
                for i in range(5):
                    history.save_run(make_result(i), label=f"t{k}-{i}")
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert len(history.list_runs()) == 20
        assert history.pop_notices() == []  # contention is never taken for corruption


def test_a_corrupt_store_is_moved_aside_with_a_timestamp(store):
    store.parent.mkdir(parents=True, exist_ok=True)
    garbage = b"this is not an SQLite database\n" * 200
    store.write_bytes(garbage)
    with pytest.warns(history.HistoryWarning, match="moved it to"):
        assert history.list_runs() == []
    aside = [p for p in store.parent.iterdir() if p.name.startswith(store.name + ".corrupt-")]
    assert len(aside) == 1
    assert re.fullmatch(re.escape(store.name) + r"\.corrupt-\d{8}T\d{6}\.\d{6}Z", aside[0].name)
    assert aside[0].read_bytes() == garbage  # kept, byte for byte
    notices = history.pop_notices()
    assert len(notices) == 1 and str(aside[0]) in notices[0] and "\n" not in notices[0]
    assert history.pop_notices() == []
    assert history.save_run(make_result()) == 1  # a fresh store works
    assert history.list_runs()[0]["id"] == 1


def test_a_damaged_page_is_detected_and_moved_aside(store):
    for i in range(30):
        history.save_run(make_result(i, n_decode=20))
    with sqlite3.connect(store) as conn:  # fold the WAL into the main file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = store.stat().st_size
    assert size > 8 * 4096
    with open(store, "r+b") as f:  # keep the 100-byte header, wreck pages 2..5
        f.seek(4096)
        f.write(b"\xa5" * (4 * 4096))
    with pytest.warns(history.HistoryWarning):
        runs = history.list_runs()
    assert runs == []
    assert any(p.name.startswith(store.name + ".corrupt-") for p in store.parent.iterdir())
    assert len(history.pop_notices()) == 1


def test_bad_ids_are_refused(store):
    for bad in (0, -1, True, "1", 1.0):
        with pytest.raises(BenchError):
            history.get_run(bad)


def test_a_foreign_sqlite_file_is_left_alone(store):
    store.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(store) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
        conn.execute("PRAGMA user_version = 3")
    with pytest.raises(BenchError, match="something else"):
        history.list_runs()
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT x FROM notes").fetchall() == [("mine",)]
    assert not [p for p in store.parent.iterdir() if ".corrupt-" in p.name]
