"""The local device: what it is, how much memory is free, and the peak no measurement may beat.

Kinds: `cuda` (NVIDIA, and AMD through ROCm: torch exposes both as torch.cuda), `mps` (Apple),
`cpu`. Free memory: `torch.cuda.mem_get_info` plus what torch's caching allocator holds unused;
MPS: `torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()`; CPU:
`MemAvailable` from /proc/meminfo, else `os.sysconf`.

Peaks (docs/model.md, "Measuring on the local device": a result faster than the datasheet is a
timing bug). A CUDA device's name is matched against the GPU presets (data/gpus.json through
`mla_core.presets`); where a name could be several parts, the bound is the fastest of them, so
that a real result is never called an error. Other devices get generous physical sanity bounds,
labelled as such in `peak_source`:
    CPU bandwidth   logical CPUs x 6 GHz x 192 B/cycle (two 64 B loads and one store per cycle
                    from L1: above any DRAM or cache level)
    CPU flops       logical CPUs x 6 GHz x 128 fp32 flop/cycle (two AVX-512 FMA ports, 2x margin),
                    x 4096 for bf16/fp16 (AMX tiles: 1024 bf16 FMA/cycle, 2x margin)
    unknown GPU     20 TB/s and 20,000 TFLOP/s
"""
from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass

import torch

from .errors import BenchError, DeviceUnavailable

CPU_GHZ_BOUND = 6.0
CPU_BYTES_PER_CYCLE = 192
CPU_FP32_FLOP_PER_CYCLE = 128
CPU_LOWP_FLOP_PER_CYCLE = 4096
UNKNOWN_GPU_BANDWIDTH_Bps = 20e12
UNKNOWN_GPU_FLOPS = 20e15

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# (pattern on the lower-cased device name, preset id). First match wins; None means "no
# datasheet for this part": a sanity bound is used instead of a wrong, lower datasheet.
_GPU_NAME_RULES: tuple[tuple[str, str | None], ...] = (
    (r"gh200", None),  # H100/H200 with LPDDR: 4.0-4.9 TB/s, above h100-sxm's figures
    (r"gb200", "gb200"),
    (r"\bb200\b", "b200"),
    (r"\bh200\b", "h200"),  # H200 SXM; the H200 NVL is slower, so h200 bounds it
    (r"\bh20\b", "h20"),
    (r"\bh800\b", "h800"),  # H800 PCIe is slower than the SXM figures used
    (r"\bh100\b.*\bnvl\b", None),  # 3.9 TB/s: faster memory than h100-sxm
    (r"\bh100\b.*pcie", "h100-pcie"),
    (r"\bh100\b", "h100-sxm"),
    (r"\ba100\b.*80\s*gb", "a100-80gb"),  # 80GB PCIe (1.935 TB/s) is bounded by the SXM figure
    (r"\ba100\b", "a100-40gb"),
    (r"mi325x", "mi325x"),
    (r"mi300x", "mi300x"),
    (r"\bl40s?\b", "l40s"),  # plain L40 is slower than the L40S
    (r"rtx\s*4090", "rtx-4090"),
    (r"rtx\s*5090", "rtx-5090"),
    (r"apple m2 ultra", "apple-m2-ultra"),
    (r"apple m3 max", "apple-m3-max"),
    (r"apple m4 max", "apple-m4-max"),
)


def match_gpu_preset(name: str) -> str | None:
    """The GPU preset id whose datasheet bounds device `name` (e.g. 'NVIDIA H200' -> 'h200',
    'NVIDIA H100 80GB HBM3' -> 'h100-sxm'), or None when no preset is a safe bound."""
    text = " ".join(str(name).lower().replace("-", " ").split())
    for pattern, preset in _GPU_NAME_RULES:
        if re.search(pattern, text):
            return preset
    return None


@dataclass(frozen=True)
class Device:
    """A resolved device. `torch_device` is where tensors go; `kind` picks the clock."""

    kind: str  # cuda | mps | cpu
    torch_device: torch.device
    name: str
    backend: str  # cuda | rocm | mps | cpu
    total_memory_bytes: int | None
    llc_bytes: int | None  # last-level cache: CPU L3 (or L2), GPU L2
    preset: str | None  # matched GPU preset id
    peak_bandwidth_Bps: float
    peak_flops_lowp: float  # bf16/fp16 bound (also bounds fp32)
    peak_flops_fp32: float
    peak_source: str
    threads: int | None = None  # CPU: torch.get_num_threads()

    def peak_flops(self, dtype: str) -> float:
        return self.peak_flops_fp32 if dtype == "fp32" else self.peak_flops_lowp


