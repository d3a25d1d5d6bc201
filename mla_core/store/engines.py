"""Engine benchmark results imported: vLLM `bench serve --save-result` and SGLang's benchmarks.

No torch here. Formats read (field names are the engines' own, from their code):

- `vllm_serve`: the JSON `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py;
  the older benchmarks/benchmark_serving.py writes the same keys): date, backend, model_id,
  tokenizer_id, num_prompts, request_rate (a number or "inf"), burstiness, max_concurrency
  (null when unset), any `--metadata KEY=VALUE` pairs, then duration, completed, failed,
  total_input_tokens, total_output_tokens, request_throughput, output_throughput,
  total_token_throughput, max_concurrent_requests, and mean_/median_/std_/pNN_ x
  ttft_ms / tpot_ms / itl_ms / e2el_ms. One run per file (or one per line with --append-result).
- `sglang_bench_serving`: the JSONL `python -m sglang.bench_serving --output-file F` appends,
  one line per run (python/sglang/bench_serving.py): backend, dataset_name, request_rate (a
  number, or Infinity as Python's json writes float('inf')), max_concurrency,
  random_input_len, random_output_len, duration, completed, total_input_tokens,
  total_output_tokens, request_throughput, input_throughput, output_throughput,
  mean_/median_/std_/p99_ x ttft_ms / tpot_ms / itl_ms / e2e_latency_ms, concurrency,
  accept_length. It names no model: `--model` is needed.
- `sglang_one_batch`: the JSONL `python -m sglang.bench_one_batch --result-filename F`
  appends, one line per (batch, input, output) point (python/sglang/bench_one_batch.py):
  run_name, batch_size, input_len, output_len, prefill_latency, prefill_throughput,
  median_decode_latency, median_decode_throughput, total_latency, overall_throughput
  (seconds and tokens/s). One static batch, no scheduler: the closest to the model's plan.

`load_engine_file(raw, name, **settings)` turns a file into an engine result (the "engine"
kind of the history, `engine.schema.json`): the settings the file does not hold (GPU, split)
come from the caller (CLI flags `--model --gpu --tp ...`), each point's workload (lengths,
batch or concurrency) and its measured TTFT, TPOT and throughput in seconds and tokens/s.
`compare(run)` sets each point beside the serving model's plan point (`mla_core.serving`).

Command line: `python -m mla_core bench import FILE [--format F] [--model M] [--gpu G] [--tp N]
[--num-gpus N] [--gpus-per-node N] [--dp-attention] [--ep N] [--kv-cache-dtype D] [--label L]
[--out FILE.json] [--json] [--no-save]`. Bad input: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import hashlib
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field

from ..errors import MLAError
from .errors import InvalidResult
from .schema import result_schema

FORMATS: tuple[str, ...] = ("vllm_serve", "sglang_bench_serving", "sglang_one_batch")
ENGINE_OF = {"vllm_serve": "vllm", "sglang_bench_serving": "sglang", "sglang_one_batch": "sglang"}
FORMAT_LABELS = {"vllm_serve": "vllm bench serve --save-result", "sglang_bench_serving": "sglang.bench_serving",
                 "sglang_one_batch": "sglang.bench_one_batch"}
KV_DTYPES = ("auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2")
MAX_ENGINE_FILE_BYTES = 32 << 20  # a --save-detailed vLLM file carries per-request lists
MAX_POINTS = 500
MAX_PARALLEL = 4096

# The settings an engine file may carry as vLLM `--metadata KEY=VALUE` pairs, by our name.
_METADATA_KEYS = {"tp": ("tp", "tensor_parallel_size", "tp_size"), "gpu": ("gpu",), "num_gpus": ("num_gpus",),
                  "ep": ("ep", "ep_size"), "kv_dtype": ("kv_cache_dtype",), "gpus_per_node": ("gpus_per_node",)}


@dataclass(frozen=True)
class EngineSettings:
    """What the run was served with, as the serving model's Deployment names it."""

    model: str  # model preset id (data/models.json)
    gpu: str  # GPU preset id (data/gpus.json)
    num_gpus: int = 1
    gpus_per_node: int = 8
    tp: int = 1  # vLLM --tensor-parallel-size, SGLang --tp-size
    dp_attention: bool = False  # SGLang --enable-dp-attention
    ep: int = 1  # expert parallel size (SGLang --ep-size)
    kv_dtype: str = "auto"  # vLLM --kv-cache-dtype
    weights_dtype: str | None = None  # None: the model's own (fp8 for DeepSeek-V3)

    def to_dict(self) -> dict:
        return asdict(self)


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def match_model(name) -> str | None:
    """The model preset id an engine's model name means: a preset id, its Hugging Face repo
    ('deepseek-ai/DeepSeek-V3'), or a local path ending in the repo's name; None when none does."""
    from ..presets import model_entries

    if not isinstance(name, str) or not name.strip():
        return None
    text = name.strip().rstrip("/").lower()
    entries = model_entries()
    if text in entries:
        return text
    base = text.rsplit("/", 1)[-1]
    for key, e in entries.items():
        repo = (e.get("hf_repo") or "").lower()
        if repo and (text == repo or base == repo.rsplit("/", 1)[-1]):
            return key
    return None


