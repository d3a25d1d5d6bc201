"""Launch commands for a serving plan's point: `vllm serve ...` and `python -m sglang.launch_server ...`.

Each flag is spelled as the engine's own argument parser spells it. Checked against:
  vLLM    vllm/engine/arg_utils.py (EngineArgs.add_cli_args, commit 99d7eb5d), vllm/config/cache.py
          (CacheDType: auto, bfloat16, int8, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla;
          BlockSize 1..256), vllm/config/speculative.py (method "mtp"), and
          docs/serving/data_parallel_deployment.md (commit 01e4fce0: --data-parallel-size-local,
          --data-parallel-address, --data-parallel-rpc-port, --headless, --data-parallel-start-rank);
          the v0.10 to v0.12 line of releases.
  SGLang  python/sglang/srt/server_args.py (commit 001067ff): --model-path, --tp-size, --dp-size,
          --enable-dp-attention, --ep-size, --kv-cache-dtype (auto, fp8_e5m2, fp8_e4m3, mxfp8,
          bf16, bfloat16, nvfp4, fp4_mx_block16, fp4_e2m1), --context-length,
          --max-running-requests, --mem-fraction-static, --page-size, --nnodes, --node-rank,
          --dist-init-addr, --speculative-algorithm / --speculative-num-steps /
          --speculative-eagle-topk / --speculative-num-draft-tokens, --trust-remote-code,
          --mamba-ssm-dtype (float32, bfloat16, float16: the SSM state only).
  vLLM    --mamba-cache-dtype (vllm/config/cache.py MambaDType: auto, float32, float16, bfloat16 in
          the late-2025 releases; conv and SSM state together).
  TensorRT-LLM  `trtllm-serve MODEL` (docs: commands/trtllm-serve, 1.x): --backend pytorch, --tp_size,
          --ep_size, --max_batch_size, --max_num_tokens, --max_seq_len, --trust_remote_code;
          attention DP and the KV dtype are LLM-API options (enable_attention_dp,
          kv_cache_config.dtype) given in a --config YAML, so the command says so in a note.
Pipeline stages and the MoE split (checked against):
  vLLM    --pipeline-parallel-size (EngineArgs); --enable-expert-parallel spreads the experts over
          every TP x DP rank (ep = tp): there is no MoE TP x EP split, so a plan with 1 < ep < tp
          gets no vLLM command and a note. Stages split the layers by vllm/distributed/utils.py
          get_pp_indices (VLLM_PP_LAYER_PARTITION overrides it).
  SGLang  --pp-size (alias --pipeline-parallel-size) and --ep-size (alias --expert-parallel-size)
          in python/sglang/srt/server_args.py; parallel_state.initialize_model_parallel sets
          moe_tp_size = tp_size // ep_size, so --tp-size 8 --ep-size 4 is MoE TP2 x EP4.
  TensorRT-LLM  tensorrt_llm/commands/serve.py: --tp_size, --pp_size, --ep_size (the LLM API's
          moe_expert_parallel_size); tensorrt_llm/mapping.py derives moe_tp_size = tp_size //
          moe_ep_size when only the EP size is given (moe_tensor_parallel_size states it in the YAML).
Prefill/decode disaggregation (`role` 'prefill' or 'decode'), checked against:
  vLLM    docs/features/nixl_connector_usage.md (commit 026c83f9): --kv-transfer-config
          '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' on a prefiller, "kv_consumer" on a
          decoder; VLLM_NIXL_SIDE_CHANNEL_HOST / _PORT (default 5600) per instance; a proxy sends each
          request to a prefiller, then to a decoder (tests/v1/kv_connector/nixl_integration/
          toy_proxy_server.py --prefiller-hosts/--prefiller-ports/--decoder-hosts/--decoder-ports).
  SGLang  docs/advanced_features/pd_disaggregation.md (commit 08edc506) and server_args.py
          (DISAGG_TRANSFER_BACKEND_CHOICES mooncake, nixl, ascend, fake, mori, mooncake_tcp):
          --disaggregation-mode prefill|decode, --disaggregation-transfer-backend (mooncake by
          default), --disaggregation-ib-device for the RDMA NIC; the router `python -m
          sglang_router.launch_router --pd-disaggregation --prefill URL --decode URL`.
  TensorRT-LLM  docs/source/features/disagg-serving.md: each server's --config YAML holds
          cache_transceiver_config {backend: UCX | NIXL | MPI | DEFAULT, max_tokens_in_buffer} (and
          disable_overlap_scheduler: True on context servers); `trtllm-serve disaggregated -c
          disagg_config.yaml` (context_servers / generation_servers urls) routes the requests.
A command is built with shlex.join, so it parses back (shlex.split) into the same arguments.
A setting an engine cannot express (a KV dtype it lacks) gives None and a note, not a guess.
"""
from __future__ import annotations

