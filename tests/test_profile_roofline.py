"""A kernel profile's decode rows as roofline points (mla_core.store.profile_roofline) and the
views the Benchmark and Roofline pages draw of stored profiles (mla_core.views.profile_section,
roofline_profiles). No torch: profiles are typed tables saved through the store."""
from __future__ import annotations

import copy

import pytest

from mla_core.errors import MLAError
from mla_core.presets import load_model
from mla_core.roofline import attention_flops_per_token_layer
from mla_core.store import list_profiles, save_profile
from mla_core.store.profile_roofline import decode_work, profile_roofline, variant_label
from mla_core.units import row_bytes
from mla_core.views import APP_PROFILE_FAMILIES, profile_section, roofline_profiles

MLA_ROW = {"kind": "mla_absorbed", "batch": 2, "context": 1024, "num_heads": 16, "num_kv_heads": 1, "k_dim": 576,
           "v_dim": 512, "kv_dtype": "bf16", "latency_s": 1.0e-4}
GQA_ROW = {"kind": "gqa", "batch": 1, "context": 512, "num_heads": 32, "num_kv_heads": 8, "k_dim": 128,
           "v_dim": 128, "kv_dtype": "fp32", "latency_s": 2.5e-5}


def table(rows=None, model="deepseek-v3", tp=8) -> dict:
    return {"kind": "profile", "device": {"kind": "cpu", "name": "Test CPU", "torch_version": "2.13.0"},
            "model": model, "tp": tp, "engine": None,
            "ops": {"gemm": [], "attention_decode": copy.deepcopy(rows if rows is not None else [MLA_ROW, GQA_ROW]),
                    "attention_prefill": [], "moe": [], "elementwise": [{"bytes": 1024, "latency_s": 1e-6}],
                    "collective": [], "recurrent": []}}


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("MLA_EXPLORER_HISTORY", str(path))
    return str(path)


def test_a_known_op_gives_intensity_f_over_b_and_achieved_f_over_t():
    # MLA absorbed: the latent row (d_c + d_r = 576 values) is both K and V: B = 2 x 1,024 x 576 x 2 bytes;
    # F = 2 x 2 x 16 x 1,024 x (576 + 512).
    b, f = 2 * 1024 * 576 * 2, 2.0 * 2 * 16 * 1024 * (576 + 512)
    assert decode_work(MLA_ROW) == (b, f) == (2_359_296, 71_303_168.0)
    # GQA at fp32: K and V of 8 KV heads: B = 512 x 8 x (128 + 128) x 4; F = 2 x 32 x 512 x 256.
    assert decode_work(GQA_ROW) == (4_194_304, 8_388_608.0)
    pr = profile_roofline(table(), run_id=7)
    assert (pr.run_id, pr.model, pr.tp, pr.device_name, pr.device_kind) == (7, "deepseek-v3", 8, "Test CPU", "cpu")
    mla, gqa = pr.points
    assert mla.bytes == b and mla.flops == f and mla.latency_s == 1.0e-4
    assert mla.intensity_flop_per_byte == pytest.approx(f / b) and mla.intensity_flop_per_byte == pytest.approx(30.222, 1e-4)
    assert mla.achieved_flops == pytest.approx(f / 1.0e-4) == pytest.approx(713.03168e9)
    assert mla.achieved_Bps == pytest.approx(b / 1.0e-4)
    assert gqa.intensity_flop_per_byte == 2.0 and gqa.achieved_flops == pytest.approx(8_388_608 / 2.5e-5)
    assert (mla.label, gqa.label) == ("MLA absorbed", "GQA")
    d = pr.to_dict()
    assert d["points"][0]["intensity_flop_per_byte"] == mla.intensity_flop_per_byte and d["skipped"] == ()