# The unit each limit of engine.schema.json's $defs is stated in, as a message names it.
LIMIT_UNITS = {"rate": "per second", "seconds": "s", "batch": "requests at once", "requests": "requests",
               "length": "tokens per request"}


@functools.lru_cache(maxsize=1)
def limits() -> dict[str, float]:
    """The largest figure of each kind an engine file may hold (engine.schema.json's $defs, the one
    statement of them): rate (tokens/s or requests/s), seconds, batch, requests, length (tokens
    per request). Far beyond any deployment: past them a figure is a typo, not a measurement."""
    defs = result_schema("engine")["$defs"]
    return {k: defs[k]["maximum"] for k in LIMIT_UNITS}


def _limit(line: int | None, key: str, v, limit: str, scale: float = 1.0, unit: str | None = None):
    """`v` when `v * scale` is within limits()[limit]; else InvalidResult naming the field."""
    top = limits()[limit]
    if v is not None and not math.isinf(v) and v * scale > top:
        where = f"line {line}: " if line else ""
        shown = f"{v:,}" if isinstance(v, int) else f"{v:.4g}"
        raise InvalidResult(f"{where}{key} is {shown}; more than {top / scale:,.0f} {unit or LIMIT_UNITS[limit]} is "
                            "not a measurement (a typo or a broken file); nothing was imported")
    return v


def _number(line: int | None, key: str, v, *, allow_inf: bool = False, positive: bool = False,
            limit: str | None = None, scale: float = 1.0, unit: str | None = None):
    where = f"line {line}: " if line else ""
    if v is None:
        return None
    if isinstance(v, str) and allow_inf and v.strip().lower() == "inf":
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidResult(f"{where}{key} is {_short(v)}, not a number")
    if math.isinf(v) and allow_inf:
        return math.inf
    if not math.isfinite(v):
        raise InvalidResult(f"{where}{key} is {v!r}, not a finite number")
    if v < 0 or (positive and v == 0):
        raise InvalidResult(f"{where}{key} is {v!r}; it must be {'positive' if positive else 'zero or more'}")
    if limit is not None:
        _limit(line, key, v, limit, scale, unit)
    return v


def _int(line, key, v, positive=False, limit: str | None = None):
    x = _number(line, key, v, positive=positive, limit=limit)
    if x is None:
        return None
    if float(x) != int(x):
        raise InvalidResult(f"line {line}: {key} is {x!r}, not a whole number" if line else
                            f"{key} is {x!r}, not a whole number")
    return int(x)


def _ms(line, rec, key):
    v = _number(line, key, rec.get(key), limit="seconds", scale=1e-3, unit="ms")
    return None if v is None else v / 1e3


def _rate(line, key, v, unit="tokens/s"):
    return _number(line, key, v, limit="rate", unit=unit)


def _secs(line, key, v, positive=False):
    return _number(line, key, v, positive=positive, limit="seconds")


