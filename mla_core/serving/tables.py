"""Kernel tables: where an op's time comes from, in order of precedence (docs/model.md,
"Estimated step time"). Every estimate names the tables it used.

1. Your own profile (`ProfileTable`): the model's own op shapes measured on your GPU (`bench
   --profile`), a dict of the shape below or a JSON file holding one; source
   "own profile <run id or file>".
2. aiconfigurator-core 0.12.0's measured tables (`aic.AicTable`, the optional extra `aic`);
   source "aiconfigurator-core <system>/<backend> <version>".
3. Uncalibrated (`UncalibratedTable`): per op class `latency_floor + work / (efficiency x peak)`
   with the floors and efficiencies below, each with its source; source "uncalibrated".

A table answers `lookup(op, hw)` with a `Lookup` or None (it does not hold that op class or
shape key); `KernelTables` asks them in order, so a profile that holds the GEMMs but no
collectives gets its collectives from the next table. Inside a table's measured range the
answer is interpolated in log space (interp.py); outside it (or between shapes the table did
not measure) the nearest measured point is scaled by the roofline, with a note:
    t = max(t_near x roofline(query) / roofline(near), t_near + roofline(query) - roofline(near))
(the multiplicative form when the query is bigger; the additive form keeps a kernel's floor
when it is smaller).

Profile shape ({"kind": "profile", ...}; seconds, elements, bytes):
    {"kind": "profile", "device": {...}, "model": str, "tp": int, "run_id": str (optional),
     "ops": {"gemm": [{"m", "n", "k", "dtype", "latency_s"}],
             "attention_decode": [{"kind", "batch", "context", "num_heads", "num_kv_heads",
                                   "k_dim", "v_dim", "kv_dtype", "latency_s"}],
             "attention_prefill": [{"kind", "tokens", "prefix", "num_heads", "num_kv_heads",
                                    "k_dim", "v_dim", "window", "dtype", "latency_s"}],
             "moe": [{"tokens", "hidden", "inter", "topk", "num_experts", "experts_local",
                      "dtype", "latency_s"}],
             "elementwise": [{"bytes", "latency_s"}],
             "collective": [{"op", "bytes", "ranks", "latency_s"}],
             "recurrent": [{"kind", "batch", "tokens", "state_elements", "latency_s"}]}}
Attention kinds: "mla_absorbed" (decode over the latent), "mla_mha" (prefill: MLA run as MHA),
"gqa" (paged MHA/GQA/MQA), "sliding" (gqa with a window); recurrent kinds as
spec.RECURRENT_KINDS.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import MLAError
from ..hardware import GPU
from .interp import Grid, Hit
from .ops import OP_CLASSES

TABLE_SOURCES = ("auto", "profile", "aiconfigurator", "uncalibrated")  # --kernel-tables choices


@dataclass(frozen=True)
class Hardware:
    """What a roofline needs: the GPU's HBM bandwidth and dense peaks, and the deployment whose
    links the collectives cross (bound.collective_wire / wire_time)."""

    gpu: GPU
    dep: object  # inputs.Deployment

    def __post_init__(self):
        object.__setattr__(self, "bandwidth_Bps", self.gpu.bandwidth_Bps)
        object.__setattr__(self, "_peaks", {})

    def peak_flops(self, dtype: str) -> float:
        try:
            return self._peaks[dtype]
        except KeyError:
            p = self._peaks[dtype] = self.gpu.peak_flops(dtype)
            return p

    def key(self, links: bool = False) -> tuple:
        """What a roofline on this hardware depends on (a cache key): the GPU's figures, and the
        group's links for a collective."""
        g = self.gpu
        k = (g.bandwidth_TBps, g.bf16_TFLOPS, g.fp8_TFLOPS)
        if links:
            d = self.dep
            k += (d.tp, d.gpus_per_node, d.ep, d.link_bandwidth_Bps, d.internode_gbps, g.link_GBps)
        return k


