"""What each section of the app's pages draws, from one call each (no streamlit here).

A page section calls one function of this module and draws what it returns: the numbers (from
mla_core.kv / roofline / sweeps), the fallbacks the inputs need (with the warning to show), and
the chart arrays. Pages and `ui/` hold no arithmetic and no rule about a model's kind; the rules
live here, next to the core functions they call. Results are frozen dataclasses with
`to_dict()`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .errors import MLAError
from .kv import (compare_variants, default_gqa_groups, gqa_group_choices, kv_report, resolve_kv_dtype,
                 variant_specs)
from .spec import ModelSpec
from .sweeps import kv_cache_bytes_vs_context, log_contexts
from .units import format_tokens

MAX_SWEEP_CONTEXT = 10**15  # a chart's right end never passes this (exact in a browser)


class _View:
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def context_limit_warning(model: ModelSpec, context: int) -> str | None:
    """A warning when `context` exceeds the config's `max_position_embeddings` (the positions
    the model was configured for; the cache arithmetic still holds, the model may not), else None."""
    limit = model.max_position_embeddings
    if limit and context > limit:
        return (f"{context:,} tokens is beyond {model.name}'s max_position_embeddings ({limit:,} = "
                f"{format_tokens(limit)}): the cache is costed as asked, but the model is not configured "
                "for sequences this long.")
    return None


def kv_dtype_for(model: ModelSpec, kv_dtype: str) -> tuple[str, str | None]:
    """The KV dtype to cost `model` at, and a warning when the shared choice does not apply:
    fp8_ds_mla exists only for an MLA latent, so another model is costed at fp8."""
    if kv_dtype == "fp8_ds_mla" and not model.is_mla:
        return "fp8", f"fp8_ds_mla is an MLA latent layout; {model.name} is costed at fp8."
    return kv_dtype, None


def describe_shape(model: ModelSpec) -> str:
    """'61 layers, 128 query heads, latent d_c 512 + decoupled RoPE key d_r 64' (or the KV heads)."""
    a = model.attention
    return (f"{model.num_hidden_layers} layers, {a.num_attention_heads} query heads, "
            + (f"latent d_c {a.kv_lora_rank} + decoupled RoPE key d_r {a.qk_rope_head_dim}" if model.is_mla
               else f"{a.num_key_value_heads} KV heads of d_h {a.head_dim}"))


def baseline_head_dim_text(model: ModelSpec) -> str:
    """How the MHA/GQA/MQA rows' d_h is chosen for this model (DeepSeek-V2 Table 1's convention)."""
    return ("qk_nope_head_dim (DeepSeek-V2 Table 1's d_h)" if model.is_mla else str(model.attention.head_dim))


@dataclass(frozen=True)
class KVSummary(_View):
    """The KV page's headline for one model: `report` is `kv.kv_report` at the dtype and layout
    used; `kv_dtype` / `cache_layout` what was used; `warnings` the fallbacks taken and the
    context-limit warning; `shape` and `notes` describe the model."""

    model: str
    kind: str
    shape: str
    kv_dtype: str
    cache_layout: str
    report: dict
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    sliding_layers: int = 0


def kv_summary(model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto",
               cache_layout: str = "latent", block_size: int | None = None) -> KVSummary:
    """`kv_report` for the page's inputs, after its fallbacks: fp8_ds_mla on a non-MLA model is
    fp8; a non-MLA model has one layout; fp8_ds_mla with the expanded layout shows the latent.
    Raises MLAError for inputs the core refuses (a context or batch out of range)."""
    warnings = []
    dtype, warning = kv_dtype_for(model, kv_dtype)
    if warning:
        warnings.append(warning)
    layout = cache_layout if model.is_mla else "latent"
    if layout == "expanded" and dtype == "fp8_ds_mla":
        warnings.append("fp8_ds_mla stores the latent only; the latent layout is shown.")
        layout = "latent"
    limit = context_limit_warning(model, context)
    if limit:
        warnings.append(limit)
    report = kv_report(model, context, batch, dtype, layout, block_size)
    return KVSummary(model.name, model.kind, describe_shape(model), dtype, layout, report, tuple(warnings),
                     tuple(model.notes), model.num_sliding_layers)


@dataclass(frozen=True)
class KVVariants(_View):
    """The same width as MHA, GQA, MQA, MLA latent and MLA expanded: `rows` from
    `kv.compare_variants`; `gqa_choices` (0 = default first) and `default_gqa_groups`;
    `gqa_groups` in use (0 = default); `warnings`; `mla_as_gqa_groups`, `mla_vs_mha` and
    `expanded_vs_latent` (None without an expanded row) for the sentence above the table;
    `baseline_head_dim` (how d_h is chosen)."""

    rows: tuple[dict, ...]
    gqa_choices: tuple[int, ...]
    default_gqa_groups: int
    gqa_groups: int
    mla_as_gqa_groups: float
    mla_vs_mha: float
    expanded_vs_latent: float | None
    baseline_head_dim: str
    model_is_mla: bool
    warnings: tuple[str, ...] = ()


def kv_variants(model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto", *,
                gqa_groups: int = 0, kv_lora_rank: int = 0, qk_rope_head_dim: int = 0,
                block_size: int | None = None) -> KVVariants:
    """`compare_variants` with the page's settings (0 = the default for each); a GQA group count
    that does not divide the query heads falls back to the default with a warning."""
    dtype, _ = kv_dtype_for(model, kv_dtype)
    choices = gqa_group_choices(model)
    warnings = []
    if gqa_groups and gqa_groups not in choices:
        warnings.append(f"GQA groups {gqa_groups} does not divide the {model.attention.num_attention_heads} query "
                        f"heads of {model.name}; the default is used.")
        gqa_groups = 0
    rows = compare_variants(model, context, batch, dtype, gqa_groups=gqa_groups or None,
                            kv_lora_rank=kv_lora_rank or None, qk_rope_head_dim=qk_rope_head_dim or None,
                            block_size=block_size)
    by = {r["key"]: r for r in rows}
    latent = by["mla"]
    expanded = by.get("mla-expanded")
    return KVVariants(tuple(rows), (0, *choices), default_gqa_groups(model), gqa_groups,
                      latent["gqa_groups_equivalent"], latent["vs_mha"],
                      expanded["vs_mla_latent"] if expanded else None, baseline_head_dim_text(model), model.is_mla,
                      tuple(warnings))


@dataclass(frozen=True)
class Series(_View):
    """One line of a chart: `x` and `y` (ints), its `label`, `is_model`, and the value at the
    chosen x (`x_here`, `y_here`)."""

    label: str
    x: tuple[int, ...]
    y: tuple[int, ...]
    x_here: int
    y_here: int
    is_model: bool = False


@dataclass(frozen=True)
class KVSweep(_View):
    """The KV page's main chart: one `Series` of cache bytes against context per same-width
    variant (x: tokens per sequence, y: bytes for `batch` sequences), plus `second` (a second
    model's own cache, or None)."""

    context: int
    batch: int
    series: tuple[Series, ...]
    second: Series | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    same_as: dict = field(default_factory=dict)  # label -> the earlier line it coincides with (views.same_as)


def sweep_contexts(context: int, points: int = 128):
    """The x values of a chart against context: `points` log-spaced counts (128: smooth on a log
    axis, and half the hover text of 256) from min(1K, T) to
    max(1M, 4 T), capped at 10^15 (numpy int64 array)."""
    return log_contexts(min(1024, context), min(MAX_SWEEP_CONTEXT, max(1 << 20, 4 * context)), points)


def kv_sweep(model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto", *, gqa_groups: int = 0,
             kv_lora_rank: int = 0, qk_rope_head_dim: int = 0, block_size: int | None = None,
             second: ModelSpec | None = None, second_kv_dtype: str | None = None) -> KVSweep:
    """KV cache bytes against context for each same-width variant of `model`
    (`kv.variant_specs`) and for `second`'s own cache when given (`sweeps.kv_cache_bytes_vs_context`).
    Raises MLAError for inputs the core refuses."""
    dtype, _ = kv_dtype_for(model, kv_dtype)
    if gqa_groups and gqa_groups not in gqa_group_choices(model):
        gqa_groups = 0
    xs = sweep_contexts(context)
    x = tuple(int(t) for t in xs)
    out = []
    for label, spec, layout, d in variant_specs(model, dtype, gqa_groups=gqa_groups or None,
                                                kv_lora_rank=kv_lora_rank or None,
                                                qk_rope_head_dim=qk_rope_head_dim or None):
        y = tuple(int(n) for n in kv_cache_bytes_vs_context(spec, xs, batch, d, layout, block_size=block_size))
        here = int(kv_cache_bytes_vs_context(spec, [context], batch, d, layout, block_size=block_size)[0])
        out.append(Series(label, x, y, context, here, layout == "latent" and spec.attention == model.attention))
    two = None
    if second is not None:
        d2, _ = kv_dtype_for(second, second_kv_dtype or kv_dtype)
        y = tuple(int(n) for n in kv_cache_bytes_vs_context(second, xs, batch, d2, block_size=block_size))
        here = int(kv_cache_bytes_vs_context(second, [context], batch, d2, block_size=block_size)[0])
        two = Series(f"{second.name} ({second.kind.upper()}, {resolve_kv_dtype(second, d2)})", x, y, context, here)
    return KVSweep(context, batch, tuple(out), two,
                   same_as=same_as((s.label, s.y) for s in (*out, *([two] if two else []))))


# ---------------------------------------------------------------------------------------------
# Roofline page

TP_DEGREES = (1, 2, 4, 8, 16)
STEP_BATCH_MAX = 1024  # the step chart's batches run 1..1024 (or to 4 B beyond)


@dataclass(frozen=True)
class RooflineGPU(_View):
    """The GPU the roofline uses: `gpu` (a preset, or the preset with a typed peak, or the
    fallback), `name`, and a `message` with its `level` ('info' or 'warning') when the chosen
    part needed one. `needs_peak`: the preset publishes no tensor peak (Apple)."""

    gpu: object
    name: str
    needs_peak: bool
    level: str = ""
    message: str = ""

    def to_dict(self) -> dict:
        return {"gpu": self.gpu.id, "name": self.name, "needs_peak": self.needs_peak, "level": self.level,
                "message": self.message}


def roofline_gpu(preset, name: str, peak_tflops: float, fallback, fallback_name: str) -> RooflineGPU:
    """A roofline needs a bandwidth and a tensor peak: a preset without a peak takes the typed
    `peak_tflops` (> 0) with its own bandwidth, else `fallback` is shown with a warning."""
    from .hardware import custom_gpu

    if preset.bandwidth_TBps and preset.bf16_TFLOPS:
        return RooflineGPU(preset, name, False)
    if preset.bandwidth_TBps and peak_tflops > 0:
        try:
            gpu = custom_gpu(preset.memory_GB, bf16_TFLOPS=peak_tflops, base=preset)
        except MLAError as e:
            return RooflineGPU(fallback, fallback_name, True, "warning", f"{e}; showing {fallback_name} instead.")
        return RooflineGPU(gpu, name, True, "info",
                           f"{name}: no published tensor peak; using the {peak_tflops:g} TFLOP/s typed below with its "
                           f"{preset.bandwidth_TBps:g} TB/s bandwidth.")
    return RooflineGPU(fallback, fallback_name, True, "warning",
                       f"{name} has no published dense tensor peak, so it has no roofline. Type a peak (bf16 TFLOP/s) "
                       f"under Roofline settings; until then the page shows {fallback_name}.")


@dataclass(frozen=True)
class RooflinePoint(_View):
    """One variant's decode attention on the roofline: `label`, `kv_dtype`, `mla_path`,
    `result` (`roofline.attention_roofline`, every query head on one GPU) and `is_model`."""

    label: str
    kv_dtype: str
    mla_path: str
    result: dict
    is_model: bool
    spec: object = None

    def to_dict(self) -> dict:
        return {"label": self.label, "kv_dtype": self.kv_dtype, "mla_path": self.mla_path, "result": self.result,
                "is_model": self.is_model}


@dataclass(frozen=True)
class RooflineView(_View):
    """The Roofline page's headline and main chart: `points` (each variant at TP 1), `own_label`
    (the point that is the model), `own_all` / `own_tp` (the model with all heads / one GPU's share
    at `tp`), `step` (`roofline.roofline`, the whole decode step at `tp`), `mla_path` and
    `kv_dtype` used, `ridge` (bf16 peak / bandwidth), `roof_x` / `roof_y` (the roof's corners,
    flop/B and flop/s, spanning every point and `extra_intensities`), `warnings`."""

    points: tuple[RooflinePoint, ...]
    own_label: str
    own_all: dict
    own_tp: dict
    step: dict
    mla_path: str
    kv_dtype: str
    tp: int
    ridge: float
    roof_x: tuple[float, ...]
    roof_y: tuple[float, ...]
    baseline_head_dim: str
    warnings: tuple[str, ...] = ()
    largest_batch: int | None = None  # whole sequences the tp GPUs hold (serving.largest_batch_that_fits)
    batch_note: str = ""  # said when the chosen batch does not fit

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("own_label", "own_all", "own_tp", "step", "mla_path", "kv_dtype", "tp",
                                           "ridge", "roof_x", "roof_y", "warnings", "largest_batch")}
        d["points"] = [p.to_dict() for p in self.points]
        return d


