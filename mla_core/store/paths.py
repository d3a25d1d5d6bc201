"""Where the store lives (stdlib only): `MLA_EXPLORER_HISTORY` (a file path) if set, else
`var/history.sqlite3` at the project root (the repository's `var/`, which git ignores). An
installed copy (`mla-explorer`, mla_core.entry) sets the variable to the user's data folder.

The history (`mla_core.store.history`) and the machine's benchmark lock beside it
(`mla_core.store.runlock`) both ask here, so neither imports the other for it.
"""
from __future__ import annotations

import os

ENV_VAR = "MLA_EXPLORER_HISTORY"


def default_path() -> str:
    """MLA_EXPLORER_HISTORY, else <repo>/var/history.sqlite3."""
    env = os.environ.get(ENV_VAR)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "var", "history.sqlite3")
