"""GPU presets (data/gpus.json): datasheet figures pinned to their datasheets, and the peak-flops
rule of docs/model.md ("Peak flops used for the step"): the 4-bit weight formats use the dense
FP4 peak where the part has one, else its fp8 peak, else its bf16 peak."""
import json

import pytest

from mla_core.hardware import custom_gpu
from mla_core.presets import DATA_DIR, gpu_entries, load_gpu, load_model
from mla_core.roofline import roofline
from mla_core.units import FP4_WEIGHT_DTYPES, WEIGHT_DTYPES, weight_bytes


# --- datasheet figures ------------------------------------------------------------------------

def test_blackwell_fp4_peaks_from_the_datasheets():
    # NVIDIA HGX B200 datasheet: FP4 Tensor Core 72 PFLOPS dense for 8 GPUs -> 9 PFLOPS a GPU.
    assert load_gpu("b200").fp4_TFLOPS == 9000
    # NVIDIA GB200 NVL72 datasheet: FP4 1,440 PFLOPS with sparsity for 72 GPUs -> 10 PFLOPS dense.
    assert load_gpu("gb200").fp4_TFLOPS == load_gpu("gb200-nvl72").fp4_TFLOPS == 1440e3 / 72 / 2
    # NVIDIA GB300 NVL72 datasheet: FP4 1,080 PFLOPS dense for 72 GPUs -> 15 PFLOPS a GPU.
    assert load_gpu("gb300").fp4_TFLOPS == 1080e3 / 72
    # NVIDIA HGX B300 datasheet (and aiconfigurator's b300_sxm.yaml): 14 PFLOPS dense FP4, 288 GB.
    b300 = load_gpu("b300")
    assert (b300.fp4_TFLOPS, b300.fp8_TFLOPS, b300.memory_GB) == (14000, 4500, 288)


def test_other_new_presets_from_their_datasheets():
    # AMD Instinct MI355X: 256 CUs x 2.4 GHz x 8,192 FP8 flop a clock a CU = 5.03 PFLOPS dense;
    # FP16 half of it, MXFP4 twice; 288 GB HBM3E at 8 TB/s; 7 Infinity Fabric links x 153.6 GB/s.
    mi = load_gpu("mi355x")
    assert mi.fp8_TFLOPS == pytest.approx(256 * 2.4e9 * 8192 / 1e12, rel=1e-4)
    assert (mi.bf16_TFLOPS * 2, mi.fp4_TFLOPS) == pytest.approx((mi.fp8_TFLOPS, 2 * mi.fp8_TFLOPS), rel=1e-4)
    assert (mi.memory_GB, mi.bandwidth_TBps, mi.link_GBps) == (288, 8.0, pytest.approx(7 * 153.6))
    # NVIDIA L4 datasheet: FP8 485 and BF16 242 TFLOPS with sparsity (dense: half), 24 GB, 300 GB/s.
    l4 = load_gpu("l4")
    assert (l4.fp8_TFLOPS, l4.bf16_TFLOPS, l4.memory_GB, l4.bandwidth_TBps, l4.fp4_TFLOPS) == (485 / 2, 121, 24, 0.3, None)
    # NVIDIA H100 datasheet, NVL column: 94 GB HBM3 at 3.9 TB/s, FP8 3,341 TFLOPS with sparsity.
    nvl = load_gpu("h100-nvl")
    assert (nvl.memory_GB, nvl.bandwidth_TBps, nvl.fp8_TFLOPS, nvl.link_domain_gpus) == (94, 3.9, 3341 / 2, 2)
    # RTX PRO 6000 Blackwell: 512-bit GDDR7 at 28 Gbps = 1,792 GB/s; 4,000 AI TOPS = FP4 sparse.
    pro = load_gpu("rtx-pro-6000")
    assert (pro.bandwidth_TBps, pro.fp4_TFLOPS, pro.memory_GB) == (512 * 28 / 8 / 1000, 4000 / 2, 96)
    # NVIDIA GH200 datasheet: 96 GB HBM3 at 4 TB/s, Hopper compute (FP8 3,958 TFLOPS sparse).
    gh = load_gpu("gh200")
    assert (gh.memory_GB, gh.bandwidth_TBps, gh.fp8_TFLOPS, gh.fp4_TFLOPS) == (96, 4.0, 1978.9, None)