def _records(text: str) -> list[tuple[int, dict]]:
    """[(line number, object)] of a JSON object file or a JSONL file. Python's json reads
    Infinity/NaN (SGLang writes request_rate=inf as Infinity); each field is checked later."""
    stripped = text.strip()
    if not stripped:
        raise InvalidResult("the file is empty")
    try:
        data = json.loads(stripped)
        if isinstance(data, dict):
            return [(1, data)]
        if isinstance(data, list) and all(isinstance(x, dict) for x in data) and data:
            return list(enumerate(data, 1))
        raise InvalidResult("the file holds JSON, but not an object or lines of objects")
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise InvalidResult("the file is JSON nested too deeply to read (thousands of levels): not an engine "
                            "result") from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidResult(f"line {i} is not JSON ({str(e).splitlines()[0][:80]})") from None
        except RecursionError:
            raise InvalidResult(f"line {i} is JSON nested too deeply to read (thousands of levels): not an engine "
                                "result") from None
        if not isinstance(obj, dict):
            raise InvalidResult(f"line {i} is JSON but not an object")
        out.append((i, obj))
    if not out:
        raise InvalidResult("the file holds no JSON objects")
    return out


def detect_format(rec: dict) -> str | None:
    """The format a record is in, by the keys each engine writes; None when it is neither."""
    if "median_decode_latency" in rec or ("prefill_latency" in rec and "batch_size" in rec):
        return "sglang_one_batch"
    if "median_ttft_ms" in rec or "mean_ttft_ms" in rec:
        if "model_id" in rec or "tokenizer_id" in rec or "median_e2el_ms" in rec or "endpoint_type" in rec:
            return "vllm_serve"
        if "median_e2e_latency_ms" in rec or "random_input_len" in rec or "concurrency" in rec:
            return "sglang_bench_serving"
    return None


def _serve_point(line, rec, fmt: str) -> dict:
    completed = _int(line, "completed", rec.get("completed"), limit="requests")
    if not completed:
        raise InvalidResult(f"line {line}: completed is {rec.get('completed')!r}: no request finished, nothing to compare")
    for key in ("median_ttft_ms", "median_tpot_ms", "output_throughput", "total_input_tokens", "total_output_tokens"):
        if rec.get(key) is None:
            raise InvalidResult(f"line {line}: {key} is missing; it is not a {FORMAT_LABELS[fmt]} result with "
                                "TTFT and TPOT (run it with the default --percentile-metrics)")
    tin = _int(line, "total_input_tokens", rec["total_input_tokens"])
    tout = _int(line, "total_output_tokens", rec["total_output_tokens"])
    rate = _number(line, "request_rate", rec.get("request_rate"), allow_inf=True, limit="rate", unit="requests/s")
    max_conc = _int(line, "max_concurrency", rec.get("max_concurrency"), positive=True, limit="batch")
    num_prompts = _int(line, "num_prompts", rec.get("num_prompts"), positive=True, limit="requests")
    mean_conc = _number(line, "concurrency", rec.get("concurrency"), limit="batch")  # SGLang: measured mean in flight
    peak = _int(line, "max_concurrent_requests", rec.get("max_concurrent_requests"), limit="batch")  # vLLM: measured
    if max_conc is not None:
        batch, batch_from = max_conc, "max_concurrency"
    elif mean_conc:
        batch, batch_from = max(1, round(mean_conc)), "measured mean concurrency"
    elif peak:
        batch, batch_from = peak, "measured peak concurrent requests"
    else:
        batch, batch_from = completed, "all requests at once (no concurrency limit)"
        _limit(line, "completed (all requests at once: the batch)", batch, "batch")
    input_len, output_len = max(1, round(tin / completed)), max(1, round(tout / completed))
    _limit(line, "total_input_tokens / completed", input_len, "length")
    _limit(line, "total_output_tokens / completed", output_len, "length")
    measured = {
        "ttft_s": _ms(line, rec, "median_ttft_ms"), "ttft_mean_s": _ms(line, rec, "mean_ttft_ms"),
        "tpot_s": _ms(line, rec, "median_tpot_ms"), "tpot_mean_s": _ms(line, rec, "mean_tpot_ms"),
        "itl_s": _ms(line, rec, "median_itl_ms"),
        "output_tokens_per_s": _rate(line, "output_throughput", rec["output_throughput"]),
        "total_tokens_per_s": _rate(line, "total_token_throughput", rec.get("total_token_throughput")),
        "request_throughput": _rate(line, "request_throughput", rec.get("request_throughput"), "requests/s"),
        "duration_s": _secs(line, "duration", rec.get("duration")),
        "completed": completed,
    }
    return {
        "workload": {"input_len": input_len, "output_len": output_len,
                     "batch": batch, "batch_from": batch_from, "max_concurrency": max_conc,
                     "request_rate": None if rate is None or math.isinf(rate) else rate, "num_prompts": num_prompts},
        "measured": measured,
    }


