"""NVIDIA aiconfigurator-core 0.12.0's measured kernel tables as a kernel table (tables.py), and its
own engine as a cross-check (docs/model.md, "Estimated step time").

aiconfigurator-core (Apache-2.0, `pip install 'mla-explorer[aic]'`) ships parquet tables measured
per system, kernel family, engine backend and version, under
`systems/data/<system>/<family>/<backend>/<version>/<table>.parquet`. Facts this reader relies on
(checked against the 0.12.0 wheel):
- `latency` is in milliseconds, except the all-to-all tables (`moe_a2a_perf`: `latency` in
  microseconds; SGLang's `wideep_deepep_*`: `dispatch_avg_t_us`, `combine_avg_t_us`);
  communication `message_size` counts bf16 elements, not bytes.
- `systems/query_versions.yaml` names the current version per backend (and per system
  overrides); a family the current version lacks is read from the newest older version of the
  same backend ("backward fill", as aiconfigurator itself does), and the note says which.
- Families read: gemm (m, n, k, gemm_dtype); generation / context attention (batch_size,
  step = tokens already cached, isl, num_heads and num_key_value_heads on one GPU, head_dim,
  window_size, kv_cache_dtype); MLA generation / context (num_heads on one GPU, DeepSeek's
  d_c 512, d_r 64, d_nope 128, d_v 128); MoE (num_tokens, hidden_size, inter_size, topk,
  num_experts, moe_tp_size, moe_ep_size, distribution); custom all-reduce (num_gpus,
  message_size; vLLM and SGLang measure a CUDA-graph and an eager variant); NCCL (all_gather,
  reduce_scatter, all_reduce); DeepEP all-to-all (low-latency for decode, high-throughput for
  prefill); Gated DeltaNet (linear_attention/gdn: conv + recurrence kernels).
- Where several kernels of one engine measured the same shape (FA3 and FA4; CUTLASS, DeepGEMM
  and FlashInfer fp8 GEMMs) the fastest is taken: the engine picks among them by shape.
- MoE rows are read at `distribution` 'balanced': docs/model.md's uniform routing.
- vLLM has no bare MLA decode-kernel table (its MLA tables time the whole attention module, the
  projections included, for DeepSeek-V3 shapes only): vLLM's MLA decode and prefill use
  TensorRT-LLM's MLA kernel tables of the same system, and say so.
Hand-set corrections of the system YAMLs: `mem_bw_empirical_scaling_factor` (0.8) and
`mem_empirical_constant_latency` (3 us) are the uncalibrated table's elementwise figures (the
only op class aiconfigurator does not measure); `nccl_mem`, `other_mem` (memory reserves) and
`p2p_latency` (pipeline sends, not modelled) are not applied. Nothing else is corrected.

Our GPU presets map to its systems by `AIC_SYSTEMS`; a GPU without an entry, or a system without
tables (a100_pcie, a30, h100_pcie, l4 hold specs only), gets no aiconfigurator table.
Everything read is cached (numpy arrays and grids), so a plan stays fast.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from .interp import Grid
from .tables import KernelTable, Lookup, scaled

AIC_VERSION = "0.12.0"
# Our GPU preset ids (data/gpus.json) -> aiconfigurator-core systems with measured tables.
AIC_SYSTEMS = {
    "h100-sxm": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "gb200": "gb200",
    "gb200-nvl72": "gb200",  # the same part in its 72-GPU rack (gb200.yaml: 8 TB/s, 2,500 / 5,000 / 10,000 TFLOPS)
    "b300": "b300_sxm",
    "gb300": "gb300",
    "rtx-pro-6000": "rtx_pro_6000_server",
    "a100-80gb": "a100_sxm",  # a100_sxm.yaml: 2.039 TB/s, the 80 GB part
    "l40s": "l40s",
}
BACKENDS = ("vllm", "sglang", "trtllm")
WIDE_EP = 8  # SGLang expert parallelism over more GPUs than one node runs DeepEP (AicTable._wide_moe)
MLA_DIMS = (576, 512)  # the MLA tables' (d_c + d_r, d_c): DeepSeek-V3
MLA_PREFILL_DIMS = (192, 128)  # (d_nope + d_r, d_v)


def aic_installed() -> bool:
    return importlib.util.find_spec("aiconfigurator_core") is not None


@functools.lru_cache(maxsize=1)
def systems_dir() -> Path | None:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "systems"


def _version_key(v: str) -> tuple:
    """'1.3.0rc20' < '1.3.0' < '1.3.1'; '0.5.6.post2' > '0.5.6'."""
    m = re.match(r"(\d+(?:\.\d+)*)(.*)", v)
    if not m:
        return ((), 0, 0)
    release = tuple(int(x) for x in m.group(1).split("."))
    rest = m.group(2)
    n = int((re.findall(r"\d+", rest) or ["0"])[0])
    stage = 0 if ("rc" in rest or "dev" in rest) else (2 if "post" in rest else 1)
    return (release, stage, n)


@functools.lru_cache(maxsize=32)
def _yaml(path: str) -> dict:
    import yaml  # an aiconfigurator-core dependency

    with open(path) as f:
        return yaml.safe_load(f) or {}


def current_version(system: str, backend: str) -> str | None:
    """The version `systems/query_versions.yaml` names current for (system, backend)."""
    root = systems_dir()
    q = _yaml(str(root / "query_versions.yaml"))
    slot = (q.get("overrides") or {}).get(system, {}).get(backend) or (q.get("defaults") or {}).get(backend) or {}
    return slot.get("current")


@functools.lru_cache(maxsize=512)
def _family_version(system: str, family: str, backend: str, current: str) -> str | None:
    """The version folder a family is read from: `current`, else the newest older one."""
    base = systems_dir() / "data" / system / family / backend
    if not base.is_dir():
        return None
    versions = [p.name for p in base.iterdir() if p.is_dir()]
    if current in versions:
        return current
    older = [v for v in versions if _version_key(v) < _version_key(current)]
    return max(older, key=_version_key) if older else None


@functools.lru_cache(maxsize=256)
def _columns(path: str) -> dict:
    """All columns of one parquet file as numpy arrays (strings as object arrays)."""
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return {name: t.column(name).to_numpy(zero_copy_only=False) for name in t.column_names}


def _eq(cols: dict, name: str, value):
    """Rows where column `name` equals `value`; every row when an older table lacks the column
    (a100_sxm's attention tables have no window_size: all full attention)."""
    if name in cols:
        return cols[name] == value
    return np.ones(len(next(iter(cols.values()))), dtype=bool)


def _grid(cols: dict, mask, axes: tuple[str, ...], value: np.ndarray, offsets: tuple[float, ...] = ()) -> Grid | None:
    if not mask.any():
        return None
    pts = np.stack([cols[a][mask].astype(float) + (offsets[i] if i < len(offsets) else 0.0)
                    for i, a in enumerate(axes)], axis=1)
    vals = value[mask]
    ok = (vals > 0) & np.isfinite(vals) & (pts > 0).all(axis=1)
    if not ok.any():
        return None
    return Grid.from_points(pts[ok], vals[ok])


class AicTable(KernelTable):
    """aiconfigurator-core's tables for one system and engine backend (module docstring)."""

    kind = "aiconfigurator"

    def __init__(self, system: str, backend: str):
        self.system, self.backend = system, backend
        self.version = current_version(system, backend)
        spec = _yaml(str(systems_dir() / f"{system}.yaml"))
        self.nccl_version = str((spec.get("misc") or {}).get("nccl_version") or "")
        self.name = f"aiconfigurator-core {AIC_VERSION} {system}/{backend} {self.version}"
        self._grids: dict = {}

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "notes": [
            f"aiconfigurator-core {AIC_VERSION} (Apache-2.0) tables measured on {self.system} for {self.backend} "
            f"{self.version} (families an engine version lacks come from its newest older version)",
            "hand corrections applied: the system YAML's mem_bw_empirical_scaling_factor (0.8) and "
            "mem_empirical_constant_latency (3 us), as the elementwise figures of the uncalibrated table "
            "(aiconfigurator measures no elementwise kernels); not applied: nccl_mem and other_mem (memory "
            "reserves), p2p_latency (pipeline sends are not modelled)",
            "rows read at distribution 'balanced' for MoE (uniform routing); the fastest kernel where an engine "
            "measured several at one shape"]}

    # -- files ---------------------------------------------------------------------------------
    def _file(self, family: str, table: str, backend: str | None = None) -> tuple[str, str, str] | None:
        """(path, backend, version) of a family's table, current or backward-filled."""
        backend = backend or self.backend
        key = ("file", family, table, backend)
        if key not in self._grids:
            self._grids[key] = self._find(family, table, backend)
        return self._grids[key]

    def _find(self, family: str, table: str, backend: str):
        current = current_version(self.system, backend)
        if current is None:
            return None
        v = _family_version(self.system, family, backend, current)
        if v is None:
            return None
        path = systems_dir() / "data" / self.system / family / backend / v / f"{table}.parquet"
        return (str(path), backend, v) if path.is_file() else None

    def _table_file(self, family: str, table: str) -> tuple[str, str, str] | None:
        """(path, backend, version) of one table the family's version may lack: the newest version
        up to the current one that has it (SGLang's DeepEP MoE tables stop at 0.5.10)."""
        key = ("table", family, table)
        if key not in self._grids:
            current = current_version(self.system, self.backend)
            base = systems_dir() / "data" / self.system / family / self.backend
            found = None
            if current is not None and base.is_dir():
                have = [q.name for q in base.iterdir() if q.is_dir() and (q / f"{table}.parquet").is_file()
                        and _version_key(q.name) <= _version_key(current)]
                if have:
                    v = max(have, key=_version_key)
                    found = (str(base / v / f"{table}.parquet"), self.backend, v)
            self._grids[key] = found
        return self._grids[key]

    def _source(self, backend: str, version: str, family: str) -> tuple[str, str]:
        """(source, note) for a family read from (backend, version)."""
        src = f"aiconfigurator-core {AIC_VERSION} {self.system}/{backend} {version}"
        notes = []
        if backend != self.backend:
            notes.append(f"{self.backend} has no {family} kernel table: {backend}'s")
        elif version != self.version:
            notes.append(f"{family} from {backend} {version} (backward fill: {self.version} has none)")
        return src, "; ".join(notes)

    def _cached(self, key, make):
        try:
            return self._grids[key]
        except KeyError:
            g = self._grids[key] = make()
            return g

    # -- lookup --------------------------------------------------------------------------------
    def lookup(self, op, hw) -> Lookup | None:
        fn = getattr(self, "_" + op.op_class, None)
        return None if fn is None else fn(op, hw)  # kept per shape by ops.Op.time

    def _with(self, look: Lookup | None, note: str) -> Lookup | None:
        if look is None or not note:
            return look
        return Lookup(look.latency_s, look.source, "; ".join(filter(None, (note, look.note))))

    def _gemm(self, op, hw):
        dtype = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8_block" if op.block_fp8 else "fp8",
                 "fp4": "nvfp4"}.get(op.dtype)
        f = self._file("gemm", "gemm_perf")
        if dtype is None or f is None:
            return None
        path, backend, version = f

        def make(d):
            cols = _columns(path)
            return _grid(cols, cols["gemm_dtype"] == d, ("m", "n", "k"), cols["latency"] * 1e-3)

        grid = self._cached((path, dtype), lambda: make(dtype))
        note = ""
        if grid is None and dtype == "fp8_block":
            grid, note = self._cached((path, "fp8"), lambda: make("fp8")), "per-tensor fp8 GEMMs (no block-scaled table)"
        if grid is None:
            return None
        hit = grid(op.m, op.n, op.k)
        if hit.outside and dtype == "fp8_block" and not note:
            # Some systems' block-scaled tables stop at small shapes (rtx_pro_6000_server: n, k <= 128):
            # the per-tensor fp8 table measured at this shape beats the tiny block-scaled kernel
            # scaled up by the roofline (its launch floor, multiplied: seconds a decode step).
            wide = self._cached((path, "fp8"), lambda: make("fp8"))
            wide_hit = wide(op.m, op.n, op.k) if wide is not None else None
            if wide_hit is not None and not wide_hit.outside:
                hit, note = wide_hit, "per-tensor fp8 GEMMs (the block-scaled table does not reach this shape)"
        src, n2 = self._source(backend, version, "gemm")
        look = scaled(op, hw, hit, src, lambda p: {"m": int(p[0]), "n": int(p[1]), "k": int(p[2])}, "GEMM")
        return self._with(look, "; ".join(filter(None, (n2, note))))

    @staticmethod
    def _kv(dtype: str) -> str | None:
        if dtype in ("bf16", "fp16"):
            return "bfloat16"
        if dtype.startswith("fp8"):
            return "fp8"
        return None

    def _attention_decode(self, op, hw):
        kv = self._kv(op.kv_dtype)
        if kv is None:
            return None
        if op.kind == "mla_absorbed":
            if (op.k_dim, op.v_dim) != MLA_DIMS:
                return None
            for backend in ((self.backend,) if self.backend != "vllm" else ()) + ("trtllm", "sglang"):
                f = self._file("mla", "generation_mla_perf", backend)
                if f is not None:
                    break
            else:
                return None
            path, backend, version = f

            def make():
                cols = _columns(path)
                return _grid(cols, cols["kv_cache_dtype"] == kv, ("batch_size", "step", "num_heads"),
                             cols["latency"] * 1e-3, (0.0, 1.0))

            grid = self._cached((path, kv), make)
            if grid is None:
                return None
            src, note = self._source(backend, version, "MLA decode")
            hit = grid(op.batch, op.context, op.num_heads)
            look = scaled(op, hw, hit, src, lambda p: {"batch": int(p[0]), "context": int(p[1]), "num_heads": int(p[2])},
                          "MLA decode")
            return self._with(look, note)
        if op.kind not in ("gqa", "sliding"):
            return None
        f = self._file("attention", "generation_attention_perf")
        if f is None:
            return None
        path, backend, version = f
        head_dim = op.k_dim if op.k_dim == op.v_dim else max(op.k_dim, op.v_dim)

        def make():
            cols = _columns(path)
            mask = (cols["kv_cache_dtype"] == kv) & (cols["head_dim"] == head_dim) & _eq(cols, "window_size", 0)
            return _grid(cols, mask, ("batch_size", "step", "num_heads", "num_key_value_heads"),
                         cols["latency"] * 1e-3, (0.0, 1.0))

        grid = self._cached((path, kv, head_dim), make)
        if grid is None:
            return None
        src, note = self._source(backend, version, "decode attention")
        if op.k_dim != op.v_dim:
            note = "; ".join(filter(None, (note, f"K and V widths differ: read at head_dim {head_dim}")))
        hit = grid(op.batch, op.context, op.num_heads, op.num_kv_heads)
        look = scaled(op, hw, hit, src, lambda p: {"batch": int(p[0]), "context": int(p[1]), "num_heads": int(p[2]),
                                                   "num_kv_heads": int(p[3])}, "decode attention")
        return self._with(look, note)

    def _attention_prefill(self, op, hw):
        notes = []
        if op.kind == "mla_mha" and self.backend != "vllm":
            if (op.k_dim, op.v_dim) != MLA_PREFILL_DIMS:
                return None
            f = self._file("mla", "context_mla_perf")
            if f is None:
                return None
            path, backend, version = f

            def make():
                cols = _columns(path)
                kv = cols["kv_cache_dtype"]
                d = "bfloat16" if (kv == "bfloat16").any() else kv[0]
                return _grid(cols, (cols["batch_size"] == 1) & (kv == d), ("isl", "num_heads"), cols["latency"] * 1e-3)

            grid = self._cached((path, "ctx"), make)
            axes = ("tokens", "num_heads")
            query = (op.tokens, op.num_heads)
        elif op.kind in ("gqa", "sliding", "mla_mha"):
            f = self._file("attention", "context_attention_perf")
            if f is None:
                return None
            path, backend, version = f
            head_dim = op.k_dim if op.k_dim == op.v_dim else max(op.k_dim, op.v_dim)
            if op.k_dim != op.v_dim:
                notes.append(f"K and V widths differ ({op.k_dim}, {op.v_dim}): read at head_dim {head_dim}")

            def make():
                cols = _columns(path)
                mask = ((cols["batch_size"] == 1) & (cols["head_dim"] == head_dim) & _eq(cols, "window_size", 0)
                        & _eq(cols, "kv_cache_dtype", "bfloat16"))
                return _grid(cols, mask, ("isl", "num_heads", "num_key_value_heads"), cols["latency"] * 1e-3)

            grid = self._cached((path, "ctx", head_dim), make)
            axes = ("tokens", "num_heads", "num_kv_heads")
            query = (op.tokens, op.num_heads, op.num_kv_heads)
        else:
            return None
        if grid is None:
            return None
        src, note = self._source(backend, version, "prefill attention")
        notes.insert(0, note)
        # The tables time full causal attention of `isl` new tokens with no cached prefix: the
        # op is read there and scaled to its own pairs (prefix, window) by the roofline.
        base = op
        if op.prefix or op.window:
            base = replace(op, prefix=0, window=0, pairs=op.tokens * (op.tokens + 1) / 2)
            notes.append("the table has no cached-prefix or window axis: full causal attention of the new tokens, "
                         "scaled to this op's pairs by the roofline")
        hit = grid(*query)
        look = scaled(base, hw, hit, src, lambda p: {a: int(v) for a, v in zip(axes, p)}, "prefill attention")
        if base is not op:
            r_o, r_b = op.roofline_s(hw), base.roofline_s(hw)
            look = Lookup(look.latency_s * (r_o / r_b if r_b else 1.0), look.source, look.note)
        return self._with(look, "; ".join(filter(None, notes)))

    def _moe(self, op, hw):
        dtype = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8_block", "mxfp4": "w4a16_mxfp4",
                 "fp4": "nvfp4"}.get(op.dtype)
        ep = max(1, round(op.num_experts / op.experts_local))
        if self.backend == "sglang" and ep > WIDE_EP and dtype is not None:
            wide = self._wide_moe(op, hw, dtype, ep)
            if wide is not None:
                return wide
        f = self._file("moe", "moe_perf")
        if dtype is None or f is None:
            return None
        path, backend, version = f

        def keys():
            cols = _columns(path)
            mask = _eq(cols, "distribution", "balanced")
            out = {}
            names = ("moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size")
            arr = [cols[n][mask] for n in names]
            tok, lat = cols["num_tokens"][mask].astype(float), cols["latency"][mask] * 1e-3
            for i, key in enumerate(zip(*arr)):
                out.setdefault(tuple(x if isinstance(x, str) else int(x) for x in key), ([], []))
                out[tuple(x if isinstance(x, str) else int(x) for x in key)][0].append(tok[i])
                out[tuple(x if isinstance(x, str) else int(x) for x in key)][1].append(lat[i])
            return {k: Grid.from_points(np.array(v[0])[:, None], v[1]) for k, v in out.items()}

        grids = self._cached((path, "moe"), keys)
        want = (dtype, op.hidden, op.inter, op.topk, op.num_experts, op.moe_tp, ep)
        note = ""
        grid = grids.get(want)
        near = op
        if grid is None:
            k = self._cached((path, "moe-nearest", want), lambda: self._nearest_moe_key(grids, want))
            if k is None:
                return None
            grid = grids[k]
            near = op.at(hidden=k[1], inter=k[2], topk=k[3], num_experts=k[4], moe_tp=k[5],
                         experts_local=max(1, k[4] // k[6]))
            note = (f"MoE shape not in the table: nearest measured (hidden {k[1]}, inter {k[2]}, top-{k[3]} of {k[4]}, "
                    f"moe_tp {k[5]}, ep {k[6]}) scaled by the roofline")
        src, n2 = self._source(backend, version, "MoE")
        hit = grid(op.tokens)
        look = scaled(near, hw, hit, src, lambda p: {"tokens": int(p[0])}, "MoE")
        if near is not op:
            r_o, r_n = op.roofline_s(hw), near.roofline_s(hw)
            look = Lookup(max(look.latency_s * r_o / r_n, look.latency_s + r_o - r_n), src, look.note)
        return self._with(look, "; ".join(filter(None, (n2, note))))

    def _wide_moe(self, op, hw, dtype: str, ep: int):
        """SGLang's expert parallelism beyond one node runs DeepEP (its multi-node EP path, the
        large-scale EP deployments' --moe-a2a-backend deepep): the routed experts' compute from
        its DeepEP MoE tables (`wideep_generation_moe_perf` while a rank holds at most the
        decode table's tokens, else `wideep_context_moe_perf`), rows at distribution 'uniform',
        `num_tokens` the tokens of the whole EP group (its range grows with moe_ep_size). The
        nearest measured moe_ep_size is scaled by the roofline; None where neither table holds
        the model's shape."""
        for table in ("wideep_generation_moe_perf", "wideep_context_moe_perf"):
            f = self._table_file("moe", table)
            if f is None:
                continue
            path, backend, version = f

            def keys(path=path):
                cols = _columns(path)
                mask = _eq(cols, "distribution", "uniform")
                names = ("moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size")
                arr = [cols[n][mask] for n in names]
                tok, lat = cols["num_tokens"][mask].astype(float), cols["latency"][mask] * 1e-3
                out = {}
                for i, key in enumerate(zip(*arr)):
                    k = tuple(x if isinstance(x, str) else int(x) for x in key)
                    out.setdefault(k, ([], []))
                    out[k][0].append(tok[i])
                    out[k][1].append(lat[i])
                return {k: (Grid.from_points(np.array(v[0])[:, None], v[1]), max(v[0])) for k, v in out.items()}

            grids = self._cached((path, "wide-moe"), keys)
            same = [k for k in grids if k[:6] == (dtype, op.hidden, op.inter, op.topk, op.num_experts, op.moe_tp)]
            if not same:
                continue
            k = min(same, key=lambda k: abs(math.log(k[6] / ep)))
            grid, top = grids[k]
            if table == "wideep_generation_moe_perf" and op.tokens / ep > top / k[6]:
                continue  # more tokens a rank than the decode kernel's table: the prefill one
            near = op if k[6] == ep else op.at(experts_local=max(1, op.num_experts // k[6]))
            # the table's tokens are the group's: at the measured moe_ep_size, the same tokens a rank
            tokens = op.tokens * k[6] / ep
            src, n2 = self._source(backend, version, "MoE")
            hit = grid(tokens)
            look = scaled(replace(near, tokens=max(1, int(tokens))), hw, hit, src, lambda p: {"tokens": int(p[0])},
                          "MoE")
            note = f"DeepEP MoE table ({table}, moe_ep_size {k[6]})"
            if near is not op:
                r_o, r_n = op.roofline_s(hw), replace(near, tokens=max(1, int(tokens))).roofline_s(hw)
                look = Lookup(look.latency_s * (r_o / r_n if r_n else 1.0), src, look.note)
                note += f" scaled from moe_ep_size {k[6]} to {ep} by the roofline"
            return self._with(look, "; ".join(filter(None, (n2, note))))
        return None

    @staticmethod
    def _nearest_moe_key(grids: dict, want: tuple):
        """The measured MoE shape nearest `want` in log space (same dtype; fp8 for a block-fp8
        model without block-scaled rows), or None."""
        cands = [k for k in grids if k[0] == want[0]]
        if not cands and want[0] == "fp8_block":
            cands = [k for k in grids if k[0] == "fp8"]
        if not cands:
            return None
        return min(cands, key=lambda k: sum(math.log(max(a, 1) / max(b, 1)) ** 2 for a, b in zip(k[1:], want[1:])))

    def _collective(self, op, hw):
        if op.nodes > 1 or op.ranks > 8 or op.ranks < 2 or op.op == "send":
            return None  # the tables are measured within one node; they hold no point-to-point send
        if op.op == "all_to_all":
            return self._all_to_all(op, hw)
        elements = op.bytes / 2
        if op.op == "all_reduce":
            f = self._file("comm", "custom_allreduce_perf")
            if f is not None:
                path, backend, version = f
                variant = "graph" if op.graph else "eager"

                def make():
                    cols = _columns(path)
                    mask = cols["num_gpus"] == op.ranks
                    if "backend" in cols:
                        mask &= np.array([str(b).endswith(variant) for b in cols["backend"]])
                    return _grid(cols, mask, ("message_size",), cols["latency"] * 1e-3)

                grid = self._cached((path, op.ranks, variant), make)
                if grid is not None:
                    src, note = self._source(backend, version, "all-reduce")
                    look = scaled(op, hw, grid(elements), src, lambda p: {"bytes": p[0] * 2}, "all-reduce")
                    return self._with(look, note)
        # NCCL: all_gather, reduce_scatter (and all_reduce without a custom table)
        if not self.nccl_version:
            return None
        path = systems_dir() / "data" / self.system / "comm" / "nccl" / self.nccl_version / "nccl_perf.parquet"
        if not path.is_file():
            return None
        path = str(path)

        def make():
            cols = _columns(path)
            mask = (cols["op_name"] == op.op) & (cols["num_gpus"] == op.ranks) & (cols["nccl_dtype"] == "half")
            return _grid(cols, mask, ("message_size",), cols["latency"] * 1e-3)

        grid = self._cached((path, op.op, op.ranks), make)
        if grid is None:
            return None
        src = f"aiconfigurator-core {AIC_VERSION} {self.system}/nccl {self.nccl_version}"
        return scaled(op, hw, grid(elements), src, lambda p: {"bytes": p[0] * 2}, op.op)

    def _all_to_all(self, op, hw):
        tokens = max(1, round(op.bytes / (2 * op.hidden))) if op.hidden else 1
        mode = "ll" if op.low_latency else "ht"
        if self.backend == "sglang":
            kind = "wideep_deepep_ll_perf" if op.low_latency else "wideep_deepep_normal_perf"
            f = self._file("comm", kind)
            if f is None:
                return None
            path, backend, version = f
            col = f"{op.phase}_avg_t_us"

            def make():
                cols = _columns(path)
                out = {}
                for key in set(zip(cols["node_num"], cols["hidden_size"], cols["num_topk"], cols["num_experts"])):
                    mask = ((cols["node_num"] == key[0]) & (cols["hidden_size"] == key[1]) & (cols["num_topk"] == key[2])
                            & (cols["num_experts"] == key[3]))
                    g = _grid(cols, mask, ("num_token",), cols[col] * 1e-6)
                    if g is not None:
                        out[(8 * int(key[0]), int(key[1]), int(key[2]), int(key[3]))] = g
                return out
        else:
            f = self._file("comm", "moe_a2a_perf")
            if f is None:
                return None
            path, backend, version = f

            def make():
                cols = _columns(path)
                out = {}
                be = np.array([str(b).endswith("_" + mode) for b in cols["comm_backend"]])
                for key in set(zip(cols["ep_size"], cols["hidden_size"], cols["topk"], cols["num_experts"])):
                    mask = (be & (cols["phase"] == op.phase) & (cols["ep_size"] == key[0]) & (cols["node_num"] == 1)
                            & (cols["hidden_size"] == key[1]) & (cols["topk"] == key[2]) & (cols["num_experts"] == key[3]))
                    g = _grid(cols, mask, ("num_tokens",), cols["latency"] * 1e-6)
                    if g is not None:
                        out[tuple(int(x) for x in key)] = g
                return out
        grids = self._cached((path, "a2a", mode, op.phase), make)
        cands = [k for k in grids if k[0] == op.ranks]
        if not cands:
            return None
        want = (op.ranks, op.hidden, op.topk, op.num_experts)
        k = min(cands, key=lambda k: sum(math.log(max(a, 1) / max(b, 1)) ** 2 for a, b in zip(k[1:], want[1:])))
        src, note = self._source(backend, version, "all-to-all")
        near = op.at(hidden=k[1], topk=k[2], num_experts=k[3], bytes=op.bytes * k[1] / max(op.hidden, 1))
        look = scaled(near, hw, grids[k](tokens), src, lambda p: {"bytes": p[0] * 2 * k[1]}, "all-to-all")
        if k != want:
            r_o, r_n = op.roofline_s(hw), near.roofline_s(hw)
            look = Lookup(max(look.latency_s * (r_o / r_n if r_n else 1), look.latency_s + r_o - r_n), src,
                          "; ".join(filter(None, (look.note, f"nearest measured all-to-all (hidden {k[1]}, top-{k[2]} "
                                                  f"of {k[3]}) scaled by the roofline"))))
        return self._with(look, f"DeepEP {'low-latency' if op.low_latency else 'high-throughput'} kernels; " + note
                          if note else f"DeepEP {'low-latency' if op.low_latency else 'high-throughput'} kernels")

    def _recurrent(self, op, hw):
        if op.kind != "gdn" or not op.num_heads:
            return None
        f = self._file("linear_attention", "gdn_perf")
        if f is None:
            return None
        path, backend, version = f
        phase = "generation" if op.tokens <= 4 else "context"

        def make():
            cols = _columns(path)
            out = {}
            mask0 = cols["phase"] == phase
            for key in set(zip(cols["num_k_heads"][mask0], cols["num_v_heads"][mask0], cols["head_k_dim"][mask0],
                               cols["head_v_dim"][mask0])):
                mask = (mask0 & (cols["num_k_heads"] == key[0]) & (cols["num_v_heads"] == key[1])
                        & (cols["head_k_dim"] == key[2]) & (cols["head_v_dim"] == key[3]))
                # a layer's recurrence is its conv kernel plus its delta-rule kernel: sum them per shape
                shape = {}
                for b, s, src_k, lat in zip(cols["batch_size"][mask], cols["seq_len"][mask], cols["kernel_source"][mask],
                                            cols["latency"][mask]):
                    shape.setdefault((int(b), int(s)), {}).setdefault(str(src_k), []).append(float(lat))
                pts, vals = [], []
                for (b, s), by_kernel in shape.items():
                    conv = min((v for k, v in by_kernel.items() if "conv" in k), default=None, key=min)
                    rec = min((v for k, v in by_kernel.items() if "conv" not in k), default=None, key=min)
                    if conv is None or rec is None:
                        continue
                    pts.append((b, s))
                    vals.append((min(conv) + min(rec)) * 1e-3)
                if pts:
                    out[tuple(int(x) for x in key)] = Grid.from_points(pts, vals)
            return out

        grids = self._cached((path, "gdn", phase), make)
        want = (op.num_groups, op.num_heads, op.state_size, op.head_dim)
        if not grids:
            return None
        k = min(grids, key=lambda k: sum(math.log(max(a, 1) / max(b, 1)) ** 2 for a, b in zip(k, want)))
        src, note = self._source(backend, version, "Gated DeltaNet")
        near = op
        if k != want:
            ratio = (k[1] * k[3] * k[2]) / max(op.num_heads * op.head_dim * op.state_size, 1)
            near = op.at(num_groups=k[0], num_heads=k[1], state_size=k[2], head_dim=k[3],
                         state_elements=int(op.state_elements * ratio), flops_per_token=op.flops_per_token * ratio)
        look = scaled(near, hw, grids[k](op.batch, op.tokens), src,
                      lambda p: {"batch": int(p[0]), "tokens": int(p[1])}, "Gated DeltaNet")
        if near is not op:
            r_o, r_n = op.roofline_s(hw), near.roofline_s(hw)
            look = Lookup(max(look.latency_s * (r_o / r_n if r_n else 1), look.latency_s + r_o - r_n), src,
                          "; ".join(filter(None, (look.note, "nearest measured GDN heads scaled by the roofline"))))
        return self._with(look, note)


@functools.lru_cache(maxsize=32)
def aic_table(gpu_id: str, backend: str) -> AicTable | None:
    """aiconfigurator-core's table for our GPU preset `gpu_id` and `backend`, or None (not
    installed, no system for the GPU, or no current version for the backend)."""
    system = AIC_SYSTEMS.get(gpu_id)
    if system is None or backend not in BACKENDS or not aic_installed():
        return None
    root = systems_dir()
    if root is None or not (root / "data" / system).is_dir() or current_version(system, backend) is None:
        return None
    return AicTable(system, backend)


# --- aiconfigurator-core's own engine as a cross-check ---------------------------------------------

@functools.lru_cache(maxsize=64)
def _engine(model_path: str, system: str, backend: str, tp: int, adp: int, moe_tp: int, moe_ep: int, kv: str,
            fmha: str, gemm: str | None = None, moe: str | None = None,
            pp: int = 1):
    import logging

    from aiconfigurator_core.sdk import EngineHandle

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    return EngineHandle.compile(model_path, system, backend, tp_size=tp, pp_size=pp, attention_dp_size=adp, moe_tp_size=moe_tp,
                                moe_ep_size=moe_ep, kvcache_quant_mode=kv, fmha_quant_mode=fmha,
                                gemm_quant_mode=gemm, moe_quant_mode=moe)


def _model_path(model) -> str | None:
    """What aiconfigurator-core's engine is compiled from, without a download: the preset's
    Hugging Face repo where aiconfigurator-core 0.12.0 ships its config (model_configs/
    owner--name_config.json), else a local folder holding the preset's own config.json (its
    loader reads a local path first); None for a model with neither."""
    import hashlib
    import json
    import tempfile

    from ..presets import model_entries
    from .commands import model_path_for

    repo = model_path_for(model)
    root = systems_dir()
    if root is not None and (root.parent / "model_configs" / f"{repo.replace('/', '--')}_config.json").is_file():
        return repo
    try:
        cfg = (model_entries().get(model.name) or {}).get("config")
    except Exception:
        cfg = None
    if not cfg:
        return None
    text = json.dumps(cfg, sort_keys=True)
    folder = Path(tempfile.gettempdir()) / "mla_explorer_aic_configs" / hashlib.sha1(text.encode()).hexdigest()[:16]
    if not (folder / "config.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"config.json.{hashlib.sha1(str(id(cfg)).encode()).hexdigest()[:8]}"
        tmp.write_text(text)
        tmp.replace(folder / "config.json")
    return str(folder)


# Our weights dtypes -> aiconfigurator-core's (GEMMQuantMode, MoEQuantMode); a block-scaled fp8
# checkpoint (DeepSeek's) is fp8_block for both.
_QUANT = {"bf16": ("bfloat16", "bfloat16"), "fp16": ("bfloat16", "bfloat16"), "fp8": ("fp8", "fp8"),
          "fp4": ("nvfp4", "nvfp4"), "nvfp4": ("nvfp4", "nvfp4")}


def aic_estimate(model, dep, wl, batch_per_replica: int, engine: str, *, weights_dtype: str | None = None,
                 prefill_prompts: int = 1) -> dict:
    """aiconfigurator-core's own estimate (its Rust engine, `EngineHandle`) of one replica of
    `dep` holding `batch_per_replica` sequences: `available` False with a `reason` where it
    cannot (not installed, the GPU has no system, the model or its architecture unknown to it,
    the split or the dtypes it has no tables for). Otherwise `system`, `backend`, `version`,
    `model_path`, `split` (its arguments), and, per its API (docs/model.md):
        decode_step_s                 `decode_step_latency` of the rank's batch at the input length
        tpot_s                        that step / the tokens a step emits
        ttft_s                        `predict_prefill_latency` of one request
        tokens_per_s_per_gpu          decode steps only: the rank's batch x tokens a step / the step
        output_tokens_per_s_per_gpu   `run_static` (the batch prefilled, then decoded): batch x
                                      output_len / its total time
        input_tokens_per_s_per_gpu    `predict_prefill_latency` of `prefill_prompts` requests at once
    each per GPU. Its batch is per attention-DP rank (with DP-attention, the replica's batch / tp);
    the weights dtype maps to its quant modes (`_QUANT`; the checkpoint's own when None)."""
    def no(reason):
        return {"available": False, "reason": reason}

    if not aic_installed():
        return no("aiconfigurator-core is not installed (pip install 'mla-explorer[aic]')")
    system = AIC_SYSTEMS.get(dep.gpu.id)
    if system is None:
        return no(f"aiconfigurator-core has no measured system for GPU {dep.gpu.id}")
    path = _model_path(model)
    if path is None:
        return no(f"aiconfigurator-core has no config for {model.name} and the model has none to hand it")
    gemm = moe = None
    if weights_dtype not in (None, model.default_weights_dtype):
        if weights_dtype not in _QUANT:
            return no(f"aiconfigurator-core has no quant mode for {weights_dtype} weights")
        gemm, moe = _QUANT[weights_dtype]
    if model.quant_method == "fp8" and weights_dtype in (None, "fp8"):
        gemm = moe = None  # the checkpoint's own block-scaled fp8, as it reads it
    tp, ep = dep.tp, dep.ep
    dp = dep.dp_attention and tp > 1
    tp_size, adp = (1, tp) if dp else (tp, 1)
    moe_ep = ep if ep > 1 else 1
    moe_tp = tp // moe_ep  # tp = moe_tp x ep inside the group (docs/model.md, "Deployments")
    from ..kv import resolve_kv_dtype

    kv = resolve_kv_dtype(model, dep.kv_dtype)
    kv_mode = "bfloat16" if kv in ("bf16", "fp16") else "fp8" if kv.startswith("fp8") else None
    if kv_mode is None:
        return no(f"aiconfigurator-core has no KV-cache mode for {kv}")
    b = max(1, -(-batch_per_replica // adp))
    try:
        handle = _engine(path, system, engine, tp_size, adp, moe_tp, moe_ep, kv_mode, "bfloat16", gemm, moe, dep.pp)
        prefix = wl.input_len - wl.new_prefill_tokens
        step_ms = handle.decode_step_latency(b, wl.input_len, max(wl.output_len, 2))
        prefill_ms = handle.predict_prefill_latency(1, wl.input_len, prefix)
        many_ms = prefill_ms if prefill_prompts <= 1 else handle.predict_prefill_latency(prefill_prompts, wl.input_len,
                                                                                         prefix)
        static_ms = handle.run_static(batch_size=b, isl=wl.input_len, osl=max(wl.output_len, 2), prefix=prefix)[2]
    except Exception as e:  # its errors are many and typed in its own package
        return no(f"aiconfigurator-core could not estimate {model.name} on {system}/{engine} at this split: "
                  f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
    if not (step_ms > 0 and prefill_ms > 0 and static_ms > 0):
        return no(f"aiconfigurator-core returned no time for {model.name} on {system}/{engine} at this split")
    tps = wl.tokens_per_step
    return {"available": True, "system": system, "backend": engine, "version": current_version(system, engine),
            "model_path": path if not path.startswith("/") else f"{model.name} (the preset's config.json)",
            "split": {"tp_size": tp_size, "pp_size": dep.pp, "attention_dp_size": adp, "moe_tp_size": moe_tp,
                      "moe_ep_size": moe_ep,
                      "kvcache_quant_mode": kv_mode, "fmha_quant_mode": "bfloat16", "gemm_quant_mode": gemm,
                      "moe_quant_mode": moe, "batch_size": b},
            "decode_step_s": step_ms * 1e-3, "tpot_s": step_ms * 1e-3 / tps, "ttft_s": prefill_ms * 1e-3,
            "tokens_per_s_per_user": tps / (step_ms * 1e-3),
            "tokens_per_s_per_gpu": b * tps / (step_ms * 1e-3) / (tp_size * dep.pp),
            "output_tokens_per_s_per_gpu": b * max(wl.output_len, 2) / (static_ms * 1e-3) / (tp_size * dep.pp),
            "input_tokens_per_s_per_gpu": prefill_prompts * wl.input_len / (many_ms * 1e-3) / (tp_size * dep.pp)}


def cross_check(model, dep, wl, point, engine: str, *, weights_dtype: str | None = None) -> dict:
    """aiconfigurator-core's own estimate (`aic_estimate`) at `point` of `dep`, beside ours, with
    `ours_over_aic` (our estimate / its figure, for TPOT and TTFT)."""
    out = aic_estimate(model, dep, wl, point.batch_per_replica, engine, weights_dtype=weights_dtype)
    est = point.estimate
    if out["available"] and est is not None:
        out["ours_over_aic"] = {"tpot": est.tpot_s / out["tpot_s"], "ttft": est.ttft_s / out["ttft_s"]}
    return out