def roof(gpu, intensities, dtype: str = "bf16") -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The roofline's corners (x in flop/B, y in flop/s) from min(0.1, lowest / 3) to
    max(10 ridge, 3 highest): min(peak, bandwidth x intensity) at the ends and the ridge."""
    from .roofline import attainable_flops

    ridge = gpu.peak_flops(dtype) / gpu.bandwidth_Bps
    xs = [float(x) for x in intensities if x and x > 0]
    lo = min(0.1, min(xs, default=1.0) / 3)
    hi = max(10 * ridge, 3 * max(xs, default=1.0))
    x = (lo, ridge, hi)
    return x, tuple(attainable_flops(t, gpu, dtype) for t in x)


def variant_dims_settable(model: ModelSpec) -> bool:
    """Whether the same-width MLA variant's d_c and d_r are the Roofline page's to set: for a
    model without MLA (Table 1's 4 d_h and d_h / 2 unless set); an MLA model's variant is the
    model, whose d_c and d_r the what-if sliders change."""
    return not model.is_mla


def roofline_variants(model: ModelSpec, kv_dtype: str, *, gqa_groups: int = 0, kv_lora_rank: int = 0,
                      qk_rope_head_dim: int = 0) -> list[tuple[str, ModelSpec, str, str]]:
    """[(label, spec, kv dtype, mla path)]: `roofline.decode_variants` with the page's settings
    (0 = the default; a GQA group count that does not divide n_h is the default). An MLA
    model's MLA variants are the model itself: `kv_lora_rank` and `qk_rope_head_dim` set the
    same-width MLA variant of a model without MLA only (an MLA model's d_c and d_r move with the
    what-if sliders, the one control for them; `variant_dims_settable`)."""
    from .roofline import decode_variants

    if gqa_groups and gqa_groups not in gqa_group_choices(model):
        gqa_groups = 0
    if not variant_dims_settable(model):
        kv_lora_rank = qk_rope_head_dim = 0
    return [tuple(d) for d in decode_variants(model, kv_dtype, gqa_groups=gqa_groups or None,
                                              kv_lora_rank=kv_lora_rank or None,
                                              qk_rope_head_dim=qk_rope_head_dim or None)]


def roofline_view(model: ModelSpec, gpu, *, context: int, batch: int = 1, kv_dtype: str = "auto",
                  weights_dtype: str | None = None, mla_path: str = "absorbed", tp: int = 1, gqa_groups: int = 0,
                  kv_lora_rank: int = 0, qk_rope_head_dim: int = 0, extra_intensities=()) -> RooflineView:
    """Every variant's decode attention on `gpu`'s roofline, and the model's whole step at `tp`
    (`roofline.attention_roofline`, `roofline.roofline`). Fallbacks: fp8_ds_mla on a non-MLA
    model is fp8; the expanded path with fp8_ds_mla (latent only) is the absorbed path; a GQA
    group count that does not divide n_h is the default. Raises MLAError on inputs the core refuses."""
    from .roofline import attention_roofline, roofline

    warnings = []
    dtype, warning = kv_dtype_for(model, kv_dtype)
    if warning:
        warnings.append(warning)
    if model.is_mla and mla_path == "expanded" and dtype == "fp8_ds_mla":
        warnings.append("fp8_ds_mla stores the latent only; the decode step uses the absorbed path.")
        mla_path = "absorbed"
    if gqa_groups and gqa_groups not in gqa_group_choices(model):
        warnings.append(f"GQA groups {gqa_groups} does not divide the query heads of {model.name}; the default is used.")
        gqa_groups = 0
    limit = context_limit_warning(model, context)
    if limit:
        warnings.append(limit)
    from .kv import tp_split_error

    split = tp_split_error(model, tp)
    if split:
        warnings.append(f"{split}: engines refuse this TP; the figures take max(1, heads // tp) heads a GPU")
    points = []
    for label, spec, d, path in roofline_variants(model, dtype, gqa_groups=gqa_groups, kv_lora_rank=kv_lora_rank,
                                                  qk_rope_head_dim=qk_rope_head_dim):
        mine = (label == f"MLA {mla_path}") if model.is_mla else (not spec.is_mla and spec.attention == model.attention)
        r = attention_roofline(spec, gpu, context=context, batch=batch, kv_dtype=d, mla_path=path)
        points.append(RooflinePoint(label, d, path, r, mine, spec))
    step = roofline(model, gpu, context=context, batch=batch, kv_dtype=dtype, weights_dtype=weights_dtype,
                    mla_path=mla_path, tp=tp)
    own_all = attention_roofline(model, gpu, context=context, batch=batch, kv_dtype=dtype, mla_path=mla_path)
    own_tp = attention_roofline(model, gpu, context=context, batch=batch, kv_dtype=dtype, mla_path=mla_path, tp=tp)
    own_label = next((p.label for p in points if p.is_model), f"{model.kind.upper()} (this model)")
    rx, ry = roof(gpu, [*(p.result["attention_intensity_flop_per_byte"] for p in points),
                        own_tp["attention_intensity_flop_per_byte"], *extra_intensities])
    cap = _largest_batch(model, gpu, context, tp, dtype, weights_dtype, mla_path)
    note = ""
    if cap is not None and batch > cap:
        note = (f"Batch {batch:,} does not fit: at TP {tp} memory holds {cap:,} sequences of "
                        f"{format_tokens(context)} (gpu_memory_utilization 0.9); the figures are for a step that "
                "cannot run as set.")
    return RooflineView(tuple(points), own_label, own_all, own_tp, step, mla_path, dtype, tp,
                        gpu.ridge_flop_per_byte, rx, ry, baseline_head_dim_text(model), tuple(warnings), cap, note)


def _largest_batch(model, gpu, context, tp, kv_dtype, weights_dtype, mla_path) -> int | None:
    """`serving.largest_batch_that_fits` for the path's cache layout, or None when refused."""
    from .serving import largest_batch_that_fits

    try:
        return largest_batch_that_fits(model, gpu, context=context, tp=tp, kv_dtype=kv_dtype,
                                       weights_dtype=weights_dtype,
                                       cache_layout="expanded" if (model.is_mla and mla_path == "expanded") else "latent")
    except MLAError:
        return None


@dataclass(frozen=True)
class StepSweep(_View):
    """The whole decode step against batch: `batches` (the x values), `lines` of
    (label, is_model, `sweeps.decode_step_vs_batch` arrays as lists), `crossover` (the first
    batch at which the model's step is compute bound, found on every batch to 1,024 or a fine
    log grid beyond; None if it stays memory bound), `batch` (the chosen one)."""

    batches: tuple[int, ...]
    lines: tuple[tuple[str, bool, dict], ...]
    crossover: int | None
    batch: int
    cap: int | None = None


def step_sweep(model: ModelSpec, gpu, *, context: int, batch: int = 1, kv_dtype: str = "auto",
               weights_dtype: str | None = None, mla_path: str = "absorbed", tp: int = 1, own_label: str = "",
               variants: list | None = None) -> StepSweep:
    """`sweeps.decode_step_vs_batch` for the model (first) and for `variants` (from
    `roofline_variants`, the recompute path left out) when given; ~200 log-spaced batches plus the
    chosen batch and the two either side of the crossover."""
    from .sweeps import decode_step_vs_batch
    from .validate import MAX_BATCH

    dtype, _ = kv_dtype_for(model, kv_dtype)
    if model.is_mla and mla_path == "expanded" and dtype == "fp8_ds_mla":
        mla_path = "absorbed"
    hi = STEP_BATCH_MAX if batch <= STEP_BATCH_MAX else min(MAX_BATCH, 4 * batch)
    fine = sorted({*(range(1, STEP_BATCH_MAX + 1) if hi == STEP_BATCH_MAX
                     else (int(b) for b in log_contexts(1, hi, 2000))), batch})
    own = decode_step_vs_batch(model, gpu, fine, context=context, kv_dtype=dtype, weights_dtype=weights_dtype,
                               mla_path=mla_path, tp=tp)
    at = next((i for i, c in enumerate(own["compute_bound"]) if c), None)
    crossover = fine[at] if at is not None else None
    batches = sorted({*(int(b) for b in log_contexts(1, hi, 200)), batch, *((fine[at - 1], crossover) if at else ())})
    todo = [(own_label or model.kind.upper(), True, model, dtype, mla_path)]
    todo += [(label, False, spec, d, path) for label, spec, d, path in (variants or [])
             if label != own_label and (not spec.is_mla or path != "recompute")]
    lines = []
    for label, mine, spec, d, path in todo:
        s = decode_step_vs_batch(spec, gpu, batches, context=context, kv_dtype=d, weights_dtype=weights_dtype,
                                 mla_path=path, tp=tp)
        cap = _largest_batch(spec, gpu, context, tp, d, weights_dtype, path)
        arrays = {k: val.tolist() for k, val in s.items()}
        arrays["fits"] = [cap is None or b <= cap for b in batches]
        lines.append((label, mine, arrays))
    own_cap = _largest_batch(model, gpu, context, tp, dtype, weights_dtype, mla_path)
    return StepSweep(tuple(batches), tuple(lines), crossover, batch, own_cap)


@dataclass(frozen=True)
class TPComparison(_View):
    """MLA's attention intensity per GPU under TP against DP-attention, and GQA's under TP:
    `degrees`, `rows` of (tp, MLA under TP, MLA with DP-attention, GQA under TP) as
    `attention_roofline` dicts, `mla_label`, `gqa_label`, `ridge`."""

    degrees: tuple[int, ...]
    rows: tuple[tuple[int, dict, dict, dict], ...]
    mla_label: str
    gqa_label: str
    ridge: float


def tp_comparison(model: ModelSpec, gpu, *, context: int, batch: int = 1, kv_dtype: str = "auto",
                  mla_path: str = "absorbed", tp: int = 8, gqa_groups: int = 0, kv_lora_rank: int = 0,
                  qk_rope_head_dim: int = 0) -> TPComparison:
    """The model's MLA (or its same-width MLA variant) and GQA variant at TP 1, 2, 4, 8, 16 and
    `tp` (`roofline.attention_roofline`); the expanded path with fp8_ds_mla is the absorbed one."""
    from .roofline import attention_roofline

    dtype, _ = kv_dtype_for(model, kv_dtype)
    vs = roofline_variants(model, dtype, gqa_groups=gqa_groups, kv_lora_rank=kv_lora_rank,
                           qk_rope_head_dim=qk_rope_head_dim)
    _, mla_spec, mla_dtype, _ = next(x for x in vs if x[0] == "MLA absorbed")
    gqa_label, gqa_spec, gqa_dtype, _ = next(x for x in vs if x[0].startswith("GQA"))
    path = "absorbed" if (mla_path == "expanded" and mla_dtype == "fp8_ds_mla") else mla_path
    label = f"MLA {path}" + ("" if model.is_mla else " (same-width variant)")
    degrees = tuple(sorted({*TP_DEGREES, tp}))
    kw = dict(context=context, batch=batch)
    rows = tuple((t, attention_roofline(mla_spec, gpu, kv_dtype=mla_dtype, mla_path=path, tp=t, **kw),
                  attention_roofline(mla_spec, gpu, kv_dtype=mla_dtype, mla_path=path, tp=t, dp_attention=True, **kw),
                  attention_roofline(gqa_spec, gpu, kv_dtype=gqa_dtype, tp=t, **kw)) for t in degrees)
    return TPComparison(degrees, rows, label, gqa_label, gpu.ridge_flop_per_byte)


def measured_roof(bandwidth_GBps: float, matmul_TFLOPs: float, x_lo: float, x_hi: float):
    """The roof of measured ceilings (x flop/B, y flop/s at lo, ridge, hi), or None when the
    figures cannot make a GPU."""
    from .hardware import custom_gpu
    from .roofline import attainable_flops

    try:
        g = custom_gpu(1.0, bandwidth_TBps=bandwidth_GBps / 1000, bf16_TFLOPS=matmul_TFLOPs)
    except MLAError:
        return None
    x = (x_lo, g.ridge_flop_per_byte, x_hi)
    return x, tuple(attainable_flops(t, g, "bf16") for t in x)


# ---------------------------------------------------------------------------------------------
# Kernel profiles (`bench --profile`): the Benchmark page's section and the Roofline page's picker

PROFILE_TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)
# What the Benchmark page measures by default: the attention kernels, the elementwise ops and the
# recurrent scans take seconds on a CPU; the GEMMs and the MoE block of a large model take
# minutes there (their weights alone are gigabytes to fill), so they are asked for.
APP_PROFILE_FAMILIES = ("attention_decode", "attention_prefill", "elementwise", "recurrent")


