"""mla_core.store: torch-free and free of mla_core.bench, no import circles, and kernel profiles
(save / load / list, and a bad table refused in one line) through the API and `bench history`."""
from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mla_core.store import history, profiles
from mla_core.store.errors import BenchError, InvalidResult
from mla_core.store.schema import KINDS, PROFILE_OPS, result_schema, validate_result
from mla_core.units import KV_DTYPES, WEIGHT_DTYPES

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "mla_core" / "store"
BENCH = ROOT / "mla_core" / "bench"


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "h" / "history.sqlite3"
    monkeypatch.setenv(history.ENV_VAR, str(path))
    history.pop_notices()
    return path


# --- the package boundary ---------------------------------------------------------------------------------

def test_importing_the_store_imports_neither_torch_nor_the_benchmark():
    modules = sorted(p.stem for p in STORE.glob("*.py") if p.stem != "__init__")
    code = ("import sys, mla_core.store\n"
            + "".join(f"import mla_core.store.{m}\n" for m in modules)
            + "from mla_core.store import save_profile, load_profile, list_profiles, validate_result\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('mla_core.bench')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert {"history", "schema", "report", "engines", "runlock", "disturbance", "profiles"} <= set(modules)


def _imports(path: Path, package: str) -> set[str]:
    """Every mla_core module `path` imports, at the top or inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = f"mla_core.{package}"
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = ({1: here, 2: "mla_core"}[node.level] if node.level else "") + (
                ("." if node.level else "") + node.module if node.module else "")
            base = base.lstrip(".")
            if node.module is None:  # from . import history
                out |= {f"{base}.{a.name}" for a in node.names}
            else:
                out.add(base)
                out |= {f"{base}.{a.name}" for a in node.names}  # from ..store import history
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("mla_core.")}


def _graph() -> dict[str, set[str]]:
    nodes = {f"mla_core.{pkg}.{p.stem}": p for pkg, folder in (("store", STORE), ("bench", BENCH))
             for p in folder.glob("*.py") if p.stem != "__init__"}
    return {name: {m for m in _imports(path, name.split(".")[1]) if m in nodes} for name, path in nodes.items()}


def test_no_import_circles_in_store_and_bench_and_store_never_imports_bench():
    graph = _graph()
    assert "mla_core.store.runlock" in graph["mla_core.store.history"]  # the scan sees imports
    assert "mla_core.store.files" in graph["mla_core.bench.cli"]
    for name, deps in graph.items():
        if name.startswith("mla_core.store."):
            assert not [d for d in deps if d.startswith("mla_core.bench.")], name

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return trail + [nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + [nxt]))
        return None

    cycles = [c for c in (cycle_from(n) for n in graph) if c]
    assert cycles == []


# --- kernel profiles ----------------------------------------------------------------------------------------

def make_profile() -> dict:
    """A profile of DeepSeek-V3's op shapes at TP8 (config.json: hidden_size 7168, q_lora_rank 1536,
    kv_lora_rank 512, qk_rope_head_dim 64, num_attention_heads 128 -> 16 per GPU,
    moe_intermediate_size 2048, n_routed_experts 256 -> 32 per GPU at EP8, num_experts_per_tok 8).
    Latencies are typed for the test: a round trip must give them back exactly."""
    return {
        "kind": "profile", "device": {"kind": "cuda", "name": "NVIDIA H200", "torch_version": "2.13.0"},
        "model": "deepseek-v3", "tp": 8, "engine": None,
        "ops": {
            "gemm": [{"m": m, "n": 1536, "k": 7168, "dtype": "bf16", "latency_s": 4.6e-6 * (1 + m / 512)}
                     for m in (1, 64, 512, 8192)],
            "attention_decode": [{"kind": "mla_absorbed", "batch": b, "context": 4096, "num_heads": 16,
                                  "num_kv_heads": 1, "k_dim": 576, "v_dim": 512, "kv_dtype": "fp8",
                                  "latency_s": 2.1e-5 * b} for b in (1, 32)],
            "attention_prefill": [{"kind": "mla_mha", "tokens": 2048, "prefix": 0, "num_heads": 16,
                                   "num_kv_heads": 16, "k_dim": 192, "v_dim": 128, "window": None, "dtype": "bf16",
                                   "latency_s": 1.9e-4}],
            "moe": [{"tokens": 64, "hidden": 7168, "inter": 2048, "topk": 8, "num_experts": 256, "experts_local": 32,
                     "dtype": "fp8", "latency_s": 8.5e-5}],
            "elementwise": [{"bytes": 1 << 20, "latency_s": 3.0e-6}],
            "collective": [{"op": "all_reduce", "bytes": 1 << 20, "ranks": 8, "latency_s": 1.6e-5}],
            "recurrent": [],
        },
    }


META = {"torch_version": "2.13.0", "dtype": "bf16", "wall_s": 312.5, "command": "mla_core bench --profile",
        "created": "2026-11-30T10:00:00Z", "notes": ["measured with CUDA graphs off"]}


def test_a_profile_round_trips_through_the_store(store):
    table = make_profile()
    first = profiles.save_profile(table, label="h200 tp8", meta=META)
    second = profiles.save_profile({**copy.deepcopy(table), "tp": 4, "model": "kimi-k2-instruct"}, meta={})
    assert table == make_profile()  # the caller's dict is not changed
    loaded = profiles.load_profile(first)
    assert loaded["ops"] == table["ops"] and loaded["device"] == table["device"]
    assert (loaded["kind"], loaded["model"], loaded["tp"], loaded["engine"]) == ("profile", "deepseek-v3", 8, None)
    assert loaded["created"] == "2026-11-30T10:00:00Z"  # the measurement's date, from meta
    assert loaded["meta"] == {k: v for k, v in META.items() if k != "created"}
    listed = profiles.list_profiles()
    assert [p["id"] for p in listed] == [second, first]  # newest first
    assert {k: listed[1][k] for k in ("id", "device_name", "model", "tp", "label", "n_ops", "damaged")} == {
        "id": first, "device_name": "NVIDIA H200", "model": "deepseek-v3", "tp": 8, "label": "h200 tp8",
        "n_ops": 4 + 2 + 1 + 1 + 1 + 1, "damaged": None}
    assert listed[0]["model"] == "kimi-k2-instruct" and listed[0]["tp"] == 4 and listed[0]["label"] is None
    assert all(p["saved_at"] for p in listed)
    runs = {r["id"]: r for r in history.list_runs()}
    assert runs[first]["kind"] == "profile" and runs[first]["device_kind"] == "cuda"
    # The store's own export carries it, and it imports again as it was.
    [exported] = json.loads(history.export_json([first]))["runs"]
    assert validate_result(exported["result"], kind="profile") == loaded


def test_list_profiles_of_an_absent_store_is_empty_and_creates_nothing(store):
    assert profiles.list_profiles() == [] and not store.exists()


def test_a_profile_is_told_apart_from_other_runs(store):
    from test_bench_history import make_result

    kernels = history.save_run(make_result(1))
    profile = profiles.save_profile(make_profile(), meta={})
    with pytest.raises(BenchError, match=rf"^run {kernels} is not a kernel profile \(it is a kernel benchmark run\)"):
        profiles.load_profile(kernels)
    assert [p["id"] for p in profiles.list_profiles()] == [profile]
    with pytest.raises(BenchError, match="no stored run with id 99"):
        profiles.load_profile(99)


def _refused(table, meta=None) -> str:
    with pytest.raises(InvalidResult) as e:
        profiles.save_profile(table, meta={} if meta is None else meta)
    text = str(e.value)
    assert "\n" not in text and len(text) < 400
    return text


def _with(edit) -> dict:
    t = make_profile()
    edit(t)
    return t


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t["ops"]["gemm"][0].pop("latency_s"), "ops.gemm[0]: 'latency_s' is a required property"),
    (lambda t: t["ops"]["gemm"][0].update(latency_s=0), "ops.gemm[0].latency_s: 0 is less than or equal to"),
    (lambda t: t["ops"]["gemm"][0].update(latency_s=-1e-6), "ops.gemm[0].latency_s: -1e-06 is less than or equal"),
    (lambda t: t["ops"]["gemm"][1].update(m=10**12), "ops.gemm[1].m: 1000000000000 is greater than the maximum"),
    (lambda t: t["ops"]["gemm"][0].update(dtype="bf17"), "ops.gemm[0].dtype: 'bf17' is not one of"),
    (lambda t: t["ops"]["gemm"][0].update(latency="1"), "ops.gemm[0]: Additional properties are not allowed"),
    (lambda t: t["ops"].update(matmul=[]), "result JSON, ops: Additional properties are not allowed ('matmul'"),
    (lambda t: t["ops"]["collective"][0].update(op="broadcast"), "ops.collective[0].op: 'broadcast' is not one of"),
    (lambda t: t["ops"]["moe"][0].update(experts_local=300), "ops.moe[0]: experts_local 300 is above num_experts 256"),
    (lambda t: t["ops"]["moe"][0].update(topk=257), "ops.moe[0]: topk 257 is above num_experts 256"),
    (lambda t: t.update(tp=0), "result JSON, tp: 0 is less than the minimum of 1"),
    (lambda t: t.update(engine="tensorrt"), "result JSON, engine: 'tensorrt' is not one of"),
    (lambda t: t["device"].pop("name"), "result JSON, device: 'name' is a required property"),
    (lambda t: t.update(ops={k: [] for k in PROFILE_OPS}), "result JSON, ops: the profile holds no measured op"),
    (lambda t: t.update(kind="kernels"), "a kernel profile has kind 'profile', got 'kernels'"),
])
def test_a_bad_table_is_refused_in_one_line_and_nothing_is_saved(store, edit, expected):
    assert expected in _refused(_with(edit))
    assert profiles.list_profiles() == []


def test_nan_and_a_bad_meta_are_refused(store):
    assert "is not a finite number" in _refused(_with(lambda t: t["ops"]["gemm"][0].update(latency_s=float("nan"))))
    assert "meta" in _refused(make_profile(), meta={"nested": {"a": 1}})
    with pytest.raises(InvalidResult, match="meta is a dict"):
        profiles.save_profile(make_profile(), meta=None)
    assert profiles.list_profiles() == []


def test_the_profile_schema_names_the_projects_dtypes_and_every_kind_has_a_schema():
    dtypes = set(result_schema("profile")["$defs"]["dtype"]["enum"])
    assert (set(KV_DTYPES) - {"auto"}) <= dtypes and set(WEIGHT_DTYPES) <= dtypes
    assert set(result_schema("profile")["properties"]["ops"]["properties"]) == set(PROFILE_OPS)
    for kind in KINDS:
        assert result_schema(kind)["$id"] == f"mla_core/store/{os.path.basename(result_schema(kind)['$id'])}"


# --- `bench history` -------------------------------------------------------------------------------------------

def _cli(*args, env_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{history.ENV_VAR: str(env_path)})
    return subprocess.run([sys.executable, "-m", "mla_core", "bench", "history", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_bench_history_lists_runs_with_their_kind_and_reads_only(store):
    p = _cli(env_path=store)
    assert p.returncode == 0 and p.stdout.strip() == f"no runs saved in {store}" and not store.exists()
    from test_bench_history import make_result

    kernels = history.save_run(make_result(3), label="cpu run")
    profile = profiles.save_profile(make_profile(), label="h200", meta={})
    p = _cli(env_path=store)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["id", "kind", "saved", "(UTC)", "device", "source", "label", "note"]
    assert lines[2].split()[:2] == [str(profile), "profile"] and "NVIDIA H200" in lines[2]
    assert lines[3].split()[:2] == [str(kernels), "kernels"] and "test cpu 3" in lines[3] and "cpu run" in lines[3]
    data = json.loads(_cli("--json", "--kind", "profile", env_path=store).stdout)
    assert [r["id"] for r in data["runs"]] == [profile] and data["store"] == str(store)
    p = _cli("--kind", "collectives", env_path=store)
    assert p.returncode == 0 and p.stdout.strip() == f"no collectives runs saved in {store}"
    p = _cli("--kind", "nope", env_path=store)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "invalid choice: 'nope'" in p.stderr