def _one_batch_point(line, rec) -> dict:
    for key in ("batch_size", "input_len", "output_len", "prefill_latency"):
        if rec.get(key) is None:
            raise InvalidResult(f"line {line}: {key} is missing; not an sglang.bench_one_batch result line")
    batch = _int(line, "batch_size", rec["batch_size"], positive=True, limit="batch")
    step = _secs(line, "median_decode_latency", rec.get("median_decode_latency"), positive=True)
    prefill = _secs(line, "prefill_latency", rec["prefill_latency"], positive=True)
    return {
        "workload": {"input_len": _int(line, "input_len", rec["input_len"], positive=True, limit="length"),
                     "output_len": _int(line, "output_len", rec["output_len"], positive=True, limit="length"),
                     "batch": batch,
                     "batch_from": "batch_size", "max_concurrency": None, "request_rate": None, "num_prompts": None},
        "measured": {
            "ttft_s": prefill,  # the whole batch's prefill: every request's first token comes after it
            "ttft_mean_s": None, "tpot_s": step, "tpot_mean_s": None, "itl_s": step,
            "output_tokens_per_s": batch / step if step else None,
            "total_tokens_per_s": _rate(line, "overall_throughput", rec.get("overall_throughput")),
            "request_throughput": None,
            "duration_s": _secs(line, "total_latency", rec.get("total_latency")), "completed": batch,
            "prefill_tokens_per_s": _rate(line, "prefill_throughput", rec.get("prefill_throughput")),
        },
    }


_KEEP = 40  # engine fields kept per point (scalars only): what the file said, for the record


def _engine_fields(rec: dict) -> dict:
    out = {}
    for k, v in rec.items():
        if len(out) >= _KEEP:
            break
        if isinstance(v, bool) or v is None:
            out[str(k)[:60]] = v
        elif isinstance(v, (int, float)):
            out[str(k)[:60]] = v if math.isfinite(v) else str(v)
        elif isinstance(v, str):
            out[str(k)[:60]] = v[:200]
    return out


def load_engine_file(raw, name: str = "engine result", *, fmt: str = "auto", model: str | None = None,
                     gpu: str | None = None, tp: int | None = None, num_gpus: int | None = None,
                     gpus_per_node: int | None = None, dp_attention: bool | None = None, ep: int | None = None,
                     kv_dtype: str | None = None, weights_dtype: str | None = None) -> dict:
    """An engine result dict (kind "engine", `engine.schema.json`) from the bytes or text of an
    engine's output file. Settings given here win over those the file carries (vLLM's model_id
    and `--metadata` pairs); model and GPU must be known one way or the other.

    Raises InvalidResult (one line, naming the line and field) for a file that is not one of
    FORMATS or holds a bad value, MLAError for unknown or missing settings.
    """
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw)
        if len(raw) > MAX_ENGINE_FILE_BYTES:
            raise InvalidResult(f"the file is {len(raw):,} bytes; the limit is {MAX_ENGINE_FILE_BYTES:,} (32 MiB)")
        digest = hashlib.sha256(raw).hexdigest()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidResult("the file is not UTF-8 text") from None
    elif isinstance(raw, str):
        text = raw
        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    else:
        raise InvalidResult(f"an engine file is bytes or text, got {type(raw).__name__}")
    if fmt != "auto" and fmt not in FORMATS:
        raise MLAError(f"unknown format {_short(fmt)}; choose auto or one of {', '.join(FORMATS)}")
    records = _records(text)
    if len(records) > MAX_POINTS:
        raise InvalidResult(f"the file holds {len(records):,} runs; at most {MAX_POINTS} are imported at once")
    found = {detect_format(r) for _, r in records}
    if fmt == "auto":
        if None in found:
            line = next(i for i, r in records if detect_format(r) is None)
            raise InvalidResult(f"line {line} is not a vllm bench serve, sglang.bench_serving or sglang.bench_one_batch "
                                "result (no median_ttft_ms, median_decode_latency or prefill_latency)")
        if len(found) > 1:
            raise InvalidResult(f"the file mixes formats ({', '.join(sorted(found))}); import one at a time")
        fmt = found.pop()
    points = []
    for line, rec in records:
        point = _one_batch_point(line, rec) if fmt == "sglang_one_batch" else _serve_point(line, rec, fmt)
        point["engine_fields"] = _engine_fields(rec)
        points.append(point)
    first = records[0][1]
    meta = {ours: next((first[k] for k in keys if first.get(k) not in (None, "")), None)
            for ours, keys in _METADATA_KEYS.items()}
    settings = _settings(fmt, first, meta, model=model, gpu=gpu, tp=tp, num_gpus=num_gpus, gpus_per_node=gpus_per_node,
                         dp_attention=dp_attention, ep=ep, kv_dtype=kv_dtype, weights_dtype=weights_dtype)
    from ..presets import load_gpu

    gpu_spec = load_gpu(settings.gpu)
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    notes = []
    if fmt != "sglang_one_batch":
        notes.append("served under a scheduler: TTFT includes queueing behind other requests, and the batch is the "
                     "concurrency limit (or the measured concurrency), not a fixed decode batch")
    return {
        "schema_version": 1, "kind": "engine", "tool": "mla_core.store.engines", "created": created,
        "engine": ENGINE_OF[fmt], "format": fmt, "source_name": str(name)[:200], "source_sha256": digest,
        "engine_date": str(first.get("date"))[:40] if first.get("date") else None,
        "engine_model": str(first.get("model_id"))[:200] if first.get("model_id") else None,
        "settings": settings.to_dict(),
        "device": {"kind": "cuda", "name": gpu_spec.name, "preset": settings.gpu, "count": settings.num_gpus},
        "points": points,
        "notes": notes,
    }