def available_devices() -> list[str]:
    """Device kinds usable here, fastest first among GPUs, always ending with 'cpu'."""
    out = []
    if torch.cuda.is_available():
        out.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    out.append("cpu")
    return out


def resolve_kind(device: str = "auto") -> str:
    """'auto' -> the first of available_devices(); raises DeviceUnavailable for a device this
    machine or torch build lacks, BenchError for an unknown name."""
    if device not in ("auto", "cpu", "cuda", "mps"):
        raise BenchError(f"unknown device {device!r}; choose auto, cpu, cuda or mps")
    avail = available_devices()
    if device == "auto":
        return avail[0]
    if device not in avail:
        why = ""
        if device == "cuda" and torch.version.cuda is None and torch.version.hip is None:
            why = f" (torch {torch.__version__} is built without CUDA or ROCm)"
        elif device == "cuda":
            why = " (no CUDA/ROCm device visible to torch)"
        elif device == "mps":
            why = " (MPS needs Apple silicon and a macOS build of torch)"
        raise DeviceUnavailable(f"device {device} is not available{why}; available: {', '.join(avail)}")
    return device


def resolve_dtype(kind: str, dtype: str = "auto") -> str:
    """The run dtype: the device's fast dtype for 'auto' (bf16 on CUDA/ROCm with bf16 support,
    else fp16; fp16 on MPS; fp32 on CPUs)."""
    if dtype != "auto":
        if dtype not in TORCH_DTYPES:
            raise BenchError(f"dtype must be one of auto, {', '.join(TORCH_DTYPES)}; got {dtype!r}")
        return dtype
    if kind == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if kind == "mps":
        return "fp16"
    return "fp32"


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _mac_chip_name() -> str:
    import subprocess

    try:
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                             timeout=2)
        return out.stdout.strip() or "Apple GPU"
    except (OSError, subprocess.SubprocessError):
        return "Apple GPU"