import shlex

from ..errors import MLAError
from ..spec import ModelSpec

HEAD_ADDRESS = "HEAD_NODE_IP"  # placeholder for the first node's address in multi-node commands
VLLM_RPC_PORT = 13345
DISAGG_PORTS = {"prefill": 30000, "decode": 30001}  # the pools' HTTP ports in the disaggregated commands
ROLES = (None, "prefill", "decode")
# GPUs one host drives in a rack-scale NVLink domain (GB200 / GB300 NVL72 compute trays: 2 Grace CPUs
# x 2 GPUs; aiconfigurator-core 0.12.0 systems/gb200.yaml and gb300.yaml, num_gpus_per_node 4).
RACK_HOST_GPUS = 4
SGLANG_INIT_PORT = 20000

# Our KV dtypes (mla_core.units.KV_DTYPES after `auto` is resolved) in each engine's spelling.
VLLM_KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
                  "fp8_ds_mla": "fp8_ds_mla"}
SGLANG_KV_DTYPES = {"bf16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
                    "fp4": "nvfp4"}
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# Our recurrent-state dtypes in the engines' spelling (vLLM --mamba-cache-dtype, SGLang --mamba-ssm-dtype).
STATE_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def model_path_for(model: ModelSpec) -> str:
    """The Hugging Face repo of a preset, else the model's name (an uploaded config's path)."""
    from ..presets import model_entries

    try:
        entry = model_entries().get(model.name)
    except MLAError:
        entry = None
    return (entry or {}).get("hf_repo") or model.name


def _engine_kv_dtype(model: ModelSpec, kv_dtype: str, table: dict) -> str | None:
    """The engine's spelling, 'auto' when it is the model's own dtype, None when it has none."""
    from ..kv import resolve_kv_dtype

    resolved = resolve_kv_dtype(model, kv_dtype)
    if kv_dtype == "auto" or resolved == model.torch_dtype:
        return "auto"
    return table.get(resolved)


