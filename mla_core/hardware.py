"""GPUs: datasheet figures per preset, and hand-typed devices.

Memory of a preset is its vendor figure times 2**30 (docs/model.md: vendor "GB" on these parts is
close to the GiB a driver reports; the user can type the exact figure). Bandwidth and flops
are decimal (TB/s = 1e12 B/s, TFLOP/s = 1e12 flop/s), dense (no 2:4 sparsity).
`link_domain_gpus` is how many GPUs the preset's link joins in the system its datasheet describes
(8 on an HGX board, 72 in a GB200/GB300 NVL72 rack; None where the server decides, e.g. PCIe cards).
Sources per row: data/gpus.json (vendor datasheets, a source and a confidence per row).
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import MLAError
from .units import FP4_WEIGHT_DTYPES, gib_to_bytes
from .validate import check_real


@dataclass(frozen=True)
class GPU:
    """One accelerator. `memory_GB` is the vendor figure, read as GiB (see module docstring)."""

    id: str
    name: str
    memory_GB: float  # vendor memory figure; bytes = floor(memory_GB * 2**30)
    bandwidth_TBps: float | None  # HBM (or GDDR / unified) bandwidth, 1e12 B/s
    bf16_TFLOPS: float | None  # dense bf16 tensor peak, 1e12 flop/s
    fp8_TFLOPS: float | None = None  # dense fp8 tensor peak (None: no fp8 units)
    fp4_TFLOPS: float | None = None  # dense fp4 tensor peak, NVFP4 / MXFP4 (None: no fp4 units)
    vendor: str = ""
    source: str = ""
    confidence: str = ""
    notes: str = ""
    link_GBps: float | None = None  # GPU-to-GPU link, vendor aggregate of both directions, 1e9 B/s
    link_kind: str = ""  # "NVLink 4", "Infinity Fabric", "PCIe 4.0 x16"
    link_domain_gpus: int | None = None  # GPUs one link domain joins (8 HGX, 72 NVL72; None: server-defined)
    link_source: str = ""

    @property
    def link_Bps(self) -> float:
        """One direction of the GPU-to-GPU link in B/s (half the vendor's bidirectional figure):
        the ceiling of a collective's bus bandwidth within a node (nccl-tests' PERFORMANCE.md).
        Raises MLAError when the part has no published link figure."""
        if self.link_GBps is None:
            raise MLAError(f"GPU {self.id} has no published GPU-to-GPU link figure")
        return self.link_GBps * 1e9 / 2

    @property
    def memory_bytes(self) -> int:
        return gib_to_bytes(self.memory_GB)

    @property
    def bandwidth_Bps(self) -> float:
        if self.bandwidth_TBps is None:
            raise MLAError(f"GPU {self.id} has no memory bandwidth figure; type one")
        return self.bandwidth_TBps * 1e12

    def peak_flops(self, weights_dtype: str) -> float:
        """Dense peak in flop/s at the weights' dtype (docs/model.md, "Peak flops"): the 4-bit
        formats (`units.FP4_WEIGHT_DTYPES`: fp4, nvfp4, mxfp4) use the fp4 peak, else the fp8 peak,
        else the bf16 peak, whichever the part has first; fp8 weights the fp8 peak, else bf16;
        bf16, fp16 and fp32 weights the bf16 peak. Raises MLAError when the vendor publishes no
        tensor peak (Apple parts)."""
        if weights_dtype in FP4_WEIGHT_DTYPES:
            tflops = self.fp4_TFLOPS or self.fp8_TFLOPS or self.bf16_TFLOPS
        elif weights_dtype == "fp8":
            tflops = self.fp8_TFLOPS or self.bf16_TFLOPS
        else:
            tflops = self.bf16_TFLOPS
        if not tflops:
            raise MLAError(f"GPU {self.id} has no published tensor peak; type one (--peak-tflops)")
        return tflops * 1e12

    @property
    def ridge_flop_per_byte(self) -> float:
        """bf16 peak / bandwidth: the intensity above which a kernel is compute bound."""
        return self.peak_flops("bf16") / self.bandwidth_Bps


def custom_gpu(memory_gib: float, bandwidth_TBps: float | None = None, bf16_TFLOPS: float | None = None,
               fp8_TFLOPS: float | None = None, base: GPU | None = None) -> GPU:
    """A GPU with typed figures; figures not given come from `base` (a preset) when there is one.
    Raises MLAError on a non-positive or non-finite figure."""
    check_real("GPU memory (GiB)", memory_gib, minimum=0, exclusive_minimum=True, maximum=1e7)
    # At least 1 MB/s and 1 MFLOP/s: below that no device exists and times overflow to infinity.
    for label, v in (("bandwidth (TB/s)", bandwidth_TBps), ("bf16 peak (TFLOP/s)", bf16_TFLOPS),
                     ("fp8 peak (TFLOP/s)", fp8_TFLOPS)):
        if v is not None:
            check_real(label, v, minimum=1e-6, maximum=1e7)
    return GPU(
        id="custom" if base is None else f"{base.id}-custom",
        name=f"{memory_gib:g} GiB device" if base is None else f"{base.name} ({memory_gib:g} GiB)",
        memory_GB=memory_gib,
        bandwidth_TBps=bandwidth_TBps if bandwidth_TBps is not None else (base.bandwidth_TBps if base else None),
        bf16_TFLOPS=bf16_TFLOPS if bf16_TFLOPS is not None else (base.bf16_TFLOPS if base else None),
        fp8_TFLOPS=fp8_TFLOPS if fp8_TFLOPS is not None else (base.fp8_TFLOPS if base else None),
        fp4_TFLOPS=base.fp4_TFLOPS if base else None,
        vendor=base.vendor if base else "",
        source="typed by the user",
        link_GBps=base.link_GBps if base else None,
        link_kind=base.link_kind if base else "",
        link_domain_gpus=base.link_domain_gpus if base else None,
        link_source=base.link_source if base else "",
    )