def _meminfo(field: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    parts = line.split()
                    return int(parts[1]) * (1024 if parts[2:3] == ["kB"] else 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_llc_bytes() -> int | None:
    """The largest cache level cpu0 reports in sysfs (bytes), or None."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = None
    try:
        for entry in os.listdir(base):
            if not entry.startswith("index"):
                continue
            try:
                with open(os.path.join(base, entry, "size"), encoding="ascii") as f:
                    text = f.read().strip()
            except OSError:
                continue
            m = re.fullmatch(r"(\d+)([KMG]?)", text)
            if m:
                size = int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
                best = size if best is None else max(best, size)
    except OSError:
        return None
    return best


def _logical_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def make_device(kind: str) -> Device:
    """A `Device` for an available kind (call `resolve_kind` first). Allocates nothing."""
    if kind == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        name = props.name
        backend = "rocm" if torch.version.hip is not None else "cuda"
        preset = match_gpu_preset(name)
        l2 = getattr(props, "L2_cache_size", None) or None
        bw, lowp, source = _gpu_peaks(name, preset)
        return Device("cuda", torch.device("cuda", index), name, backend, int(props.total_memory), l2, preset,
                      bw, lowp, lowp, source)
    if kind == "mps":
        name = _mac_chip_name()
        preset = match_gpu_preset(name)
        total = None
        try:
            total = int(torch.mps.recommended_max_memory())
        except (AttributeError, RuntimeError):
            pass
        bw, lowp, source = _gpu_peaks(name, preset)
        return Device("mps", torch.device("mps"), name, "mps", total, None, preset, bw, lowp, lowp, source)
    cpus = _logical_cpus()
    hz = CPU_GHZ_BOUND * 1e9
    source = (f"no datasheet for CPUs: sanity bounds {cpus} CPUs x {CPU_GHZ_BOUND:g} GHz x "
              f"{CPU_BYTES_PER_CYCLE} B/cycle, x {CPU_FP32_FLOP_PER_CYCLE} fp32 / {CPU_LOWP_FLOP_PER_CYCLE} "
              "bf16/fp16 flop/cycle")
    total = _meminfo("MemTotal")
    if total is None:
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            total = None
    return Device("cpu", torch.device("cpu"), cpu_name(), "cpu", total, cpu_llc_bytes(), None,
                  cpus * hz * CPU_BYTES_PER_CYCLE, cpus * hz * CPU_LOWP_FLOP_PER_CYCLE,
                  cpus * hz * CPU_FP32_FLOP_PER_CYCLE, source, threads=torch.get_num_threads())


def _gpu_peaks(name: str, preset: str | None) -> tuple[float, float, str]:
    if preset is not None:
        from ..presets import load_gpu

        try:
            gpu = load_gpu(preset)
        except Exception:  # presets unreadable: fall back to the sanity bound, and say so
            gpu = None
        if gpu is not None:
            bw = gpu.bandwidth_TBps * 1e12 if gpu.bandwidth_TBps else UNKNOWN_GPU_BANDWIDTH_Bps
            flops = gpu.bf16_TFLOPS * 1e12 if gpu.bf16_TFLOPS else UNKNOWN_GPU_FLOPS
            what = []
            what.append(f"{gpu.bandwidth_TBps:g} TB/s" if gpu.bandwidth_TBps else "bandwidth: sanity bound 20 TB/s")
            what.append(f"{gpu.bf16_TFLOPS:g} TFLOP/s dense bf16" if gpu.bf16_TFLOPS
                        else "flops: sanity bound 20,000 TFLOP/s")
            return bw, flops, f"datasheet of preset {preset} ({gpu.name}): " + ", ".join(what)
    return (UNKNOWN_GPU_BANDWIDTH_Bps, UNKNOWN_GPU_FLOPS,
            f"no datasheet matches {name!r}: sanity bounds 20 TB/s and 20,000 TFLOP/s")


def free_memory_bytes(dev: Device) -> int | None:
    """Bytes the run may still allocate on `dev` (before headroom), or None when unknown."""
    if dev.kind == "cuda":
        free, _total = torch.cuda.mem_get_info(dev.torch_device)
        cached = torch.cuda.memory_reserved(dev.torch_device) - torch.cuda.memory_allocated(dev.torch_device)
        return int(free + max(0, cached))
    if dev.kind == "mps":
        try:
            return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
        except (AttributeError, RuntimeError):
            return None
    avail = _meminfo("MemAvailable")
    if avail is not None:
        return avail
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def empty_cache(dev: Device) -> None:
    """Return torch's cached blocks to the driver (CUDA/MPS); nothing on CPU."""
    if dev.kind == "cuda":
        torch.cuda.empty_cache()
    elif dev.kind == "mps":
        try:
            torch.mps.empty_cache()
        except (AttributeError, RuntimeError):
            pass


def info(dev: Device, dtype: str) -> dict:
    """The JSON-able `device` block of a result."""
    return {
        "kind": dev.kind,
        "backend": dev.backend,
        "name": dev.name,
        "torch_version": torch.__version__,
        "runtime_version": (torch.version.hip if dev.backend == "rocm"
                            else torch.version.cuda if dev.kind == "cuda" else None),
        "dtype": dtype,
        "total_memory_bytes": dev.total_memory_bytes,
        "free_memory_bytes": free_memory_bytes(dev),
        "llc_bytes": dev.llc_bytes,
        "threads": dev.threads,
        "load_avg_1min": _load_avg(),
        "preset": dev.preset,
        "peak_bandwidth_GBps": dev.peak_bandwidth_Bps / 1e9,
        "peak_TFLOPs": dev.peak_flops(dtype) / 1e12,
        "peak_source": dev.peak_source,
    }


def cpu_snapshot() -> tuple[float, float, float] | None:
    """(wall s, CPU-seconds all CPUs spent busy or stolen by the host, CPU-seconds of this
    process) from /proc/stat and getrusage; None where /proc/stat is missing. Two snapshots give
    how much CPU other processes (and the hypervisor) took while a run was timing."""
    import resource
    import time as _time

    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        if fields[0] != "cpu":
            return None
        v = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
        busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return _time.monotonic(), busy / hz, ru.ru_utime + ru.ru_stime


def other_cpus_busy(before, after) -> float | None:
    """Average number of CPUs kept busy by other processes (or stolen) between two snapshots."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    other = (after[1] - before[1]) - (after[2] - before[2])
    return round(max(0.0, other) / (after[0] - before[0]), 2)


def _load_avg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def device_info(device: str = "auto", dtype: str = "auto") -> dict:
    """Public: the `device` block for `device` ('auto', 'cpu', 'cuda', 'mps') at `dtype`.
    Raises DeviceUnavailable / BenchError. Allocates no tensor."""
    kind = resolve_kind(device)
    return info(make_device(kind), resolve_dtype(kind, dtype))