def launch_commands(model: ModelSpec, dep, wl, point, *, model_path: str | None = None, role: str | None = None
                    ) -> dict:
    """The vLLM, SGLang and TensorRT-LLM commands that start `point` (a `serving.Point`) of `dep`.

    The commands start one replica (a group of `tp` GPUs); a group spanning nodes gets the first
    node's command with `HEAD_NODE_IP` to fill in. Returns `vllm_command`, `sglang_command` (str or
    None), `trtllm_command`, `replicas`, `nodes_per_replica`, `max_model_len`, `max_running_requests_per_engine`
    and `notes` (tuple of str: what to do on the other nodes, what an engine cannot express).
    `role` 'prefill' or 'decode' starts that pool of a disaggregated pair (the module docstring's
    flags; `disagg_commands` adds the router)."""
    if role not in ROLES:
        raise MLAError(f"role must be prefill, decode or none, got {role!r}")
    from ..capacity import default_block_size

    path = model_path or model_path_for(model)
    tp, dp, ep = point.tp, point.dp_attention, point.ep
    pp = getattr(point, "pp", 1)
    moe_tp = tp // ep if ep > 1 else tp
    world = tp * pp  # GPUs of one replica
    # serving.check_deployment guarantees the layout: a replica within one node, or whole nodes.
    gpn = min(dep.gpus_per_node, world)
    nodes = world // gpn
    max_len = wl.input_len + wl.output_len
    block = dep.block_size or default_block_size(model)
    per_replica = max(1, point.batch_per_replica)
    gmu = f"{dep.gpu_memory_utilization:g}"
    notes = []
    others = "node 1" if nodes == 2 else f"nodes 1 to {nodes - 1}"
    if point.replicas > 1:
        notes.append(f"start {point.replicas} replicas of {world} GPUs each (one command per replica) "
                     "behind a load balancer")
    if pp > 1:
        from ..spec import pp_layer_counts

        counts = pp_layer_counts(model.num_hidden_layers, pp)
        notes.append(f"{pp} pipeline stages of {', '.join(map(str, counts))} decoder layers (vLLM's and SGLang's "
                     "split; TensorRT-LLM gives the extra layers to the first stages)")
    if dep.gpus_per_node > 8 and world > RACK_HOST_GPUS:
        notes.append(f"one NVLink domain of {dep.gpus_per_node} GPUs spans hosts of {RACK_HOST_GPUS} GPUs (NVL72 "
                     f"compute trays): a replica of {world} GPUs starts on {-(-world // RACK_HOST_GPUS)} hosts, "
                     "as a multi-node launch (vLLM on Ray, SGLang --nnodes / --node-rank, TensorRT-LLM mpirun)")
    split_moe = 1 < ep < tp
    mtp = model.num_nextn_predict_layers > 0
    k = wl.spec_tokens
    # The recurrent state's dtype, when the plan set one and the model has recurrent layers.
    state_flag = (STATE_DTYPE_NAMES[dep.state_dtype]
                  if dep.state_dtype != "auto" and model.recurrent_layers else None)
    # The recurrent (SSM) part alone: vLLM's --mamba-ssm-cache-dtype, SGLang's --mamba-ssm-dtype.
    ssm_flag = (STATE_DTYPE_NAMES[dep.ssm_state_dtype]
                if dep.ssm_state_dtype != "auto" and model.recurrent_layers else None)

    # vLLM
    vllm: list[str] | None = ["vllm", "serve", path]
    if dp:
        # Attention data parallel over the group, experts over DP x TP (EP with the flag).
        vllm += ["--data-parallel-size", str(tp), "--tensor-parallel-size", "1"]
        if nodes > 1:
            vllm += ["--data-parallel-size-local", str(gpn), "--data-parallel-address", HEAD_ADDRESS,
                     "--data-parallel-rpc-port", str(VLLM_RPC_PORT)]
            notes.append(f"vLLM, {others}: the same command with --headless and "
                         f"--data-parallel-start-rank {gpn}*NODE_RANK")
        per_engine = -(-per_replica // tp)
    else:
        vllm += ["--tensor-parallel-size", str(tp)]
        if pp > 1:
            vllm += ["--pipeline-parallel-size", str(pp)]
        if nodes > 1:
            vllm += ["--distributed-executor-backend", "ray"]
            notes.append(f"vLLM: a {'replica' if pp > 1 else 'TP group'} over {nodes} nodes runs on a Ray cluster "
                         "(ray start on every node)")
        per_engine = per_replica
    if ep > 1 and not split_moe:
        vllm.append("--enable-expert-parallel")
    vdtype = _engine_kv_dtype(model, dep.kv_dtype, VLLM_KV_DTYPES)
    if split_moe:
        notes.append(f"vLLM has no MoE TP x EP split: --enable-expert-parallel spreads the experts over all {tp} "
                     f"ranks (ep = tp), without it they are TP{tp}; no vLLM command for MoE TP{moe_tp} x EP{ep}")
        vllm = None
    elif vdtype is None:
        notes.append(f"vLLM has no kv_cache_dtype for {dep.kv_dtype}: no vLLM command")
        vllm = None
    else:
        vllm += ["--kv-cache-dtype", vdtype, "--max-model-len", str(max_len), "--max-num-seqs", str(per_engine),
                 "--gpu-memory-utilization", gmu]
        if block in VLLM_BLOCK_SIZES:
            vllm += ["--block-size", str(block)]
        if k:
            if mtp:
                vllm += ["--speculative-config", f'{{"method": "mtp", "num_speculative_tokens": {k}}}']
            else:
                notes.append("vLLM: speculative decoding without MTP layers needs a draft model "
                             "(--speculative-config with its \"model\")")
        if state_flag:
            vllm += ["--mamba-cache-dtype", state_flag]
        if ssm_flag:
            vllm += ["--mamba-ssm-cache-dtype", ssm_flag]
        if role:
            kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
            vllm += ["--port", str(DISAGG_PORTS[role]), "--kv-transfer-config",
                     f'{{"kv_connector":"NixlConnector","kv_role":"{kv_role}"}}']
        vllm.append("--trust-remote-code")

    # SGLang: --tp-size is the whole group; DP-attention sets --dp-size to it.
    sgl: list[str] | None = ["python", "-m", "sglang.launch_server", "--model-path", path, "--tp-size", str(tp)]
    if pp > 1:
        sgl += ["--pp-size", str(pp)]
    if dp:
        sgl += ["--dp-size", str(tp), "--enable-dp-attention"]
    if ep > 1:
        sgl += ["--ep-size", str(ep)]
    sdtype = _engine_kv_dtype(model, dep.kv_dtype, SGLANG_KV_DTYPES)
    if sdtype is None:
        notes.append(f"SGLang has no --kv-cache-dtype for {dep.kv_dtype}: no SGLang command")
        sgl = None
    else:
        sgl += ["--kv-cache-dtype", sdtype, "--context-length", str(max_len),
                "--max-running-requests", str(per_replica), "--mem-fraction-static", gmu, "--page-size", str(block)]
        if k:
            if mtp:
                sgl += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(k),
                        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1)]
            else:
                notes.append("SGLang: speculative decoding without MTP layers needs a draft model "
                             "(--speculative-draft-model-path)")
        if ssm_flag or state_flag:
            sgl += ["--mamba-ssm-dtype", ssm_flag or state_flag]
            if state_flag:
                notes.append("SGLang's --mamba-ssm-dtype sets the SSM state only; its conv state keeps the model's dtype")
        if nodes > 1:
            sgl += ["--nnodes", str(nodes), "--node-rank", "0", "--dist-init-addr", f"{HEAD_ADDRESS}:{SGLANG_INIT_PORT}"]
            notes.append(f"SGLang, {others}: the same command with --node-rank NODE_RANK")
        if role:
            sgl += ["--port", str(DISAGG_PORTS[role]), "--disaggregation-mode", role,
                    "--disaggregation-transfer-backend", "mooncake"]
        sgl.append("--trust-remote-code")
    # TensorRT-LLM (PyTorch backend)
    trt = ["trtllm-serve", path, "--backend", "pytorch", "--tp_size", str(tp)]
    if pp > 1:
        trt += ["--pp_size", str(pp)]
    if ep > 1:
        trt += ["--ep_size", str(ep)]
    if split_moe:
        notes.append(f"MoE TP{moe_tp} x EP{ep}: SGLang's --tp-size {tp} --ep-size {ep} and TensorRT-LLM's "
                     f"--tp_size {tp} --ep_size {ep} give moe_tp {moe_tp} (tp / ep; TensorRT-LLM's YAML may state "
                     f"moe_tensor_parallel_size: {moe_tp})")
    trt += ["--max_batch_size", str(per_replica), "--max_seq_len", str(max_len), "--trust_remote_code"]
    extra = []
    if role:
        trt += ["--port", str(DISAGG_PORTS[role]), "--config", "ctx_config.yml" if role == "prefill" else "gen_config.yml"]
        extra.append(("disable_overlap_scheduler: true; " if role == "prefill" else "")
                     + f"cache_transceiver_config: {{backend: UCX, max_tokens_in_buffer: {wl.input_len}}}")
    if dp:
        extra.append("enable_attention_dp: true")
    from ..kv import resolve_kv_dtype

    kv = resolve_kv_dtype(model, dep.kv_dtype)
    if dep.kv_dtype != "auto" and kv != model.torch_dtype:
        extra.append(f"kv_cache_config: {{dtype: {'fp8' if kv.startswith('fp8') else kv}}}")
    if extra:
        where = ("ctx_config.yml" if role == "prefill" else "gen_config.yml") if role else "a YAML file given with --config"
        notes.append("TensorRT-LLM: put " + "; ".join(extra) + f" in {where}")
    if nodes > 1:
        notes.append(f"TensorRT-LLM: a {'replica' if pp > 1 else 'group'} over {nodes} nodes starts with mpirun / "
                     "srun (one rank a GPU)")
    if nodes > 1:
        notes.append(f"replace {HEAD_ADDRESS} with the first node's address")
    notes.append("SGLang's --mem-fraction-static counts weights and KV like vLLM's --gpu-memory-utilization; "
                 "activations and graphs come out of the rest")
    return {
        "vllm_command": shlex.join(vllm) if vllm else None,
        "sglang_command": shlex.join(sgl) if sgl else None,
        "trtllm_command": shlex.join(trt),
        "replicas": point.replicas,
        "nodes_per_replica": nodes,
        "max_model_len": max_len,
        "max_running_requests_per_engine": per_engine if vllm else per_replica,
        "notes": tuple(notes),
    }


