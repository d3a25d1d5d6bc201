"""`python -m mla_core bench collectives`: collective bandwidth with torch.distributed under torchrun.

    torchrun --nproc-per-node N -m mla_core bench collectives [--sizes 1K..1G]
        [--ops all_reduce,all_gather,reduce_scatter,all_to_all] [--device auto|cpu|cuda]
        [--dtype fp32|bf16|fp16] [--quick] [--reps R] [--budget-s S] [--out FILE.json]
        [--save [--label TEXT]] [--json]

Across nodes, torchrun's own rendezvous flags do the rest (`--nnodes 2 --rdzv-backend c10d
--rdzv-endpoint HOST:PORT`), nothing here changes. Backend: NCCL on CUDA (each rank on GPU
LOCAL_RANK), gloo on CPU. Ops: `all_reduce` (sum), `all_gather_single`,
`reduce_scatter_single` (sum) and `all_to_all_single` (torch 2.13's gloo runs all four; a
backend that refuses one gets a one-line error naming it, never a silent skip).

Timing (docs/model.md, "Collective bandwidth"): per repetition, a barrier and a device synchronise,
then the clock, the collective, a device synchronise and the clock again. A repetition's time is
the slowest rank's (an all_reduce MAX over the per-rank times at the end); the result keeps the
median and the best over repetitions. Warm-up calls first; then as many repetitions as fit the
time budget (`--budget-s` per size, at least 5, at most `--reps`), the count agreed by all ranks.
Each op's result is checked once (every rank fills its buffer with rank + 1; the sum or the
gathered chunks must come back exact) before it is timed.

Only rank 0 prints, writes `--out` (with the user's umask) and saves to the history (`--save`:
the same SQLite store as the kernel benchmark, `mla_core.store.history`). Without torchrun
(no RANK / WORLD_SIZE in the environment) it prints how to start it and exits 2.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import socket
import sys
import time

from ..errors import MLAError
from ..store.files import check_out, write_json
from . import comm
from .errors import BenchError

PROG = "mla_core bench collectives"
LAUNCH_HINT = (f"{PROG}: error: start it under torchrun, e.g. `torchrun --nproc-per-node 2 -m mla_core bench "
               "collectives --device cpu --quick` (multi-node: add torchrun's --nnodes and --rdzv-endpoint)")
MIN_REPS = 5


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # noqa: D102 - one line, no usage block
        raise _UsageError(f"{self.prog}: error: {message}")


def _typed(fn, name):
    def parse(text):
        try:
            return fn(text)
        except MLAError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name
    return parse


def _positive(name: str, lo: float, hi: float, cast=float):
    def parse(text):
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {str(text)[:30]!r}") from None
        if not lo <= v <= hi:  # NaN fails too
            raise argparse.ArgumentTypeError(f"{name} must be between {lo:g} and {hi:g}, got {text}")
        return v

    parse.__name__ = name
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Bus bandwidth of all_reduce, all_gather, reduce_scatter and all_to_all "
                                      "with torch.distributed (NCCL on CUDA, gloo on CPU). Start it with torchrun.")
    p.add_argument("--sizes", type=_typed(comm.parse_sizes, "--sizes"), metavar="LO..HI | S,S,...",
                   help=f"buffer sizes S (nccl-tests' size), doubling from LO to HI (default {comm.DEFAULT_SIZES['cuda']} "
                        f"on CUDA, {comm.DEFAULT_SIZES['cpu']} on CPU; --quick {comm.QUICK_SIZES})")
    p.add_argument("--ops", type=_typed(comm.parse_ops, "--ops"), default=comm.OPS, metavar="OP[,OP...]",
                   help=f"all, or a subset of {','.join(comm.OPS)}")
    p.add_argument("--device", choices=comm.DEVICE_CHOICES, default="auto", help="auto: cuda when present, else cpu")
    p.add_argument("--dtype", choices=comm.DTYPE_CHOICES, default="fp32", help="element type (default fp32)")
    p.add_argument("--quick", action="store_true", help="small sizes and a short budget (seconds on a CPU)")
    p.add_argument("--reps", type=_positive("--reps", MIN_REPS, 10_000, int), help="timed repetitions at most")
    p.add_argument("--warmup", type=_positive("--warmup", 0, 1000, int), help="untimed calls first (default 3)")
    p.add_argument("--budget-s", type=_positive("--budget-s", 0.001, 3600), metavar="S",
                   help="seconds of timed repetitions per size (default 1, --quick 0.05)")
    p.add_argument("--out", metavar="FILE.json", help="write the result JSON here (rank 0)")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of the table")
    p.add_argument("--save", action="store_true", help="also save the run in the local history (SQLite)")
    p.add_argument("--label", help="label of the saved run (with --save)")
    return p


def under_torchrun(environ=None) -> bool:
    """True when the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR) is set."""
    env = os.environ if environ is None else environ
    return all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def main(argv: list[str] | None = None) -> int:
    """Entry point (`python -m mla_core bench collectives ...`). Returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        if args.label is not None and not args.save:
            raise _UsageError(f"{PROG}: error: --label needs --save")
        if not under_torchrun():
            print(LAUNCH_HINT, file=sys.stderr)
            return 2
        if args.out:
            if int(os.environ.get("RANK", "0")) == 0:
                check_out(args.out)
        try:
            result = run_collectives(sizes=args.sizes, ops=args.ops, device=args.device, dtype=args.dtype,
                                     quick=args.quick, reps=args.reps, warmup=args.warmup, budget_s=args.budget_s)
        except ImportError as e:
            from ..install import setup

            raise _UsageError(f"{PROG}: error: the benchmark needs torch ({e}); `{setup().torch_install}` adds "
                              "it") from None
        if result is None:  # not rank 0
            return 0
        if args.out:
            write_json(args.out, result)
        if args.save:
            from ..store import history

            run_id = history.save_run(result, source="local", label=args.label)
            print(f"saved as run {run_id} in {history.default_path()}", file=sys.stderr)
        try:
            print(json.dumps(result, indent=2) if args.json else render_table(result))
            if args.out and not args.json:
                print(f"wrote {args.out}")
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        return 0
    except _UsageError as e:
        print(str(e).splitlines()[0][:400], file=sys.stderr)
        return 2
    except MLAError as e:
        if int(os.environ.get("RANK", "0")) == 0:  # every rank fails alike; one line, not N
            print(" ".join(f"{PROG}: error: {e}".split())[:400], file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


# ---------------------------------------------------------------------------------------------

def run_collectives(sizes=None, ops=comm.OPS, device: str = "auto", dtype: str = "fp32", quick: bool = False,
                    reps: int | None = None, warmup: int | None = None, budget_s: float | None = None) -> dict | None:
    """Measure under an initialised torchrun environment; rank 0 returns the result dict (the
    collectives schema), the other ranks None. Initialises and destroys the process group.
    Raises BenchError (one line) for an unavailable device or a backend that refuses an op."""
    import torch
    import torch.distributed as dist

    kind = device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise BenchError("device cuda is not available (no CUDA device visible to torch, or a CPU build of torch)")
    backend = comm.BACKENDS[kind]
    if backend == "nccl" and not dist.is_nccl_available():
        raise BenchError("this torch build has no NCCL; use --device cpu (gloo)")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if kind == "cuda":
        torch.cuda.set_device(local_rank)
        tdev = torch.device("cuda", local_rank)
    else:
        tdev = torch.device("cpu")
    if sizes is None:
        sizes = comm.parse_sizes(comm.QUICK_SIZES if quick else comm.DEFAULT_SIZES[kind])
    warmup = (2 if quick else 3) if warmup is None else warmup
    budget_s = (0.05 if quick else 1.0) if budget_s is None else budget_s
    reps = (20 if quick else 200) if reps is None else reps
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]

    t_start = time.perf_counter()
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    load = _load_avg()
    # A rank that fails makes torchrun stop the others; the timeout bounds a hang all the same.
    dist.init_process_group(backend=backend, device_id=tdev if kind == "cuda" else None,
                            timeout=_dt.timedelta(minutes=5))
    try:
        rank, n = dist.get_rank(), dist.get_world_size()
        hosts: list = [None] * n
        dist.all_gather_object(hosts, socket.gethostname())
        sync = torch.cuda.synchronize if kind == "cuda" else (lambda: None)
        results = []
        for op in ops:
            _check_op(op, n, rank, tdtype, tdev, sync)
            for size in sizes:
                results.append(_measure(op, size, n, dtype, tdtype, tdev, sync, warmup, reps, budget_s))
        dist.barrier()
    except RuntimeError as e:
        raise BenchError(f"{backend} failed: {' '.join(str(e).split())[:200]}") from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if rank != 0:
        return None
    from .device import cpu_name  # the kernel benchmark's name for this CPU

    name = torch.cuda.get_device_name(tdev) if kind == "cuda" else cpu_name()
    nodes = len(set(hosts))
    notes = [f"{n} ranks on {nodes} node(s) ({', '.join(sorted(set(hosts)))[:200]}); each repetition's time is the "
             "slowest rank's; busbw = algbw x 2(n-1)/n (all_reduce) or (n-1)/n (the others), nccl-tests' definition"]
    if kind == "cpu":
        notes.append("gloo on CPU: the ranks share this machine's cores and memory, so busbw measures memory copies "
                     "and the loopback path, not a network or NVLink")
    return {
        "schema_version": 1,
        "kind": "collectives",
        "tool": "mla_core.bench.collectives",
        "created": created,
        "wall_s": time.perf_counter() - t_start,
        "config": {"device": device, "dtype": dtype, "quick": bool(quick), "sizes": list(sizes), "ops": list(ops),
                   "warmup": warmup, "reps": reps, "min_reps": MIN_REPS, "budget_s": budget_s},
        "device": {"kind": kind, "backend": backend, "name": name, "torch_version": torch.__version__,
                   "runtime_version": torch.version.cuda if kind == "cuda" else None, "dtype": dtype,
                   "world_size": n, "nodes": nodes, "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", n)),
                   "load_avg_1min": load},
        "results": results,
        "notes": notes,
    }


