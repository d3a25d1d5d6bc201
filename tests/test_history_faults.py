"""Faults of the run history and the machine's benchmark lock, each with its true message and
nothing lost (issue: "History that tells the truth"): a full disk (SQLite max_page_count), a
read-only store (read-only connection), a changed byte, a second session, a killed writer; the
machine-wide lock between processes; runs marked disturbed by a busy neighbour process."""
from __future__ import annotations

import copy
import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from mla_core.store import disturbance, history, runlock
from mla_core.store.errors import BenchBusy, BenchError
from test_bench_history import ROOT, make_result


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "h" / "history.sqlite3"
    monkeypatch.setenv(history.ENV_VAR, str(path))
    history.pop_notices()
    history._pending_notices.clear()
    yield path
    history._connect_hook = None


def _fill_disk(monkeypatch, path):
    """Every later connection may not grow the file past its present size: SQLite reports
    SQLITE_FULL exactly as on a full disk."""
    pages = sqlite3.connect(path).execute("PRAGMA page_count").fetchone()[0]
    monkeypatch.setattr(history, "_connect_hook", lambda conn: conn.execute(f"PRAGMA max_page_count = {pages}"))


def _big(tag: int) -> dict:
    r = make_result(tag, n_decode=60)  # tens of KiB: more than the free pages of a small store
    r["notes"] = ["x" * 400] * 60
    return r


# --- disk full ------------------------------------------------------------------------------------------

def test_a_full_disk_says_disk_full_and_keeps_what_was_saved(store, monkeypatch):
    first = history.save_run(make_result(1))
    _fill_disk(monkeypatch, str(store))
    with pytest.raises(history.StoreFull) as e:
        history.save_run(_big(2))
    text = str(e.value)
    assert text.startswith("disk full:") and "rollback" not in text and "\n" not in text
    monkeypatch.setattr(history, "_connect_hook", None)
    runs = history.list_runs()
    assert [r["id"] for r in runs] == [first] and runs[0]["damaged"] is None  # nothing half-written
    assert history.save_run(make_result(3)) == first + 1  # space back: saving works again


def test_the_cli_prints_and_writes_out_when_the_disk_is_full(store, monkeypatch, tmp_path, capsys):
    pytest.importorskip("torch")
    from mla_core.bench import cli

    history.save_run(make_result(1))
    _fill_disk(monkeypatch, str(store))
    out = tmp_path / "r.json"
    status = cli.main(["--device", "cpu", "--quick", "--batch", "1", "--context", "256", "--heads", "4",
                       "--gqa-groups", "2", "--stream-bytes", "4M", "--matmul-n", "64", "--reps", "3",
                       "--budget-s", "0.05", "--out", str(out), "--save"])
    captured = capsys.readouterr()
    assert status == 2
    assert "mla_core bench: error: not saved: disk full:" in captured.err and "rollback" not in captured.err
    assert f"(the result is in {out})" in captured.err
    data = json.loads(out.read_text())  # the measurement is kept
    assert {r["kernel"] for r in data["results"]} >= {"copy", "mla_absorbed_decode"}
    assert "copy" in captured.out  # and printed
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()  # the user's umask, not mkstemp's 0600


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_an_app_run_on_a_full_disk_keeps_its_result_in_the_session(store, monkeypatch):
    brun = pytest.importorskip("mla_core.bench.run")
    from ui import bench_runs

    history.save_run(make_result(1))
    _fill_disk(monkeypatch, str(store))
    monkeypatch.setattr(brun, "run_benchmark", lambda config, **kw: _big(5))
    reg = bench_runs.Registry()
    reg.start("owner-full", config=None)
    assert reg.join("owner-full", 30)
    job = reg.take("owner-full")
    assert job.state == "done" and job.run_id is None
    assert job.save_error.startswith("disk full:") and job.result["device"]["name"] == "test cpu 5"


# --- read-only store ----------------------------------------------------------------------------------------

