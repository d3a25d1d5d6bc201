"""Collective bandwidth: the formulas, size lists and what a stored result gives the serving model.

Pure Python (no torch): the page, the history and the serving model read collectives results
through this module; `mla_core.bench.collectives` measures them under torchrun.

Definitions (docs/model.md, "Collective bandwidth"; nccl-tests' doc/PERFORMANCE.md). For a
collective over n ranks on S bytes taking t seconds:

    algbw = S / t
    busbw = algbw * f,  f = 2 (n - 1) / n   all_reduce
                        f = (n - 1) / n     all_gather, reduce_scatter, all_to_all

S is nccl-tests' "size": the whole buffer of the operation, i.e. the all_reduce buffer, the
all_gather *output* (n chunks of S / n), the reduce_scatter *input* (n chunks of S / n), the
all_to_all send buffer (n chunks of S / n going to the n ranks). Bandwidths are GB/s = 1e9 B/s.
busbw is the figure comparable to the hardware's link bandwidth (NVLink, network): for a ring
all_reduce it is the bandwidth each link carried.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from ..errors import MLAError

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
BACKENDS = {"cuda": "nccl", "cpu": "gloo"}
DEVICE_CHOICES = ("auto", "cpu", "cuda")
DTYPE_CHOICES = ("fp32", "bf16", "fp16")
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MIN_SIZE = 1 << 10
MAX_SIZE = 1 << 34  # 16 GiB per buffer: beyond any real sweep
MAX_SIZES = 64
DEFAULT_SIZES = {"cuda": "1K..1G", "cpu": "1K..64M"}
QUICK_SIZES = "1K..1M"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw factor of `op` over `world_size` ranks. Raises MLAError."""
    if op not in OPS:
        raise MLAError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise MLAError(f"world size must be a whole number >= 1, got {world_size!r}")
    n = world_size
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def bandwidths(op: str, size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of one `op` on `size_bytes` taking `seconds` (> 0)."""
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise MLAError(f"a collective's time must be a positive number of seconds, got {seconds!r}")
    alg = size_bytes / seconds / 1e9
    return alg, alg * bus_factor(op, world_size)


def _one_size(text: str) -> int:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    m = re.fullmatch(r"(\d{1,12})([KMG]?)", t)
    if not m:
        raise MLAError(f"a size is a whole number of bytes with an optional K, M or G suffix, got {text.strip()[:30]!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_sizes(text: str) -> tuple[int, ...]:
    """Sizes in bytes from '1K..1G' (powers of two from 1 KiB to 1 GiB, doubling) or a comma
    list '1M,16M,256M' (K = 2^10, M = 2^20, G = 2^30). Sorted, distinct, each in
    [1 KiB, 16 GiB], at most 64. Raises MLAError (one line)."""
    text = str(text).strip()
    if not text:
        raise MLAError("--sizes needs at least one size")
    out: set[int] = set()
    for part in text.split(","):
        if ".." in part:
            lo_t, _, hi_t = part.partition("..")
            lo, hi = _one_size(lo_t), _one_size(hi_t)
            if lo > hi:
                raise MLAError(f"size range {part.strip()!r} runs backwards")
            if lo < 1:
                raise MLAError("sizes must be positive")
            s = lo
            while s <= hi:
                out.add(s)
                s *= 2
                if len(out) > MAX_SIZES:
                    break
        else:
            out.add(_one_size(part))
    sizes = tuple(sorted(out))
    for s in sizes:
        if not MIN_SIZE <= s <= MAX_SIZE:
            raise MLAError(f"sizes must be between 1K and 16G bytes, got {s:,}")
    if len(sizes) > MAX_SIZES:
        raise MLAError(f"at most {MAX_SIZES} sizes in one run, got more")
    return sizes


def parse_ops(text: str) -> tuple[str, ...]:
    """Ops from 'all' or a comma list of OPS, in OPS order. Raises MLAError."""
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    if names == ["all"]:
        return OPS
    if not names:
        raise MLAError("--ops needs at least one collective")
    for n in names:
        if n not in OPS:
            raise MLAError(f"unknown collective {n[:30]!r}; choose from all, {', '.join(OPS)}")
    return tuple(op for op in OPS if op in names)


def buffer_elements(op: str, size_bytes: int, world_size: int, dtype: str) -> int:
    """Elements of the whole buffer S of `op`, rounded down to a multiple of world_size (every
    rank's chunk the same), at least world_size."""
    n = max(1, size_bytes // DTYPE_BYTES[dtype])
    if op != "all_reduce":
        n -= n % world_size
    return max(n, world_size)


def peak_buffer_bytes(op: str, size_bytes: int, world_size: int) -> int:
    """Memory one rank holds for one point: all_reduce one buffer of S; all_gather S / n in and
    S out; reduce_scatter S in and S / n out; all_to_all S in and S out."""
    chunk = size_bytes // max(1, world_size)
    return {"all_reduce": size_bytes, "all_gather": size_bytes + chunk, "reduce_scatter": size_bytes + chunk,
            "all_to_all": 2 * size_bytes}[op]


# ---------------------------------------------------------------------------------------------
# What a stored result gives the serving model.

@dataclass(frozen=True)
class LinkBandwidth:
    """A measured bus bandwidth to put in `mla_core.serving.Deployment(link_bandwidth_Bps=...)`.

    link_bandwidth_Bps: busbw in B/s (median of the repetitions) at `size_bytes`, the largest
    size measured for `op` (small messages are latency-bound and understate the link).
    """

    link_bandwidth_Bps: float
    op: str
    size_bytes: int
    world_size: int
    backend: str
    nodes: int
    device_name: str
    busbw_best_Bps: float
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


def link_bandwidth(result: dict, op: str = "all_reduce") -> LinkBandwidth:
    """The bus bandwidth of a collectives result (as `mla_core.bench.collectives` writes it and the
    history stores it) for the serving model's communication terms: tensor parallelism's
    all_reduce by default, `op="all_to_all"` for expert parallelism's dispatch and combine.

    Raises MLAError when `result` is not a collectives result, has no `op` or ran on one rank.
    """
    if not isinstance(result, dict) or result.get("kind") != "collectives":
        raise MLAError("not a collectives result (kind 'collectives'); measure one with "
                       "`torchrun --nproc-per-node N -m mla_core bench collectives`")
    dev = result.get("device") or {}
    n = dev.get("world_size")
    if not isinstance(n, int) or n < 2:
        raise MLAError("a collectives result over fewer than 2 ranks measures no link")
    rows = [r for r in result.get("results", []) if isinstance(r, dict) and r.get("op") == op]
    if not rows:
        raise MLAError(f"this collectives result has no {op} measurement")
    top = max(rows, key=lambda r: r["bytes"])
    source = (f"measured {op} busbw at {top['bytes']:,} B over {n} ranks ({dev.get('backend')}, "
              f"{dev.get('nodes', 1)} node(s), {dev.get('name', '')}), created {result.get('created', '?')}")
    return LinkBandwidth(link_bandwidth_Bps=top["busbw_GBps"] * 1e9, op=op, size_bytes=top["bytes"], world_size=n,
                         backend=str(dev.get("backend", "")), nodes=int(dev.get("nodes") or 1),
                         device_name=str(dev.get("name", "")), busbw_best_Bps=top["busbw_best_GBps"] * 1e9,
                         source=source)


def stored_link_bandwidth(run_id: int, op: str = "all_reduce", *, path: str | None = None) -> LinkBandwidth:
    """`link_bandwidth` of a collectives run in the history (`mla_core.store.history`), e.g. for
    a planner's `--link-from-run ID`. Raises BenchError for an unknown id, MLAError for a run of
    another kind ("run 3 is not a collectives run (it is an engine import)") and otherwise."""
    from ..store import history
    from ..store.schema import kind_name, result_kind

    result = history.get_run(run_id, path=path)["result"]
    if result_kind(result) != "collectives":
        raise MLAError(f"run {run_id} is not a collectives run (it is {kind_name(result_kind(result))}); "
                       "`python -m mla_core bench history --kind collectives` lists the collectives runs")
    return link_bandwidth(result, op)


@dataclass(frozen=True)
class CollectiveRow:
    op: str
    size_bytes: int
    size_text: str
    median_s: float
    min_s: float
    reps: int
    algbw_GBps: float
    busbw_GBps: float
    busbw_best_GBps: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CollectivesView:
    """All the Benchmark page draws of one collectives result (`collectives_view`)."""

    world_size: int
    nodes: int
    backend: str
    device_name: str
    dtype: str
    rows: tuple[CollectiveRow, ...]
    peak_busbw_GBps: dict  # op -> the largest median busbw over sizes
    series: dict  # op -> {"size_bytes": [...], "busbw_GBps": [...], "algbw_GBps": [...]}
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rows"] = [r.to_dict() for r in self.rows]
        return d


def collectives_view(result: dict) -> CollectivesView:
    """The table and chart series of a collectives result. Raises MLAError for another kind."""
    from ..units import format_bytes

    if not isinstance(result, dict) or result.get("kind") != "collectives":
        raise MLAError("not a collectives result")
    dev = result.get("device") or {}
    rows = []
    series: dict = {}
    peak: dict = {}
    for r in result.get("results", []):
        rows.append(CollectiveRow(r["op"], r["bytes"], format_bytes(r["bytes"]), r["median_s"], r["min_s"],
                                  r.get("reps", 0), r["algbw_GBps"], r["busbw_GBps"], r["busbw_best_GBps"]))
        s = series.setdefault(r["op"], {"size_bytes": [], "busbw_GBps": [], "algbw_GBps": []})
        s["size_bytes"].append(r["bytes"])
        s["busbw_GBps"].append(r["busbw_GBps"])
        s["algbw_GBps"].append(r["algbw_GBps"])
        peak[r["op"]] = max(peak.get(r["op"], 0.0), r["busbw_GBps"])
    return CollectivesView(int(dev.get("world_size", 1)), int(dev.get("nodes", 1)), str(dev.get("backend", "")),
                           str(dev.get("name", "")), str(dev.get("dtype", "")), tuple(rows), peak, series,
                           tuple(result.get("notes", [])))