def _settings(fmt, first, meta, **given) -> EngineSettings:
    model = given["model"]
    if model is None and first.get("model_id"):
        model = first["model_id"]
    if model is None:
        raise MLAError(f"the {FORMAT_LABELS[fmt]} file does not name its model; give --model PRESET "
                       "(`python -m mla_core presets` lists them)")
    key = match_model(model)
    if key is None:
        raise MLAError(f"model {_short(model)} is not a preset; give --model PRESET (`python -m mla_core presets`)")
    gpu = given["gpu"] if given["gpu"] is not None else meta["gpu"]
    if gpu is None:
        raise MLAError("the file does not say which GPU served it; give --gpu PRESET (e.g. h200)")
    from ..presets import gpu_entries

    gpu = str(gpu).lower()
    if gpu not in gpu_entries():
        raise MLAError(f"unknown GPU {_short(gpu)}; known: {', '.join(gpu_entries())}")

    def whole(name, v, default):
        if v is None:
            return default
        try:
            x = int(str(v).strip()) if not isinstance(v, bool) else None
        except ValueError:
            x = None
        if x is None or not 1 <= x <= MAX_PARALLEL:
            raise MLAError(f"{name} must be a whole number between 1 and {MAX_PARALLEL}, got {_short(v)}")
        return x

    tp = whole("tp", given["tp"] if given["tp"] is not None else meta["tp"], 1)
    ep = whole("ep", given["ep"] if given["ep"] is not None else meta["ep"], 1)
    num_gpus = whole("num_gpus", given["num_gpus"] if given["num_gpus"] is not None else meta["num_gpus"], tp)
    per_node = whole("gpus_per_node", given["gpus_per_node"] if given["gpus_per_node"] is not None
                     else meta["gpus_per_node"], min(num_gpus, 8))
    if num_gpus % tp:
        raise MLAError(f"num_gpus ({num_gpus}) must be a multiple of tp ({tp})")
    kv = given["kv_dtype"] if given["kv_dtype"] is not None else (meta["kv_dtype"] or "auto")
    if kv not in KV_DTYPES:
        raise MLAError(f"kv_cache_dtype must be one of {', '.join(KV_DTYPES)}, got {_short(kv)}")
    return EngineSettings(model=key, gpu=gpu, num_gpus=num_gpus, gpus_per_node=per_node, tp=tp,
                          dp_attention=bool(given["dp_attention"]), ep=ep, kv_dtype=kv,
                          weights_dtype=given["weights_dtype"])


