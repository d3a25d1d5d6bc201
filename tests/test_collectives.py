"""Collective bandwidth: nccl-tests' formulas, the CLI, and a real two-rank gloo run under torchrun."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mla_core.bench import comm
from mla_core.store import history
from mla_core.store.schema import validate_result
from mla_core.errors import MLAError

ROOT = Path(__file__).resolve().parents[1]


def _torchrun() -> list[str]:
    exe = Path(sys.executable).parent / "torchrun"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


# --- formulas (nccl-tests doc/PERFORMANCE.md) --------------------------------------------------------------

@pytest.mark.parametrize("op, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 8, 0.875), ("all_reduce", 1, 0.0), ("all_gather", 2, 0.5),
])
def test_bus_factor_is_nccl_tests_definition(op, n, factor):
    # PERFORMANCE.md: all_reduce busbw = algbw * 2(n-1)/n; all_gather / reduce_scatter / alltoall (n-1)/n.
    assert comm.bus_factor(op, n) == pytest.approx(factor)


def test_bandwidths_of_one_timed_collective():
    # 1 GiB all_reduce over 8 ranks in 5 ms: algbw 214.7 GB/s, busbw 1.75x that.
    alg, bus = comm.bandwidths("all_reduce", 1 << 30, 5e-3, 8)
    assert alg == pytest.approx(214.748, rel=1e-5)
    assert bus == pytest.approx(375.809, rel=1e-5)


@pytest.mark.parametrize("text, expect", [
    ("1K..8K", (1024, 2048, 4096, 8192)), ("1M,4M", (1 << 20, 4 << 20)), ("1G", (1 << 30,)),
    ("4K..4K,1K", (1024, 4096)),
])
def test_parse_sizes(text, expect):
    assert comm.parse_sizes(text) == expect


@pytest.mark.parametrize("bad", ["", "8K..1K", "1T", "12", "x..1M", "1K..64G"])
def test_parse_sizes_refuses(bad):
    with pytest.raises(MLAError):
        comm.parse_sizes(bad)


def test_parse_ops():
    assert comm.parse_ops("all") == comm.OPS
    assert comm.parse_ops("all_to_all,all_reduce") == ("all_reduce", "all_to_all")
    with pytest.raises(MLAError, match="unknown collective"):
        comm.parse_ops("broadcast")


# --- the command line without torchrun ---------------------------------------------------------------------

def test_without_torchrun_it_says_how_to_start_and_exits_2():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    p = subprocess.run([sys.executable, "-m", "mla_core", "bench", "collectives", "--device", "cpu", "--quick"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "torchrun --nproc-per-node" in lines[0]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("argv, expect", [
    (["--ops", "broadcast"], "unknown collective"), (["--sizes", "1T"], "size"), (["--label", "x"], "--label needs"),
])
def test_bad_flags_exit_2_with_one_line(argv, expect):
    p = subprocess.run([sys.executable, "-m", "mla_core", "bench", "collectives", *argv], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and expect in p.stderr


# --- a real run: two gloo ranks under torchrun -------------------------------------------------------------

@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("coll")
    out = tmp / "out" / "collectives.json"
    out.parent.mkdir()
    env = dict(os.environ, MLA_EXPLORER_HISTORY=str(tmp / "history.sqlite3"), OMP_NUM_THREADS="1")
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # a CI container's hostname may not resolve: gloo on loopback
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [*_torchrun(), "--standalone", "--nproc-per-node", "2", "-m", "mla_core", "bench", "collectives",
           "--device", "cpu", "--quick", "--sizes", "4K..256K", "--out", str(out), "--save", "--label", "ci gloo"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
                       preexec_fn=lambda: os.umask(0o022))
    assert p.returncode == 0, p.stderr[-2000:]
    return p, out, env


def test_two_gloo_ranks_write_a_valid_result_with_busbw_for_every_op(gloo_run):
    p, out, _env = gloo_run
    data = validate_result(out.read_bytes(), kind="collectives")
    dev = data["device"]
    assert (dev["world_size"], dev["nodes"], dev["backend"], dev["kind"]) == (2, 1, "gloo", "cpu")
    sizes = comm.parse_sizes("4K..256K")
    assert {r["op"] for r in data["results"]} == set(comm.OPS)
    for op in comm.OPS:
        rows = [r for r in data["results"] if r["op"] == op]
        assert [r["bytes"] for r in rows] == list(sizes)  # 4K fp32 splits evenly over 2 ranks
        for r in rows:
            assert r["busbw_GBps"] > 0 and r["min_s"] <= r["median_s"]
            assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["median_s"] / 1e9)
            assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * comm.bus_factor(op, 2))
            assert r["busbw_best_GBps"] >= r["busbw_GBps"]
            assert r["reps"] >= 5
    # Only rank 0 prints the table.
    assert p.stdout.count("busbw GB/s") == 1


def test_result_file_follows_the_umask(gloo_run):
    _p, out, _env = gloo_run
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # umask 022, not mkstemp's 0600


def test_only_rank_0_saves_to_the_history(gloo_run, monkeypatch):
    _p, out, env = gloo_run
    monkeypatch.setenv(history.ENV_VAR, env["MLA_EXPLORER_HISTORY"])
    runs = history.list_runs()
    assert len(runs) == 1 and runs[0]["kind"] == "collectives" and runs[0]["label"] == "ci gloo"
    assert history.list_runs(kind="kernels") == []
    stored = history.get_run(runs[0]["id"])["result"]
    assert stored == json.loads(out.read_text())
    rows = list(__import__("csv").DictReader(__import__("io").StringIO(history.export_csv())))
    assert {r["kernel"] for r in rows} == set(comm.OPS)
    # The serving model's figure: all_reduce busbw at the largest size, in B/s.
    link = comm.link_bandwidth(stored)
    top = max((r for r in stored["results"] if r["op"] == "all_reduce"), key=lambda r: r["bytes"])
    assert link.link_bandwidth_Bps == pytest.approx(top["busbw_GBps"] * 1e9)
    assert (link.size_bytes, link.world_size, link.backend) == (256 * 1024, 2, "gloo")
    assert comm.link_bandwidth(stored, "all_to_all").op == "all_to_all"
    assert comm.stored_link_bandwidth(runs[0]["id"]) == link


def test_link_bandwidth_refuses_other_results():
    with pytest.raises(MLAError, match="not a collectives result"):
        comm.link_bandwidth({"kind": "kernels"})
    one = {"kind": "collectives", "device": {"world_size": 1}, "results": []}
    with pytest.raises(MLAError, match="fewer than 2 ranks"):
        comm.link_bandwidth(one)


def test_a_kernel_page_refuses_a_collectives_result(gloo_run):
    from mla_core.store.errors import InvalidResult

    _p, out, _env = gloo_run
    with pytest.raises(InvalidResult, match="collectives result, not a kernels result; import it in the Collectives"):
        validate_result(out.read_bytes())
    p = subprocess.run([sys.executable, "-m", "mla_core", "bench", "--validate", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    n = 4 * len(comm.parse_sizes("4K..256K"))
    assert p.returncode == 0 and "valid collectives result" in p.stdout and f"{n} results" in p.stdout


def test_plan_takes_the_link_from_a_stored_collectives_run(gloo_run):
    # The serving model's communication terms use the measured bus bandwidth when asked.
    _p, _out, env = gloo_run
    argv = [sys.executable, "-m", "mla_core", "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm",
            "--num-gpus", "8", "--tp", "8", "--batch", "16", "--input-len", "2048", "--output-len", "512", "--json"]
    datasheet = json.loads(subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True).stdout)
    p = subprocess.run([*argv, "--link-from-run", "1"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    measured = json.loads(p.stdout)
    link = comm.stored_link_bandwidth(1, path=env["MLA_EXPLORER_HISTORY"])
    # gloo on one CPU is far slower than NVLink: the same point becomes communication bound.
    assert measured["bound"] == "communication" and measured["tpot_s"] > datasheet["tpot_s"]
    best = measured["best"]
    assert best["communication_time_s"] == pytest.approx(best["communication_bytes_per_gpu"] / link.link_bandwidth_Bps)
    bad = subprocess.run([*argv, "--link-from-run", "99"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
