"""Parameter counts from configs, pinned to published totals (docs/model.md)."""
import pytest

from mla_core.config import load_config
from mla_core.params import active_params_per_token, param_breakdown, params_total
from mla_core.presets import load_model, model_entries

from conftest import case_config


def test_llama31_8b_exact():
    # Meta's published count: 8,030,261,248 parameters.
    assert params_total(load_config(case_config("llama-3.1-8b.json"))) == 8030261248


def test_qwen3_30b_a3b_exact():
    # 30,532,122,624: the exact count a model card gives for the Qwen3-30B-A3B architecture
    # (q_norm/k_norm included, no qkv bias, untied head); Qwen publishes "30.5B".
    assert params_total(load_model("qwen3-30b-a3b")) == 30532122624


def test_gpt_oss_20b():
    # openai/gpt-oss README: 21B (20.91B) parameters, 3.6B active (the input embedding left out).
    m = load_model("gpt-oss-20b")
    assert params_total(m) == 20914757184
    assert active_params_per_token(m) / 1e9 == pytest.approx(3.61, abs=0.01)


@pytest.mark.parametrize("preset, published_b, rel", [
    ("deepseek-v3", 671.0, 0.005),       # DeepSeek-V3 report: 671B without the MTP module
    ("deepseek-v2", 235.7, 0.005),       # DeepSeek-V2 (docs/model.md: 235.7 B)
    ("deepseek-v2-lite", 15.7, 0.005),   # DeepSeek-V2-Lite: 15.7B
    ("kimi-k2-instruct", 1030, 0.005),   # Kimi-K2: 1.03T
    ("gpt-oss-120b", 116.83, 0.001),     # openai/gpt-oss: 117B (116.83B)
    ("qwen1.5-moe-a2.7b", 14.3, 0.005),  # Qwen1.5-MoE-A2.7B card: 14.3B
    ("glm-4.5-air", 106, 0.01),          # zai-org/GLM-4.5 README: 106B (MTP layer not counted)
    ("gemma-2-9b", 9.24, 0.002),         # Gemma 2 report: 9.24B
    ("gemma-2-27b", 27.2, 0.002),        # Gemma 2 report: 27.2B
    ("gemma-3-27b", 27.0, 0.002),        # Gemma 3 27B text tower
    ("mistral-7b-v0.1", 7.24, 0.002),    # Mistral 7B: 7.24B
    ("falcon-7b", 6.92, 0.002),          # Falcon-7B: 6.92B (tied embeddings)
])
def test_published_totals(preset, published_b, rel):
    assert params_total(load_model(preset)) / 1e9 == pytest.approx(published_b, rel=rel)


def test_deepseek_v3_breakdown():
    b = param_breakdown(load_model("deepseek-v3"))
    assert b["embed_tokens"] == b["lm_head"] == 129280 * 7168
    assert b["moe_routed"] == 58 * 256 * 3 * 7168 * 2048  # 58 MoE layers after 3 dense
    assert b["mlp_dense"] == 3 * 3 * 7168 * 18432


def test_active_params_deepseek_v3():
    # DeepSeek-V3: 37B activated including 0.9B embedding; we leave the input embedding out.
    m = load_model("deepseek-v3")
    active = active_params_per_token(m)
    assert (active + 129280 * 7168) / 1e9 == pytest.approx(37.5, abs=0.5)


def test_every_preset_parses_and_counts():
    for preset_id, entry in model_entries().items():
        m = load_model(preset_id)
        total = params_total(m)
        published = entry["published"].get("params_total_B")
        if published:
            assert total / 1e9 == pytest.approx(published, rel=0.03), preset_id
