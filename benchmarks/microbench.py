"""5. The live microbenchmark against the limits of this machine (mla_core.bench on the CPU).

- copy bandwidth of torch against numpy's `copyto` on the same buffers, timed alternately
  (goal: at least 0.9x);
- each decode kernel's measured time against its roofline time predicted from the measured
  ceilings (the share `predicted / measured`: 1.0 = at the roofline);
- MLA absorbed against recompute at contexts 1K to 64K: the speed-up and where it crosses over.
"""
from __future__ import annotations

import argparse

from common import dump, result

DECODE = ("mha_decode", "gqa_decode", "mqa_decode", "mla_absorbed_decode", "mla_recompute_decode")


def run(device: str = "cpu", contexts=(1024, 4096, 16384, 65536), heads: int = 16, tiny: bool = False) -> list[dict]:
    from mla_core.bench import run_benchmark

    if tiny:
        contexts = (256, 1024)
        heads = 4
    quick = run_benchmark({"device": device, "quick": True} if not tiny else
                          {"device": device, "quick": True, "heads": heads, "gqa_groups": 2, "contexts": [256], "batches": [1],
                           "stream_bytes": 1 << 24, "matmul_n": 256, "reps": 3, "min_reps": 1, "budget_s": 0.2})
    out = []
    copy = next(r for r in quick["results"] if r["kernel"] == "copy")
    ref = copy.get("reference_GBps")
    if ref:
        ratio = copy["achieved_GBps"] / ref
        out.append(result("copy_vs_numpy_copyto", ratio, "x", goal=">= 0.9", met=ratio >= 0.9,
                          torch_GBps=round(copy["achieved_GBps"], 2), numpy_GBps=round(ref, 2),
                          other_cpus_busy=quick["device"].get("other_cpus_busy")))
    for r in quick["results"]:
        if r["kernel"] in DECODE and r.get("predicted_s"):
            out.append(result(f"{r['kernel']}_share_of_roofline", r["predicted_s"] / r["median_s"], "x",
                              note="predicted (roofline from measured ceilings) / measured; 1 = at the roofline",
                              median_ms=round(r["median_s"] * 1e3, 3), predicted_ms=round(r["predicted_s"] * 1e3, 3),
                              shape=r["shape"]))
    sweep = run_benchmark({"device": device, "quick": True, "heads": heads, "gqa_groups": min(8, heads), "batches": [1],
                           "contexts": list(contexts),
                           "kernels": ["read", "matmul", "mla_absorbed_decode", "mla_recompute_decode"],
                           **({"stream_bytes": 1 << 24, "matmul_n": 256, "reps": 3, "min_reps": 1, "budget_s": 0.2}
                              if tiny else {})})
    by_t: dict[int, dict] = {}
    for r in sweep["results"]:
        if r["kernel"] in ("mla_absorbed_decode", "mla_recompute_decode"):
            by_t.setdefault(r["shape"]["context"], {})[r["kernel"]] = r["median_s"]
    speedups = {t: v["mla_recompute_decode"] / v["mla_absorbed_decode"] for t, v in sorted(by_t.items())
                if len(v) == 2}
    faster = [t for t, s in speedups.items() if s > 1.0]
    if faster and faster[0] == min(speedups):
        crossover = f"absorbed is faster at every context measured (from {min(speedups):,})"
    elif faster:
        crossover = f"absorbed is faster from {faster[0]:,} tokens"
    else:
        crossover = "recompute is faster at every context measured"
    out.append(result("absorbed_vs_recompute_speedup", speedups, "x by context",
                      note="recompute time / absorbed time at batch 1; > 1: absorbed is faster",
                      heads=heads, crossover=crossover,
                      device=sweep["device"]["name"], dtype=sweep["device"]["dtype"]))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny", action="store_true", help="smoke-test sizes")
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run(a.device, tiny=a.tiny), a.out)
