"""`python -m mla_core bench --profile`: measure a model's own op shapes here, as a kernel table.

    python -m mla_core bench --profile [--model PRESET | --config PATH] [--tp N]
        [--device auto|cpu|cuda|mps] [--dtype auto|fp32|bf16|fp16] [--quick] [--threads N]
        [--out FILE.json] [--json] [--save [--label TEXT]] [--progress | --no-progress] [--wait]
    torchrun --nproc-per-node N -m mla_core bench --profile --model M --tp N ...
        (the collectives over the N ranks first, then rank 0 measures the rest)

The table (`mla_core.bench.profile_plan`, `profile.schema.json`) goes to --out and, with --json,
to stdout; otherwise stdout gets a summary: rows per op family, a few latencies, what was scaled
to fit the device, the wall time. --save stores it in the history as a run of kind "profile".
Bad requests exit with status 2 and one line on stderr (unknown flags or values, a tp that does
not split the model, an unavailable device, an unwritable --out, out of memory, another benchmark
running without --wait, a table that could not be saved: it is printed and in --out first).
No torch is imported until the request is checked.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading

from ..errors import MLAError

PROG = "mla_core bench --profile"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # noqa: D102 - argparse hook: one line, no usage block
        raise _UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    from .console import _int
    from .config import DEVICE_CHOICES, DTYPE_CHOICES

    p = _Parser(prog=PROG, description="Measure the model's own op shapes on this device (every GEMM per GPU after "
                                      "TP over 1..8,192 tokens, decode and prefill attention of each layer kind, the "
                                      "MoE grouped GEMM, elementwise ops, recurrent scans; under torchrun the "
                                      "collectives) and write the kernel table the serving estimate reads.")
    p.add_argument("--profile", action="store_true", required=True, help="this command")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="PRESET", help="the model (default deepseek-v3; `python -m mla_core presets`)")
    src.add_argument("--config", metavar="PATH", help="a Hugging Face config.json instead of a preset")
    p.add_argument("--tp", type=_int("--tp", 1, 1024), default=1, help="tensor-parallel GPUs the shapes are split over "
                                                                       "(default 1)")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help="default auto: cuda, else mps, else cpu")
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto",
                   help="default auto: bf16 on CUDA/ROCm, fp16 on MPS, fp32 on CPUs")
    p.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    p.add_argument("--threads", type=_int("--threads", 1, 4096), help="CPU threads for torch (default: torch's)")
    p.add_argument("--out", metavar="FILE.json", help="write the table JSON here")
    p.add_argument("--json", action="store_true", help="print the table JSON instead of the summary")
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="progress bar on stderr (default: when stderr is a terminal)")
    bar.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--wait", action="store_true", help="wait for another benchmark on this machine to finish")
    p.add_argument("--save", action="store_true", help="also store the table in the local history (kind profile)")
    p.add_argument("--label", help="label of the saved run (with --save)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point (`mla_core.bench.cli.main` dispatches `--profile` here). Returns the exit status."""
    from ..store.files import check_out as _check_out
    from ..store.files import write_json as _write_json
    from .console import _Bar, _cancel_on_sigterm, _one_line

    argv = sys.argv[1:] if argv is None else list(argv)
    bar = _Bar(sys.stderr, False)
    try:
        args = build_parser().parse_args(argv)
        if args.label is not None and not args.save:
            raise _UsageError(f"{PROG}: error: --label needs --save")
        if args.out:
            _check_out(args.out)
        spec = _model(args)
        from ..kv import tp_split_error

        err = tp_split_error(spec, args.tp)
        if err:
            raise _UsageError(f"{PROG}: error: --tp {args.tp}: {err}")
        try:
            from .collectives import under_torchrun
            from .profile import measure_collectives, run_profile, save_profile_table
        except ImportError as e:  # torch missing or broken
            raise _UsageError(f"{PROG}: error: the profile needs torch ({e})") from None
        rows = None
        if under_torchrun():
            import os

            if int(os.environ.get("WORLD_SIZE", "1")) >= 2:
                rows = measure_collectives(spec, device=args.device, dtype=args.dtype, quick=args.quick)
            if int(os.environ.get("RANK", "0")) != 0:
                return 0  # rank 0 measures the local ops alone, on an otherwise idle machine
        bar.enabled = sys.stderr.isatty() if args.progress is None else args.progress
        cancel = threading.Event()
        with _cancel_on_sigterm(cancel):
            run = run_profile(spec, tp=args.tp, device=args.device, dtype=args.dtype, quick=args.quick,
                              progress=bar, cancel=cancel, wait=bool(args.wait), source="cli", collectives=rows,
                              threads=args.threads)
        bar.clear()
        if args.out:
            _write_json(args.out, run.table)
        save_error = None
        if args.save:
            try:
                run_id = save_profile_table(run, label=args.label)
                print(f"saved as run {run_id} (kind profile)", file=sys.stderr)
            except MLAError as e:
                save_error = e
        try:
            print(json.dumps(run.table, indent=1) if args.json else render_summary(run.table, run.meta))
            if args.out and not args.json:
                print(f"wrote {args.out}")
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        if save_error is not None:
            kept = f" (the table is in {args.out})" if args.out else " (the table is printed above)"
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


def _model(args):
    if args.config:
        from ..config import load_config

        return load_config(args.config)
    from ..presets import load_model

    return load_model(args.model or "deepseek-v3")


def render_summary(table: dict, meta: dict) -> str:
    """The profile as text: the device, rows per family with the fastest and slowest latency,
    what was scaled or skipped, notes and the wall time."""
    from ..units import format_seconds

    d = table["device"]
    lines = [f"profile of {table['model']} at TP{table['tp']} on {d['name']} ({d['kind']}), torch "
             f"{d['torch_version']}, {meta.get('dtype', '')}" + (f", {d['threads']} threads" if d.get("threads") else "")]
    header = ("family", "rows", "fastest", "slowest", "e.g.")
    body = []
    for family, rows in table["ops"].items():
        if not rows:
            body.append((family, "0", "-", "-", ""))
            continue
        lat = sorted(r["latency_s"] for r in rows)
        example = rows[len(rows) // 2]
        shown = ", ".join(f"{k}={v}" for k, v in example.items() if k not in ("latency_s", "dtype", "kv_dtype"))
        body.append((family, str(len(rows)), format_seconds(lat[0]), format_seconds(lat[-1]),
                     f"{shown}: {format_seconds(example['latency_s'])}"))
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    fmt = lambda row: "  ".join(c.ljust(w) if i in (0, 4) else c.rjust(w)  # noqa: E731
                                for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    lines += ["", fmt(header), fmt(tuple("-" * w for w in widths))] + [fmt(r) for r in body]
    lines += [f"scaled: {s}" for s in meta.get("scaled", [])]
    for s in meta.get("skipped", [])[:5]:
        lines.append(f"skipped {s['family']}: {s['reason']}")
    if len(meta.get("skipped", [])) > 5:
        lines.append(f"... and {len(meta['skipped']) - 5} more skipped")
    if meta.get("timing_errors"):
        lines.append(f"{len(meta['timing_errors'])} points faster than the device's peak were dropped (timing errors)")
    lines += [f"note: {n}" for n in meta.get("notes", [])]
    lines.append(f"{meta.get('points', 0)} points, wall time {meta.get('wall_s', 0):.1f} s")
    return "\n".join(lines)
