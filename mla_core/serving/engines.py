"""Per-engine rules the estimate follows (`--engine vllm|sglang|trtllm`): which kernel tables,
which decode steps run inside a CUDA graph, what a step costs beyond its kernels, which ops the
engine overlaps, how big a prefill chunk is, and which launch command comes first. Every figure
has its source beside it; nothing is fitted to a published serving result.

Rules common to the three (their sources in `EngineRules.sources`):
- The scheduler runs one step ahead of the GPU (vLLM async scheduling, SGLang's zero-overhead
  scheduler, TensorRT-LLM's overlap scheduler, each on by default), so CPU scheduling hides
  behind the GPU; what stays on the GPU's critical path each step is `step_overhead_s`.
- A decode step of at most `graph_max_batch` sequences on a GPU replays a CUDA graph: its
  kernels run back to back. A prefill chunk, a mixed step or a bigger decode batch runs eagerly:
  each kernel launch costs the CPU `EAGER_LAUNCH_S`, and a kernel shorter than that leaves the
  GPU waiting (step.step_time).
"""
from __future__ import annotations

from dataclasses import dataclass, field

ENGINES = ("vllm", "sglang", "trtllm")  # --engine choices; the CLI, URL and pages import this tuple

# CPU cost of one kernel launch outside a CUDA graph: CUDA.jl's published measurement (a 4-layer
# MLP of 8 kernels: 50 us a pass launched normally, 16 us as a graph, 34 us / 8 = 4.3 us a kernel;
# cuda.juliagpu.org "Graphs"). PyTorch's dispatcher adds more per op, so this is a floor.
EAGER_LAUNCH_S = 4.3e-6


@dataclass(frozen=True)
class EngineRules:
    """One engine's rules (module docstring). `graph_max_batch(gpu_memory_GB, tp)` the largest
    decode batch per GPU replayed as a CUDA graph; `overlap_shared_experts_up_to` the most
    tokens a decode step may have for the shared experts to run on a second stream beside the
    routed ones (0: no overlap); `prefill_chunk(gpu_memory_GB)` the default
    max_num_batched_tokens / chunked_prefill_size."""

    id: str
    label: str
    aic_backend: str
    step_overhead_s: float
    overlap_shared_experts_up_to: int
    sources: dict = field(default_factory=dict)

    def graph_max_batch(self, gpu_memory_GB: float, tp: int) -> int:
        if self.id == "vllm":
            return 512
        if self.id == "sglang":
            mib = gpu_memory_GB * 1024
            if mib < 20 * 1024:
                return 8
            if mib < 35 * 1024:
                return 24 if tp < 4 else 80
            if mib < 60 * 1024:
                return 32 if tp < 4 else 160
            if mib < 160 * 1024:
                return 256 if tp < 4 else 512
            return 512
        return 128

    def prefill_chunk(self, gpu_memory_GB: float) -> int:
        if self.id == "vllm":
            return 8192 if gpu_memory_GB >= 70 else 2048
        if self.id == "sglang":
            mib = gpu_memory_GB * 1024
            if mib < 35 * 1024:
                return 2048
            if mib < 60 * 1024:
                return 4096
            return 8192 if mib < 160 * 1024 else 16384
        return 8192

    def to_dict(self) -> dict:
        return {"id": self.id, "label": self.label, "aic_backend": self.aic_backend,
                "step_overhead_s": self.step_overhead_s,
                "overlap_shared_experts_up_to": self.overlap_shared_experts_up_to, "sources": dict(self.sources)}


RULES = {
    "vllm": EngineRules(
        "vllm", "vLLM", "vllm", step_overhead_s=250e-6, overlap_shared_experts_up_to=256,
        sources={
            "step_overhead_s": "vllm-project/vllm#10634: a 5-6 ms gap between decode steps at batch 256 before "
                               "asynchronous scheduling, which was designed to bring it to 200-300 us "
                               "(vllm#19970 added it; SchedulerConfig.async_scheduling, vllm#32775)",
            "graph_max_batch": "vllm/config/vllm.py _set_cudagraph_sizes: max_cudagraph_capture_size = "
                               "min(max_num_seqs x decode tokens x 2, 512); a bigger batch runs eagerly "
                               "(cudagraph_dispatcher returns NONE)",
            "overlap": "vLLM's SharedFusedMoE runs the shared experts on an auxiliary CUDA stream "
                       "(VLLM_DISABLE_SHARED_EXPERTS_STREAM, VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD 256)",
            "prefill_chunk": "vllm/engine/arg_utils.py: max_num_batched_tokens 8192 for `vllm serve` on GPUs of "
                             "70 GiB or more, 2048 below",
            "kernel_tables": "aiconfigurator-core vllm tables (MLA kernels from TensorRT-LLM's: see aic.py)",
        }),
    "sglang": EngineRules(
        "sglang", "SGLang", "sglang", step_overhead_s=0.0, overlap_shared_experts_up_to=0,
        sources={
            "step_overhead_s": "SGLang v0.4 blog (lmsys.org, 2024-12-04), zero-overhead batch scheduler: Nsight "
                               "shows no GPU idle time between five consecutive decode batches",
            "graph_max_batch": "sglang server_args._handle_gpu_memory_settings (as aiconfigurator-core 0.12.0 "
                               "backends/sglang_backend.py transcribes it @0.5.16): cuda_graph_max_bs 8 under 20 GiB, "
                               "24/80 under 35, 32/160 under 60, 256/512 under 160 (tp < 4 / tp >= 4), else 512",
            "overlap": "none: SGLang fuses DeepSeek's shared expert into the routed MoE kernel "
                       "(--disable-shared-experts-fusion turns it off) rather than a second stream",
            "prefill_chunk": "sglang server_args: chunked_prefill_size 2048 under 35 GiB, 4096 under 60, "
                             "8192 under 160, 16384 above (same transcription)",
            "kernel_tables": "aiconfigurator-core sglang tables",
        }),
    "trtllm": EngineRules(
        "trtllm", "TensorRT-LLM", "trtllm", step_overhead_s=0.0, overlap_shared_experts_up_to=1 << 30,
        sources={
            "step_overhead_s": "TensorRT-LLM docs, Overlap Scheduler: CPU work of step n runs while the GPU computes "
                               "step n + 1, enabled by default",
            "graph_max_batch": "TensorRT-LLM DecodeCudaGraphConfig (1.3.0rc27 docs): without batch_sizes or "
                               "max_batch_size a default max_batch_size of 128 is used",
            "overlap": "TensorRT-LLM's DeepSeek model runs the shared experts beside the routed ones on a second "
                       "stream (maybe_execute_in_parallel), as aiconfigurator-core models it (OverlapOp)",
            "prefill_chunk": "TensorRT-LLM LLM API: max_num_tokens 8192 by default",
            "kernel_tables": "aiconfigurator-core trtllm tables",
        }),
}


def engine_rules(engine: str) -> EngineRules:
    """The rules of `engine` (one of ENGINES). Raises MLAError otherwise."""
    from ..errors import MLAError

    try:
        return RULES[engine]
    except KeyError:
        raise MLAError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}") from None