# ---------------------------------------------------------------------------------------------
# Predicted against measured.

@dataclass(frozen=True)
class MetricCompare:
    """One figure: measured, predicted (the serving model), error = (predicted - measured) /
    measured in percent, and `beats_bound`: the measured figure is better than the model's
    bound (a shorter time, or more tokens/s), which the roofline model says cannot happen: a
    modelling error to investigate, not a fast machine."""

    name: str  # ttft_s | tpot_s | output_tokens_per_s
    measured: float | None
    predicted: float | None
    error_pct: float | None
    beats_bound: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PointCompare:
    workload: dict  # input_len, output_len, batch, batch_from, ...
    deployment: dict  # the Deployment the plan used
    bound: str | None  # what binds the plan point (the serving model's `bound`)
    metrics: tuple[MetricCompare, ...]
    modelling_error: bool  # any metric beats its bound
    plan: dict = field(default_factory=dict)  # the serving point's to_dict()
    ttft_basis: str = ""  # what the predicted TTFT is the time of
    fits: bool = True  # the plan's memory cap admits this batch

    def to_dict(self) -> dict:
        d = asdict(self)
        d["metrics"] = [m.to_dict() for m in self.metrics]
        return d


@dataclass(frozen=True)
class EngineComparison:
    """`compare(run)`: every point of an imported engine run beside the serving model's plan."""

    engine: str
    format: str
    model: str
    gpu: str
    settings: dict
    points: tuple[PointCompare, ...]
    available: bool  # False: the serving model could not be loaded (reason in `notes`)
    notes: tuple[str, ...]

    @property
    def any_modelling_error(self) -> bool:
        return any(p.modelling_error for p in self.points)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["points"] = [p.to_dict() for p in self.points]
        d["any_modelling_error"] = self.any_modelling_error
        return d


METRICS = (("ttft_s", "ttft_s", "lower"), ("tpot_s", "tpot_s", "lower"),
           ("output_tokens_per_s", "tokens_per_s", "higher"))


def _metric(name: str, measured, predicted, better: str) -> MetricCompare:
    if not isinstance(measured, (int, float)) or not isinstance(predicted, (int, float)) or measured <= 0 \
            or not math.isfinite(predicted):
        return MetricCompare(name, measured, predicted if isinstance(predicted, (int, float)) else None, None, False)
    err = (predicted - measured) / measured * 100.0
    beats = measured < predicted if better == "lower" else measured > predicted
    return MetricCompare(name, float(measured), float(predicted), err, bool(beats))


