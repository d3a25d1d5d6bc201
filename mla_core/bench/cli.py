"""`python -m mla_core bench ...`: measure this device and write the result JSON.

    python -m mla_core bench [--model PRESET | --config PATH] [--device auto|cpu|cuda|mps] [--quick]
        [--dtype auto|fp32|bf16|fp16]
        [--batch B[,B...]] [--context N[,N...]] [--heads H] [--gqa-groups G]
        [--kernels K[,K...]] [--reps R] [--budget-s S] [--stream-bytes SIZE] [--matmul-n N]
        [--flush-bytes SIZE] [--threads N] [--skip-oversize] [--seed S] [--out FILE.json]
        [--json] [--progress | --no-progress] [--wait] [--save [--label TEXT]]
    python -m mla_core bench --validate FILE.json
    torchrun --nproc-per-node N -m mla_core bench collectives ...   (mla_core.bench.collectives)
    python -m mla_core bench import FILE --model M --gpu G --tp N ...  (mla_core.store.engines)
    python -m mla_core bench history [--kind KIND] [--json]             (mla_core.store.cli)
    python -m mla_core bench --profile --model M [--tp N] [--quick] [--out F] [--save]
                                                        (mla_core.bench.profile_cli: a kernel table)

The decode kernels run the attention shape of `--model` (default DeepSeek-V3) or `--config`,
scaled down in batch and context (never in heads or widths) to fit the device, and the result
says so (`mla_core.bench.run.default_config`).

A list of batches and contexts is a sweep (every decode kernel at every (B, T)); contexts take
K and M suffixes (4K = 4096, 128K = 131072). The table goes to stdout (or the JSON with
`--json`), a progress bar to stderr when it is a terminal. Bad requests exit with status 2 and
one line on stderr: unknown flags or values, an unavailable device, shapes that would not fit
in 80% of the device's free memory (refused before allocating), out-of-memory during the run,
an unwritable --out, a run stopped by SIGTERM (e.g. `timeout`; its memory is freed first),
another benchmark running on this machine (without --wait; the lock file beside the history is
shared with the app), a run disturbed beyond trust (mla_core.store.disturbance), a result that
could not be saved (--save: disk full, read-only store; the table is printed and --out written
first). A disturbed run is kept and says so on stderr. Ctrl-C exits 130 after freeing the run's
memory.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time

from ..errors import MLAError
from ..store.files import check_out, write_json
from .console import _Bar, _cancel_on_sigterm, _int, _one_line, _short  # noqa: F401
from .config import DEVICE_CHOICES, DTYPE_CHOICES, KERNELS, MAX_BATCH, MAX_CONTEXT, MAX_HEADS

PROG = "mla_core bench"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # noqa: D102 - argparse hook: one line, no usage block
        raise _UsageError(f"{self.prog}: error: {message}")


def _int_list(name: str, maximum: int, suffixes: bool = False):
    units = {"K": 1024, "M": 1024 * 1024} if suffixes else {}

    def parse(text: str) -> tuple[int, ...]:
        out = []
        for part in str(text).split(","):
            t = part.strip().replace("_", "")
            mult = 1
            if t[-1:].upper() in units:
                mult, t = units[t[-1].upper()], t[:-1]
            if not t.isdigit() or len(t) > 12:
                allowed = " (K, M suffixes allowed)" if suffixes else ""
                raise argparse.ArgumentTypeError(f"{name} takes whole numbers{allowed} separated by commas, "
                                                 f"got {_short(text)}")
            v = int(t) * mult
            if not 1 <= v <= maximum:
                raise argparse.ArgumentTypeError(f"{name} must be between 1 and {maximum:,}, got {v:,}")
            out.append(v)
        if len(set(out)) != len(out):
            raise argparse.ArgumentTypeError(f"{name} lists a value twice: {_short(text)}")
        return tuple(out)

    parse.__name__ = name
    return parse


def _size(name: str, minimum: int = 4096):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

    def parse(text: str) -> int:
        t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
        mult = 1
        if t[-1:] in units:
            mult, t = units[t[-1]], t[:-1]
        if not t.isdigit() or len(t) > 15:
            raise argparse.ArgumentTypeError(f"{name} takes a size such as 512M or 2G, got {_short(text)}")
        v = int(t) * mult
        if not minimum <= v <= 1 << 40:
            raise argparse.ArgumentTypeError(f"{name} must be between {minimum:,} bytes and 1024G, got {v:,} bytes")
        return v

    parse.__name__ = name
    return parse


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--budget-s must be a number of seconds, got {_short(text)}") from None
    if not 0 < v <= 3600:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"--budget-s must be in (0, 3600], got {_short(text)}")
    return v


def _kernels(text: str) -> tuple[str, ...]:
    names = tuple(k.strip() for k in str(text).split(",") if k.strip())
    for k in names:
        if k not in KERNELS:
            raise argparse.ArgumentTypeError(f"unknown kernel {_short(k)}; choose from {', '.join(KERNELS)}")
    if not names:
        raise argparse.ArgumentTypeError("--kernels needs at least one kernel")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Measure this device: copy/read bandwidth, matmul peak, and one decode step "
                                      "of MHA, GQA, MQA and MLA (absorbed, recompute) at the same batch and context, "
                                      "beside the roofline time predicted from the measured ceilings. With --profile: "
                                      "the model's own op shapes as a kernel table (`bench --profile --help`).")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help="default auto: cuda, else mps, else cpu")
    p.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions (about 10-20 s on a CPU)")
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto",
                   help="default auto: bf16 on CUDA/ROCm, fp16 on MPS, fp32 on CPUs")
    p.add_argument("--batch", "--batches", dest="batches", type=_int_list("--batch", MAX_BATCH), metavar="B[,B...]",
                   help="sequences per step; a list makes a sweep")
    p.add_argument("--context", "--contexts", dest="contexts", type=_int_list("--context", MAX_CONTEXT, True),
                   metavar="N[,N...]", help="tokens cached per sequence (4K = 4096); a list makes a sweep")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="PRESET",
                     help="the model whose attention shape is measured (default deepseek-v3; "
                          "`python -m mla_core presets` lists them): n_h, KV heads, d_h, d_c, d_r, d_nope, d_v")
    src.add_argument("--config", metavar="PATH", help="a Hugging Face config.json instead of a preset")
    p.add_argument("--heads", type=_int("--heads", 1, MAX_HEADS), help="query heads n_h of every decode kernel")
    p.add_argument("--gqa-groups", type=_int("--gqa-groups", 1, MAX_HEADS), help="KV heads of gqa_decode (default 8)")
    p.add_argument("--kernels", type=_kernels, metavar="K[,K...]", help=f"a subset of {','.join(KERNELS)}")
    p.add_argument("--reps", type=_int("--reps", 1, 10_000), help="timed repetitions per point, at most")
    p.add_argument("--stream-bytes", type=_size("--stream-bytes"), metavar="SIZE",
                   help="bytes of one copy/read buffer, e.g. 2G (default: 4x the CPU cache or 2 GiB on GPUs)")
    p.add_argument("--matmul-n", type=_int("--matmul-n", 1, 65536), help="matmul size n (n x n x n)")
    p.add_argument("--flush-bytes", type=_size("--flush-bytes", minimum=0), metavar="SIZE",
                   help="buffer zeroed between repetitions to clear caches (default: max(4x L2, 256M) on GPUs, "
                        "0 on CPUs)")
    p.add_argument("--budget-s", type=_seconds, metavar="S",
                   help="seconds per point after which no more repetitions start (at least the minimum are run)")
    p.add_argument("--threads", type=_int("--threads", 1, 4096), help="CPU threads for torch (default: torch's)")
    p.add_argument("--seed", type=_int("--seed", 0, 2**31 - 1), help="seed of the random inputs (default 0)")
    p.add_argument("--skip-oversize", action="store_true",
                   help="in a sweep, skip points that do not fit in memory instead of refusing the run")
    p.add_argument("--out", metavar="FILE.json", help="write the result JSON here")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of the table")
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="progress bar on stderr (default: when stderr is a terminal)")
    bar.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--wait", action="store_true",
                   help="when another benchmark runs on this machine (command line or app), wait for it instead "
                        "of refusing to start")
    p.add_argument("--save", action="store_true", help="also save the run in the local history (SQLite)")
    p.add_argument("--label", help="label of the saved run (with --save)")
    p.add_argument("--validate", metavar="FILE.json", help="check a result file against the schema and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point (mla_core.cli dispatches `bench` here). Returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "collectives":  # torch.distributed under torchrun: mla_core.bench.collectives
        from .collectives import main as collectives_main

        return collectives_main(argv[1:])
    if argv and argv[0] == "import":  # engine benchmark results: mla_core.store.engines
        from ..store.engines import main as import_main

        return import_main(argv[1:])
    if argv and argv[0] == "history":  # the stored runs and their ids: mla_core.store.cli
        from ..store.cli import main as history_main

        return history_main(argv[1:])
    if "--profile" in argv:  # the model's own op shapes as a kernel table: mla_core.bench.profile_cli
        from .profile_cli import main as profile_main

        return profile_main(argv)
    bar = _Bar(sys.stderr, False)
    try:
        args = build_parser().parse_args(argv)
        if args.validate:
            return _validate_file(args.validate)
        if args.label is not None and not args.save:
            raise _UsageError(f"{PROG}: error: --label needs --save")
        overrides = {k: getattr(args, k) for k in ("batches", "contexts", "heads", "gqa_groups", "kernels", "reps",
                                                   "threads", "seed", "stream_bytes", "matmul_n",
                                                   "budget_s", "flush_bytes") if getattr(args, k) is not None}
        if args.dtype != "auto":
            overrides["dtype"] = args.dtype
        if args.skip_oversize:
            overrides["skip_oversize"] = True
        if args.out:
            check_out(args.out)
        try:
            from .run import default_config, run_benchmark
        except ImportError as e:  # torch missing or broken: the analytic commands still work
            from ..install import setup

            raise _UsageError(f"{PROG}: error: the benchmark needs torch ({e}); `{setup().torch_install}` adds "
                              "it") from None

        model = args.model
        if args.config:
            from ..config import load_config

            model = load_config(args.config)
        config = default_config(args.device, args.quick, model=model, **overrides)
        _report_history()
        bar.enabled = sys.stderr.isatty() if args.progress is None else args.progress
        cancel = threading.Event()
        with _cancel_on_sigterm(cancel):  # `timeout` and job schedulers stop us cleanly
            result = run_benchmark(config, progress=bar, cancel=cancel, wait=bool(args.wait), source="cli")
        bar.clear()
        if args.out:
            write_json(args.out, result)
        save_error = None
        if args.save:
            from ..store import history

            try:
                run_id = history.save_run(result, source="local", label=args.label)
                print(f"saved as run {run_id} in {history.default_path()}", file=sys.stderr)
            except MLAError as e:  # the measurement is not lost: it is printed (and in --out)
                save_error = e
            for notice in history.pop_notices():
                print(f"{PROG}: note: {notice}", file=sys.stderr)
        out = json.dumps(result, indent=2) if args.json else render_table(result)
        try:
            print(out)
            if args.out and not args.json:
                print(f"wrote {args.out}")
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        block = result.get("disturbed") or {}
        if block.get("disturbed"):
            print(_one_line(f"{PROG}: note: this run was disturbed: " + "; ".join(block.get("reasons") or [])),
                  file=sys.stderr)
        if save_error is not None:
            kept = f" (the result is in {args.out})" if args.out else " (the result is printed above)"
            print(_one_line(f"{PROG}: error: not saved: {save_error}") + kept, file=sys.stderr)
            return 2
        return 0
    except _UsageError as e:
        bar.clear()
        print(_one_line(str(e)), file=sys.stderr)
        return 2
    except MLAError as e:
        bar.clear()
        print(_one_line(f"{PROG}: error: {e}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        bar.clear()
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _report_history() -> None:
    """Tell the user, before a run, what the history has to say: runs cut short by a process
    that died, and notices (a corrupt store moved aside) not yet acknowledged."""
    from ..store import history

    try:
        for r in history.interrupted_runs():
            print(_one_line(f"{PROG}: note: a benchmark started {r['started_at']} ({r['source']}, pid {r['pid']}) "
                            "never finished: its process died during the run; nothing of it was saved"),
                  file=sys.stderr)
            try:
                history.acknowledge_interrupted(r["id"])
            except MLAError:
                pass
        for n in history.notices():
            print(_one_line(f"{PROG}: note: {n['text']}"), file=sys.stderr)
    except MLAError:
        pass  # an unreadable history is reported when the run is saved


def _validate_file(path: str) -> int:
    from ..store.errors import BenchError
    from ..store.schema import MAX_RESULT_BYTES, validate_result

    import os
    import stat

    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            raise BenchError(f"{path!r} is not a regular file")
        if st.st_size > MAX_RESULT_BYTES:
            raise BenchError(f"{path!r} is {st.st_size:,} bytes; the limit is {MAX_RESULT_BYTES:,} (1 MiB)")
        with open(path, "rb") as f:
            raw = f.read(MAX_RESULT_BYTES + 1)
    except OSError as e:
        raise BenchError(f"cannot read {path}: {e.strerror or e}") from None
    data = validate_result(raw, kind=None)  # any kind: kernels, collectives, engine
    name = "".join(ch if ch.isprintable() else "?" for ch in str(data["device"]["name"]))[:120]
    kind = data.get("kind", "kernels")
    count = len(data.get("results") or data.get("points") or [])
    what = "results" if kind != "engine" else "points"
    print(f"{path}: valid {'' if kind == 'kernels' else kind + ' '}result (schema_version {data['schema_version']}, "
          f"{count} {what}, {name})")
    return 0


# ---------------------------------------------------------------------------------------------

def _shape_text(r: dict) -> str:
    s = r["shape"]
    if "batch" in s:
        kv = f" kv{s['kv_heads']}" if "kv_heads" in s else ""
        return f"B{s['batch']} T{s['context']} h{s['heads']}{kv}"
    if "m" in s:
        return f"{s['m']}^3"
    from ..units import format_bytes

    return format_bytes(s["buffer_bytes"])


def render_table(result: dict) -> str:
    """The result as a fixed-width table with units (GB/s = 1e9 B/s, TFLOP/s = 1e12 flop/s)."""
    from ..units import format_bytes, format_seconds

    d = result["device"]
    lines = [f"device: {d['name']} ({d['kind']}{'/' + d['backend'] if d['backend'] != d['kind'] else ''}), "
             f"torch {d['torch_version']}, {d['dtype']}"
             + (f", {d['threads']} threads" if d.get("threads") else "")
             + (f", free {format_bytes(d['free_memory_bytes'])}" if d.get("free_memory_bytes") else "")
             + (f"; other processes kept {d['other_cpus_busy']:.2f} CPUs busy" if d.get("other_cpus_busy") else ""),
             f"peak bound: {d['peak_bandwidth_GBps']:,.0f} GB/s, {d['peak_TFLOPs']:,.1f} TFLOP/s ({d['peak_source']})"]
    # "accuracy" = predicted / measured, as the app's benchmark page shows it (1 = at the roofline).
    cfg = result.get("config") or {}
    if cfg.get("model"):
        lines.append(f"shape: {cfg['scaling']}" if cfg.get("scaling")
                     else f"shape: {cfg['model']}'s attention shape, not scaled")
    header = ("kernel", "shape", "median", "best", "GB/s", "TFLOP/s", "predicted", "accuracy", "note")
    rows = []
    for r in result["results"]:
        pred = r.get("predicted_s")
        note = []
        if r.get("max_rel_err") is not None:
            note.append(f"rel.err {r['max_rel_err']:.1e}")
        if r.get("predicted_bound"):
            note.append(f"{r['predicted_bound']} bound")
        if r.get("reference_GBps"):
            note.append(f"numpy copyto {r['reference_GBps']:,.1f} GB/s")
        if any(n.startswith("unsteady") for n in r.get("notes", [])):
            note.append("unsteady")
        rows.append((r["kernel"], _shape_text(r), format_seconds(r["median_s"]), format_seconds(r["min_s"]),
                     f"{r['achieved_GBps']:,.1f}", f"{r['achieved_TFLOPs']:,.3f}",
                     format_seconds(pred) if pred else "-", f"{pred / r['median_s']:.2f}" if pred else "-",
                     ", ".join(note)))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = lambda row: "  ".join(c.ljust(w) if i in (0, 1, 8) else c.rjust(w)  # noqa: E731
                                for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    lines += ["", fmt(header), fmt(tuple("-" * w for w in widths))] + [fmt(row) for row in rows]
    for e in result.get("timing_errors", []):
        lines.append(f"NOT SHOWN {e['kernel']} {_shape_text(e)}: {e['reason']}")
    for s in result.get("skipped", []):
        lines.append(f"skipped {s['kernel']} {_shape_text(s)}: {s['reason']}")
    c = result.get("ceilings") or {}
    if c.get("predicted_from"):
        lines.append(f"predicted = max(bytes / {c.get('read_GBps') or c.get('copy_GBps'):,.1f} GB/s, "
                     f"flops / {c['matmul_TFLOPs']:,.3f} TFLOP/s): {c['predicted_from']}")
    lines += [f"note: {n}" for n in result.get("notes", [])]
    lines.append(f"wall time {result.get('wall_s', 0):.1f} s")
    return "\n".join(lines)