def _make_read_only(monkeypatch, store):
    """Mode 0444/0555 (what a read-only mount looks like to a user); root ignores file modes, so
    for root the store is declared unwritable the same way os.access would report a ro mount."""
    os.chmod(store, 0o444)
    os.chmod(store.parent, 0o555)
    if os.geteuid() == 0:
        monkeypatch.setattr(history, "_writable", lambda path: False)


def test_a_read_only_store_is_read_and_refuses_to_save(store, monkeypatch):
    ids = [history.save_run(make_result(i)) for i in range(4)]
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    _make_read_only(monkeypatch, store)
    try:
        runs = history.list_runs()
        assert sorted(r["id"] for r in runs) == ids and all(r["damaged"] is None for r in runs)
        assert history.get_run(ids[0])["result"]["device"]["name"] == "test cpu 0"
        assert len(json.loads(history.export_json())["runs"]) == 4
        assert not history.writable()
        for write in (lambda: history.save_run(make_result(9)), lambda: history.delete_run(ids[0])):
            with pytest.raises(history.StoreReadOnly, match="is read-only: its runs can be read but nothing can "
                                                            "be saved"):
                write()
    finally:
        os.chmod(store.parent, 0o755)
        os.chmod(store, 0o644)
    assert len(history.list_runs()) == 4  # nothing was lost or moved aside
    assert not [p for p in os.listdir(store.parent) if ".corrupt-" in p]


def test_a_write_through_a_read_only_connection_is_named_read_only(store):
    history.save_run(make_result(1))
    conn = history._open_readonly(str(store))
    with pytest.raises(sqlite3.OperationalError) as e:
        conn.execute("DELETE FROM runs")
    assert history._is_readonly(e.value)


# --- a changed byte --------------------------------------------------------------------------------------------

def test_a_changed_byte_marks_the_run_damaged_everywhere(store):
    good = history.save_run(make_result(1))
    bad = history.save_run(make_result(2))
    conn = sqlite3.connect(store)
    text = conn.execute("SELECT json FROM runs WHERE id = ?", (bad,)).fetchone()[0]
    i = text.index('"median_s":') + len('"median_s":')
    changed = text[:i] + ("9" if text[i] != "9" else "8") + text[i + 1:]  # one byte
    conn.execute("UPDATE runs SET json = ? WHERE id = ?", (changed, bad))
    conn.commit()
    conn.close()
    runs = {r["id"]: r for r in history.list_runs()}
    assert runs[good]["damaged"] is None
    assert "no longer matches the sha256" in runs[bad]["damaged"]
    with pytest.raises(BenchError, match=f"stored run #{bad} is damaged: its JSON no longer matches"):
        history.get_run(bad)
    exported = {r["id"]: r for r in json.loads(history.export_json())["runs"]}
    assert "result" in exported[good] and exported[good]["damaged"] is None
    assert "result" not in exported[bad] and "sha256" in exported[bad]["damaged"]
    rows = list(csv.DictReader(io.StringIO(history.export_csv())))
    assert {r["run_damaged"] for r in rows if r["run_id"] == str(good)} == {""}
    assert all("sha256" in r["run_damaged"] for r in rows if r["run_id"] == str(bad))


def test_a_changed_result_row_marks_the_run_damaged(store):
    run = history.save_run(make_result(1))
    conn = sqlite3.connect(store)
    conn.execute("UPDATE results SET median_s = median_s * 2 WHERE run_id = ? AND idx = 1", (run,))
    conn.commit()
    conn.close()
    assert "result rows no longer match its JSON" in history.list_runs()[0]["damaged"]
    rows = list(csv.DictReader(io.StringIO(history.export_csv())))
    assert all("no longer match" in r["run_damaged"] for r in rows)  # the CSV says what JSON would not show


# --- the moved-aside notice reaches every session until acknowledged ------------------------------------------