def disagg_commands(model: ModelSpec, prefill_dep, prefill_point, decode_dep, decode_point, wl, *,
                    model_path: str | None = None) -> dict:
    """The commands of a disaggregated pair: each pool's `launch_commands` with its role, and what
    joins them (SGLang's router, TensorRT-LLM's disaggregated server; vLLM's proxy as a note).
    Returns `prefill` and `decode` (each launch_commands' dict), `sglang_router_command`,
    `trtllm_disagg_command` and `notes` (str tuple)."""
    pre = launch_commands(model, prefill_dep, wl, prefill_point, model_path=model_path, role="prefill")
    dec = launch_commands(model, decode_dep, wl, decode_point, model_path=model_path, role="decode")
    router = shlex.join(["python", "-m", "sglang_router.launch_router", "--pd-disaggregation",
                         "--prefill", f"http://PREFILL_HOST:{DISAGG_PORTS['prefill']}",
                         "--decode", f"http://DECODE_HOST:{DISAGG_PORTS['decode']}", "--host", "0.0.0.0",
                         "--port", "8000"])
    notes = (
        f"start {prefill_point.replicas} prefill and {decode_point.replicas} decode instances; list every one "
        "with the router (one --prefill / --decode URL each)",
        "vLLM: give each instance VLLM_NIXL_SIDE_CHANNEL_HOST=its address (VLLM_NIXL_SIDE_CHANNEL_PORT, default "
        "5600) and route with a proxy that sends the prompt to a prefiller, then to a decoder (vLLM's "
        "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --prefiller-hosts --prefiller-ports "
        "--decoder-hosts --decoder-ports)",
        "SGLang: add --disaggregation-ib-device with the RDMA NIC the KV cache moves over (e.g. mlx5_0); mooncake is "
        "the default transfer backend, nixl the other",
        "TensorRT-LLM: list the servers in disagg_config.yaml (context_servers and generation_servers, num_instances "
        "and urls) for trtllm-serve disaggregated",
    )
    return {"prefill": pre, "decode": dec, "sglang_router_command": router,
            "trtllm_disagg_command": shlex.join(["trtllm-serve", "disaggregated", "-c", "disagg_config.yaml"]),
            "notes": notes}