@dataclass(frozen=True)
class ProfileRow(_View):
    """One stored profile as the lists show it (`mla_core.store.list_profiles`)."""

    id: int
    model: str
    tp: int | None
    device: str
    device_kind: str
    created: str
    n_ops: int | None
    label: str
    damaged: str | None


@dataclass(frozen=True)
class ProfileSection(_View):
    """The Benchmark page's "Kernel profile" section: the run it offers (`model`, `tp`, the
    `families` measured), the TP choices that split the model, a note when the asked TP does not,
    the same run from a shell (`command`), the stored profiles (`rows`, newest first) and
    `error`, the history's one-line problem when it could not be read."""

    model: str
    tp: int
    tp_choices: tuple[int, ...]
    tp_note: str | None
    families: tuple[str, ...]
    command: str
    rows: tuple[ProfileRow, ...]
    error: str | None = None


def _profile_rows(path: str | None = None) -> tuple[tuple[ProfileRow, ...], str | None]:
    from .store import list_profiles

    try:
        listed = list_profiles(path=path)
    except MLAError as e:
        return (), f"History: {e}"
    return tuple(ProfileRow(
        id=r["id"], model=str(r.get("model") or "?"), tp=r.get("tp"), device=str(r.get("device_name") or "unknown"),
        device_kind=str(r.get("device_kind") or ""), created=str(r.get("created") or r.get("saved_at") or ""),
        n_ops=r.get("n_ops"), label=str(r.get("label") or ""), damaged=r.get("damaged")) for r in listed), None