def _other_process(code: str, store) -> str:
    env = dict(os.environ, **{history.ENV_VAR: str(store)})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_moved_aside_notice_is_kept_for_every_session_until_acknowledged(store):
    store.parent.mkdir(parents=True)
    store.write_bytes(b"this is not a database" * 100)
    with pytest.warns(history.HistoryWarning):
        assert history.list_runs() == []  # the first session moves it aside
    history.pop_notices()  # that session's own in-process copy is gone
    code = "from mla_core.store import history; print([n['text'] for n in history.notices()])"
    for _ in range(3):  # three more sessions, in other processes, each are told
        assert "moved it to" in _other_process(code, store)
    [notice] = history.notices()
    assert notice["kind"] == "moved-aside" and os.path.exists(notice["text"].split("moved it to ")[1].split(" and")[0])
    assert history.acknowledge_notice(notice["id"])
    assert _other_process(code, store).strip() == "[]"


# --- a writer killed during a run: reported at the next start ------------------------------------------------

def test_a_run_killed_mid_measurement_is_reported_at_the_next_start(store):
    pytest.importorskip("torch")
    code = """
        import os, signal
        from mla_core.bench.run import run_benchmark, default_config
        cfg = default_config("cpu", True, contexts=(256,), heads=4, gqa_groups=2, stream_bytes=4 << 20,
                             matmul_n=64, reps=3, budget_s=0.05)
        def progress(done, total, label):
            if done == 3:
                os.kill(os.getpid(), signal.SIGKILL)  # the server dies mid-run
        run_benchmark(cfg, progress=progress, source="app")
    """
    env = dict(os.environ, **{history.ENV_VAR: str(store)})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                       timeout=120)
    assert p.returncode == -9, p.stderr
    [cut] = history.interrupted_runs()
    assert cut["source"] == "app" and cut["pid"] != os.getpid() and "benchmark" in cut["what"]
    assert history.list_runs() == []  # nothing half-saved
    with runlock.machine_lock(source="api", wait=False):  # the kernel dropped the dead run's lock
        pass
    assert history.acknowledge_interrupted(cut["id"]) and history.interrupted_runs() == []


def test_a_finished_or_failed_run_is_not_reported_as_interrupted(store):
    start = history.begin_run("cli", "cpu quick benchmark")
    assert history.interrupted_runs() == []  # this process is alive: still running
    history.end_run(start, "measured")
    assert history.interrupted_runs() == []


# --- one run at a time on the machine --------------------------------------------------------------------------

def test_a_second_run_is_refused_or_waits_while_another_process_holds_the_lock(store):
    code = """
        import sys, time
        from mla_core.store import runlock
        with runlock.machine_lock(source="cli"):
            print("held", flush=True)
            time.sleep(float(sys.argv[1]))
    """
    env = dict(os.environ, **{history.ENV_VAR: str(store)})
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), "3"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        info = runlock.holder()
        assert info["pid"] == holder.pid and info["source"] == "cli"
        with pytest.raises(BenchBusy, match=rf"another benchmark is running on this machine \(from the command line, "
                                            rf"pid {holder.pid}, since .*\); wait for it"):
            with runlock.machine_lock(source="app", wait=False):
                pass
        t0 = time.monotonic()
        with runlock.machine_lock(source="app", wait=True):  # waits for it, then runs
            assert time.monotonic() - t0 > 0.5  # the holder slept 3 s with it
            assert runlock.holder()["pid"] == os.getpid()
    finally:
        holder.kill()
        holder.wait()
    assert runlock.holder() is None