def compare(run, *, link_bandwidth_Bps: float | None = None, internode_gbps: float = 400.0,
            gpu_memory_utilization: float = 0.9) -> EngineComparison:
    """Each point of an engine result (the dict `load_engine_file` returns, or a history run
    `{"result": ...}`) beside `mla_core.serving.evaluate` at the same model, GPU, split,
    lengths and batch: TTFT, TPOT and output throughput, measured and predicted, the error in
    percent and a flag where the measurement beats the bound.

    `link_bandwidth_Bps`: a measured collectives bus bandwidth
    (`mla_core.bench.comm.link_bandwidth(result).link_bandwidth_Bps`) for the communication
    terms instead of the datasheet figure. Raises MLAError for a result of another kind.
    """
    result = run.get("result", run) if isinstance(run, dict) else run
    if not isinstance(result, dict) or result.get("kind") != "engine":
        raise MLAError("not an engine result (kind 'engine'); import one with `python -m mla_core bench import FILE`")
    s = result["settings"]
    notes = list(result.get("notes", []))
    try:
        from ..presets import load_gpu, load_model
        from ..serving import Deployment, Workload, evaluate
    except ImportError as e:
        notes.append(f"the serving model is not available in this build ({e}); measured figures only")
        return EngineComparison(result["engine"], result["format"], s["model"], s["gpu"], s, (), False, tuple(notes))
    model, gpu = load_model(s["model"]), load_gpu(s["gpu"])
    dep = Deployment(gpu=gpu, num_gpus=s["num_gpus"], gpus_per_node=s["gpus_per_node"], tp=s["tp"],
                     dp_attention=s["dp_attention"], ep=s["ep"], weights_dtype=s.get("weights_dtype"),
                     kv_dtype=s["kv_dtype"], gpu_memory_utilization=gpu_memory_utilization,
                     internode_gbps=internode_gbps, link_bandwidth_Bps=link_bandwidth_Bps)
    dep_dict = {k: v for k, v in s.items()}
    dep_dict.update(gpu_memory_utilization=gpu_memory_utilization, internode_gbps=internode_gbps,
                    link_bandwidth_Bps=link_bandwidth_Bps)
    points = []
    for p in result["points"]:
        w = p["workload"]
        wl = Workload(input_len=w["input_len"], output_len=w["output_len"], prefix_hit=0.0, spec_tokens=0,
                      acceptance=0.0)
        try:
            plan = evaluate(model, dep, wl, batch=w["batch"])
        except MLAError as e:
            notes.append(f"batch {w['batch']}, {w['input_len']} in / {w['output_len']} out: no plan ({e})")
            continue
        ttft, basis = plan.ttft_s, "one request's prefill (the serving model's TTFT)"
        if result["format"] == "sglang_one_batch" and w["batch"] > 1:
            # bench_one_batch prefills the whole batch at once: its flops are the batch's sum
            # (mla_core.serving.prefill_work per request, times the batch), while the weights are
            # read once. Lower bound: the larger of one request's TTFT and the batch's flops at peak.
            from ..serving import prefill_work

            work = prefill_work(model, dep, wl)
            batch_compute = w["batch"] * work["flops_gpu"] / work["peak_flops"]
            if batch_compute > ttft:
                ttft = batch_compute
            basis = (f"{w['batch']} requests prefilled at once: max(one request's TTFT, the batch's prefill flops "
                     "at the peak)")
        pred = {"ttft_s": ttft, "tpot_s": plan.tpot_s, "tokens_per_s": plan.tokens_per_s}
        metrics = tuple(_metric(name, p["measured"].get(name), pred[pkey], better) for name, pkey, better in METRICS)
        points.append(PointCompare(workload=dict(w), deployment=dep_dict, bound=getattr(plan, "bound", None),
                                   metrics=metrics, modelling_error=any(m.beats_bound for m in metrics),
                                   plan=plan.to_dict() if hasattr(plan, "to_dict") else {}, ttft_basis=basis,
                                   fits=bool(getattr(plan, "fits", True))))
    return EngineComparison(result["engine"], result["format"], s["model"], s["gpu"], s, tuple(points), True,
                            tuple(notes))


def accuracy(*, link_bandwidth_Bps: float | None = None, path: str | None = None) -> list[EngineComparison]:
    """`compare` of every engine run in the history (newest first): what an "Accuracy" section
    draws. A stored run that no longer validates is skipped with its reason in the notes of an
    empty comparison. Raises BenchError when the history cannot be read."""
    from . import history
    from .schema import validate_result

    if path is None and not os.path.exists(history.default_path()):
        return []
    out = []
    for r in history.list_runs(path=path, kind="engine"):
        try:
            result = validate_result(history.get_run(r["id"], path=path)["result"], kind="engine")
            out.append(compare(result, link_bandwidth_Bps=link_bandwidth_Bps))
        except MLAError as e:
            out.append(EngineComparison("?", "?", "?", "?", {"run_id": r["id"]}, (), False,
                                        (f"stored run #{r['id']}: {e}",)))
    return out


# ---------------------------------------------------------------------------------------------
# Command line: python -m mla_core bench import FILE ...

