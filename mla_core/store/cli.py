"""`python -m mla_core bench history [--kind KIND] [--json]`: the runs the history holds (no torch).

One row per run, newest first: its id (what `plan --link-from-run ID` and the Benchmark page take),
kind (kernels, collectives, engine, profile), when it was saved, the device, the source, the
label and whether it is disturbed or damaged. Reading never creates or changes the store: an
absent store lists nothing; a read-only or full disk is read as it is. Bad input exits 2 with
one line on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import MLAError
from .schema import KINDS

PROG = "mla_core bench history"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # noqa: D102 - one line, no usage block
        raise _UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="List the runs saved in the local history (benchmark runs, collectives, "
                                      "engine imports, kernel profiles) with their ids.")
    p.add_argument("--kind", choices=KINDS, help="only runs of this kind (e.g. collectives for plan --link-from-run)")
    p.add_argument("--json", action="store_true", help="print the runs as one JSON object")
    return p


def _clean(text, width: int) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in str(text or ""))
    return text if len(text) <= width else text[:width - 3] + "..."


def render(runs: list[dict], path: str, kind: str | None = None) -> str:
    """The runs as a fixed-width table, the store's path last."""
    if not runs:
        return f"no {kind + ' ' if kind else ''}runs saved in {path}"
    header = ("id", "kind", "saved (UTC)", "device", "source", "label", "note")
    rows = []
    for r in runs:
        note = "damaged: " + r["damaged"] if r.get("damaged") else ("disturbed" if r.get("disturbed") else "")
        rows.append((str(r["id"]), str(r.get("kind")), str(r["saved_at"])[:19],
                     _clean(r.get("device_name"), 40), r["source"], _clean(r.get("label"), 40), _clean(note, 80)))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    fmt = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(tuple("-" * w for w in widths)), *map(fmt, rows), f"store: {path}"])


def main(argv: list[str] | None = None) -> int:
    """Entry point (`mla_core bench history ...`). Returns the exit status."""
    from . import history

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        path = history.default_path()
        runs = history.list_runs(kind=args.kind) if os.path.exists(path) else []
        for notice in history.pop_notices():
            print(" ".join(f"{PROG}: note: {notice}".split())[:600], file=sys.stderr)
        try:
            print(json.dumps({"store": path, "runs": runs}, indent=2) if args.json else render(runs, path, args.kind))
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        return 0
    except _UsageError as e:
        print(str(e).splitlines()[0][:400], file=sys.stderr)
        return 2
    except MLAError as e:
        print(" ".join(f"{PROG}: error: {e}".split())[:400], file=sys.stderr)
        return 2