def profile_section(model: ModelSpec, tp: int, *, every_family: bool = False, cli: str = "python -m mla_core",
                    path: str | None = None) -> ProfileSection:
    """What the "Kernel profile" section offers for `model` at `tp` (the section's choice): the
    TP choices (PROFILE_TP_CHOICES that split the model, `kv.tp_split_error`), the TP the run
    uses (the asked one where it splits the model, else the largest choice below it, with
    `tp_note` saying why), the op families it measures (APP_PROFILE_FAMILIES, or every family
    of `bench --profile` with `every_family`) and the stored profiles."""
    from .bench.profile_plan import FAMILIES
    from .kv import tp_split_error
    from .presets import model_ids

    choices = tuple(t for t in PROFILE_TP_CHOICES if not tp_split_error(model, t))
    use, note = tp, None
    if tp not in choices:
        use = max([t for t in choices if t <= tp] or [1])
        why = tp_split_error(model, tp) or f"TP {tp} is not one of {', '.join(map(str, choices))}"
        note = f"{why}: the profile is measured at TP {use}."
    families = tuple(f for f in FAMILIES if f != "collective") if every_family else APP_PROFILE_FAMILIES
    source = f"--model {model.name}" if model.name in model_ids() else "--config config.json"
    rows, error = _profile_rows(path)
    return ProfileSection(model=model.name, tp=use, tp_choices=choices, tp_note=note, families=families,
                          command=f"{cli} bench --profile {source} --tp {use} --quick --save", rows=rows, error=error)


@dataclass(frozen=True)
class RooflineProfiles(_View):
    """The Roofline page's profile picker: `options` (0 = none, then the stored profiles of the
    model, newest first), their `labels`, the `chosen` one (0 when the asked one is not a
    profile of this model here, with `message` saying so), its points (`roofline`, a
    `mla_core.store.profile_roofline.ProfileRoofline`, or None) and their legend `name`."""

    options: tuple[int, ...]
    labels: dict
    chosen: int
    roofline: object | None = None
    name: str = ""
    message: str | None = None


def roofline_profiles(model_name: str, chosen: int = 0, *, path: str | None = None) -> RooflineProfiles:
    """The stored profiles of `model_name` to pick from and the chosen one's decode points
    (`mla_core.store.profile_roofline.profile_roofline`: x = counted flops / bytes, y = flops /
    measured latency). A damaged run is not offered; the history's problem is the `message`."""
    from .store import load_profile
    from .store.profile_roofline import profile_roofline

    rows, error = _profile_rows(path)
    mine = [r for r in rows if r.model == model_name and not r.damaged]
    labels = {0: "none"}
    for r in mine:
        extra = f", {r.label}" if r.label else ""
        labels[r.id] = f"#{r.id} {r.device} TP{r.tp} ({r.created[:16]}{extra}), {r.n_ops} ops"
    options = tuple(labels)
    if not chosen:
        return RooflineProfiles(options, labels, 0, message=error)
    if chosen not in labels:
        return RooflineProfiles(options, labels, 0, message=error or (
            f"Profile run #{chosen} is not a stored kernel profile of {model_name} in this history: none is drawn."))
    try:
        pr = profile_roofline(load_profile(chosen, path=path), run_id=chosen)
    except MLAError as e:
        return RooflineProfiles(options, labels, 0, message=f"Profile run #{chosen}: {e}")
    message = None
    if not pr.points:
        message = f"Profile run #{chosen} holds no attention decode rows to draw."
    elif pr.skipped:
        message = f"Profile run #{chosen}: skipped {len(pr.skipped)} row(s) ({pr.skipped[0]})."
    return RooflineProfiles(options, labels, chosen, pr, f"profile #{chosen}: {pr.device_name} TP{pr.tp}", message)


# ---------------------------------------------------------------------------------------------
# Capacity page

GMU_MIN = 0.01  # the page's gpu_memory_utilization floor; a link may carry anything in (0, 1]


def parallel_fallback(num_gpus: int, tp: int, where: str = "Configuration 1") -> tuple[int, str | None]:
    """(num_gpus to use, error): tp must divide num_gpus (MODEL.md); else one TP group is costed."""
    if num_gpus % tp:
        return tp, (f"{where}: tp ({tp}) must divide num_gpus ({num_gpus}). "
                    f"Showing num_gpus = {tp} (one TP group) instead.")
    return num_gpus, None


def no_fit_reason(r: dict, gmu: float | None = None) -> str:
    """Why a `capacity` result holds no KV cache: the weights, or the weights and the reserve."""
    from .capacity import memory_breakdown
    from .units import format_bytes

    usable = format_bytes(r["usable_bytes_per_gpu"]) + " usable" + (
        f" (gpu_memory_utilization {gmu:g} × {format_bytes(r['memory_bytes_per_gpu'])})" if gmu else "")
    if r["weights_bytes_per_gpu"] >= r["usable_bytes_per_gpu"] or not r["reserve_bytes"]:
        return f"Weights do not fit: {format_bytes(r['weights_bytes_per_gpu'])} needed per GPU, {usable}."
    return (f"Weights and reserve do not fit: {format_bytes(r['weights_bytes_per_gpu'])} of weights and "
            f"{format_bytes(r['reserve_bytes'])} of reserve per GPU, {usable} "
            f"({format_bytes(memory_breakdown(r)['over'])} short).")


def mode_name(dp_attention: bool, tp: int) -> str:
    return "DP-attention" if dp_attention else f"TP{tp}"


@dataclass(frozen=True)
class CapacityView(_View):
    """The Capacity page's headline: `by_mode` ({'tp': ..., 'dp': ...} `capacity.capacity`
    dicts with DP-attention off and on), `main` (the one set), the inputs used after the
    fallbacks (`num_gpus`, `tp`, `dp_attention`, `kv_dtype`, `gpu_memory_utilization`),
    `kwargs` (the `capacity` arguments shared by the page's other sections), `errors` and
    `warnings` (fallbacks taken), `no_fit` (why no KV fits, or '')."""

    by_mode: dict
    main: dict
    num_gpus: int
    tp: int
    dp_attention: bool
    kv_dtype: str
    gpu_memory_utilization: float
    kwargs: dict
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    no_fit: str = ""
    fp8: dict | None = None
    fp8_note: str = ""

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("by_mode", "main", "num_gpus", "tp", "dp_attention", "kv_dtype",
                                           "gpu_memory_utilization", "errors", "warnings", "no_fit", "fp8",
                                           "fp8_note")}
        return d


def capacity_view(model: ModelSpec, gpu, *, context: int, num_gpus: int, tp: int, dp_attention: bool = False,
                  kv_dtype: str = "auto", weights_dtype: str | None = None, gpu_memory_utilization: float = 0.9,
                  block_size: int | None = None, reserve_bytes: int = 0) -> CapacityView:
    """`capacity.capacity` with DP-attention off and on, after the page's fallbacks: tp not
    dividing num_gpus costs one TP group; gpu_memory_utilization below GMU_MIN is raised to it;
    fp8_ds_mla on a non-MLA model is fp8. Raises MLAError on inputs the core refuses."""
    from .capacity import capacity

    errors, warnings = [], []
    if gpu_memory_utilization < GMU_MIN:
        warnings.append(f"gpu_memory_utilization {gpu_memory_utilization:g} is below {GMU_MIN}; {GMU_MIN} is used.")
        gpu_memory_utilization = GMU_MIN
    dtype, warning = kv_dtype_for(model, kv_dtype)
    if warning:
        warnings.append(warning)
    limit = context_limit_warning(model, context)
    if limit:
        warnings.append(limit)
    n, err = parallel_fallback(num_gpus, tp)
    if err:
        errors.append(err)
    kwargs = dict(context=context, weights_dtype=weights_dtype, gpu_memory_utilization=gpu_memory_utilization,
                  block_size=block_size, reserve_bytes=reserve_bytes, gpu=gpu, num_gpus=n, tp=tp, kv_dtype=dtype)
    by_mode = {"tp": capacity(model, dp_attention=False, **kwargs), "dp": capacity(model, dp_attention=True, **kwargs)}
    main = by_mode["dp" if dp_attention else "tp"]
    fp8, fp8_note = _fp8_alternative(model, main, dp_attention, kwargs)
    return CapacityView(by_mode, main, n, tp, dp_attention, dtype, gpu_memory_utilization, kwargs, tuple(errors),
                        tuple(warnings), "" if main["weights_fit"] else no_fit_reason(main, gpu_memory_utilization),
                        fp8, fp8_note)


FP8_FROM = ("bf16", "fp16", "fp32")  # 16- and 32-bit KV: the cases where fp8 would hold at least twice as much


def _fp8_alternative(model: ModelSpec, main: dict, dp_attention: bool, kwargs: dict) -> tuple[dict | None, str]:
    """An MLA model cached at 16 or 32 bits: the same deployment with fp8 KV (`capacity.capacity`,
    kv_dtype fp8: one byte a value, the engines' `--kv-cache-dtype fp8` / `fp8_e4m3`; vLLM makes
    its fp8 latent layout fp8_ds_mla the default for DeepSeek-V3.2, vllm-project/vllm#25988), and
    the sentence saying what it would hold. (None, '') otherwise or when the weights do not fit."""
    from .capacity import capacity

    if not model.is_mla or main["kv_dtype"] not in FP8_FROM or not main["weights_fit"]:
        return None, ""
    r = capacity(model, dp_attention=dp_attention, **{**kwargs, "kv_dtype": "fp8"})
    now, then = main["max_concurrent_requests"], r["max_concurrent_requests"]
    gain = f" ({then / now:.2f}x)" if now else ""
    note = (f"With fp8 KV (--kv-cache-dtype fp8) the same deployment would hold {then:,} whole requests of "
            f"{format_tokens(main['context'])} at once instead of {now:,}{gain}: the latent takes one byte a value "
            f"instead of {main['kv_dtype']}'s {2 if main['kv_dtype'] != 'fp32' else 4}.")
    return r, note


