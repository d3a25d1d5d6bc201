"""Rebuild data/traffic_lengths.json from the public Azure LLM inference traces (2023).

The traces are CSV files of (TIMESTAMP, ContextTokens, GeneratedTokens), one row a request,
published by Microsoft under CC-BY with the Splitwise paper (Patel et al., ISCA 2024):
    https://github.com/Azure/AzurePublicDataset  data/AzureLLMInferenceTrace_conv.csv
                                                 data/AzureLLMInferenceTrace_code.csv
(commit 790921015d50dd6aae7f7e47f39ba0e235ad6b08 added them). Download them yourself; nothing
in the project downloads data at run time.

    python data/sources/build_traffic_lengths.py CONV.csv CODE.csv > data/traffic_lengths.json

Each trace becomes a joint histogram of (input, output) lengths over bins whose edges grow by
2^(1/4) (whole tokens), so the correlation between a request's input and output is kept:
`cells` lists [input bin, output bin, requests] for every non-empty cell; a length is drawn as
a cell by its count, then a whole number uniform in the cell's [low, high) edges
(mla_core.traffic.LengthHistogram).
"""
from __future__ import annotations

import csv
import json
import sys
from collections import Counter

SOURCE = ("Azure LLM inference trace 2023 (github.com/Azure/AzurePublicDataset, "
          "AzureLLMInferenceDataset2023.md; CC-BY), the sample described in Patel et al., 'Splitwise: "
          "Efficient generative LLM inference using phase splitting', ISCA 2024")


def edges_up_to(top: int) -> list[int]:
    """Whole-token bin edges 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, ... (ratio 2^(1/4)) past `top`."""
    out, k = [1], 1
    while out[-1] <= top:
        e = round(2 ** (k / 4))
        if e > out[-1]:
            out.append(e)
        k += 1
    return out


def histogram(path: str) -> dict:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(f)]
    ins, outs = edges_up_to(max(i for i, _ in rows)), edges_up_to(max(o for _, o in rows))

    def where(edges, v):
        lo, hi = 0, len(edges) - 1
        while hi - lo > 1:  # edges[lo] <= v < edges[hi]
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if edges[mid] <= v else (lo, mid)
        return lo

    cells = Counter((where(ins, i), where(outs, o)) for i, o in rows)
    n = len(rows)
    return {
        "requests": n,
        "trace_mean_input_len": round(sum(i for i, _ in rows) / n, 2),
        "trace_mean_output_len": round(sum(o for _, o in rows) / n, 2),
        "max_input_len": max(i for i, _ in rows),
        "max_output_len": max(o for _, o in rows),
        "input_edges": ins,
        "output_edges": outs,
        "cells": [[a, b, c] for (a, b), c in sorted(cells.items())],
    }


def main(conv: str, code: str) -> None:
    out = {
        "about": ("Request length histograms for mla_core.traffic (--dataset): joint (input tokens, output tokens) "
                  "counts of public traces, rebuilt by data/sources/build_traffic_lengths.py. A length is a cell "
                  "drawn by its count, then a whole number uniform in the cell's [low, high) edges."),
        "datasets": [
            {"id": "azure-conv-2023", "title": "Azure LLM inference trace 2023, conversation service",
             "source": SOURCE + "; file data/AzureLLMInferenceTrace_conv.csv", **histogram(conv)},
            {"id": "azure-code-2023", "title": "Azure LLM inference trace 2023, coding service",
             "source": SOURCE + "; file data/AzureLLMInferenceTrace_code.csv", **histogram(code)},
        ],
    }
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: build_traffic_lengths.py CONV.csv CODE.csv > data/traffic_lengths.json")
    main(sys.argv[1], sys.argv[2])