@dataclass(frozen=True)
class Lookup:
    """A table's answer for one call of an op: `latency_s`, the `source` (the table's name and
    the family read), a `note` when it is not a plain interpolation, and `measured` False when
    it comes from a model rather than a measurement (the uncalibrated table)."""

    latency_s: float
    source: str
    note: str = ""
    measured: bool = True


def scaled(op, hw, hit: Hit, source: str, shape_of, what: str) -> Lookup:
    """A grid hit as a Lookup: interpolated as is, or the nearest measured point `hit.point`
    (turned into op fields by `shape_of`) scaled by the roofline (module docstring)."""
    if not hit.outside:
        return Lookup(hit.value, source)
    near = op.at(**shape_of(hit.point))
    r_q, r_n = op.roofline_s(hw), near.roofline_s(hw)
    t = max(hit.value * (r_q / r_n if r_n > 0 else 1.0), hit.value + r_q - r_n)
    shown = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in shape_of(hit.point).items())
    return Lookup(t, source, f"{what} outside the measured shapes: nearest ({shown}) scaled by the roofline")


class KernelTable:
    """One kernel table: `name` (the source string an estimate shows), `kind` ('profile',
    'aiconfigurator', 'uncalibrated'), `lookup(op, hw) -> Lookup | None`, `describe()`."""

    name = ""
    kind = ""

    def lookup(self, op, hw) -> Lookup | None:
        raise NotImplementedError

    def describe(self) -> dict:
        """`name`, `kind` and `notes`: what the table holds and what it corrects."""
        return {"name": self.name, "kind": self.kind, "notes": []}


@dataclass(frozen=True, eq=False)
class KernelTables:
    """The precedence chain bound to one deployment's hardware: `tables` in order (the
    uncalibrated table last, so every op gets an answer) and `hw`."""

    tables: tuple
    hw: Hardware

    def lookup(self, op) -> Lookup:
        for table in self.tables:
            look = table.lookup(op, self.hw)
            if look is not None:
                return look
        raise MLAError(f"no kernel table answers {op.op_class} {op.name}")  # the uncalibrated table always does

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)


# --- 3. uncalibrated ------------------------------------------------------------------------------