def memory_bars(results: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """[(name, `capacity.memory_breakdown(result)`)] for the memory-per-GPU chart."""
    from .capacity import memory_breakdown

    return [(name, memory_breakdown(r)) for name, r in results]


@dataclass(frozen=True)
class CapacityVariants(_View):
    """The same model costed as MHA, GQA, MQA and MLA: `rows` (`capacity.capacity_variants`)
    and one `Series` of whole concurrent requests against context per row (`y_here` at the
    chosen context)."""

    rows: tuple[dict, ...]
    series: tuple[Series, ...]
    gqa_groups: int | None
    same_as: dict = field(default_factory=dict)  # label -> the earlier line it coincides with (views.same_as)


def capacity_variants_view(model: ModelSpec, view: CapacityView, *, gqa_groups: int = 0) -> CapacityVariants:
    """`capacity_variants` with the headline's inputs, and each row's requests against context
    (`sweeps.concurrent_requests_vs_context` over `sweep_contexts`). A GQA group count that does
    not divide n_h takes the default."""
    from .capacity import capacity_variants
    from .sweeps import concurrent_requests_vs_context

    groups = gqa_groups if gqa_groups in gqa_group_choices(model) else None
    kw = view.kwargs
    rows = capacity_variants(model, dp_attention=view.dp_attention, gqa_groups=groups, **kw)
    specs = variant_specs(model, view.kv_dtype, gqa_groups=groups)
    xs = sweep_contexts(kw["context"])
    x = tuple(int(t) for t in xs)
    series = []
    for r, (label, spec, layout, dtype) in zip(rows, specs):
        n = concurrent_requests_vs_context(spec, xs, r["kv_budget_bytes_per_gpu"], replicas=r["replicas"],
                                           kv_dtype=dtype, cache_layout=layout, block_size=r["block_size"],
                                           tp=view.tp, dp_attention=view.dp_attention)
        series.append(Series(label, x, tuple(int(c) for c in n), kw["context"], r["max_concurrent_requests"],
                             r["is_model"]))
    return CapacityVariants(tuple(rows), tuple(series), groups, same_as(
        ((s.label, s.y) for s in series), step=max((r["replicas"] for r in rows), default=1)))  # replicas * floor(...)


@dataclass(frozen=True)
class AllocatorWaste(_View):
    """An MHA-formula allocator against the latent (`capacity.allocator_waste`), for TP and
    DP-attention (`by_mode`), the one set (`main`), and the query heads per GPU each way."""

    by_mode: dict
    main: dict
    heads_tp: int
    heads_dp: int


def allocator_waste_view(model: ModelSpec, view: CapacityView) -> AllocatorWaste | None:
    """None for a model without MLA (its allocator already uses the per-KV-head formula)."""
    from .capacity import allocator_waste
    from .kv import heads_per_gpu

    if not model.is_mla:
        return None
    by_mode = {m: allocator_waste(model, dp_attention=m == "dp", **view.kwargs) for m in ("tp", "dp")}
    n_h = model.attention.num_attention_heads
    return AllocatorWaste(by_mode, by_mode["dp" if view.dp_attention else "tp"], heads_per_gpu(n_h, view.tp),
                          heads_per_gpu(n_h, view.tp, True))


def capacity_across_gpus(model: ModelSpec, view: CapacityView, gpus) -> list[tuple[object, dict, dict | None]]:
    """[(gpu, capacity, MHA-formula capacity or None)] on each of `gpus` with the headline's
    other inputs; a GPU the core refuses is left out."""
    from .capacity import allocator_waste, capacity

    kw = {k: val for k, val in view.kwargs.items() if k != "gpu"}
    out = []
    for g in gpus:
        try:
            r = capacity(model, gpu=g, dp_attention=view.dp_attention, **kw)
            e = allocator_waste(model, gpu=g, dp_attention=view.dp_attention, **kw)["expanded"] if model.is_mla else None
        except MLAError:
            continue
        out.append((g, r, e))
    return out


@dataclass(frozen=True)
class Configuration(_View):
    """A comparison configuration: its `result` (`capacity.capacity`, or None when refused),
    the inputs used, and `messages` ((level, text) pairs)."""

    i: int
    model: object
    gpu: object
    num_gpus: int
    tp: int
    dp_attention: bool
    result: dict | None
    messages: tuple[tuple[str, str], ...] = ()
    no_fit: str = ""

    def to_dict(self) -> dict:
        return {"i": self.i, "model": getattr(self.model, "name", None), "gpu": getattr(self.gpu, "id", None),
                "num_gpus": self.num_gpus, "tp": self.tp, "dp_attention": self.dp_attention, "result": self.result,
                "messages": self.messages, "no_fit": self.no_fit}


def configuration(i: int, model: ModelSpec, gpu, view: CapacityView, *, num_gpus: int, tp: int,
                  dp_attention: bool, kv_dtype: str) -> Configuration:
    """Configuration `i` of the comparison: its own model, GPU, parallelism and KV dtype, the
    headline's context, gpu_memory_utilization, reserve, weights dtype and block size."""
    from .capacity import capacity

    messages = []
    dtype, warning = kv_dtype_for(model, kv_dtype)
    if warning:
        messages.append(("warning", warning))
    n, err = parallel_fallback(num_gpus, tp, f"Configuration {i}")
    if err:
        messages.append(("error", err))
    kw = {k: view.kwargs[k] for k in ("context", "weights_dtype", "gpu_memory_utilization", "block_size",
                                      "reserve_bytes")}
    try:
        r = capacity(model, gpu=gpu, num_gpus=n, tp=tp, dp_attention=dp_attention, kv_dtype=dtype, **kw)
    except MLAError as e:
        messages.append(("error", str(e)))
        r = None
    return Configuration(i, model, gpu, n, tp, dp_attention, r, tuple(messages),
                         no_fit_reason(r) if r is not None and not r["weights_fit"] else "")


def configurations_by_context(configs: list[Configuration], context: int) -> tuple[tuple[int, ...], list[tuple]]:
    """(contexts, [(configuration, requests at each)]): whole concurrent requests of each
    configuration at 4K, 32K, 128K and the chosen context (`sweeps.concurrent_requests_vs_context`)."""
    from .sweeps import concurrent_requests_vs_context

    contexts = tuple(sorted({4096, 32768, 131072, context}))
    out = []
    for c in configs:
        r = c.result
        n = concurrent_requests_vs_context(c.model, contexts, r["kv_budget_bytes_per_gpu"], replicas=r["replicas"],
                                           kv_dtype=r["kv_dtype"], cache_layout="latent",
                                           block_size=r["block_size"], tp=c.tp, dp_attention=c.dp_attention)
        out.append((c, tuple(int(x) for x in n)))
    return contexts, out


# ---------------------------------------------------------------------------------------------
# Published-figures page

@dataclass(frozen=True)
class ClaimsView(_View):
    """The published-figures page: `summary` (`claims.summarize` of every claim), `shown` (the
    claims the filters keep), `plotted` (those with positive stated and recomputed figures),
    `diagonal` (the chart's x = y line ends), `differing` (shown claims whose figure differs)
    and `titles` (seed id -> document title)."""

    summary: dict
    shown: tuple[dict, ...]
    plotted: tuple[dict, ...]
    diagonal: tuple[float, float]
    differing: tuple[dict, ...]
    titles: dict


def claims_view(claims: list[dict], *, topics=(), verdicts=(), sources=()) -> ClaimsView:
    """Filter evaluated claims (`claims.evaluate_all`) by topic, verdict and source seed (an empty
    filter keeps all) and summarise them for the page."""
    from .claims import summarize

    def keep(c: dict) -> bool:
        return all(not chosen or value in chosen for chosen, value in (
            (topics, c["topic"]), (verdicts, c["verdict"]), (sources, c["source"]["seed"])))

    shown = tuple(c for c in claims if keep(c))
    plotted = tuple(c for c in shown if c["computed"] > 0 and c["stated"]["value"] > 0)
    values = [x for c in plotted for x in (c["computed"], c["stated"]["value"])]
    diagonal = (min(values) / 2, max(values) * 2) if values else (1.0, 1.0)
    titles = {c["source"]["seed"]: c["source"].get("title", c["source"]["seed"]) for c in claims}
    return ClaimsView(summarize(claims), shown, plotted, diagonal,
                      tuple(c for c in shown if c["verdict"] == "differs"), titles)


# ---------------------------------------------------------------------------------------------
# Shared by the pages' charts and tables

SAME_AS_REL_TOL = 0.03  # within 3% at every point: about a pixel apart on a log axis of 3 decades in 300 px


def _flat(values) -> list:
    out = []
    for x in values:
        out.extend(_flat(x) if isinstance(x, (tuple, list)) else [x])
    return out


def _close(a: list, b: list, rel_tol: float, step: float = 0) -> bool | None:
    """True: equal; False: within rel_tol (plus `step`) at every value (None matches only None);
    None: apart."""
    if len(a) != len(b):
        return None
    exact = True
    for x, y in zip(a, b):
        if x == y:
            continue
        if x is None or y is None or abs(x - y) > rel_tol * max(abs(x), abs(y)) + step:
            return None
        exact = False
    return exact


def same_as(lines, rel_tol: float = SAME_AS_REL_TOL, *, step: float = 0) -> dict[str, tuple[str, bool]]:
    """{label: (the earlier label it coincides with, exactly)} for `lines` of (label, values):
    lines that would be drawn on top of each other (GQA-8 under MQA when TP 8 leaves each one KV
    head a GPU; two serving splits that reach the same points), so a legend can say so instead
    of hiding one. Values (numbers, None, or tuples of them) coincide when every pair is equal,
    or within `rel_tol` of each other (exactly: False). `step`: the values are rounded down to
    multiples of it (whole requests on `replicas` copies: replicas), so floors of quantities
    within `rel_tol` may differ by one step more (22 and 23 requests from KV budgets 0.2% apart)."""
    out: dict[str, tuple[str, bool]] = {}
    seen: list[tuple[str, list]] = []
    for label, values in lines:
        flat = _flat(values)
        for first, other in seen:
            exact = _close(flat, other, rel_tol, step)
            if exact is not None:
                out[label] = (first, exact)
                break
        else:
            seen.append((label, flat))
    return out


def legend_name(label: str, same: dict) -> str:
    """`label`, with "(same as X)" or "(within 3% of X)" when `same` (from `same_as`) says it
    coincides with X."""
    if label not in same:
        return label
    other, exact = same[label]
    return f"{label} ({'same as' if exact else f'within {SAME_AS_REL_TOL:.0%} of'} {other})"


def command_lines(command: str | None) -> str | None:
    """A shell command (one line, as `shlex.join` writes it) as one line per flag, joined by
    backslash-newlines: `vllm serve repo \\` then `  --tensor-parallel-size 8 \\` ... A flag's
    value stays on its flag's line, so nothing wraps inside a flag, and the text pastes into a
    shell as the same command (shlex.split of it, its line continuations removed, gives the same
    words as of `command`). None stays None."""
    import shlex

    if command is None:
        return None
    words = shlex.split(command)
    lines: list[list[str]] = [[]]
    for w in words:
        if w.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(w)
    return " \\\n  ".join(shlex.join(line) for line in lines)


@dataclass(frozen=True)
class KVRatio(_View):
    """The second model's KV cache against the first's at the same context, batch and KV dtype
    choice: `per_token`, `per_sequence` and `batch` are second / first (float; > 1: the second
    caches more), `first` and `second` the model names, `sentence` the line the page shows."""

    first: str
    second: str
    per_token: float
    per_sequence: float
    batch: float
    sentence: str


def kv_ratio(first: KVSummary, second: KVSummary) -> KVRatio:
    """Second / first of the KV page's headline numbers (`kv_summary` of each model). The
    per-sequence and batch figures include windows and block rounding; per token does not."""
    from .units import format_bytes

    a, b = first.report, second.report

    def ratio(key: str) -> float:
        return b[key] / a[key] if a[key] else float("inf")

    per_token, per_seq, batch = (ratio("kv_bytes_per_token"), ratio("kv_cache_bytes_per_sequence"),
                                 ratio("kv_cache_bytes"))
    more = per_seq >= 1
    factor = per_seq if more else (1 / per_seq if per_seq else float("inf"))
    sentence = (f"{second.model} caches {factor:.2f}x {'more' if more else 'less'} than {first.model} per sequence "
                f"({format_bytes(b['kv_cache_bytes_per_sequence'])} against "
                f"{format_bytes(a['kv_cache_bytes_per_sequence'])}); per token {per_token:.2f}x.")
    return KVRatio(first.model, second.model, per_token, per_seq, batch, sentence)


# ---------------------------------------------------------------------------------------------
# Serving plan page (over mla_core.serving.search's Plan)

@dataclass(frozen=True)
class FrontierLine(_View):
    """One split's points that fit, in batch order: `label` (the split), `x` tokens/s per user,
    `y` tokens/s per GPU (the estimate's where the plan has one, else the bound's; a bound line's
    always the bound's), `points` (the serving.Point of each marker), `same_as` ("same as X" or
    "within 3% of X" when an earlier split's markers coincide with these, else '')."""

    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    points: tuple = ()
    same_as: str = ""

    def to_dict(self) -> dict:
        return {"label": self.label, "x": self.x, "y": self.y, "batches": [p.batch for p in self.points],
                "same_as": self.same_as}


@dataclass(frozen=True)
class ServingFrontier(_View):
    """The frontier chart: `lines` (one per split with a point that fits; the estimate's rates
    where the plan has estimates), `pareto` ((x, y) of the Pareto front on the same rates),
    `best` ((x, y) or None), `tpot_region` (x from, x to, y from, y to) of the region meeting the
    TPOT objective, or None without one. `estimated` whether the lines are estimates;
    `bound_lines` and `bound_pareto` the same on the bound's rates (drawn faint behind: upper
    bounds), `best_bound` the best point on them. `lines_left_out` splits with points that
    `max_lines` left out (the lowest ranked)."""

    lines: tuple[FrontierLine, ...]
    pareto: tuple[tuple[float, float], ...]
    best: tuple[float, float] | None
    tpot_region: tuple[float, float, float, float] | None
    estimated: bool = False
    bound_lines: tuple[FrontierLine, ...] = ()
    bound_pareto: tuple[tuple[float, float], ...] = ()
    best_bound: tuple[float, float] | None = None
    lines_left_out: int = 0

    def to_dict(self) -> dict:
        return {"lines": [ln.to_dict() for ln in self.lines], "pareto": self.pareto, "best": self.best,
                "tpot_region": self.tpot_region, "estimated": self.estimated,
                "bound_lines": [ln.to_dict() for ln in self.bound_lines], "bound_pareto": self.bound_pareto,
                "best_bound": self.best_bound, "lines_left_out": self.lines_left_out}


def _split_key(p) -> tuple:
    return (p.tp, p.dp_attention, p.ep, getattr(p, "pp", 1))


def serving_frontier(plan, max_lines: int | None = None) -> ServingFrontier:
    """What the Serving plan's frontier draws, from `serving.search`'s plan: each split's points
    that fit at the estimate's rates (Point.rate_per_user / rate_per_gpu: the bound's when the
    plan has no estimate), a split whose markers are those of an earlier split says so
    (`same_as`); the Pareto front (plan.pareto), the best point; the same on the bound's rates
    (`bound_lines`, plan.bound_pareto); and the TPOT objective's region (tokens/s per user >=
    1000 / TPOT ms, spanning the points' range with a factor of 2 either side). `max_lines`
    keeps the splits whose best points rank highest (the search's order: most tokens/s per GPU,
    then per user; a slide's legend), the bound lines of those same splits."""
    fits = [p for p in plan.points if p.fits]
    estimated = any(p.estimate is not None for p in fits)
    order = list(plan.splits)
    if max_lines is not None:
        ranked = sorted((s for s in order if s.best is not None),
                        key=lambda s: (-s.best.rate_per_gpu, -s.best.rate_per_user))
        order = ranked[:max_lines]

    def lines_of(rates):
        out = []
        for s in order:
            mine = [p for p in fits if _split_key(p) == (s.tp, s.dp_attention, s.ep, s.pp)]
            if mine:
                out.append((s.split, tuple(rates(p)[0] for p in mine), tuple(rates(p)[1] for p in mine), tuple(mine)))
        same = same_as((label, tuple(zip(x, y))) for label, x, y, _ in out)
        return tuple(FrontierLine(label, x, y, pts, legend_name(label, same)[len(label):].strip(" ()"))
                     for label, x, y, pts in out)

    def est(p):
        return (p.rate_per_user, p.rate_per_gpu)

    def bnd(p):
        return (p.tokens_per_s_per_user, p.tokens_per_s_per_gpu)

    lines = lines_of(est)
    bound_lines = lines_of(bnd) if estimated else ()
    with_points = sum(1 for s in plan.splits if any(_split_key(p) == (s.tp, s.dp_attention, s.ep, s.pp) for p in fits))
    xs = [v for p in fits for v in ((p.rate_per_user, p.tokens_per_s_per_user) if estimated
                                    else (p.tokens_per_s_per_user,))] or [1.0]
    ys = [v for p in fits for v in ((p.rate_per_gpu, p.tokens_per_s_per_gpu) if estimated
                                    else (p.tokens_per_s_per_gpu,))] or [1.0]
    region = None
    if plan.tpot_ms:
        x_slo = 1000.0 / plan.tpot_ms
        region = (x_slo, max(max(xs) * 2, x_slo * 2), min(ys) / 2, max(ys) * 2)
    b = plan.best
    return ServingFrontier(lines, tuple(est(p) for p in plan.pareto), est(b) if b is not None else None, region,
                           estimated, bound_lines,
                           tuple(bnd(p) for p in plan.bound_pareto) if estimated else (),
                           bnd(b) if (b is not None and estimated) else None,
                           with_points - len(lines))


@dataclass(frozen=True)
class ServingHeadline(_View):
    """The Serving plan's headline: the best point's estimate (what the engine will do) with the
    bound beside it. `estimated` False when the plan has no estimate (bounds only: the figures
    are then the bound's). Times in s, rates in tokens/s. `engine` the engine's label
    ('vLLM'), `source` the estimate's tables and their share of the time
    ('uncalibrated (100%)'), `tables` the kernel-table chain in precedence order, `kind` which
    kind of table gave most of the time ('own profile', 'aiconfigurator-core', 'uncalibrated' or
    'bound'), `confidence` ('high', 'medium', 'low'), `sentence` the line that says all this."""

    split: str
    batch: int
    max_batch: int
    limit: str
    estimated: bool
    engine: str
    ttft_s: float
    tpot_s: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    output_tokens_per_s_per_gpu: float | None
    bound_ttft_s: float
    bound_tpot_s: float
    bound_tokens_per_s_per_user: float
    bound_tokens_per_s_per_gpu: float
    bound: str
    prefill_bound: str
    source: str
    tables: tuple[str, ...]
    kind: str
    confidence: str
    sentence: str
    usd_per_million_output_tokens: float | None = None
    usd_per_million_input_tokens: float | None = None
    tokens_per_s: float = 0.0


def _table_kind(name: str) -> str:
    if name.startswith("own profile"):
        return "own profile"
    if name.startswith("aiconfigurator"):
        return "aiconfigurator-core"
    return "uncalibrated"


def serving_headline(plan) -> ServingHeadline | None:
    """The headline of `plan` (serving.search's Plan): its best point's estimate and bound; None
    when the plan has no best point."""
    b = plan.best
    if b is None:
        return None
    e = b.estimate
    engine = ""
    if plan.engine:
        from .serving.engines import engine_rules

        engine = engine_rules(plan.engine).label
    if e is None:
        kind, source, confidence = "bound", "roofline bound (no estimate)", "upper bound"
        sentence = ("Bounds only: times are lower bounds and rates upper bounds (roofline, no kernel overheads); "
                    "a real engine is slower.")
    else:
        source, confidence = e.source, e.confidence
        kind = _table_kind(source.split(" (")[0])
        sentence = (f"Estimate for {engine} from kernel tables: {source}; confidence {confidence} "
                    f"({'at least 90%' if confidence == 'high' else '50-90%' if confidence == 'medium' else 'under 50%'}"
                    " of the decode step's time measured). The bound beside each figure is the roofline's: no engine "
                    "beats it.")
    return ServingHeadline(
        b.split, b.batch, b.max_batch, b.limit, e is not None, engine,
        e.ttft_s if e else b.ttft_s, e.tpot_s if e else b.tpot_s,
        e.tokens_per_s_per_user if e else b.tokens_per_s_per_user,
        e.tokens_per_s_per_gpu if e else b.tokens_per_s_per_gpu,
        e.output_tokens_per_s_per_gpu if e else None,
        b.ttft_s, b.tpot_s, b.tokens_per_s_per_user, b.tokens_per_s_per_gpu, b.bound, b.prefill_bound,
        source, tuple(plan.kernel_tables), kind, confidence, sentence,
        b.usd_per_million_output_tokens, b.usd_per_million_input_tokens,
        (e.tokens_per_s_per_gpu * b.num_gpus) if e else b.tokens_per_s)


@dataclass(frozen=True)
class BreakdownPart(_View):
    """One segment of a step's bar: `name` (an op class, 'engine overhead' or 'kernel launches'),
    `time_s` and `share` of the phase's summed segments."""

    name: str
    time_s: float
    share: float


@dataclass(frozen=True)
class BreakdownPhase(_View):
    """One phase: 'decode step' (one step of the best point's batch) or 'prefill' (one request,
    its chunks summed). `time_s` the estimate's time; `parts` the op classes (summed over
    layers), the engine's per-step overhead and, outside a CUDA graph, the kernel launches'
    floor; `hidden_s` what the parts add above `time_s` (overlapped streams or pipeline stages
    that run at once); `ops` (name, op class, layer, time s) of every op, longest first;
    `captured` whether the step replays a CUDA graph; `steps` steps summed."""

    phase: str
    time_s: float
    parts: tuple[BreakdownPart, ...]
    hidden_s: float
    ops: tuple[tuple[str, str, str, float], ...]
    captured: bool
    steps: int


@dataclass(frozen=True)
class ServingBreakdown(_View):
    """Where one decode step's and one prefill's time goes at the best point (Plan.estimate):
    `phases` (decode step, prefill), `classes` the segment names in drawing order, `source`."""

    phases: tuple[BreakdownPhase, ...]
    classes: tuple[str, ...]
    source: str


OVERHEAD = "engine overhead"
LAUNCHES = "kernel launches (eager)"


def serving_breakdown(plan) -> ServingBreakdown | None:
    """The per-op breakdown of the plan's best point (`plan.estimate`, search.estimate_breakdown),
    None when the plan has no estimate."""
    est = plan.estimate
    if not est:
        return None
    phases = []
    seen: dict[str, float] = {}
    for label, steps in (("decode step", [est["decode_step"]]), ("prefill", list(est["prefill"]))):
        if not steps:
            continue
        by: dict[str, float] = {}
        ops: dict[tuple, float] = {}
        for s in steps:
            for k, v in s["by_class_s"].items():
                by[k] = by.get(k, 0.0) + v
            for o in s.get("ops", ()):
                key = (o["name"], o["op_class"], o["layer"])
                ops[key] = ops.get(key, 0.0) + o["time_s"]
        total = sum(s["time_s"] for s in steps)
        overhead = sum(s["overhead_s"] for s in steps)
        summed = sum(by.values()) + overhead
        parts = sorted(by.items(), key=lambda kv: -kv[1]) + [(OVERHEAD, overhead)]
        launches = total - summed
        if launches > 1e-12 * max(total, 1e-30):
            parts.append((LAUNCHES, launches))
            summed = total
        hidden = max(0.0, summed - total)
        for name, t in parts:
            seen[name] = seen.get(name, 0.0) + t
        phases.append(BreakdownPhase(
            label, total, tuple(BreakdownPart(n, t, t / summed if summed else 0.0) for n, t in parts), hidden,
            tuple((n, c, layer, t) for (n, c, layer), t in sorted(ops.items(), key=lambda kv: -kv[1])),
            bool(steps[0]["captured"]), len(steps)))
    classes = tuple(n for n, _ in sorted(seen.items(), key=lambda kv: (kv[0] in (OVERHEAD, LAUNCHES), -kv[1])))
    return ServingBreakdown(tuple(phases), classes, est.get("source", ""))


NOT_SERVED = "-"  # a table cell for a split that serves no point (its weights or one batch do not fit)


def serving_split_rows(plan) -> list[dict]:
    """The Serving plan's table: one row per split, every cell a number or a text (never None):
    the split (its label names tp), its pipeline stages pp and MoE split moe_tp x ep, its best point's estimate (TTFT,
    TPOT, tokens/s: the bound's when the plan has no estimate) with the bound's TPOT beside it, and its $ per million output tokens when the plan has a price; a split
    that serves no point shows NOT_SERVED in its time and rate columns, and says why under "what
    binds"."""
    from .units import format_seconds

    def usd(x) -> str:
        return "n/a" if x is None else f"${x:,.3f}"

    estimated = any(s.best is not None and s.best.estimate is not None for s in plan.splits)
    rows = []
    for s in plan.splits:
        b = s.best
        e = b.estimate if b else None
        row = {
            "split": s.split,  # it names tp
            "pp": s.pp,
            "moe_tp": s.moe_tp if s.moe_tp else 1,
            "ep": s.ep,
            "TTFT": format_seconds(e.ttft_s if e else b.ttft_s) if b else NOT_SERVED,
            "TPOT": format_seconds(e.tpot_s if e else b.tpot_s) if b else NOT_SERVED,
            "batch": f"{b.batch:,}" if b else NOT_SERVED,
            "memory holds": f"{s.max_batch:,}",
            "tokens/s/user": f"{(e.tokens_per_s_per_user if e else b.tokens_per_s_per_user):,.1f}" if b else NOT_SERVED,
            "tokens/s/GPU": f"{(e.tokens_per_s_per_gpu if e else b.tokens_per_s_per_gpu):,.1f}" if b else NOT_SERVED,
        }
        if estimated:
            row["TPOT bound"] = format_seconds(b.tpot_s) if b else NOT_SERVED
        if plan.usd_per_gpu_hour is not None:
            row["$ per M output"] = usd(b.usd_per_million_output_tokens) if b else NOT_SERVED
        row["what binds"] = b.limit if b else s.reason
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# Serving plan page: traffic at the best point (mla_core.traffic) and prefill/decode pools

# The rate slider's values, requests/s: 1-2-5 steps over six decades (a log slider).
TRAFFIC_RATES = tuple(float(f"{m * 10.0 ** e:g}") for e in range(-2, 4) for m in (1, 2, 5))
TRAFFIC_MODES = ("rate", "concurrency")  # Poisson arrivals at a rate, or a closed loop of clients
TRAFFIC_MAX_PROMPTS = 2000  # the page's cap on prompts a run (each sweep point simulates them)
SWEEP_FACTORS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 1.5, 2.0, 3.0, 4.0)  # of the closed loop's throughput
MAX_RATE_ITERATIONS = 6  # bisection steps of max_rate_at_slo on the page: about 1% precision


