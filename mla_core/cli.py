"""The command line: `python -m mla_core {kv,capacity,roofline,plan,bench,presets} ... [--json]`.

Bad input exits with status 2 and one line on stderr, never a traceback. `--json` prints one
JSON object; without it, a table with units. The analytic commands import no numpy, torch,
streamlit, plotly or pandas: they answer about as fast as Python starts.
"""
from __future__ import annotations

import argparse
import sys

from .errors import MLAError

PROG = "mla_core"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2."""

    def error(self, message):  # noqa: D102 - argparse hook
        raise _UsageError(f"{self.prog}: error: {message}")


class _UsageError(Exception):
    pass


class _Formatter(argparse.HelpFormatter):
    """Help text sized to the terminal without importing shutil (argparse's default does)."""

    def __init__(self, prog):
        import os

        try:
            width = os.get_terminal_size().columns - 2
        except OSError:
            width = 98
        super().__init__(prog, width=max(40, min(width, 120)))


COMMANDS = ("kv", "capacity", "roofline", "plan", "bench", "presets")


def _int_arg(name: str, minimum: int = 1):
    def parse(text: str) -> int:
        t = text.strip().replace(",", "").replace("_", "")
        if not t or len(t) > 40 or not t.isascii() or not (t.isdigit() or (t[0] in "+-" and t[1:].isdigit())):
            hint = " (write the whole number: 131072 for 128K, 1048576 for 1M)" if t[-1:].lower() in "km" else ""
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {_short(text)}{hint}")
        v = int(t)
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be at least {minimum}, got {v}")
        return v

    parse.__name__ = name
    return parse


def _real_arg(name: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {_short(text)}") from None
        if v != v or v in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number, got {_short(text)}")
        return v

    parse.__name__ = name
    return parse


def _short(text) -> str:
    text = str(text)
    return repr(text if len(text) <= 30 else text[:27] + "...")


def _add_model_args(p: argparse.ArgumentParser, cache: bool = True) -> None:
    g = p.add_argument_group("model (one of --model, --config, --attention)")
    g.add_argument("--model", metavar="PRESET", help="preset id, e.g. deepseek-v3 (see `presets`)")
    g.add_argument("--config", metavar="PATH", help="a Hugging Face config.json, or a folder holding one")
    g.add_argument("--attention", choices=("mha", "gqa", "mqa", "mla"), help="a hand-set architecture")
    g.add_argument("--layers", type=_int_arg("--layers"), help="num_hidden_layers")
    g.add_argument("--heads", type=_int_arg("--heads"), help="num_attention_heads")
    g.add_argument("--kv-heads", type=_int_arg("--kv-heads"), help="num_key_value_heads (GQA)")
    g.add_argument("--head-dim", type=_int_arg("--head-dim"), help="head_dim (default 128)")
    g.add_argument("--kv-lora-rank", type=_int_arg("--kv-lora-rank"), help="MLA d_c (default 4 * head_dim)")
    g.add_argument("--rope-dim", type=_int_arg("--rope-dim"), help="MLA qk_rope_head_dim (default head_dim / 2)")
    g.add_argument("--nope-dim", type=_int_arg("--nope-dim"), help="MLA qk_nope_head_dim (default head_dim)")
    g.add_argument("--v-dim", type=_int_arg("--v-dim"), help="MLA v_head_dim (default nope dim)")
    g.add_argument("--hidden-size", type=_int_arg("--hidden-size"), help="default heads * head_dim")
    g.add_argument("--intermediate-size", type=_int_arg("--intermediate-size"), help="MLP width (counted only if given)")
    g.add_argument("--vocab-size", type=_int_arg("--vocab-size"), help="embeddings (counted only if given)")
    c = p.add_argument_group("cache")
    if cache:
        c.add_argument("--context", type=_int_arg("--context"), required=True, help="tokens per sequence, T")
        c.add_argument("--batch", type=_int_arg("--batch"), default=1, help="sequences, B (default 1)")
    from .units import KV_DTYPES

    c.add_argument("--kv-dtype", default="auto", choices=KV_DTYPES, metavar="DTYPE",
                   help=f"kv_cache_dtype: {', '.join(KV_DTYPES)} (default auto = the model's torch_dtype)")
    if cache:
        c.add_argument("--cache-layout", choices=("latent", "expanded"), default="latent",
                       help="MLA cache: the latent (default) or the expanded per-head K and V")
    c.add_argument("--block-size", type=_int_arg("--block-size"), help="round tokens up to whole blocks")
    from .units import STATE_DTYPES

    c.add_argument("--state-dtype", default="auto", choices=STATE_DTYPES, metavar="DTYPE",
                   help=f"recurrent state, both parts (Mamba, DeltaNet, KDA, lightning, short conv): "
                        f"{', '.join(STATE_DTYPES)} (default auto = the model's torch_dtype; vLLM's --mamba-cache-dtype)")
    c.add_argument("--ssm-state-dtype", default="auto", choices=STATE_DTYPES, metavar="DTYPE",
                   help="the recurrent (SSM) part alone (default auto = the config's mamba_ssm_cache_dtype, else "
                        "--state-dtype; KDA's stays float32 as vLLM keeps it; vLLM's --mamba-ssm-cache-dtype)")
    d = c.add_mutually_exclusive_group()
    d.add_argument("--draft-layers", type=_int_arg("--draft-layers", minimum=0), metavar="N",
                   help="add N draft (MTP / EAGLE) layers of the model's own attention kind")
    d.add_argument("--mtp", action="store_true",
                   help="add the model's multi-token-prediction layers (num_nextn_predict_layers)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


_SYNTHETIC = ("layers", "heads", "kv_heads", "head_dim", "kv_lora_rank", "rope_dim", "nope_dim", "v_dim",
              "hidden_size", "intermediate_size", "vocab_size")


def _model(args):
    """The model the flags name, with draft layers added when asked (--draft-layers, --mtp)."""
    model = _base_model(args)
    n = getattr(args, "draft_layers", None)
    if getattr(args, "mtp", False):
        n = model.num_nextn_predict_layers
        if not n:
            raise MLAError(f"--mtp: {model.name} has no num_nextn_predict_layers; use --draft-layers N")
    if n:
        from .spec import with_draft_layers

        model = with_draft_layers(model, n)
    return model


def _base_model(args):
    sources = [s for s in ("model", "config", "attention") if getattr(args, s) is not None]
    if len(sources) != 1:
        raise MLAError("give exactly one of --model PRESET, --config PATH or --attention KIND")
    synthetic = {k: getattr(args, k) for k in _SYNTHETIC if getattr(args, k) is not None}
    if args.attention is None:
        if synthetic:
            flag = "--" + next(iter(synthetic)).replace("_", "-")
            raise MLAError(f"{flag} sets a hand-made architecture: use it with --attention, not --{sources[0]}")
        if args.model is not None:
            from .presets import load_model

            return load_model(args.model)
        from .config import load_config

        return load_config(args.config)
    for required in ("layers", "heads"):
        if required not in synthetic:
            raise MLAError(f"--attention needs --{required}")
    from .config import synthetic_model

    return synthetic_model(args.attention, **synthetic)


def _gpu(args, required: bool):
    from .hardware import custom_gpu
    from .presets import load_gpu

    base = load_gpu(args.gpu) if args.gpu else None
    mem = getattr(args, "gpu_memory_gib", None)
    bw = getattr(args, "bandwidth_tbps", None)
    peak = getattr(args, "peak_tflops", None)
    if mem is not None or bw is not None or peak is not None:
        if base is None and mem is None and required:
            mem = 1.0  # roofline needs no memory size
        if mem is None:
            mem = base.memory_GB
        return custom_gpu(mem, bw, peak, peak if peak is not None else None, base=base) if base is None or peak is not None or bw is not None or mem != base.memory_GB else base
    if base is None and required:
        raise MLAError("give --gpu ID (see `presets`), or --bandwidth-tbps and --peak-tflops")
    return base


def cmd_kv(args) -> dict:
    from .kv import kv_report

    model = _model(args)
    return kv_report(model, args.context, args.batch, args.kv_dtype, args.cache_layout, args.block_size,
                     state_dtype=args.state_dtype, ssm_state_dtype=args.ssm_state_dtype)


def cmd_capacity(args) -> dict:
    from .capacity import capacity
    from .units import gib_to_bytes
    from .validate import check_real

    model = _model(args)
    gpu = _gpu(args, required=False)
    budget = None
    if args.kv_budget_gib is not None:
        check_real("--kv-budget-gib", args.kv_budget_gib, minimum=0, maximum=1e9)
        budget = gib_to_bytes(args.kv_budget_gib)
    elif gpu is None:
        raise MLAError("give --gpu ID or --gpu-memory-gib X (the memory of one GPU), or --kv-budget-gib")
    reserve = 0
    if args.reserve_gib is not None:
        check_real("--reserve-gib", args.reserve_gib, minimum=0, maximum=1e9)
        reserve = gib_to_bytes(args.reserve_gib)
    kwargs = dict(
        context=args.context, gpu=gpu, num_gpus=args.num_gpus, tp=args.tp, dp_attention=args.dp_attention,
        weights_dtype=args.weights_dtype, kv_dtype=args.kv_dtype, gpu_memory_utilization=args.gpu_memory_utilization,
        kv_budget_bytes=budget, block_size=args.block_size, reserve_bytes=reserve, state_dtype=args.state_dtype,
        ssm_state_dtype=args.ssm_state_dtype,
    )
    out = capacity(model, cache_layout=args.cache_layout, **kwargs).to_dict()
    if model.is_mla and args.cache_layout == "latent":
        from .capacity import allocator_waste

        waste = allocator_waste(model, **kwargs)
        out["mha_formula_kv_bytes_per_token_per_gpu"] = waste["expanded"]["kv_bytes_per_token_per_gpu"]
        out["mha_formula_max_concurrent_requests"] = waste["expanded"]["max_concurrent_requests"]
        out["mha_formula_waste_factor"] = waste["waste_factor"]
    return out


def cmd_roofline(args) -> dict:
    from .roofline import roofline

    model = _model(args)
    gpu = _gpu(args, required=True)
    return roofline(model, gpu, context=args.context, batch=args.batch, kv_dtype=args.kv_dtype,
                    weights_dtype=args.weights_dtype, mla_path=args.mla_path, tp=args.tp,
                    state_dtype=args.state_dtype, ssm_state_dtype=args.ssm_state_dtype)


def cmd_plan(args) -> dict:
    from .serving import Workload, search

    model = _model(args)
    gpu = _gpu(args, required=True)
    pools = _disagg_pools(args)
    if pools is not None and pools[0] is not None:
        args.num_gpus = pools[0] + pools[1]
    num_gpus = args.num_gpus if args.num_gpus is not None else (args.tp or 1) * (args.pp or 1)
    split_given = args.tp is not None or args.dp_attention or args.ep is not None or args.pp is not None
    if args.batch is not None and not split_given:
        raise MLAError("--batch evaluates one point: give its split too (--tp, and --dp-attention / --ep / --pp)")
    wl = Workload(input_len=args.input_len, output_len=args.output_len, prefix_hit=args.prefix_hit,
                  spec_tokens=args.spec_tokens, acceptance=args.acceptance)
    link = None
    if args.link_gbps is not None:
        from .validate import check_real

        link = check_real("--link-gbps", args.link_gbps, minimum=0, exclusive_minimum=True, maximum=1e7) * 1e9
    if args.link_from_run is not None:
        if link is not None:
            raise MLAError("give --link-gbps or --link-from-run, not both")
        from .bench.comm import stored_link_bandwidth

        # A collectives run of the history: all_reduce for TP's terms (the plan uses one link figure).
        link = stored_link_bandwidth(args.link_from_run).link_bandwidth_Bps
    plan = search(model, gpu, num_gpus=num_gpus, gpus_per_node=args.gpus_per_node, workload=wl,
                  ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, usd_per_gpu_hour=args.usd_per_gpu_hour,
                  weights_dtype=args.weights_dtype, kv_dtype=args.kv_dtype,
                  gpu_memory_utilization=args.gpu_memory_utilization, internode_gbps=args.internode_gbps,
                  link_bandwidth_Bps=link, block_size=args.block_size,
                  tp=args.tp if split_given else None, dp_attention=args.dp_attention if split_given else None,
                  ep=args.ep if split_given else None, pp=args.pp if split_given else None, batch=args.batch,
                  state_dtype=args.state_dtype,
                  ssm_state_dtype=args.ssm_state_dtype,
                  engine=None if args.bound_only else args.engine, kernel_tables=args.kernel_tables,
                  profile=args.profile, cross_check=args.cross_check and not args.bound_only)
    out = plan.to_dict()
    if any(getattr(args, name) is not None for name in TRAFFIC_FLAGS):
        out["traffic"] = _plan_traffic(args, model, gpu, plan, link)
    if pools is not None:
        out["disagg"] = _plan_disagg(args, model, gpu, wl, plan, link, pools)
    return out


def _disagg_pools(args) -> tuple | None:
    """(prefill GPUs, decode GPUs) given, (None, None) for `--disagg` (sizes searched), None
    without disaggregation. Raises MLAError on a half-given or inconsistent pair."""
    p, d = args.prefill_gpus, args.decode_gpus
    split_flags = [f for f in ("prefill_tp", "prefill_pp", "prefill_ep", "decode_tp", "decode_pp", "decode_ep")
                   if getattr(args, f) is not None] + [f for f in ("prefill_dp_attention", "decode_dp_attention")
                                                       if getattr(args, f)]
    if p is None and d is None:
        if args.disagg:
            if args.num_gpus is None or args.num_gpus < 2:
                raise MLAError("--disagg searches the pool sizes of --num-gpus: give at least 2 GPUs")
            return None, None
        if split_flags:
            raise MLAError(f"--{split_flags[0].replace('_', '-')} sets a pool of a disaggregated pair: give "
                           "--prefill-gpus and --decode-gpus, or --disagg")
        return None
    if p is None or d is None:
        raise MLAError("give both --prefill-gpus and --decode-gpus (or --disagg with --num-gpus to search them)")
    if args.disagg:
        raise MLAError("--disagg searches the pool sizes: give it or --prefill-gpus / --decode-gpus, not both")
    if args.num_gpus is not None and args.num_gpus != p + d:
        raise MLAError(f"--num-gpus ({args.num_gpus}) must be --prefill-gpus + --decode-gpus ({p + d}) or left out")
    return p, d


def _plan_disagg(args, model, gpu, wl, plan, link, pools) -> dict:
    """serving.disagg at the pools given (or searched), beside the aggregated plan on as many GPUs."""
    from .serving.disagg import disaggregate, search_disagg

    def split(role):
        fields = {k: getattr(args, f"{role}_{k}") for k in ("tp", "pp", "ep")}
        fields["dp_attention"] = getattr(args, f"{role}_dp_attention")
        return fields if any(v for v in fields.values()) else None

    kw = dict(workload=wl, gpus_per_node=plan.gpus_per_node, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms,
              prefill_split=split("prefill"), decode_split=split("decode"),
              engine=None if args.bound_only else args.engine, kernel_tables=args.kernel_tables,
              profile=args.profile, weights_dtype=args.weights_dtype, kv_dtype=args.kv_dtype,
              gpu_memory_utilization=args.gpu_memory_utilization, internode_gbps=args.internode_gbps,
              link_bandwidth_Bps=link, block_size=args.block_size, state_dtype=args.state_dtype,
              ssm_state_dtype=args.ssm_state_dtype)
    if pools[0] is None:
        r = search_disagg(model, gpu, num_gpus=plan.num_gpus, **kw)
    else:
        r = disaggregate(model, gpu, prefill_gpus=pools[0], decode_gpus=pools[1], **kw)
    out = r.to_dict()
    out["aggregated"] = None
    agg = plan.best
    if agg is not None and agg.fits:
        e = agg.estimate
        out["aggregated"] = {"split": agg.split, "num_gpus": plan.num_gpus,
                             "ttft_s": e.ttft_s if e else agg.ttft_s, "tpot_s": e.tpot_s if e else agg.tpot_s,
                             "output_tokens_per_s_per_gpu": e.output_tokens_per_s_per_gpu if e else None}
    return out


# The plan's traffic flags (`vllm bench serve` and `vllm serve` spellings); any of them runs the simulation.
TRAFFIC_FLAGS = ("rate", "burstiness", "max_concurrency", "num_prompts", "random_range_ratio", "dataset",
                 "max_num_seqs", "max_num_batched_tokens", "seed")


def _plan_traffic(args, model, gpu, plan, link) -> dict | None:
    """`mla_core.traffic.plan_traffic` at the plan's best point (its split), or None with the
    reason when the plan has no point."""
    from .traffic import TrafficConfig, best_point_deployment, plan_traffic, vllm_batch_defaults

    dep, reason = best_point_deployment(
        plan, gpu, weights_dtype=args.weights_dtype, kv_dtype=args.kv_dtype,
        gpu_memory_utilization=args.gpu_memory_utilization, internode_gbps=args.internode_gbps,
        link_bandwidth_Bps=link, block_size=args.block_size, state_dtype=args.state_dtype,
        ssm_state_dtype=args.ssm_state_dtype)
    if dep is None:
        return {"available": False, "reason": reason}
    batched, seqs = vllm_batch_defaults(gpu)
    cfg = TrafficConfig(
        input_len=args.input_len, output_len=args.output_len,
        num_prompts=args.num_prompts if args.num_prompts is not None else 1000,
        rate=args.rate if args.rate is not None else float("inf"),
        burstiness=args.burstiness if args.burstiness is not None else 1.0, max_concurrency=args.max_concurrency,
        random_range_ratio=args.random_range_ratio if args.random_range_ratio is not None else 0.0,
        dataset=args.dataset, max_num_seqs=args.max_num_seqs if args.max_num_seqs is not None else seqs,
        max_num_batched_tokens=args.max_num_batched_tokens if args.max_num_batched_tokens is not None else batched,
        prefix_hit=args.prefix_hit, spec_tokens=args.spec_tokens, acceptance=args.acceptance,
        seed=args.seed if args.seed is not None else 0, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms)
    out = plan_traffic(model, dep, cfg, engine=None if args.bound_only else args.engine,
                       kernel_tables=args.kernel_tables, profile=args.profile).to_dict()
    out["available"] = True
    out["split"] = plan.best.split
    return out


def _rate_arg(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity"):
        return float("inf")
    v = _real_arg("--rate")(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"--rate must be positive (requests a second) or inf, got {_short(text)}")
    return v


def cmd_presets(args) -> dict:
    from .presets import gpu_entries, model_entries

    return {
        "models": [{"id": k, "hf_repo": v.get("hf_repo")} for k, v in model_entries().items()],
        "gpus": [{"id": k, "name": v["name"]} for k, v in gpu_entries().items()],
    }


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser; with `only` (the subcommand the command line names), just that
    subcommand is built, which keeps the answer fast."""
    from .units import WEIGHT_DTYPES

    parser = _Parser(prog=PROG, formatter_class=_Formatter,
                     description="KV cache, capacity and decode roofline of MLA against MHA, GQA and MQA.",
                     epilog="Every figure follows the definitions in docs/model.md of the MLA explorer "
                            "(symbols, formulas, units, sources; installed copies carry it as "
                            "mla_explorer/docs/model.md). Token counts: exact, or K = 1,024 and "
                            "M = 1,048,576 tokens for round binary sizes (128K = 131,072). Installed "
                            "with pip, the same commands are `mla-explorer SUBCOMMAND ...`, and "
                            "`mla-explorer app` serves the app.")
    sub = parser.add_subparsers(dest="command", metavar="{kv,capacity,roofline,plan,bench,presets}")
    sub.required = True

    def add(name, help_text, func, **kw):
        if only not in (None, name):
            return None
        p = sub.add_parser(name, help=help_text, formatter_class=_Formatter, **kw)
        p.set_defaults(func=func)
        return p

    p = add("kv", "KV-cache bytes per token and in total", cmd_kv)
    if p:
        _add_model_args(p)

    p = add("capacity", "tokens and whole requests that fit per GPU and in the deployment", cmd_capacity)
    if p:
        _add_model_args(p)
        p.add_argument("--gpu", metavar="ID", help="GPU preset (see `presets`)")
        p.add_argument("--gpu-memory-gib", type=_real_arg("--gpu-memory-gib"),
                       help="memory of one GPU in GiB (overrides the preset)")
        p.add_argument("--num-gpus", type=_int_arg("--num-gpus"), help="GPUs in the deployment (default: tp)")
        p.add_argument("--tp", type=_int_arg("--tp"), default=1, help="tensor-parallel size (default 1)")
        p.add_argument("--dp-attention", action="store_true",
                       help="attention data parallelism: each GPU holds whole sequences")
        p.add_argument("--weights-dtype", choices=tuple(WEIGHT_DTYPES),
                       help="default: fp8 for fp8 checkpoints, else torch_dtype")
        p.add_argument("--gpu-memory-utilization", type=_real_arg("--gpu-memory-utilization"), default=0.9,
                       help="share of GPU memory the engine may use (vLLM's meaning; default 0.9)")
        p.add_argument("--kv-budget-gib", type=_real_arg("--kv-budget-gib"), help="KV budget per GPU in GiB, used as is")
        p.add_argument("--reserve-gib", type=_real_arg("--reserve-gib"),
                       help="memory kept back per GPU (activations, graphs), GiB (default 0)")

    p = add("roofline", "decode-step roofline: bytes, flops, time lower bound, tokens/s upper bound", cmd_roofline)
    if p:
        _add_model_args(p)
        p.add_argument("--gpu", metavar="ID", help="GPU preset (see `presets`)")
        p.add_argument("--bandwidth-tbps", type=_real_arg("--bandwidth-tbps"),
                       help="memory bandwidth in TB/s (overrides the preset)")
        p.add_argument("--peak-tflops", type=_real_arg("--peak-tflops"),
                       help="dense tensor peak in TFLOP/s (overrides the preset)")
        p.add_argument("--weights-dtype", choices=tuple(WEIGHT_DTYPES),
                       help="default: fp8 for fp8 checkpoints, else torch_dtype")
        p.add_argument("--mla-path", choices=("absorbed", "recompute", "expanded"), default="absorbed",
                       help="MLA decode: absorbed (default), recompute, or expanded")
        p.add_argument("--tp", type=_int_arg("--tp"), default=1, help="one GPU's share of a TP group (default 1)")

    p = add("plan", "serving plan: the split, batch, TTFT, TPOT, throughput, cost and launch commands", cmd_plan)
    if p:
        _add_model_args(p, cache=False)
        p.add_argument("--gpu", metavar="ID", help="GPU preset (see `presets`)")
        p.add_argument("--bandwidth-tbps", type=_real_arg("--bandwidth-tbps"),
                       help="memory bandwidth in TB/s (overrides the preset)")
        p.add_argument("--peak-tflops", type=_real_arg("--peak-tflops"),
                       help="dense tensor peak in TFLOP/s (overrides the preset)")
        p.add_argument("--num-gpus", type=_int_arg("--num-gpus"), help="GPUs in the deployment (default: tp, or 1)")
        p.add_argument("--gpus-per-node", type=_int_arg("--gpus-per-node"),
                       help="GPUs one NVLink domain joins (default: the GPU preset's, 72 on GB200 / GB300 NVL72, "
                            "else 8)")
        p.add_argument("--tp", type=_int_arg("--tp"),
                       help="GPUs a tensor-parallel group (a stage); with --batch: evaluate this split")
        p.add_argument("--pp", type=_int_arg("--pp"),
                       help="pipeline stages a replica (layers split over them; tp x pp GPUs a replica)")
        p.add_argument("--dp-attention", action="store_true", help="attention data parallelism within the group")
        p.add_argument("--ep", type=_int_arg("--ep"),
                       help="expert parallelism: any divisor of tp; the rest of the group slices each expert "
                            "(MoE TP = tp / ep)")
        p.add_argument("--batch", type=_int_arg("--batch"), help="sequences of the whole deployment (one point)")
        p.add_argument("--input-len", type=_int_arg("--input-len"), required=True, help="input tokens a request")
        p.add_argument("--output-len", type=_int_arg("--output-len"), required=True, help="output tokens a request")
        p.add_argument("--prefix-hit", type=_real_arg("--prefix-hit"), default=0.0,
                       help="share of input tokens already cached, [0, 1) (default 0)")
        p.add_argument("--spec-tokens", type=_int_arg("--spec-tokens", minimum=0), default=0,
                       help="speculative tokens a step, k (default 0)")
        p.add_argument("--acceptance", type=_real_arg("--acceptance"), default=0.0,
                       help="acceptance rate of each speculative token, [0, 1)")
        p.add_argument("--ttft-ms", type=_real_arg("--ttft-ms"), help="SLO: time to first token, ms")
        p.add_argument("--tpot-ms", type=_real_arg("--tpot-ms"), help="SLO: time per output token, ms")
        p.add_argument("--usd-per-gpu-hour", type=_real_arg("--usd-per-gpu-hour"),
                       help="your price of one GPU hour, $ (no price is built in)")
        p.add_argument("--internode-gbps", type=_real_arg("--internode-gbps"), default=400.0,
                       help="network per GPU across nodes, Gb/s (default 400)")
        p.add_argument("--link-gbps", type=_real_arg("--link-gbps"),
                       help="measured collective bus bandwidth, GB/s (replaces NVLink and network figures)")
        p.add_argument("--link-from-run", type=_int_arg("--link-from-run"), metavar="ID",
                       help="take the link bandwidth from a stored collectives run (its id: "
                            "`bench history --kind collectives` lists them): its all_reduce bus bandwidth at the "
                            "largest size")
        p.add_argument("--weights-dtype", choices=tuple(WEIGHT_DTYPES),
                       help="default: fp8 for fp8 checkpoints, else torch_dtype")
        p.add_argument("--gpu-memory-utilization", type=_real_arg("--gpu-memory-utilization"), default=0.9,
                       help="share of GPU memory the engine may use (vLLM's meaning; default 0.9)")
        g = p.add_argument_group("prefill/decode disaggregation (a prefill pool and a decode pool; the KV cache "
                                 "moves once a request; each pool's split searched unless given)")
        g.add_argument("--prefill-gpus", type=_int_arg("--prefill-gpus"), help="GPUs of the prefill pool")
        g.add_argument("--decode-gpus", type=_int_arg("--decode-gpus"), help="GPUs of the decode pool")
        g.add_argument("--disagg", action="store_true",
                       help="search the prefill / decode pool sizes of --num-gpus for the workload")
        for role in ("prefill", "decode"):
            g.add_argument(f"--{role}-tp", type=_int_arg(f"--{role}-tp"), help=f"the {role} pool's tp")
            g.add_argument(f"--{role}-pp", type=_int_arg(f"--{role}-pp"), help=f"the {role} pool's pipeline stages")
            g.add_argument(f"--{role}-ep", type=_int_arg(f"--{role}-ep"), help=f"the {role} pool's expert parallelism")
            g.add_argument(f"--{role}-dp-attention", action="store_true",
                           help=f"attention data parallelism in the {role} pool")
        t = p.add_argument_group("traffic (any of these simulates requests over time at the best point; "
                                 "`vllm bench serve` and `vllm serve` meanings)")
        t.add_argument("--rate", type=_rate_arg, help="requests a second, or inf (default inf: all at once)")
        t.add_argument("--burstiness", type=_real_arg("--burstiness"),
                       help="gamma shape of the arrival gaps (default 1: Poisson)")
        t.add_argument("--max-concurrency", type=_int_arg("--max-concurrency"), help="clients: requests in flight at most")
        t.add_argument("--num-prompts", type=_int_arg("--num-prompts"), help="requests in the run (default 1000)")
        t.add_argument("--random-range-ratio", type=_real_arg("--random-range-ratio"),
                       help="lengths uniform in [L (1 - r), L (1 + r)], 0 <= r < 1 (default 0: fixed)")
        t.add_argument("--dataset", metavar="ID",
                       help="draw lengths from a shipped histogram (data/traffic_lengths.json, e.g. azure-conv-2023)")
        t.add_argument("--max-num-seqs", type=_int_arg("--max-num-seqs"),
                       help="engine: requests running at once (default vLLM's: 1024 on >= 70 GiB GPUs, else 256)")
        t.add_argument("--max-num-batched-tokens", type=_int_arg("--max-num-batched-tokens"),
                       help="engine: tokens a step, chunked prefill (default vLLM's: 8192 on >= 70 GiB GPUs, else 2048)")
        t.add_argument("--seed", type=_int_arg("--seed", minimum=0), help="random seed (default 0)")
        from .serving.engines import ENGINES
        from .serving.tables import TABLE_SOURCES

        p.add_argument("--engine", choices=ENGINES, default="vllm",
                       help="the engine whose kernel tables, step overheads and CUDA-graph rules the estimate "
                            "follows, and whose launch command comes first (default vllm)")
        p.add_argument("--kernel-tables", choices=TABLE_SOURCES, default="auto",
                       help="where op times come from: auto (your --profile, then aiconfigurator-core's measured "
                            "tables when installed, then the uncalibrated model), or one of them")
        p.add_argument("--profile", metavar="FILE",
                       help="your own kernel profile (a JSON file of `bench --profile`'s shape): first in precedence")
        p.add_argument("--cross-check", action="store_true",
                       help="also run aiconfigurator-core's own engine at the best point (needs the aic extra; "
                            "about 2 s more)")
        p.add_argument("--bound-only", action="store_true", help="bounds only: no estimate")

    add("bench", "measure this device: bandwidth, matmul peak, decode attention (needs torch; "
                 "`bench --help`); `bench collectives` under torchrun; `bench import FILE` for vLLM / SGLang "
                 "results; `bench history` lists the saved runs", None, add_help=False)

    p = add("presets", "list model and GPU presets", cmd_presets)
    if p:
        p.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _import_dataclasses() -> None:
    """Import `dataclasses` without loading `inspect` until it is used.

    `dataclasses` imports `inspect` at its top (and with it ast, dis, tokenize: a fifth of an
    analytic command's start-up, measured by benchmarks/cli_startup.py) but, in Python 3.11,
    uses it only to write a signature into a dataclass that has no docstring (every one here has
    one). While `dataclasses` is imported, `inspect` is a stand-in module whose attributes load
    the real one on first use (PEP 562 `__getattr__`); the stand-in is out of `sys.modules`
    again right after, so any other `import inspect` gets the real module. Nothing changes where
    either is already imported (a test runner, the app)."""
    if "dataclasses" in sys.modules or "inspect" in sys.modules:
        return
    import types

    stand_in = types.ModuleType("inspect", "stands in for `inspect` inside `dataclasses` until first used")

    def __getattr__(attr):
        import importlib

        return getattr(importlib.import_module("inspect"), attr)

    stand_in.__getattr__ = __getattr__
    sys.modules["inspect"] = stand_in
    try:
        import dataclasses  # noqa: F401
    finally:
        if sys.modules.get("inspect") is stand_in:
            del sys.modules["inspect"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("kv", "capacity", "roofline", "plan"):  # they build a model: as fast as Python starts
        _import_dataclasses()
    if argv and argv[0] == "bench":
        # The microbenchmark has its own parser and imports torch; keep it out of the fast path.
        try:
            from .bench.cli import main as bench_main
        except ImportError as e:
            from .install import setup

            print(f"{PROG} bench: error: the benchmark needs torch ({e}); `{setup().torch_install}` adds it",
                  file=sys.stderr)
            return 2
        return bench_main(argv[1:])
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
        result = args.func(args)
    except _UsageError as e:
        print(_one_line(str(e)), file=sys.stderr)
        return 2
    except MLAError as e:
        print(_one_line(f"{PROG} {argv[0] if argv else ''}: error: {e}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if hasattr(result, "to_dict"):
        result = result.to_dict()
    try:
        if getattr(args, "json", False):
            import json

            try:
                text = json.dumps(result, indent=2, allow_nan=False)
            except ValueError:
                print(f"{PROG} {argv[0]}: error: the inputs give a figure that is not finite", file=sys.stderr)
                return 2
            print(text)
        else:
            print(render_table(args.command, result))
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def render_table(command: str, result: dict) -> str:
    """A readable two-column table with units for the non-JSON output."""
    from .units import (format_bytes, format_count, format_rate, format_seconds, format_token_rate,
                        format_tokens, format_tokens_exact)

    def b(v):  # exact bytes, and the binary unit beside them unless that would repeat them ("656 B")
        if v is None:
            return "n/a"
        short = format_bytes(v)
        return f"{v:,} B" if short.endswith(" B") else f"{v:,} B ({short})"

    rows: list[tuple[str, str]] = []
    r = result
    if command == "presets":
        lines = ["models: " + ", ".join(m["id"] for m in r["models"]), "gpus:   " + ", ".join(g["id"] for g in r["gpus"])]
        return "\n".join(lines)
    if command == "plan":
        return render_plan(r)
    rows.append(("model", f"{r['model']} ({r['attention'].upper()})"))
    if command == "kv":
        rows += [
            ("KV dtype / layout", f"{r['kv_dtype']} / {r['cache_layout']}"),
            ("context x batch", f"{format_tokens_exact(r['context'])} x {r['batch']}"),
            ("KV bytes per token per layer", b(r["kv_bytes_per_token_per_layer"])),
            ("KV bytes per token (all layers)", b(r["kv_bytes_per_token"])),
            ("KV cache per sequence", b(r["kv_cache_bytes_per_sequence"])),
            ("KV cache, whole batch", b(r["kv_cache_bytes"])),
        ]
        if r["sliding_window_layers"]:
            rows.append(("sliding-window layers", f"{r['sliding_window_layers']} of {r['num_hidden_layers']}"))
        if r["state_bytes_per_sequence"]:
            dtypes = (f" (conv {r['state_dtype']}, recurrent {r['ssm_state_dtype']})"
                      if r["recurrent_layers"] and r["state_dtype"] != r["ssm_state_dtype"]
                      else f" ({r['state_dtype']})" if r["recurrent_layers"] else " (float32 compressor state)")
            what = "recurrent state per sequence" if r["recurrent_layers"] else "compressor state per sequence"
            rows += [(what, b(r["state_bytes_per_sequence"]) + dtypes),
                     ("cache + state, whole batch", b(r["cache_bytes"]))]
        if r["is_hybrid"] or r["draft_layers"]:
            for g in r["layers"]:
                rows.append((f"  {g['layers']} x {g['kind']}", f"{g['label']}: " + b(g["bytes_per_layer"]) + " a layer"))
        if r["indexer_bytes_per_token"]:
            rows.append(("of which indexer per token", b(r["indexer_bytes_per_token"])))
    elif command == "capacity":
        rows += [
            ("GPUs / TP / DP-attention", f"{r['num_gpus']} / {r['tp']} / {'yes' if r['dp_attention'] else 'no'}"),
            ("KV dtype / weights dtype", f"{r['kv_dtype']} / {r['weights_dtype']}"),
            ("memory per GPU", b(r["memory_bytes_per_gpu"])),
            ("weights per GPU", b(r["weights_bytes_per_gpu"]) + ("" if r["weights_fit"] else "  (DO NOT FIT)")),
            ("KV budget per GPU", b(r["kv_budget_bytes_per_gpu"])),
            ("KV bytes per token per GPU", b(r["kv_bytes_per_token_per_gpu"])),
            *([("recurrent state per request per GPU", b(r["state_bytes_per_request_per_gpu"]))]
              if r["state_bytes_per_request_per_gpu"] else []),
            ("block size", f"{r['block_size']} tokens"),
            ("max tokens per GPU", format_tokens_exact(r["max_tokens_per_gpu"])),
            ("max tokens, deployment", format_tokens_exact(r["max_tokens_total"])),
            (f"whole requests of {format_tokens(r['context'])} at once", f"{r['max_concurrent_requests']:,}"),
        ]
        if "mha_formula_waste_factor" in r:
            n = r["mha_formula_max_concurrent_requests"]
            rows.append(("MHA-formula allocator would fit",
                         f"{n:,} request{'' if n == 1 else 's'} "
                         f"({r['mha_formula_waste_factor']:.1f}x the bytes per token)"))
    elif command == "roofline":
        rows += [
            ("GPU", f"{r['gpu']}: {format_rate(r['bandwidth_Bps'], 'B/s')}, {format_rate(r['peak_flops'], 'FLOP/s')} "
                    f"({r['weights_dtype']})"),
            ("batch x context", f"{r['batch']} x {format_tokens_exact(r['context'])}" + (f", TP{r['tp']} share" if r["tp"] > 1 else "")),
            ("parameters (total / active per token)", f"{format_count(r['params_total'])} / {format_count(r['params_active_per_token'])}"),
            ("weights read per step", b(r["weights_bytes_per_step"])),
            ("weights held per GPU", b(r["weights_resident_bytes_per_gpu"])
             + ("" if r["weights_fit_in_memory"] else f"  (DO NOT FIT in one {r['gpu']}: use --tp)")),
            ("attention bytes (KV read)", b(r["attention_bytes"])),
            ("attention flops", f"{r['attention_flops']:,}"),
            *([("recurrent state read + written", b(r["state_bytes_per_step"]))] if r["state_bytes_per_step"] else []),
            ("attention intensity", f"{r['attention_intensity_flop_per_byte']:.1f} flop/B "
                                    f"(ridge at the bf16 peak: {r['attention_ridge_flop_per_byte']:.1f} flop/B)"),
            ("whole step intensity", f"{r['step_intensity_flop_per_byte']:.1f} flop/B "
                                     f"(ridge at the {r['weights_dtype']} peak: {r['ridge_flop_per_byte']:.1f} flop/B)"),
            ("step time (lower bound)", f"{format_seconds(r['step_time_s'])}, {r['bound']} bound"),
            ("tokens/s (upper bound)", format_token_rate(r["tokens_per_s"])),
        ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"{k.ljust(width)}  {v}" for k, v in rows] + [f"note: {n}" for n in r.get("notes", ())])


def render_plan(r: dict) -> str:
    """The plan as text: the estimate first with the bound beside it, where the time goes, the
    best point, its cost and the launch commands (the engine's first)."""
    from .units import format_seconds, format_token_rate

    best = r["best"]
    n = r["points"]
    lines = [f"model {r['model']} on {r['num_gpus']} x {r['gpu']} ({r['gpus_per_node']} a node); "
             f"{r['workload']['input_len']:,} in / {r['workload']['output_len']:,} out; "
             f"{n:,} point{'' if n == 1 else 's'} tried"]
    if best is None:
        return "\n".join(lines + ["no point: " + "; ".join(r["notes"])])

    def usd(v):
        return "n/a (give --usd-per-gpu-hour)" if v is None else f"${v:,.4f}"

    est = r.get("estimate")
    if est:
        b = est["bound"]
        from .serving.engines import engine_rules

        lines.append(f"estimate for {engine_rules(r['engine']).label}, confidence {est['confidence']}, "
                     "the bound beside it:")
        lines.append(f"  source: {est['source']}")
        rows = [
            ("TTFT", format_seconds(est["ttft_s"]), f"bound {format_seconds(b['ttft_s'])}"),
            ("TPOT", format_seconds(est["tpot_s"]), f"bound {format_seconds(b['tpot_s'])}, {b['bound']} bound"),
            ("tokens/s per user", f"{est['tokens_per_s_per_user']:,.1f}", f"bound {b['tokens_per_s_per_user']:,.1f}"),
            ("tokens/s per GPU (decode)", f"{est['tokens_per_s_per_gpu']:,.1f}", f"bound {b['tokens_per_s_per_gpu']:,.1f}"),
            ("output tokens/s per GPU", f"{est['output_tokens_per_s_per_gpu']:,.1f}", "whole requests, prefill included"),
        ]
        w0, w1 = max(len(x[0]) for x in rows), max(len(x[1]) for x in rows)
        lines += [f"  {k.ljust(w0)}  {v.rjust(w1)}   ({c})" for k, v, c in rows]
        for label, steps in (("decode step", [est["decode_step"]]), ("prefill", est["prefill"])):
            total = sum(s["time_s"] for s in steps)
            by: dict = {}
            for s in steps:
                for k, v in s["by_class_s"].items():
                    by[k] = by.get(k, 0.0) + v
            parts = ", ".join(f"{k} {format_seconds(v)}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
            graph = "CUDA graph" if steps[0]["captured"] else "eager"
            lines.append(f"  {label} {format_seconds(total)} ({graph}; overhead "
                         f"{format_seconds(sum(s['overhead_s'] for s in steps))}): {parts}")
        cc = r.get("cross_check")
        if cc:
            if cc.get("available"):
                lines.append(f"  aiconfigurator-core's own engine ({cc['system']}/{cc['backend']} {cc['version']}): "
                             f"TPOT {format_seconds(cc['tpot_s'])}, TTFT {format_seconds(cc['ttft_s'])}")
            else:
                lines.append(f"  aiconfigurator-core cross-check: {cc['reason']}")
        lines.append("")
    rows = [
        ("best split", f"{best['split']} at batch {best['batch']:,} (memory cap {best['max_batch']:,})"
                       + ("" if best["fits"] else "  (DOES NOT FIT in memory)")),
        ("TTFT (lower bound)", f"{format_seconds(best['ttft_s'])}, {best['prefill_bound']} bound"),
        ("TPOT (lower bound)", f"{format_seconds(best['tpot_s'])}, {best['bound']} bound "
                               f"(serial: {format_seconds(best['tpot_serial_s'])})"),
        ("tokens/s per user (bound)", f"{best['tokens_per_s_per_user']:,.1f}"),
        ("tokens/s per GPU (bound)",
         f"{best['tokens_per_s_per_gpu']:,.1f} (deployment {format_token_rate(best['tokens_per_s'])})"),
        ("whole step intensity", f"{best['step_intensity_flop_per_byte']:.1f} flop/B"),
        ("$ per million output tokens", usd(best["usd_per_million_output_tokens"])),
        ("$ per million input tokens", usd(best["usd_per_million_input_tokens"])),
        ("what binds", best["limit"]),
    ]
    width = max(len(k) for k, _ in rows)
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    commands = [("vllm", "vLLM:         "), ("sglang", "SGLang:       "), ("trtllm", "TensorRT-LLM: ")]
    first = r.get("engine") or "vllm"
    commands.sort(key=lambda c: c[0] != first)
    lines.append("")
    lines += [label + (r.get(f"{key}_command") or "n/a") for key, label in commands]
    lines += [f"note: {n}" for n in r["notes"]]
    if r.get("traffic"):
        lines += [""] + render_traffic(r["traffic"])
    if r.get("disagg"):
        lines += [""] + render_disagg(r["disagg"], first)
    return "\n".join(lines)


def render_disagg(d: dict, first: str = "vllm") -> list[str]:
    """The disaggregated pair: pools, TTFT with its KV transfer, TPOT, rate and what limits it,
    the aggregated plan beside it, both pools' commands (the chosen engine's first) and the router."""
    from .units import format_bytes, format_seconds

    b = d["bound"]
    lines = [f"disaggregated ({d['source'].split(' (')[0]}): {d['prefill_gpus']} prefill GPUs ({d['prefill_split']}) + "
             f"{d['decode_gpus']} decode GPUs ({d['decode_split']})",
             f"  TTFT {format_seconds(d['ttft_s'])} (prefill {format_seconds(d['ttft_s'] - d['kv_transfer_s'])} + "
             f"KV transfer {format_seconds(d['kv_transfer_s'])}: {format_bytes(d['kv_transfer_bytes'])} a request, "
             f"{format_bytes(d['kv_transfer_bytes_per_gpu'])} on the busiest GPU over {d['link']}); bound "
             f"{format_seconds(b['ttft_s'])}",
             f"  TPOT {format_seconds(d['tpot_s'])} (bound {format_seconds(b['tpot_s'])})",
             f"  {d['request_rate']:,.2f} requests/s (limit: {d['limit']}), {d['output_tokens_per_s_per_gpu']:,.1f} "
             f"output tokens/s per GPU (bound {b['output_tokens_per_s_per_gpu']:,.1f})"]
    agg = d.get("aggregated")
    if agg:
        rate = agg["output_tokens_per_s_per_gpu"]
        lines.append(f"  aggregated on {agg['num_gpus']} GPUs ({agg['split']}): TTFT {format_seconds(agg['ttft_s'])}, "
                     f"TPOT {format_seconds(agg['tpot_s'])}"
                     + (f", {rate:,.1f} output tokens/s per GPU" if rate is not None else ""))
    for t in d.get("searched", ()):
        lines.append(f"  tried {t['prefill_gpus']}P + {t['decode_gpus']}D: {t['output_tokens_per_s_per_gpu']:,.1f} "
                     f"output tokens/s per GPU, TTFT {format_seconds(t['ttft_s'])}, TPOT {format_seconds(t['tpot_s'])}"
                     + ("" if t["meets_slo"] is not False else " (misses the SLOs)"))
    c = d["commands"]
    engines = [("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")]
    engines.sort(key=lambda e: e[0] != first)
    for key, label in engines:
        for role in ("prefill", "decode"):
            lines.append(f"  {label} {role}: {c[role][f'{key}_command'] or 'n/a'}")
    lines.append(f"  SGLang router: {c['sglang_router_command']}")
    lines.append(f"  TensorRT-LLM disaggregated server: {c['trtllm_disagg_command']}")
    lines += [f"  note: {n}" for n in d["notes"]]
    return lines


def render_traffic(t: dict) -> list[str]:
    """The plan's traffic section: the run, the percentiles of each metric, throughput, goodput."""
    from .units import format_seconds

    if not t.get("available"):
        return [f"traffic: {t.get('reason', 'n/a')}"]
    c = t["config"]
    lines = [f"traffic ({t['split']}; step times: {t['step_times']}): {t['simulated_requests']:,} requests, {c['mode']}, "
             f"{t['mean_input_len']:,.0f} in / {t['mean_output_len']:,.0f} out on average; "
             f"max_num_seqs {c['max_num_seqs']:,}, max_num_batched_tokens {c['max_num_batched_tokens']:,}"]

    def f(v):
        return "n/a" if v is None else format_seconds(v)

    for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"), ("E2E", "e2e_s")):
        m = t[key]
        lines.append(f"  {name:<5} mean {f(m['mean'])}, p50 {f(m['p50'])}, p90 {f(m['p90'])}, p99 {f(m['p99'])}")
    lines.append(f"  throughput {t['request_throughput']:,.2f} req/s, {t['output_tokens_per_s']:,.1f} output tokens/s"
                 + (f"; goodput {t['goodput_rps']:,.2f} req/s" if t["goodput_rps"] is not None else ""))
    if t["max_rate_at_slo"] is not None:
        lines.append(f"  highest Poisson rate meeting the SLOs at p99: {t['max_rate_at_slo']:,.3g} req/s")
    lines.append("  SATURATED: arrivals outpace the engine, the queue grows without bound" if t["saturated"]
                 else "  not saturated")
    lines += [f"  note: {n}" for n in t["notes"]]
    lines.append(f"  ({t['sim_wall_s'] * 1e3:,.0f} ms to simulate)")
    return lines