def _call(op: str, out, inp):
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "all_gather":  # torch 2.13's name; older builds: all_gather_into_tensor
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, inp)
    elif op == "reduce_scatter":  # torch 2.13's name; older builds: reduce_scatter_tensor
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(out, inp)
    else:
        dist.all_to_all_single(out, inp)


def _buffers(op: str, elements: int, n: int, tdtype, tdev, fill: float):
    import torch

    chunk = elements // n
    if op == "all_reduce":
        return None, torch.full((elements,), fill, dtype=tdtype, device=tdev)
    if op == "all_gather":
        return torch.empty(elements, dtype=tdtype, device=tdev), torch.full((chunk,), fill, dtype=tdtype, device=tdev)
    if op == "reduce_scatter":
        return torch.empty(chunk, dtype=tdtype, device=tdev), torch.full((elements,), fill, dtype=tdtype, device=tdev)
    return torch.empty(elements, dtype=tdtype, device=tdev), torch.full((elements,), fill, dtype=tdtype, device=tdev)


def _check_op(op: str, n: int, rank: int, tdtype, tdev, sync) -> None:
    """Run `op` once on a small buffer and check the values (rank r contributes r + 1)."""
    import torch

    elements = 8 * n
    out, inp = _buffers(op, elements, n, tdtype, tdev, float(rank + 1))
    try:
        _call(op, out, inp)
    except (RuntimeError, NotImplementedError, ValueError) as e:
        raise BenchError(f"{op} is not supported here ({' '.join(str(e).split())[:160]})") from None
    sync()
    total = n * (n + 1) / 2
    if op == "all_reduce":
        expect = torch.full_like(inp, total)
        got = inp
    elif op == "reduce_scatter":
        expect, got = torch.full_like(out, total), out
    else:  # all_gather and all_to_all: chunk i came from rank i
        expect = torch.arange(1, n + 1, dtype=tdtype, device=tdev).repeat_interleave(elements // n)
        got = out
    if not torch.equal(got, expect):
        raise BenchError(f"{op} returned wrong values on rank {rank}: the backend or the launch is broken")


def _measure(op: str, size: int, n: int, dtype: str, tdtype, tdev, sync, warmup: int, reps: int,
             budget_s: float) -> dict:
    import statistics

    import torch
    import torch.distributed as dist

    elements = comm.buffer_elements(op, size, n, dtype)
    nbytes = elements * comm.DTYPE_BYTES[dtype]
    out, inp = _buffers(op, elements, n, tdtype, tdev, 1.0)

    def timed() -> float:
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        _call(op, out, inp)
        sync()
        return time.perf_counter() - t0

    warm = [timed() for _ in range(max(1, warmup))]
    # All ranks agree on the count: the slowest rank's warm-up time decides it.
    probe = torch.tensor([min(warm)], dtype=torch.float64, device=tdev)
    dist.all_reduce(probe, op=dist.ReduceOp.MAX)
    count = int(min(reps, max(MIN_REPS, budget_s / max(probe.item(), 1e-7))))
    times = torch.tensor([timed() for _ in range(count)], dtype=torch.float64, device=tdev)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # each repetition: the slowest rank
    ts = times.tolist()
    median, best = statistics.median(ts), min(ts)
    alg, bus = comm.bandwidths(op, nbytes, median, n)
    alg_best, bus_best = comm.bandwidths(op, nbytes, best, n)
    del out, inp
    return {"op": op, "dtype": dtype, "bytes": nbytes, "elements": elements, "median_s": median, "min_s": best,
            "reps": count, "warmup": max(1, warmup), "algbw_GBps": alg, "busbw_GBps": bus,
            "algbw_best_GBps": alg_best, "busbw_best_GBps": bus_best, "bus_factor": comm.bus_factor(op, n)}


def _load_avg():
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def render_table(result: dict) -> str:
    """The result as a fixed-width table (GB/s = 1e9 B/s), one row per (op, size)."""
    from ..units import format_bytes, format_seconds

    d = result["device"]
    lines = [f"{d['world_size']} ranks on {d['nodes']} node(s), {d['backend']} on {d['kind']} ({d['name']}), "
             f"torch {d['torch_version']}, {d['dtype']}", ""]
    header = ("op", "size", "median", "best", "algbw GB/s", "busbw GB/s", "busbw best", "reps")
    rows = [(r["op"], format_bytes(r["bytes"]), format_seconds(r["median_s"]), format_seconds(r["min_s"]),
             f"{r['algbw_GBps']:,.3f}", f"{r['busbw_GBps']:,.3f}", f"{r['busbw_best_GBps']:,.3f}", str(r["reps"]))
            for r in result["results"]]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = lambda row: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    lines += [fmt(header), fmt(tuple("-" * w for w in widths))] + [fmt(r) for r in rows]
    lines += [f"note: {t}" for t in result.get("notes", [])]
    lines.append(f"wall time {result.get('wall_s', 0):.1f} s")
    return "\n".join(lines)
