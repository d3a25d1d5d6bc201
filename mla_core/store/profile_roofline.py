"""A kernel profile's attention decode rows as roofline points (no torch).

A profile (`mla_core.store.profiles`, `bench --profile`) keeps, per decode shape, the measured
latency of one attention decode call. On the roofline a row is counted as the Roofline page
counts its predicted points (`mla_core.roofline`, docs/model.md "Decode step roofline"):

    flops  = 2 * batch * num_heads * context * (k_dim + v_dim)   QK^T on k_dim, PV on v_dim
    bytes  = the cache the call reads: batch * context * num_kv_heads * token bytes, where a
             token's bytes are row_bytes(k_dim) for MLA's latent (one row is both K and V:
             d_c + d_r, with V its first d_c) and row_bytes(k_dim) + row_bytes(v_dim) otherwise,
             at the row's kv_dtype (`units.row_bytes`)

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
from ..units import row_bytes

# Profile attention kinds -> the variant label the roofline charts colour by.
_KIND_LABELS = {"mla_absorbed": "MLA absorbed"}


def variant_label(row: dict) -> str:
    """The chart label of a decode row: 'MLA absorbed' for MLA; for SDPA rows MHA (as many KV
    heads as query heads), MQA (one KV head) or GQA; ' (sliding)' after a sliding layer's."""
    kind = row["kind"]
    if kind in _KIND_LABELS:
        return _KIND_LABELS[kind]
    heads, kv = row["num_heads"], row["num_kv_heads"]
    base = "MHA" if kv == heads else ("MQA" if kv == 1 else "GQA")
    return base + (" (sliding)" if kind == "sliding" else "")


def decode_work(row: dict) -> tuple[int, float]:
    """(bytes, flops) of one attention decode call of a profile row (module docstring).
    Raises MLAError for a row without the shape fields or with an unknown kv_dtype."""
    try:
        b, t, h, kv = int(row["batch"]), int(row["context"]), int(row["num_heads"]), int(row["num_kv_heads"])
        k_dim, v_dim, dtype = int(row["k_dim"]), int(row["v_dim"]), str(row["kv_dtype"])
        kind = str(row["kind"])
    except (KeyError, TypeError, ValueError):
        raise MLAError(f"an attention_decode row without its shape: {str(row)[:80]}") from None
    if kind == "mla_absorbed":
        token = row_bytes(k_dim, dtype)
    else:
        token = row_bytes(k_dim, dtype) + row_bytes(v_dim, dtype)
    return b * t * kv * token, 2.0 * b * h * t * (k_dim + v_dim)


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
            kind=row["kind"], label=variant_label(row), batch=int(row["batch"]), context=int(row["context"]),
            num_heads=int(row["num_heads"]), num_kv_heads=int(row["num_kv_heads"]), k_dim=int(row["k_dim"]),
            v_dim=int(row["v_dim"]), kv_dtype=str(row["kv_dtype"]), latency_s=t, bytes=nbytes, flops=flops,
            intensity_flop_per_byte=flops / nbytes, achieved_flops=flops / t, achieved_Bps=nbytes / t))
    tp = table.get("tp")
    return ProfileRoofline(run_id=run_id, model=str(table.get("model") or ""),
                           tp=tp if isinstance(tp, int) and not isinstance(tp, bool) else None,
                           device_name=str(device.get("name") or "unknown device"),
                           device_kind=str(device.get("kind") or ""), points=tuple(points), skipped=tuple(skipped))
