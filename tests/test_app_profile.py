"""Kernel profiles in the app (issue 18): the Benchmark page's "Kernel profile" section
(ui/bench_profile.py: run with progress beside its button, saved, listed) and the Roofline page's
profile picker (its decode points beside the predictions). The values shown are compared with
the core's (mla_core.views, mla_core.store.profile_roofline). Profiles are typed tables saved
through the store into a temporary history; the run itself is a stand-in for run_profile (a
real CPU profile of a preset takes tens of seconds here)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from apptest_util import chart_specs, isolated_store, no_exceptions, run_page, shown
from mla_core.store import history, list_profiles, save_profile
from mla_core.views import APP_PROFILE_FAMILIES, roofline_profiles
from ui import bench_runs
from test_profile_roofline import GQA_ROW, MLA_ROW, table

BENCH, ROOF = "pages/benchmark.py", "pages/roofline.py"


@pytest.fixture(autouse=True)
def store(isolated_store):
    return isolated_store


def _frame_with(at, column: str):
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no table with a {column!r} column")


def _after_button(at, key: str, within: int = 3) -> list:
    els = list(at.main)
    i = next(n for n, e in enumerate(els) if getattr(e, "key", None) == key)
    return [e for e in els[i + 1:] if e.type not in ("flex_container", "block", "vertical", "column")][:within]


def _listed_equals_stored(at) -> None:
    df = _frame_with(at, "ops")
    stored = list_profiles()
    assert list(df["id"]) == [r["id"] for r in stored]
    assert list(df["model"]) == [r["model"] for r in stored]
    assert list(df["TP"]) == [r["tp"] for r in stored]
    assert list(df["device"]) == [r["device_name"] for r in stored]
    assert list(df["measured"]) == [r["created"] for r in stored]
    assert list(df["ops"]) == [r["n_ops"] for r in stored]


# --- the Benchmark page ---------------------------------------------------------------------------------

def test_the_section_lists_the_stored_profiles():
    first = save_profile(table(), label="h200", meta={"created": "2026-11-30T10:00:00Z"})
    second = save_profile(table(model="llama-3.1-8b", tp=2), meta={"created": "2026-12-01T08:30:00Z"})
    at = run_page(BENCH)
    no_exceptions(at)
    assert not at.error, shown(at.error)
    _listed_equals_stored(at)
    df = _frame_with(at, "ops")
    assert list(df["id"]) == [second, first] and list(df["ops"]) == [3, 3]
    assert list(df["label"]) == ["", "h200"]
    # The run offered: the sidebar's model (deepseek-v3) at the shared TP (8), the quick families.
    assert at.selectbox(key="_bench_prof_tp").value == 8
    assert "--model deepseek-v3 --tp 8 --quick --save" in shown(at.caption)


def test_no_profile_yet_says_so_and_creates_no_store(store):
    import os

    at = run_page(BENCH)
    no_exceptions(at)
    assert "No kernel profiles in the history yet." in shown(at.caption)
    assert not os.path.exists(store)


@pytest.fixture
def fake_profile(monkeypatch):
    """run_profile replaced by one that takes the real lock, reports 2 of 5 points done, waits
    for `release` (or its cancel event) and returns a typed table."""
    bprof = pytest.importorskip("mla_core.bench.profile")
    from mla_core.bench import run as brun
    from mla_core.store.errors import BenchBusy, BenchCancelled

    release = threading.Event()
    calls = []

    def fake(model, *, tp=1, device="auto", quick=False, families=(), progress=None, cancel=None, wait=False,
             source="api", **_):
        if not brun._LOCK.acquire(timeout=float(wait) if wait else 0.0):
            raise BenchBusy("another benchmark is running in this process")
        try:
            calls.append({"model": model.name, "tp": tp, "quick": quick, "families": tuple(families)})
            progress(0, 5, "mla_absorbed decode B=1 T=512")
            progress(2, 5, "mla_absorbed decode B=8 T=512")
            while not release.wait(0.01):
                if cancel is not None and cancel.is_set():
                    raise BenchCancelled("profile cancelled during mla_absorbed decode B=8 T=512; its memory was freed")
            progress(5, 5, "done")
            return bprof.ProfileRun(table(tp=tp), {"created": "2026-12-02T09:00:00Z", "wall_s": 1.5, "points": 3})
        finally:
            brun._LOCK.release()

    monkeypatch.setattr(bprof, "run_profile", fake)
    return release, calls


def _wait(predicate, timeout=20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_run_shows_its_progress_beside_the_button_and_is_saved_and_listed(fake_profile):
    release, calls = fake_profile
    reg = bench_runs.registry()
    at = run_page(BENCH)
    at.selectbox(key="_bench_prof_tp").set_value(4).run()
    at.button(key="_bench_prof_run").click().run()
    no_exceptions(at)
    key = bench_runs.profile_owner(at.session_state["_bench_owner"])
    assert _wait(lambda: (j := reg.job(key)) is not None and j.done == 2)
    at.run()
    right_after = _after_button(at, "_bench_prof_run")
    assert right_after[0].type == "progress"
    assert right_after[0].proto.text == "Your kernel profile: 2 of 5 points done; now mla_absorbed decode B=8 T=512"
    assert at.button(key="_bench_prof_run").disabled and at.button(key="_bench_prof_cancel") is not None
    assert calls == [{"model": "deepseek-v3", "tp": 4, "quick": True, "families": APP_PROFILE_FAMILIES}]
    release.set()
    assert reg.join(key, 10)
    at.run()
    no_exceptions(at)
    finished = _after_button(at, "_bench_prof_run")[0]
    assert finished.type == "success" and shown([finished]).startswith("Kernel profile finished in 1.50 s (3 points)")
    (stored,) = list_profiles()
    assert f"saved in the history as profile run #{stored['id']}" in shown([finished])
    assert (stored["model"], stored["tp"], stored["created"]) == ("deepseek-v3", 4, "2026-12-02T09:00:00Z")
    _listed_equals_stored(at)


def test_a_cancelled_run_saves_nothing(fake_profile, store):
    import os

    reg = bench_runs.registry()
    at = run_page(BENCH)
    at.button(key="_bench_prof_run").click().run()
    key = bench_runs.profile_owner(at.session_state["_bench_owner"])
    assert _wait(lambda: (j := reg.job(key)) is not None and j.done == 2)
    at.run()
    at.button(key="_bench_prof_cancel").click().run()
    texts = shown(at.info)
    assert reg.join(key, 10)
    at.run()
    no_exceptions(at)
    texts += shown(at.info)
    assert "profile cancelled during mla_absorbed decode B=8 T=512" in texts
    assert not os.path.exists(store) or list_profiles() == []


def test_without_torch_the_section_says_so_before_the_click(monkeypatch):
    from mla_core import install

    monkeypatch.setattr(install, "torch_installed", lambda: False)
    at = run_page(BENCH)
    no_exceptions(at)
    assert at.button(key="_bench_prof_run").disabled
    els = [e for e in at.main if e.type not in ("flex_container", "block", "vertical", "column")]
    i = next(n for n, e in enumerate(els) if getattr(e, "key", None) == "_bench_prof_run")
    before = [e for e in els[:i] if e.type == "warning"]
    assert "torch is not installed in this copy, so no profile can be measured from here" in shown(before[-1:])


# --- the Roofline page --------------------------------------------------------------------------------------

def _figures(at) -> list[dict]:
    return [json.loads(el) for el in chart_specs(at)]


def test_the_roofline_draws_the_chosen_profiles_decode_points():
    rows = [MLA_ROW, dict(MLA_ROW, batch=8, latency_s=3.0e-4), GQA_ROW]
    run_id = save_profile(table(rows), meta={})
    save_profile(table(model="llama-3.1-8b"), meta={})  # another model's: not offered
    at = run_page(ROOF)
    no_exceptions(at)
    picker = at.selectbox(key="roofline_profile")
    assert picker.value == 0 and picker.options == ["none", roofline_profiles("deepseek-v3").labels[run_id]]
    names = [t.get("name") for t in _figures(at)[0]["data"]]
    assert not any(str(n).startswith("profile #") for n in names)
    picker.set_value(run_id).run()
    no_exceptions(at)
    assert not at.error, shown(at.error)
    core = roofline_profiles("deepseek-v3", run_id)
    (trace,) = [t for t in _figures(at)[0]["data"] if t.get("name") == core.name]
    pts = core.roofline.points
    assert len(trace["x"]) == len(pts) == 3
    assert trace["x"] == pytest.approx([p.intensity_flop_per_byte for p in pts])
    assert trace["y"] == pytest.approx([p.achieved_flops / 1e12 for p in pts])
    assert pts[0].achieved_flops == pytest.approx(71_303_168 / 1.0e-4)
    assert at.query_params["roofline_profile"] == str(run_id)
    assert "Stars: the decode calls of" in shown(at.caption)


def test_a_link_to_a_profile_this_history_lacks_draws_none():
    at = run_page(ROOF, roofline_profile="42")
    no_exceptions(at)
    assert "Profile run #42 is not a stored kernel profile of deepseek-v3" in shown(at.info)
    assert not any(str(t.get("name")).startswith("profile #") for t in _figures(at)[0]["data"])


def test_a_real_cpu_profile_of_a_small_model_end_to_end():
    """A real `bench --profile` through the page (a hand-set 2-layer MLA model: about 10 s on two
    CPU cores): saved, listed as stored, and drawn on the Roofline page as the core converts it."""
    pytest.importorskip("torch")
    at = run_page(BENCH, model="custom", attention="mla", layers="2", heads="4", head_dim="32", kv_lora_rank="64",
                  rope_dim="16", tp="1")
    no_exceptions(at)
    assert at.selectbox(key="_bench_prof_tp").value == 1
    at.button(key="_bench_prof_run").click().run()
    key = bench_runs.profile_owner(at.session_state["_bench_owner"])
    assert bench_runs.registry().join(key, 120)
    at.run()
    no_exceptions(at)
    assert not at.error, shown(at.error)
    (stored,) = list_profiles()
    assert stored["device_kind"] == "cpu" and stored["tp"] == 1 and stored["n_ops"] > 0
    assert f"profile run #{stored['id']}" in shown(at.success)
    _listed_equals_stored(at)
    at.switch_page(ROOF).run()
    at.selectbox(key="roofline_profile").set_value(stored["id"]).run()
    no_exceptions(at)
    core = roofline_profiles(stored["model"], stored["id"])
    (trace,) = [t for t in _figures(at)[0]["data"] if t.get("name") == core.name]
    assert len(trace["x"]) == len(core.roofline.points) > 0
    assert trace["y"] == pytest.approx([p.achieved_flops / 1e12 for p in core.roofline.points])