@dataclass(frozen=True)
class TrafficView(_View):
    """The Serving plan's traffic section at the best point's split (mla_core.traffic).

    `available` False with `reason` when there is nothing to simulate (no point, pipeline
    stages). `result` the run at the chosen setting (traffic.TrafficResult: `mode` 'rate' is
    Poisson arrivals at `rate`, 'concurrency' a closed loop of `max_concurrency` clients).
    The sweep: Poisson `rates` (SWEEP_FACTORS of `capacity_rps`, the throughput of a closed
    loop of max_num_seqs clients a replica), p50/p99 TTFT and TPOT at each (s; None where no
    request has the metric), `saturated` at each and `saturation_rps` the lowest swept rate
    whose queue grows without bound (None when none does). `max_rate_at_slo` (traffic.
    max_rate_at_slo, MAX_RATE_ITERATIONS bisection steps; None without an SLO) and its
    `max_rate_note`; `ttft_slo_s` / `tpot_slo_s` the objectives (None: not set);
    `step_times` where the step times come from; `split` the split simulated."""

    available: bool
    reason: str = ""
    split: str = ""
    mode: str = "rate"
    result: object = None
    rates: tuple[float, ...] = ()
    ttft_p50: tuple = ()
    ttft_p99: tuple = ()
    tpot_p50: tuple = ()
    tpot_p99: tuple = ()
    saturated: tuple[bool, ...] = ()
    saturation_rps: float | None = None
    capacity_rps: float = 0.0
    max_rate_at_slo: float | None = None
    max_rate_note: str = ""
    goodput_rps: float | None = None
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    step_times: str = ""
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["result"] = self.result.to_dict() if self.result is not None else None
        return d


