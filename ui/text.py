"""Showing text a user supplied (a model name from an uploaded config, a link parameter, an error
message that quotes them) without it being rendered as Markdown, HTML, a link or an image."""
from __future__ import annotations

import os
import re

_MD_SPECIAL = set("\\`*_{}[]()#+-.!|<>~$&")
_ZWSP = "\u200b"
# GitHub-flavoured autolinks need no markup at all: break "scheme://", "www." and "name@host".
_AUTOLINK = re.compile(r"(?i)(://|www\.|@)")


def escape_md(text, limit: int = 120) -> str:
    """Backslash-escape Markdown and HTML-significant characters, break autolinks with a
    zero-width space and cut to `limit` characters, so '<script>', '![x](http://...)' or
    'http://evil.example' show as typed inside st.markdown / st.caption / st.error."""
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = _AUTOLINK.sub(lambda m: m.group(0)[0] + _ZWSP + m.group(0)[1:], text)
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in text)


def error(message, limit: int = 400) -> None:
    """st.error with the message escaped (messages quote user input)."""
    import streamlit as st

    st.error(escape_md(message, limit))


def warning(message, limit: int = 400) -> None:
    """st.warning with the message escaped (messages quote user input)."""
    import streamlit as st

    st.warning(escape_md(message, limit))


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def display_path(path: str) -> str:
    """A server-side path as the page may show it: relative to the project ('var/history.sqlite3'),
    else to the home folder ('~/.local/share/mla-explorer/history.sqlite3'), else the file name
    alone; never the server's absolute layout."""
    full = os.path.abspath(str(path))
    home = os.path.expanduser("~")
    for base, prefix in ((_ROOT, ""), (home, "~/")):
        if base and base != os.sep and full.startswith(base.rstrip(os.sep) + os.sep):
            return prefix + os.path.relpath(full, base)
    return os.path.basename(full)


def hide_paths(text: str, *paths: str) -> str:
    """`text` with the folder of each of `paths`, then the project and home folders, shown as
    `display_path` shows them, for messages that quote a server path (a moved-aside
    'history.sqlite3.corrupt-...' beside the store included)."""
    text = str(text)
    for path in paths:
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            shown = os.path.dirname(display_path(path))
            if folder and folder != os.sep:
                text = text.replace(folder + os.sep, shown + os.sep if shown else "")
    for base, prefix in ((_ROOT, ""), (os.path.expanduser("~"), "~/")):
        if base and base != os.sep:
            text = text.replace(base.rstrip(os.sep) + os.sep, prefix)
    return text


def csv_text(rows: list[dict]) -> str:
    """Rows (dicts with the same keys) as CSV text with a header, None as an empty cell; the
    standard library's csv writer, which for a table of a few rows is far quicker than pandas."""
    import csv
    import io

    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue()


def frame(rows: list[dict], columns: list[str] | None = None):
    """A table for st.dataframe: a pyarrow Table built straight from `rows` (one dict per row,
    the columns in the first row's order, or `columns`; a missing key is an empty cell).
    Streamlit serialises a pyarrow Table as it is, where a pandas DataFrame is converted first:
    an 8-row table costs a served rerun about 1.1 ms against 2.5-3 ms (benchmarks/element_costs.py).
    A column whose values pyarrow cannot type as one (numbers beside text) is shown as text."""
    import pyarrow as pa

    names = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    arrays = []
    for name in names:
        values = [r.get(name) for r in rows]
        try:
            arrays.append(pa.array(values) if rows else pa.array([], pa.string()))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            arrays.append(pa.array([None if x is None else str(x) for x in values], pa.string()))
    return pa.table(arrays, names=names)


def widths(**px) -> dict:
    """`column_config` of column widths in pixels, so a table of many columns fits the page (a long
    cell ends in an ellipsis and shows whole when clicked). Names that are not identifiers go in
    as `**{"bound set by": 90}`."""
    import streamlit as st

    return {name: st.column_config.Column(width=w) for name, w in px.items()}
