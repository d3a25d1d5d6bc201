"""The `mla-explorer` command that `pip install .` puts on the PATH (pyproject.toml).

    mla-explorer app [streamlit run flags]     serve the app, exactly as `make app` does
    mla-explorer app --help                     what the app is, then Streamlit's own options
    mla-explorer SUBCOMMAND ...                 `python -m mla_core SUBCOMMAND ...`: the same
                                                subcommands, flags, JSON and exit statuses

Every subcommand other than `app` goes to `mla_core.cli.main` unchanged, so a subcommand added
there appears here by itself. `app` imports streamlit; nothing else here does.

The app is found beside this package in a checkout (app.py, ui/serve.py at the project root)
or, in an installed copy, in the `mla_explorer` package that pyproject.toml ships it as. An
installed copy keeps the Benchmark page's run history in the user's data folder
(`$XDG_DATA_HOME/mla-explorer/history.sqlite3`, else `~/.local/share/mla-explorer/...`) rather than
inside site-packages; `MLA_EXPLORER_HISTORY` still overrides it.
"""
from __future__ import annotations

import importlib.util
import os
import sys

PROG = "mla-explorer"
HISTORY_ENV = "MLA_EXPLORER_HISTORY"


def _checkout_root() -> str | None:
    """The project root when this package runs from a checkout (or an editable install)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(os.path.join(root, "app.py")) and os.path.isfile(os.path.join(root, "ui", "serve.py")):
        return root
    return None


def app_root() -> str | None:
    """The folder holding app.py, pages/ and ui/ (checkout first, then the installed copy),
    or None when neither is there."""
    root = _checkout_root()
    if root:
        return root
    spec = importlib.util.find_spec("mla_explorer")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isfile(os.path.join(folder, "app.py")) and os.path.isfile(os.path.join(folder, "ui", "serve.py")):
            return folder
    return None


def _user_history_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "mla-explorer", "history.sqlite3")


APP_HELP = f"""usage: {PROG} app [streamlit run options]

Serve the MLA explorer in a browser: how Multi-head Latent Attention (DeepSeek-V2/V3) and the
other attention and state layouts (MHA, GQA, MQA, sliding windows, recurrent layers) change the
KV cache, the requests a GPU holds, the decode roofline and a serving plan, for real model
configs, with a live torch benchmark of this machine. Pages: KV cache, Capacity, Roofline,
Serving plan, Benchmark, Published figures, Definitions.

It listens on http://127.0.0.1:8501 (loopback only, from the shipped .streamlit/config.toml;
--server.address and --server.port change that) and sends no usage statistics. The Benchmark
page's runs are kept in $XDG_DATA_HOME/mla-explorer/history.sqlite3 (else ~/.local/share/...) by
an installed copy, in var/history.sqlite3 by a checkout; MLA_EXPLORER_HISTORY overrides both.
Stop it with Ctrl-C. The analytic commands need no server: `{PROG} --help`.

The options below are Streamlit's own (`streamlit run`), passed through unchanged.
"""


def _wants_help(args: list[str]) -> bool:
    """-h / --help among the options (not after a `--`, where the script's own arguments start)."""
    head = args[:args.index("--")] if "--" in args else args
    return "-h" in head or "--help" in head


def serve_app(args: list[str]) -> int:
    """Run the app's server (ui/serve.py) with `streamlit run` flags `args`; returns when it stops.
    With --help: what the app is, then Streamlit's options (its own usage line left out)."""
    root = app_root()
    if root is None:
        print(f"{PROG} app: error: the app files (app.py, pages/, ui/) are not installed", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("_mla_explorer_serve", os.path.join(root, "ui", "serve.py"))
    serve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve)
    if _wants_help(args):
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            try:
                serve.main(["--help"])
            except SystemExit:
                pass
        text = buf.getvalue()
        options = text.find("Options:")
        print(APP_HELP)
        print(text[options:] if options >= 0 else text, end="")
        return 0
    try:
        serve.main(args)
    except SystemExit as e:  # streamlit's click CLI exits when the server stops
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if _checkout_root() is None:
        os.environ.setdefault(HISTORY_ENV, _user_history_path())
    if argv and argv[0] == "app":
        return serve_app(argv[1:])
    from . import cli

    cli.PROG = PROG  # error lines and --help name the command the user typed
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