# op class: (latency floor s, memory efficiency, compute efficiency, source). The time of one call
# is floor + max(bytes / (memory eff x bandwidth), flops / (compute eff x peak)). Collectives:
# floor + the bytes each link carries / (link eff x link bandwidth) (bound.collective_wire).
UNCALIBRATED: dict[str, tuple[float, float, float, str]] = {
    "gemm": (4.5e-6, 0.72, 0.72,
             "DeepGEMM README performance table (2025-03-25, H800 SXM5, FP8): 1,688-2,668 GB/s at the M = 64 "
             "decode shapes (median about 0.72 of 3.35 TB/s) and up to 1,426 of 1,979 TFLOP/s (0.72) at M = 4,096; "
             "floor: the smallest GEMM latencies in aiconfigurator-core 0.12.0's H100/H200 vLLM tables "
             "(2.4 us bf16, 4.5 us fp8)"),
    "attention_decode": (10e-6, 0.90, 0.67,
                         "FlashMLA README: up to 3,000 GB/s memory-bound (0.90 of H800's 3.35 TB/s) and 660 TFLOP/s "
                         "compute-bound (0.67 of 989); floor: the smallest decode-attention latencies in "
                         "aiconfigurator-core 0.12.0's H200 tables (vLLM FA3 9.7 us, TensorRT-LLM MLA 10.7 us)"),
    "attention_prefill": (10e-6, 0.90, 0.75,
                          "FlashAttention-3 (Shah et al., arXiv 2407.08608): up to 740 TFLOP/s BF16 forward on H100 "
                          "(0.75 of 989); floor as decode attention"),
    "moe": (23e-6, 0.62, 0.68,
            "DeepGEMM README grouped GEMMs (H800, FP8): masked layout 2,047-2,064 GB/s at 256 rows a group (0.62 of "
            "3.35 TB/s), contiguous layout 1,346 TFLOP/s (0.68 of 1,979); floor: the smallest fused-MoE latency in "
            "aiconfigurator-core 0.12.0's H200 vLLM table (22.8 us)"),
    "elementwise": (3e-6, 0.80, 1.0,
                    "aiconfigurator-core 0.12.0 systems/*.yaml: mem_bw_empirical_scaling_factor 0.8 and "
                    "mem_empirical_constant_latency 3 us (NVIDIA's hand-set figures for memory-bound kernels)"),
    "recurrent": (4.3e-6, 0.80, 0.50,
                  "floor: the smallest recurrent decode kernel in aiconfigurator-core 0.12.0's H200 vLLM GDN table "
                  "(fused_recurrent_gated_delta_rule 4.3 us); bandwidth efficiency as elementwise kernels"),
}
# Collectives: (floor within a node, floor across nodes, link efficiency, source) per op.
UNCALIBRATED_COLLECTIVE: dict[str, tuple[float, float, float, str]] = {
    "all_reduce": (5.9e-6, 20e-6, 1.0,
                   "floor: SGLang PR #2904, custom all-reduce on H100 at TP8, 512 B: 5.9 us; across nodes nccl-tests' "
                   "order of 20 us; efficiency: nccl-tests on 8 x H100 SXM reach a bus bandwidth of 460-480 GB/s "
                   "against the 450 GB/s link (1.0)"),
    "all_gather": (5.0e-6, 20e-6, 1.0,
                   "floor: aiconfigurator-core 0.12.0 H200 NCCL table, smallest all_gather 5.0 us (2 GPUs); "
                   "efficiency as all_reduce"),
    "reduce_scatter": (5.0e-6, 20e-6, 1.0,
                       "floor: aiconfigurator-core 0.12.0 H200 NCCL table, smallest reduce_scatter 5.0 us; efficiency "
                       "as all_reduce"),
    "send": (5.0e-6, 20e-6, 1.0,
             "a pipeline stage's point-to-point send: the floor of the smallest 2-GPU all_gather in "
             "aiconfigurator-core 0.12.0's H200 NCCL table (5.0 us, one message each way), across nodes as the other "
             "collectives; efficiency as all_reduce (aiconfigurator-core measures no point-to-point send)"),
    "all_to_all": (45e-6, 77e-6, 0.95,
                   "DeepEP README: normal kernels reach 153 GB/s of H800's ~160 GB/s NVLink (0.95); floor across nodes: "
                   "low-latency dispatch at EP8, 77 us (128 tokens); within a node: aiconfigurator-core 0.12.0 H200 "
                   "vLLM DeepEP low-latency table, about 45 us at 1-16 tokens"),
}


class UncalibratedTable(KernelTable):
    """The two-term model per op class (UNCALIBRATED, UNCALIBRATED_COLLECTIVE): never measured on
    anything, every figure it gives is marked `uncalibrated`."""

    name = "uncalibrated"
    kind = "uncalibrated"

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind,
                "notes": [f"{k}: {v}" for k, v in uncalibrated_sources().items()]}

    def lookup(self, op, hw) -> Lookup:
        if op.op_class == "collective":
            floor_in, floor_out, eff, _ = UNCALIBRATED_COLLECTIVE[op.op]
            from .bound import wire_time

            total, intra, inter = op.wire(hw.dep)
            t = (floor_out if inter else floor_in) + wire_time(total, intra, inter, hw.dep) / eff
            return Lookup(t, self.name, measured=False)
        floor, eff_mem, eff_cmp, _ = UNCALIBRATED[op.op_class]
        nbytes, flops = op.work()
        t = floor + max(nbytes / (eff_mem * hw.bandwidth_Bps), flops / (eff_cmp * hw.peak_flops(op.compute_dtype())))
        return Lookup(t, self.name, measured=False)


def uncalibrated_sources() -> dict[str, str]:
    """Op class -> the source of its floor and efficiencies (for the docs and the CLI)."""
    out = {k: v[3] for k, v in UNCALIBRATED.items()}
    out.update({f"collective {k}": v[3] for k, v in UNCALIBRATED_COLLECTIVE.items()})
    return out


