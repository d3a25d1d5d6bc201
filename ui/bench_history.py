"""The benchmark page's import section and history (SQLite, mla_core.store.history): import a
result JSON, select, show, compare, export and delete runs."""
from __future__ import annotations

import streamlit as st

from mla_core import install
from mla_core.store import history
from mla_core.store.schema import MAX_RESULT_BYTES, validate_result
from mla_core.errors import MLAError

from . import measured
from .bench_common import flush, history_status, notices, say, set_shown
from .text import display_path, escape_md, frame

ss = st.session_state


def _on_upload() -> None:
    f = ss.get("_bench_upload")
    if f is None:
        return
    name = measured.clean_text(f.name, 80) or "the file"
    try:
        if f.size > MAX_RESULT_BYTES:  # refused before reading it
            raise MLAError(f"result JSON is {f.size:,} bytes; the limit is {MAX_RESULT_BYTES:,} (1 MiB)")
        data = validate_result(f.getvalue())
        label = " ".join(str(ss.get("_bench_import_label") or "").split())[:200] or name[:200]
        run_id = history.save_run(data, source="import", label=label)
    except MLAError as e:
        say("import", "error", f"{name}: {e}")
        return
    finally:
        notices()
    key = f"run:{run_id}"
    say("import", "success", f"Imported {name} ({measured.device_name(data)}) as run #{run_id}; added to the "
                              "comparison below.")
    chosen = [k for k in (ss.get("_bench_compare") or []) if k != key]
    if not chosen and ss.get("_bench_show"):
        chosen = [ss["_bench_show"]]
    ss["_bench_compare"] = [*chosen, key]


def import_result(present: bool) -> None:
    """Import a result made elsewhere (checked against the schema, saved in the history)."""
    with st.expander("Import a result from another machine", expanded=not present):
        here = install.setup()
        st.file_uploader(f"A result JSON written by `{here.cli} bench --out FILE.json` (at most 1 MiB; Streamlit "
                         "writes its limit as 1MB, meaning 2^20 bytes)", type=["json"], key="_bench_upload",
                         on_change=_on_upload)
        st.text_input("Label for the import (optional; default: the file name)", key="_bench_import_label",
                      max_chars=200)
        st.caption(f"No H200 measurement is committed yet: `{here.measure_elsewhere}` on an H200 writes one "
                   + ("(out/h200-bench-<time>.json, checked against the schema)" if here.h200_script else
                      f"(with torch there: `{here.torch_install}`)")
                   + "; import it here to set it beside this "
                   "machine. Files are checked against mla_core/store/result.schema.json: at most 1 MiB, no negative, "
                   "zero or non-finite times.")
    flush("import")


def _selected() -> list[int]:
    return [i for i in (ss.get("_bench_selected") or []) if isinstance(i, int)]


def _show_selected() -> None:
    ids = _selected()
    if ids:
        set_shown(f"run:{ids[0]}")


def _compare_selected() -> None:
    ss["_bench_compare"] = [f"run:{i}" for i in _selected()]


def _ask_delete() -> None:
    ss["_bench_confirm_delete"] = _selected()


def _delete() -> None:
    ids = ss.pop("_bench_confirm_delete", None) or []
    gone = []
    for i in ids:
        try:
            if history.delete_run(i):
                gone.append(i)
        except MLAError as e:
            say("history", "error", f"History: {e}")
    notices()
    keys = {f"run:{i}" for i in gone}
    if ss.get("_bench_result_key") in keys:
        ss.pop("bench_result", None)
        ss.pop("_bench_result_key", None)
    ss["_bench_selected"] = [i for i in _selected() if i not in gone]
    if gone:
        say("history", "success", f"Deleted run{'s' if len(gone) > 1 else ''} "
                                   + ", ".join(f"#{i}" for i in gone) + ".")


def _export(fn, ids):
    def make():
        try:
            return fn(ids)
        except MLAError as e:
            return f"error: {e}\n"
    return make


def history_section(cat) -> None:
    """The saved runs: a table, selection, show, compare, export, delete with confirmation."""
    runs, labels = cat.runs, cat.labels
    st.subheader("History")
    st.caption(f"Every run and import is saved in one SQLite transaction in {escape_md(display_path(history.default_path()), 300)} "
               f"(set {history.ENV_VAR} to keep it elsewhere). Only a file that fails SQLite's integrity check is "
               "moved aside (and you are told where), never deleted; a full or read-only disk moves nothing.")
    flush("history")
    history_status()

    if not runs:
        st.info("No runs saved yet: run the benchmark or import a result.")
    else:
        st.dataframe(frame([{
            "id": r["id"], "saved (UTC)": str(r["saved_at"])[:19], "measured (UTC)": str(r.get("created") or "")[:19],
            "device": measured.clean_text(r.get("device_name") or "", 60), "kind": r.get("device_kind") or "",
            "dtype": r.get("dtype") or "", "source": r["source"], "label": measured.clean_text(r.get("label") or "", 80),
            "results": r["n_results"],
            "disturbed": {None: "", False: "no", True: "yes: " + "; ".join(r.get("disturbed_reasons") or [])}[
                r.get("disturbed")],
            "damaged": r.get("damaged") or "",
        } for r in runs]), hide_index=True)
        ids = [r["id"] for r in runs]
        ss["_bench_selected"] = [i for i in _selected() if i in ids]
        st.multiselect("Select runs", ids, key="_bench_selected", format_func=lambda i: labels.get(f"run:{i}", str(i)))
        sel = _selected()
        c1, c2, c3, c4, c5 = st.columns(5)
        c1.button("Show", key="_bench_show_selected", on_click=_show_selected, disabled=not sel,
                  help="Show the first selected run above and on the Roofline page.")
        c2.button("Compare", key="_bench_compare_selected", on_click=_compare_selected, disabled=len(sel) < 2)
        c3.download_button("Export JSON", _export(history.export_json, sel) if sel else "", disabled=not sel,
                           file_name="mla-benchmark-runs.json", mime="application/json", key="_bench_export_json")
        c4.download_button("Export CSV", _export(history.export_csv, sel) if sel else "", disabled=not sel,
                           file_name="mla-benchmark-runs.csv", mime="text/csv", key="_bench_export_csv")
        c5.button("Delete…", key="_bench_delete", on_click=_ask_delete, disabled=not sel)
        pending = [i for i in (ss.get("_bench_confirm_delete") or []) if i in ids]
        if pending:
            st.warning(f"Delete run{'s' if len(pending) > 1 else ''} {', '.join(f'#{i}' for i in pending)} from the "
                       "history? This cannot be undone (export them first to keep a copy).")
            d1, d2, _ = st.columns([1, 1, 3])
            d1.button("Yes, delete", key="_bench_delete_yes", on_click=_delete, type="primary")
            d2.button("Keep them", key="_bench_delete_no", on_click=lambda: ss.pop("_bench_confirm_delete", None))