def test_the_cli_refuses_a_second_run_with_one_line(store):
    pytest.importorskip("torch")
    from mla_core.bench import cli

    with runlock.machine_lock(source="app"):
        p = subprocess.run([sys.executable, "-m", "mla_core", "bench", "--device", "cpu", "--quick", "--context",
                            "256", "--heads", "4", "--gqa-groups", "2", "--stream-bytes", "4M", "--matmul-n", "64"],
                           cwd=ROOT, env=dict(os.environ, **{history.ENV_VAR: str(store)}), capture_output=True,
                           text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith(f"{cli.PROG}: error: another benchmark is running on this machine (from the app, "
                               f"pid {os.getpid()}") and p.stderr.count("\n") == 1


# --- disturbed runs ------------------------------------------------------------------------------------------------

def test_a_run_beside_a_busy_neighbour_is_marked_disturbed_with_its_evidence(store):
    pytest.importorskip("torch")
    from mla_core.bench.run import default_config, run_benchmark

    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 120\nwhile time.time() < t: pass"])
    try:
        time.sleep(0.5)
        cfg = default_config("cpu", True, contexts=(256,), heads=4, gqa_groups=2, stream_bytes=8 << 20,
                             matmul_n=128, reps=5, budget_s=0.3, threads=1)
        result = run_benchmark(cfg)
    finally:
        spin.kill()
        spin.wait()
    block = result["disturbed"]
    assert block["disturbed"] is True and block["refused"] is None
    assert block["evidence"]["other_cpus_busy"] > disturbance.BUSY_CPUS
    assert any(r.startswith("other processes kept") for r in block["reasons"])
    assert set(block["evidence"]["ceiling_repeats"]) == {"copy_GBps", "read_GBps", "matmul_TFLOPs"}
    assert all(len(v) == 2 for v in block["evidence"]["ceiling_repeats"].values())
    run_id = history.save_run(result)
    [row] = history.list_runs()
    assert row["id"] == run_id and row["disturbed"] is True and row["disturbed_reasons"] == block["reasons"]
    rows = list(csv.DictReader(io.StringIO(history.export_csv())))
    assert all(r["run_disturbed"].startswith("yes: other processes kept") for r in rows)
    assert json.loads(history.export_json())["runs"][0]["disturbed"] is True


def test_disturbance_thresholds_and_refusal():
    quiet = disturbance.assess({"other_cpus_busy": 0.1, "load_avg_1min_before": 0.2,
                                "ceiling_repeats": {"read_GBps": [10.0, 10.5]}}, 2, "cpu")
    assert quiet["disturbed"] is False and quiet["evidence"]["ceiling_spread"] == {"read_GBps": 0.0488}
    spread = disturbance.assess({"ceiling_repeats": {"matmul_TFLOPs": [1.0, 0.8]}}, 2, "cuda")
    assert spread["reasons"] == ["matmul_TFLOPs measured again at the end differs by 22% (threshold 10%)"]
    gpu_busy_host = disturbance.assess({"other_cpus_busy": 1.9}, 2, "cuda")  # host CPUs do not matter on a GPU
    assert gpu_busy_host["disturbed"] is False
    os.environ[disturbance.REFUSE_ENV] = "0.25"
    try:
        full = disturbance.assess({"other_cpus_busy": 1.9}, 2, "cpu")
    finally:
        os.environ[disturbance.REFUSE_ENV] = "0"
    assert full["refused"].startswith("other processes held 1.90 of the 2 CPUs throughout the run")
    reruns = disturbance.add_evidence(copy.deepcopy(make_result(1)), other_sessions_reruns=7)
    assert reruns["disturbed"]["reasons"] == ["7 page reruns of other sessions of this server ran on the same CPUs "
                                              "during the run"]


def test_other_sessions_reruns_during_an_app_run_are_its_evidence(store, monkeypatch):
    brun = pytest.importorskip("mla_core.bench.run")
    from ui import bench_runs
    import threading

    go, done = threading.Event(), threading.Event()

    def fake(config, progress=None, cancel=None, *, wait=False, source="api"):
        progress(0, 8, "copy")
        go.set()
        done.wait(10)
        return make_result(4)

    monkeypatch.setattr(brun, "run_benchmark", fake)
    reg = bench_runs.Registry()
    reg.note_rerun("B")  # before the run: not counted
    reg.start("owner-a", config=None, session="A")
    assert go.wait(10)
    for session in ("A", "B", "B", "C"):  # A is the run's own session (its page polling)
        reg.note_rerun(session)
    done.set()
    assert reg.join("owner-a", 10)
    job = reg.take("owner-a")
    assert job.result["disturbed"]["evidence"]["other_sessions_reruns"] == 3
    assert history.list_runs()[0]["disturbed"] is True