def traffic_view(model: ModelSpec, gpu, plan, *, mode: str = "rate", rate: float = 1.0,
                 max_concurrency: int = 64, num_prompts: int = 300, engine: str | None = "vllm",
                 kernel_tables: str = "auto", profile=None, seed: int = 0, **deployment) -> TrafficView:
    """Requests over time at `plan`'s best point (its split, the plan's workload and SLOs), as
    the CLI's `plan --rate / --max-concurrency` does (vLLM's max_num_seqs and
    max_num_batched_tokens defaults for `gpu`): the run at the chosen setting, a Poisson rate
    sweep around the split's throughput, the saturation point and the highest rate meeting the
    SLOs. One set of step times (the estimate for `engine`, `kernel_tables`, `profile`; the bound
    when `engine` is None or no estimate can be made) serves every run. `deployment` holds the
    Deployment fields the plan was searched with (weights_dtype, kv_dtype,
    gpu_memory_utilization, internode_gbps, link_bandwidth_Bps, ...). Raises MLAError on bad
    settings."""
    import math
    from dataclasses import replace

    from .traffic import (TrafficConfig, best_point_deployment, plan_traffic, simulate, traffic_inputs,
                          vllm_batch_defaults)
    from .validate import check_choice, check_int

    check_choice("traffic mode", mode, TRAFFIC_MODES)
    check_int("num_prompts", num_prompts, maximum=TRAFFIC_MAX_PROMPTS)
    dep, reason = best_point_deployment(plan, gpu, **deployment)
    if dep is None:
        return TrafficView(False, reason, plan.best.split if plan.best is not None and plan.best.fits else "")
    best, wl = plan.best, plan.workload
    batched, seqs = vllm_batch_defaults(gpu)
    if mode == "concurrency":
        check_int("max_concurrency", max_concurrency, maximum=1 << 20)
    cfg = TrafficConfig(input_len=wl.input_len, output_len=wl.output_len, num_prompts=num_prompts,
                        rate=math.inf if mode == "concurrency" else float(rate),
                        max_concurrency=max_concurrency if mode == "concurrency" else None,
                        max_num_seqs=seqs, max_num_batched_tokens=max(batched, seqs * (wl.spec_tokens + 1)),
                        prefix_hit=wl.prefix_hit, spec_tokens=wl.spec_tokens, acceptance=wl.acceptance,
                        replicas=dep.replicas, seed=seed, ttft_ms=plan.ttft_ms, tpot_ms=plan.tpot_ms)
    # One set of step times for the chosen run and the sweep (traffic_inputs); the bound's note kept.
    cfg, st, kv, note = traffic_inputs(model, dep, cfg, engine=engine, kernel_tables=kernel_tables, profile=profile)
    result = plan_traffic(model, dep, cfg, step_times=st, rate_iterations=MAX_RATE_ITERATIONS)
    if note:
        result = replace(result, notes=result.notes + (note,))
    closed = replace(cfg, rate=math.inf, max_concurrency=cfg.max_num_seqs * cfg.replicas)
    capacity = simulate(st, kv, closed).request_throughput
    rates = tuple(capacity * f for f in SWEEP_FACTORS)
    runs = [simulate(st, kv, replace(cfg, rate=r, burstiness=1.0, max_concurrency=None)) for r in rates]
    rate_note = "no SLO given" if not cfg.slos else next(
        (n.split(": ", 1)[1] for n in result.notes if n.startswith("max_rate_at_slo: ")), "")
    sat = tuple(r.saturated for r in runs)
    return TrafficView(
        True, "", best.split, mode, result, rates,
        tuple(r.ttft_s.p50 for r in runs), tuple(r.ttft_s.p99 for r in runs),
        tuple(r.tpot_s.p50 for r in runs), tuple(r.tpot_s.p99 for r in runs), sat,
        next((r for r, s in zip(rates, sat) if s), None), capacity, result.max_rate_at_slo, rate_note,
        result.goodput_rps, plan.ttft_ms / 1e3 if plan.ttft_ms else None, plan.tpot_ms / 1e3 if plan.tpot_ms else None,
        result.step_times, tuple(result.notes))


