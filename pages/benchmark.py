"""Benchmark: measure this machine with torch (mla_core.bench), import results made elsewhere,
compare devices and keep a history of runs.

Sections, one module each by job: `ui.bench_run.measure` (set up, settings, run and progress),
`ui.bench_history.import_result`, `ui.bench_results.results` (the shown run: ceilings, kernels,
the measured roofline), `ui.bench_compare.compare`, `ui.bench_history.history_section`,
`ui.bench_profile.section` (the kernel profile of the sidebar's model, run and listed), then
`ui.collectives.section` and `ui.engine_runs.section`.
torch is imported only inside the handlers that need it (ui.bench_run); the history, imports,
validation, comparison and every chart work without it. Widget keys are kept across pages by
the same registry as every other page's (ui.params.SESSION_KEYS). In presentation mode the slide
is the title, the shown run's measured ceilings and its roofline.
"""
import uuid

import streamlit as st

from ui import (bench_compare, bench_history, bench_profile, bench_results, bench_run, bench_runs, collectives,
                engine_runs, state)
from ui.bench_common import catalogue

v = state.values()
present = v["present"]
reg = bench_runs.registry()
owner = st.session_state.setdefault("_bench_owner", uuid.uuid4().hex)

bench_run.take_finished(reg, owner)
bench_profile.take_finished(reg, owner)
if present:
    st.markdown("## Benchmark: measured decode kernels on a real device")
else:
    st.title("Benchmark: measure MLA, MHA, GQA and MQA decode on a real device")
    st.caption("Copy and read bandwidth, matmul throughput and one decode step of each attention variant at the same "
               "batch and context, measured with torch, beside the roofline time mla_core predicts from the measured "
               "ceilings. Rates in decimal units (GB/s = 10^9 B/s, TFLOP/s = 10^12 flop/s); memory in binary units "
               "(GiB = 2^30 B). Results from other machines can be imported and compared.")
cat = catalogue()  # after the callbacks (an import's) of this run, which run before the script
if present:  # the slide: the shown run first; the rest follows
    bench_results.results(cat, present, slide=True)
    bench_run.measure(reg, owner, present)
    bench_history.import_result(present)
else:
    bench_run.measure(reg, owner, present)
    bench_history.import_result(present)
    bench_results.results(cat, present)
bench_compare.compare(cat, present)
bench_history.history_section(cat)
bench_profile.section(reg, owner, present)  # bench --profile: the model's own op shapes (ui/bench_profile.py)
# measured beyond one device: collectives and imported engine runs (ui/collectives.py, ui/engine_runs.py)
collectives.section(present)
engine_runs.section(present)