def test_counted_as_the_predicted_points_are():
    """A row of all DeepSeek-V3's heads sits at the predicted absorbed point's intensity (241.8 flop/B at bf16)."""
    ds = load_model("deepseek-v3")
    row = dict(MLA_ROW, num_heads=128, batch=1)
    pt = profile_roofline(table([row])).points[0]
    predicted = attention_flops_per_token_layer(ds, "absorbed") / row_bytes(576, "bf16")
    assert pt.intensity_flop_per_byte == pytest.approx(predicted) == pytest.approx(241.78, 1e-4)


def test_labels_and_skipped_rows():
    assert variant_label(dict(GQA_ROW, num_kv_heads=32)) == "MHA"
    assert variant_label(dict(GQA_ROW, num_kv_heads=1)) == "MQA"
    assert variant_label(dict(GQA_ROW, kind="sliding")) == "GQA (sliding)"
    # Llama-3.1-8B (32 query heads, 8 KV heads) at TP8 runs 4 heads over 1 KV head a GPU: still GQA,
    # the model's kind, not MQA; a table naming no preset falls back to the row's shape.
    per_gpu = dict(GQA_ROW, num_heads=4, num_kv_heads=1)
    assert profile_roofline(table([per_gpu], model="llama-3.1-8b", tp=8)).points[0].label == "GQA"
    assert profile_roofline(table([per_gpu], model="my-upload", tp=8)).points[0].label == "MQA"
    pr = profile_roofline(table([MLA_ROW, {"kind": "gqa", "batch": 1}, dict(GQA_ROW, latency_s=0.0),
                                 dict(GQA_ROW, kv_dtype="nonsense")]))
    assert len(pr.points) == 1 and len(pr.skipped) == 3
    assert "without its shape" in pr.skipped[0] and "no positive latency" in pr.skipped[1]
    assert "unknown KV dtype" in pr.skipped[2]
    with pytest.raises(MLAError):
        profile_roofline({"kind": "profile"})


def test_profile_section_lists_the_stored_profiles_and_the_tp_that_splits(store):
    ds = load_model("deepseek-v3")
    view = profile_section(ds, 8)
    assert view.rows == () and view.error is None and view.tp == 8 and view.tp_note is None
    assert view.families == APP_PROFILE_FAMILIES
    assert view.command == "python -m mla_core bench --profile --model deepseek-v3 --tp 8 --quick --save"
    assert "gemm" in profile_section(ds, 8, every_family=True).families
    # Llama-3.1-8B's 8 KV heads: TP 64 does not split it, the largest choice below does.
    llama = profile_section(load_model("llama-3.1-8b"), 64)
    assert 64 not in llama.tp_choices and llama.tp == 32 and "TP 32" in llama.tp_note
    first = save_profile(table(), label="mine", meta={"created": "2026-11-30T10:00:00Z"})
    second = save_profile(table(model="llama-3.1-8b", tp=1), meta={})
    rows = profile_section(ds, 8).rows
    listed = list_profiles()
    assert [r.id for r in rows] == [r["id"] for r in listed] == [second, first]
    r = rows[1]
    assert (r.model, r.tp, r.device, r.created, r.n_ops, r.label) == (
        "deepseek-v3", 8, "Test CPU", "2026-11-30T10:00:00Z", 3, "mine")


def test_roofline_profiles_offers_the_models_own_and_draws_the_chosen(store):
    assert roofline_profiles("deepseek-v3").options == (0,)
    mine = save_profile(table(), meta={})
    save_profile(table(model="llama-3.1-8b", tp=1), meta={})
    pv = roofline_profiles("deepseek-v3")
    assert pv.options == (0, mine) and pv.chosen == 0 and pv.roofline is None and pv.labels[0] == "none"
    pv = roofline_profiles("deepseek-v3", mine)
    assert pv.chosen == mine and pv.roofline == profile_roofline(table(), run_id=mine)
    assert pv.name == f"profile #{mine}: Test CPU TP8" and pv.message is None
    stale = roofline_profiles("deepseek-v3", 99)
    assert stale.chosen == 0 and stale.roofline is None and "#99 is not a stored kernel profile" in stale.message
    empty = save_profile(table([]), meta={})
    assert "no attention decode rows" in roofline_profiles("deepseek-v3", empty).message