PROG = "mla_core bench import"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # noqa: D102 - one line, no usage block
        raise _UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Import an engine benchmark result (vllm bench serve --save-result JSON, "
                                      "sglang.bench_serving or sglang.bench_one_batch JSONL) into the history, "
                                      "with the settings the file does not hold, and compare it with the model.")
    p.add_argument("file", help="the engine's output file")
    p.add_argument("--format", choices=("auto",) + FORMATS, default="auto", help="default: told by the file's keys")
    p.add_argument("--model", help="model preset id or Hugging Face repo (vLLM files name it in model_id)")
    p.add_argument("--gpu", help="GPU preset id, e.g. h200")
    p.add_argument("--tp", "--tensor-parallel-size", "--tp-size", dest="tp", type=int, help="tensor parallel size")
    p.add_argument("--num-gpus", type=int, help="GPUs serving (default: tp)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: min(num_gpus, 8))")
    p.add_argument("--dp-attention", "--enable-dp-attention", dest="dp_attention", action="store_true",
                   help="SGLang data-parallel attention")
    p.add_argument("--ep", "--ep-size", dest="ep", type=int, help="expert parallel size")
    p.add_argument("--kv-cache-dtype", dest="kv_dtype", choices=KV_DTYPES, help="vLLM --kv-cache-dtype (default auto)")
    p.add_argument("--label", help="label of the stored run")
    p.add_argument("--out", metavar="FILE.json", help="also write the imported result JSON here")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--no-save", action="store_true", help="check and compare only; store nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        import stat as _stat

        try:
            st = os.stat(args.file)
            if not _stat.S_ISREG(st.st_mode):
                raise MLAError(f"{args.file!r} is not a regular file")
            if st.st_size > MAX_ENGINE_FILE_BYTES:
                raise MLAError(f"{args.file!r} is {st.st_size:,} bytes; the limit is {MAX_ENGINE_FILE_BYTES:,}")
            with open(args.file, "rb") as f:
                raw = f.read(MAX_ENGINE_FILE_BYTES + 1)
        except OSError as e:
            raise MLAError(f"cannot read {args.file}: {e.strerror or e}") from None
        result = load_engine_file(raw, os.path.basename(args.file), fmt=args.format, model=args.model, gpu=args.gpu,
                                  tp=args.tp, num_gpus=args.num_gpus, gpus_per_node=args.gpus_per_node,
                                  dp_attention=args.dp_attention or None, ep=args.ep, kv_dtype=args.kv_dtype)
        from .schema import validate_result

        result = validate_result(result, kind="engine")
        if args.out:
            from .files import check_out, write_json

            check_out(args.out)
            write_json(args.out, result)
        run_id = None
        if not args.no_save:
            from . import history

            run_id = history.save_run(result, source="import", label=args.label)
        cmp = compare(result)
        if args.json:
            print(json.dumps({"run_id": run_id, "result": result, "comparison": cmp.to_dict()}, indent=2))
        else:
            print(render_comparison(result, cmp))
            if run_id is not None:
                from . import history

                print(f"saved as run {run_id} in {history.default_path()}")
        return 0
    except _UsageError as e:
        print(str(e).splitlines()[0][:400], file=sys.stderr)
        return 2
    except MLAError as e:
        print(" ".join(f"{PROG}: error: {e}".split())[:400], file=sys.stderr)
        return 2


def _fmt(name: str, v) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    if not name.endswith("tokens_per_s"):
        from ..units import format_seconds

        return format_seconds(v)
    return f"{v:,.1f} tok/s"


def render_comparison(result: dict, cmp: EngineComparison) -> str:
    s = result["settings"]
    lines = [f"{FORMAT_LABELS[result['format']]}: {s['model']} on {s['num_gpus']} x {s['gpu']}, tp {s['tp']}, "
             f"ep {s['ep']}{', dp-attention' if s['dp_attention'] else ''}, kv {s['kv_dtype']}; "
             f"{len(result['points'])} point(s)"]
    if not cmp.available:
        for p in result["points"]:
            w, m = p["workload"], p["measured"]
            lines.append(f"  batch {w['batch']} ({w['batch_from']}), {w['input_len']} in / {w['output_len']} out: "
                         f"TTFT {_fmt('ttft_s', m['ttft_s'])}, TPOT {_fmt('tpot_s', m['tpot_s'])}, "
                         f"{_fmt('tok', m['output_tokens_per_s'])}")
    for p in cmp.points:
        w = p.workload
        lines.append(f"  batch {w['batch']} ({w['batch_from']}), {w['input_len']} in / {w['output_len']} out"
                     + (f", {p.bound} bound" if p.bound else ""))
        for m in p.metrics:
            err = f"{m.error_pct:+.1f}%" if m.error_pct is not None else "-"
            flag = "  MODELLING ERROR: measured beats the bound" if m.beats_bound else ""
            lines.append(f"    {m.name:<20} measured {_fmt(m.name, m.measured):>14}  predicted "
                         f"{_fmt(m.name, m.predicted):>14}  error {err}{flag}")
    lines += [f"note: {n}" for n in cmp.notes]
    return "\n".join(lines)