@dataclass(frozen=True)
class DisaggView(_View):
    """The Serving plan's prefill/decode section (serving.disagg): `result` the Disagg (pools,
    both splits, KV transfer, TTFT, TPOT, rate and limit, the bound beside them), or None with
    `reason`; `commands` ((engine label, role, command or None), ...) both pools' launch
    commands, the plan's engine first; `router` ((label, command), ...) what joins the pools;
    `aggregated` the aggregated plan's best point on its GPUs (split, num_gpus, ttft_s, tpot_s,
    output_tokens_per_s_per_gpu: the estimate's where there is one) or None; `searched` whether
    the pool sizes were searched."""

    available: bool
    reason: str = ""
    result: object = None
    commands: tuple = ()
    router: tuple = ()
    aggregated: dict | None = None
    searched: bool = False

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["result"] = self.result.to_dict() if self.result is not None else None
        return d


def disagg_view(model: ModelSpec, gpu, plan, *, prefill_gpus: int = 0, decode_gpus: int = 0,
                engine: str | None = "vllm", kernel_tables: str = "auto", profile=None, **deployment) -> DisaggView:
    """A prefill pool and a decode pool serving `plan`'s workload at its SLOs, as the CLI's
    `plan --prefill-gpus P --decode-gpus D` (both given) or `--disagg` (both 0: the pool sizes of
    the plan's GPUs searched). `deployment`: Deployment fields (weights_dtype, kv_dtype, ...).
    A pair that cannot be planned gives `available` False and the reason."""
    from .serving.disagg import disaggregate, search_disagg
    from .serving.engines import ENGINES, engine_rules

    kw = dict(workload=plan.workload, gpus_per_node=plan.gpus_per_node, ttft_ms=plan.ttft_ms, tpot_ms=plan.tpot_ms,
              engine=engine, kernel_tables=kernel_tables, profile=profile, **deployment)
    searched = not prefill_gpus and not decode_gpus
    try:
        if searched:
            r = search_disagg(model, gpu, num_gpus=plan.num_gpus, **kw)
        elif not prefill_gpus or not decode_gpus:
            raise MLAError("give both pool sizes (or 0 for both: the sizes of the deployment's GPUs are searched)")
        else:
            r = disaggregate(model, gpu, prefill_gpus=prefill_gpus, decode_gpus=decode_gpus, **kw)
    except MLAError as e:
        return DisaggView(False, str(e), searched=searched)
    first = engine or "vllm"
    order = sorted(ENGINES, key=lambda x: x != first)
    commands = tuple((engine_rules(x).label, role, r.commands[role][f"{x}_command"])
                     for x in order for role in ("prefill", "decode"))
    router = tuple((label, r.commands.get(key)) for label, key in (("SGLang router", "sglang_router_command"),
                                                                   ("TensorRT-LLM disaggregated server",
                                                                    "trtllm_disagg_command")) if r.commands.get(key))
    agg = None
    b = plan.best
    if b is not None and b.fits:
        e = b.estimate
        agg = {"split": b.split, "num_gpus": plan.num_gpus, "ttft_s": e.ttft_s if e else b.ttft_s,
               "tpot_s": e.tpot_s if e else b.tpot_s,
               "output_tokens_per_s_per_gpu": e.output_tokens_per_s_per_gpu if e else None}
    return DisaggView(True, "", r, commands, router, agg, searched)