# --- 1. your own profile --------------------------------------------------------------------------

# Per op class: (key fields matched exactly, numeric axes interpolated). Axes are > 0 in log space;
# a prefill's prefix axis is read as prefix + 1.
PROFILE_AXES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gemm": (("dtype",), ("m", "n", "k")),
    "attention_decode": (("kind", "kv_dtype", "k_dim", "v_dim"), ("batch", "context", "num_heads", "num_kv_heads")),
    "attention_prefill": (("kind", "dtype", "k_dim", "v_dim", "window"),
                          ("tokens", "prefix", "num_heads", "num_kv_heads")),
    "moe": (("dtype", "hidden", "inter", "topk", "num_experts", "experts_local"), ("tokens",)),
    "elementwise": ((), ("bytes",)),
    "collective": (("op", "ranks"), ("bytes",)),
    "recurrent": (("kind",), ("batch", "tokens", "state_elements")),
}


def load_profile_dict(profile) -> tuple[dict, str]:
    """(the profile dict, its name) from a dict, a path to a JSON file holding one, or a stored
    run id (an int, or digits: `mla_core.store.load_profile`, where the store is installed).
    Raises MLAError (one line) for a missing file or run, bad JSON or a dict of another shape."""
    name = ""
    if isinstance(profile, int) or (isinstance(profile, str) and profile.isdigit() and not Path(profile).exists()):
        try:
            from ..store import load_profile
        except ImportError:
            raise MLAError(f"profile {profile}: stored runs need mla_core.store; give the profile's JSON file") from None
        run_id = int(profile)
        profile = load_profile(run_id)
        name = f"run {run_id}"
    if isinstance(profile, (str, Path)):
        path = Path(profile)
        try:
            profile = json.loads(path.read_text())
        except OSError as e:
            raise MLAError(f"profile {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise MLAError(f"profile {path}: not JSON ({e})") from None
        name = path.name
    if not isinstance(profile, dict) or profile.get("kind") != "profile" or not isinstance(profile.get("ops"), dict):
        raise MLAError('a profile is a dict with "kind": "profile" and an "ops" table (mla_core.serving.tables)')
    return profile, str(profile.get("run_id") or name or profile.get("model") or "profile")


# The absorbed MLA decode's two small GEMMs (serving/step.py names them so).
ABSORBED_GEMMS = ("W_UK (absorbed)", "W_UV (absorbed)")


class ProfileTable(KernelTable):
    """Your own measured op shapes (module docstring). Ops of a class or key the profile does not
    hold go to the next table."""

    kind = "profile"

    def __init__(self, profile):
        data, label = load_profile_dict(profile)
        self.data = data
        self.name = f"own profile {label}"
        self.device = data.get("device") or {}
        self._grids: dict[tuple, Grid] = {}
        for cls, rows in data["ops"].items():
            if cls not in PROFILE_AXES or not isinstance(rows, list):
                continue
            keys, axes = PROFILE_AXES[cls]
            groups: dict[tuple, list] = {}
            for row in rows:
                try:
                    key = tuple(row[k] for k in keys)
                    point = tuple(float(row[a]) + (1.0 if a == "prefix" else 0.0) for a in axes)
                    t = float(row["latency_s"])
                except (KeyError, TypeError, ValueError):
                    raise MLAError(f"profile {label}: a malformed {cls} row {str(row)[:80]}") from None
                if not (t > 0 and math.isfinite(t)) or min(point) <= 0:
                    raise MLAError(f"profile {label}: a {cls} row needs positive shapes and latency_s")
                groups.setdefault(key, []).append((point, t))
            for key, pts in groups.items():
                self._grids[(cls, key)] = Grid.from_points([p for p, _ in pts], [t for _, t in pts])

    def describe(self) -> dict:
        held = sorted({cls for cls, _ in self._grids})
        return {"name": self.name, "kind": self.kind,
                "notes": [f"measured on {self.device.get('name', 'an unnamed device')} for {self.data.get('model')} "
                          f"at tp {self.data.get('tp')}; holds {', '.join(held) or 'nothing'}"]}

    def lookup(self, op, hw) -> Lookup | None:
        if op.op_class == "gemm" and op.name in ABSORBED_GEMMS and any(
                cls == "attention_decode" and key[0] == "mla_absorbed" for cls, key in self._grids):
            # bench --profile times the absorbed decode whole, W_UK and W_UV inside the kernel
            # (mla_core/bench/profile_plan.py): their own GEMMs take only their roofline here.
            return Lookup(op.roofline_s(hw, op.work()), self.name, "inside the profile's mla_absorbed decode kernel")
        keys, axes = PROFILE_AXES[op.op_class]
        shape = op.shape()
        if op.op_class == "attention_decode" and shape["kind"] == "sliding":
            shape = {**shape, "kind": "gqa"}  # a window only caps the context, which the op already holds
        grid = self._grids.get((op.op_class, tuple(shape.get(k) for k in keys)))
        if grid is None:
            return None
        query = [float(shape[a]) + (1.0 if a == "prefix" else 0.0) for a in axes]
        hit = grid(*query)

        def shape_of(point):
            return {a: (int(round(v - 1)) if a == "prefix" else int(round(v))) for a, v in zip(axes, point)}

        return scaled(op, hw, hit, self.name, shape_of, op.op_class)


# --- the chain ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _chain(gpu_id: str, backend: str, use: str, profile_key) -> tuple:
    tables = []
    if profile_key is not None:
        tables.append(_profiles[profile_key])
    if use in ("auto", "aiconfigurator"):
        from .aic import aic_table

        t = aic_table(gpu_id, backend)
        if t is not None:
            tables.append(t)
    tables.append(UncalibratedTable())
    return tuple(tables)


_profiles: dict = {}


def kernel_tables(gpu: GPU, backend: str, *, use: str = "auto", profile=None) -> tuple:
    """The precedence chain for `gpu` and an engine's table `backend` ('vllm', 'sglang',
    'trtllm'): the profile (when given), aiconfigurator-core's tables (when installed and the
    GPU maps to one of its systems; `use` 'uncalibrated' skips them), the uncalibrated table.
    The same arguments return the same (cached) tables, so their figures stay cached.
    Raises MLAError for a bad `use` or profile."""
    if use not in TABLE_SOURCES:
        raise MLAError(f"kernel tables must be one of {', '.join(TABLE_SOURCES)}, got {use!r}")
    key = None
    if profile is not None:
        if isinstance(profile, (str, Path, int)):
            key = str(profile)
        else:  # a dict: by its content (an id() could be reused by a later, different table)
            import hashlib
            import json

            key = "table:" + hashlib.sha1(json.dumps(profile, sort_keys=True, default=str).encode()).hexdigest()
        if key not in _profiles:
            _profiles[key] = ProfileTable(profile)
    elif use == "profile":
        raise MLAError("kernel tables 'profile' need a profile (a bench --profile run or its JSON file)")
    if use == "aiconfigurator":
        from .aic import AIC_SYSTEMS, aic_installed, aic_table

        if aic_table(gpu.id, backend) is None:
            why = ("aiconfigurator-core is not installed (pip install 'mla-explorer[aic]')" if not aic_installed()
                   else f"aiconfigurator-core has no measured tables for GPU {gpu.id} (it has: "
                        f"{', '.join(AIC_SYSTEMS)})")
            raise MLAError(f"kernel tables 'aiconfigurator': {why}")
    return _chain(gpu.id, backend, "uncalibrated" if use in ("uncalibrated", "profile") else use, key)


def clear_lookups() -> None:
    """Forget the ops' memoised answers (ops._PER_CALL), not the tables' arrays read from disk."""
    from . import ops

    ops._PER_CALL.clear()


def bind(tables: tuple, gpu: GPU, dep) -> KernelTables:
    """The chain bound to one deployment's hardware."""
    return KernelTables(tables, Hardware(gpu, dep))


assert set(PROFILE_AXES) == set(OP_CLASSES)