def test_nvl72_is_one_72_gpu_link_domain():
    # GB200/GB300 NVL72 datasheets: 72 GPUs on one NVLink Switch System, 1.8 TB/s a GPU.
    for gid in ("gb200-nvl72", "gb300", "gb200"):
        g = load_gpu(gid)
        assert (g.link_domain_gpus, g.link_GBps) == (72, 1800), gid
    assert load_gpu("b200").link_domain_gpus == load_gpu("mi355x").link_domain_gpus == 8
    assert load_gpu("l4").link_domain_gpus is None  # PCIe: the server decides


def test_every_preset_states_its_fp4_peak_and_link_domain():
    with open(f"{DATA_DIR}/gpus.json", encoding="utf-8") as f:
        rows = json.load(f)["gpus"]
    for g in rows:
        assert "fp4_TFLOPS" in g and "link_domain_gpus" in g, g["id"]
        peaks = [p for p in (g["bf16_TFLOPS"], g["fp8_TFLOPS"], g["fp4_TFLOPS"]) if p is not None]
        assert peaks == sorted(peaks), g["id"]  # a narrower format is never slower on one part
    no_fp4 = [gid for gid, g in gpu_entries().items() if g["fp4_TFLOPS"] is None and g["vendor"] == "NVIDIA"]
    # Ampere, Hopper and Ada have no FP4 tensor units (their datasheets list FP8 at most).
    assert set(no_fp4) == {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h800", "h20", "h200",
                           "gh200", "l40s", "l4", "rtx-4090"}


# --- the FP4 peak rule ------------------------------------------------------------------------

def test_four_bit_weights_use_the_fp4_peak_where_the_part_has_one():
    b200, h200, a100 = load_gpu("b200"), load_gpu("h200"), load_gpu("a100-80gb")
    for dtype in ("fp4", "nvfp4", "mxfp4"):
        assert b200.peak_flops(dtype) == 9000e12  # HGX B200 datasheet FP4 dense
        assert h200.peak_flops(dtype) == 1978.9e12  # Hopper: no FP4 units, the fp8 peak
        assert a100.peak_flops(dtype) == 312e12  # Ampere: neither, the bf16 peak
    assert b200.peak_flops("fp8") == 4500e12 and b200.peak_flops("bf16") == 2250e12
    assert set(FP4_WEIGHT_DTYPES) <= set(WEIGHT_DTYPES)
    assert weight_bytes(10**6, "nvfp4") == weight_bytes(10**6, "fp4") == 562_500  # 9 B per 16 weights


def test_roofline_costs_mxfp4_and_nvfp4_matmuls_at_the_fp4_peak():
    # gpt-oss-120b ships MXFP4 experts (its quantization_config): on MI355X the MXFP4 rate
    # (10.07 PFLOPS dense), on B200 the FP4 rate, on H200 the fp8 rate.
    m = load_model("gpt-oss-120b")
    for gid, peak in (("mi355x", 10066.3e12), ("b200", 9000e12), ("h200", 1978.9e12)):
        r = roofline(m, load_gpu(gid), context=4096, batch=1024, weights_dtype="mxfp4")
        assert r["peak_flops"] == pytest.approx(peak), gid
    fp4 = roofline(load_model("llama-3.1-8b"), load_gpu("b300"), context=4096, batch=4096, weights_dtype="nvfp4")
    fp8 = roofline(load_model("llama-3.1-8b"), load_gpu("b300"), context=4096, batch=4096, weights_dtype="fp8")
    assert fp4["peak_flops"] == 14000e12 and fp8["peak_flops"] == 4500e12
    assert fp4["compute_time_s"] < fp8["compute_time_s"]


def test_a_typed_gpu_keeps_its_presets_fp4_peak_and_domain():
    g = custom_gpu(270, base=load_gpu("gb300"))
    assert (g.fp4_TFLOPS, g.link_domain_gpus, g.memory_GB) == (15000, 72, 270)
    assert custom_gpu(80, bandwidth_TBps=3.0, bf16_TFLOPS=900).fp4_TFLOPS is None
