"""A kernel profile's attention decode rows as roofline points (no torch).

A profile (`mla_core.store.profiles`, `bench --profile`) keeps, per decode shape, the measured
latency of one attention decode call. On the roofline a row is counted as the Roofline page
counts its predicted points: the row's shape becomes the per-layer cache class it ran
(`mla_core.layers.MLAttention` for the absorbed MLA decode, `FullAttention` otherwise), and its
bytes and flops are that class's `kv_bytes` and `decode_flops` over the row's context, times its
batch (docs/model.md "Decode step roofline"; `mla_core.roofline.decode_attention` sums the same
methods over a model's layers),

so that x = flops / bytes (flop/B) and y = flops / latency_s (the achieved FLOP/s), and the
achieved bandwidth bytes / latency_s. The absorbed MLA decode's two small projections (W_UK on
the query, W_UV on the output), which the profile's call also runs, are not counted, as the
predicted point does not count them: the measured point then sits where the same work would
land, a little below what the call really did.

    profile_roofline(table, run_id=None) -> ProfileRoofline     points, and what was skipped
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import MLAError

# Profile attention kinds -> the variant label the roofline charts colour by.
_KIND_LABELS = {"mla_absorbed": "MLA absorbed"}


def variant_label(row: dict, model_kind: str | None = None) -> str:
    """The chart label of a decode row: 'MLA absorbed' for MLA; for SDPA rows the model's own
    attention kind when known (`model_kind` 'mha', 'gqa' or 'mqa', `ModelSpec.kind`: a GQA model
    split over TP runs one KV head a GPU, which is not MQA), else the row's own shape
    (`decode_cache(row).variant`); ' (sliding)' after a sliding layer's. Raises MLAError for a row
    without the shape fields."""
    kind = row["kind"]
    if kind in _KIND_LABELS:
        return _KIND_LABELS[kind]
    base = model_kind if model_kind in ("mha", "gqa", "mqa") else decode_cache(row).variant
    return base.upper() + (" (sliding)" if kind == "sliding" else "")


def _model_kind(name) -> str | None:
    """`ModelSpec.kind` of the preset a profile names, or None (not a preset: an uploaded config)."""
    from ..presets import load_model

    if not isinstance(name, str) or not name:
        return None
    try:
        return load_model(name).kind
    except MLAError:
        return None


def decode_cache(row: dict):
    """The per-layer cache class (`mla_core.layers`) of a profile row's decode call: the MLA
    latent (`MLAttention`, d_c = v_dim, d_r = k_dim - v_dim) for "mla_absorbed", otherwise K and V
    heads (`FullAttention`), over the row's context as it ran (a sliding row's context is its
    window). Raises MLAError for a row without the shape fields."""
    from ..layers import FullAttention, MLAttention

    try:
        h, kv = int(row["num_heads"]), int(row["num_kv_heads"])
        k_dim, v_dim, kind = int(row["k_dim"]), int(row["v_dim"]), str(row["kind"])
    except (KeyError, TypeError, ValueError):
        raise MLAError(f"an attention_decode row without its shape: {str(row)[:80]}") from None
    if kind == "mla_absorbed":
        return MLAttention(num_heads=h, kv_lora_rank=v_dim, qk_rope_head_dim=k_dim - v_dim, qk_nope_head_dim=0,
                           v_head_dim=0)
    return FullAttention(num_heads=h, num_kv_heads=kv, k_dim=k_dim, v_dim=v_dim)


def decode_work(row: dict) -> tuple[int, float]:
    """(bytes, flops) of one attention decode call of a profile row: `batch` times what the
    row's cache class (`decode_cache`) reads (`kv_bytes` at the row's kv_dtype) and computes
    (`decode_flops`, the absorbed path for MLA) over `context` tokens: the roofline's own rule
    (docs/model.md "Decode step roofline"). Raises MLAError for a row without the shape fields
    or with an unknown kv_dtype."""
    from ..layers import Precision

    cache = decode_cache(row)
    try:
        b, t, dtype = int(row["batch"]), int(row["context"]), str(row["kv_dtype"])
    except (KeyError, TypeError, ValueError):
        raise MLAError(f"an attention_decode row without its shape: {str(row)[:80]}") from None
    nbytes = cache.kv_bytes(t, Precision(kv=dtype))  # MLAError for an unknown kv_dtype (units.row_bytes)
    return b * int(nbytes), float(b * cache.decode_flops(t))


@dataclass(frozen=True)
class ProfilePoint:
    """One measured decode call on the roofline: its shape, its latency, the counted bytes and
    flops, x = `intensity_flop_per_byte`, y = `achieved_flops` (flop/s), and `achieved_Bps`."""

    kind: str
    label: str
    batch: int
    context: int
    num_heads: int
    num_kv_heads: int
    k_dim: int
    v_dim: int
    kv_dtype: str
    latency_s: float
    bytes: int
    flops: float
    intensity_flop_per_byte: float
    achieved_flops: float
    achieved_Bps: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProfileRoofline:
    """A profile's decode points: `run_id` (None for a table not from the history), `model`,
    `tp`, `device_name`, `device_kind`, `points` (in the table's order) and `skipped` (one line
    per row that could not be drawn)."""

    run_id: int | None
    model: str
    tp: int | None
    device_name: str
    device_kind: str
    points: tuple[ProfilePoint, ...] = ()
    skipped: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def profile_roofline(table: dict, run_id: int | None = None) -> ProfileRoofline:
    """The attention_decode rows of a profile table (as `load_profile` returns it) as roofline
    points. A row that cannot be read (no shape, a non-positive latency, an unknown dtype) is
    skipped with its reason; a table that is not a profile raises MLAError."""
    if not isinstance(table, dict) or not isinstance(table.get("ops"), dict):
        raise MLAError("a kernel profile is a dict with an 'ops' table")
    device = table.get("device") if isinstance(table.get("device"), dict) else {}
    points, skipped = [], []
    model_kind = _model_kind(table.get("model"))
    rows = table["ops"].get("attention_decode") or []
    for row in rows if isinstance(rows, list) else []:
        try:
            nbytes, flops = decode_work(row)
            t = float(row["latency_s"])
        except (MLAError, KeyError, TypeError, ValueError) as e:
            skipped.append(str(e) if isinstance(e, MLAError) else f"a row without latency_s: {str(row)[:80]}")
            continue
        if not (t > 0 and math.isfinite(t)) or nbytes <= 0 or flops <= 0:
            skipped.append(f"{row.get('kind')} B={row.get('batch')} T={row.get('context')}: no positive latency, "
                           "bytes or flops")
            continue
        points.append(ProfilePoint(
            kind=row["kind"], label=variant_label(row, model_kind), batch=int(row["batch"]), context=int(row["context"]),
            num_heads=int(row["num_heads"]), num_kv_heads=int(row["num_kv_heads"]), k_dim=int(row["k_dim"]),
            v_dim=int(row["v_dim"]), kv_dtype=str(row["kv_dtype"]), latency_s=t, bytes=nbytes, flops=flops,
            intensity_flop_per_byte=flops / nbytes, achieved_flops=flops / t, achieved_Bps=nbytes / t))
    tp = table.get("tp")
    return ProfileRoofline(run_id=run_id, model=str(table.get("model") or ""),
                           tp=tp if isinstance(tp, int) and not isinstance(tp, bool) else None,
                           device_name=str(device.get("name") or "unknown device"),
                           device_kind=str(device.get("kind") or ""), points=tuple(points), skipped=tuple(skipped))
