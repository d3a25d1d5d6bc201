"""Names and labels: a loaded config's own name, no repeated units in the CLI, token counts by
the one rule in the CLI table, and no server paths in what the pages show."""
import json
import os
import subprocess
import sys

from conftest import ROOT, case_config
from mla_core.config import load_config


def _write(path, cfg):
    path.write_text(json.dumps(cfg))
    return str(path)


def test_a_loaded_config_is_named_by_its_own_name_or_its_file(tmp_path):
    cfg = json.load(open(case_config("deepseek-v3.json")))
    assert load_config(case_config("deepseek-v3.json")).name == "deepseek-v3"  # the file's name
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    assert load_config(_write(folder / "config.json", cfg)).name == "DeepSeek-V3"  # a folder's config.json
    named = dict(cfg, _name_or_path="deepseek-ai/DeepSeek-V3")
    assert load_config(_write(tmp_path / "x.json", named)).name == "deepseek-ai/DeepSeek-V3"
    assert load_config(_write(folder / "config.json", named)).name == "deepseek-ai/DeepSeek-V3"


def test_an_uploaded_config_is_never_called_uploaded_config():
    from ui import models, params

    cfg = json.load(open(case_config("deepseek-v2-lite.json")))
    assert models._from_config(params.encode_config(cfg)).name == "deepseek_v2"  # no name: its model_type
    cfg["_name_or_path"] = "deepseek-ai/DeepSeek-V2-Lite"
    assert models._from_config(params.encode_config(cfg)).name == "deepseek-ai/DeepSeek-V2-Lite"


def _cli(*args):
    p = subprocess.run([sys.executable, "-m", "mla_core", *args], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_cli_table_repeats_no_unit_and_follows_the_token_rule():
    out = _cli("kv", "--model", "deepseek-v3", "--context", "131072", "--kv-dtype", "fp8_ds_mla")
    rows = dict(line.split("  ", 1) for line in out.splitlines())
    assert rows["KV bytes per token per layer"].strip() == "656 B"  # not "656 B (656 B)"
    assert rows["KV bytes per token (all layers)"].strip() == "40,016 B (39.1 KiB)"
    assert rows["context x batch"].strip() == "131,072 tokens (128K) x 1"
    out = _cli("capacity", "--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--tp", "8",
               "--kv-dtype", "fp8", "--context", "131072")
    assert "max tokens per GPU                     1,490,752 tokens\n" in out
    assert "whole requests of 128K tokens at once  11\n" in out
    assert "131K" not in out and "1.49M" not in out
    for line in out.splitlines():
        value = line.split("  ")[-1].strip()
        if value.endswith(")") and " (" in value:
            exact, short = value[:-1].split(" (", 1)
            assert exact != short, line


def test_paths_are_shown_relative_or_by_name(monkeypatch):
    from ui.text import display_path, hide_paths

    assert display_path(os.path.join(ROOT, "var", "history.sqlite3")) == os.path.join("var", "history.sqlite3")
    monkeypatch.setenv("HOME", "/home/someone")
    assert display_path("/home/someone/.local/share/mla-explorer/history.sqlite3") == \
        "~/.local/share/mla-explorer/history.sqlite3"
    assert display_path("/srv/private/store/h.sqlite3") == "h.sqlite3"
    text = "history store /srv/private/store/h.sqlite3 is damaged; moved to /srv/private/store/h.sqlite3.corrupt-1"
    assert hide_paths(text, "/srv/private/store/h.sqlite3") == \
        "history store h.sqlite3 is damaged; moved to h.sqlite3.corrupt-1"


def _page_text(at) -> str:
    """Every text a page shows: titles, markdown, captions, metrics, table heads and cells, chart specs."""
    parts = [e.value for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error")
             for e in getattr(at, kind)]
    from apptest_util import metrics

    parts += [f"{m.label} {m.value} {m.help}" for m in metrics(at)]
    for df in at.dataframe:
        parts += [str(c) for c in df.value.columns] + [str(x) for x in df.value.astype(str).to_numpy().ravel()]
    from apptest_util import chart_specs

    parts += chart_specs(at)
    return "\n".join(parts)


def test_pages_follow_the_token_rule():
    import pytest

    from apptest_util import no_exceptions, run_page

    checked = 0
    for page in ("pages/kv_cache.py", "pages/capacity.py", "pages/roofline.py"):
        for context, short, wrong in ((131072, "128K", ("131K", "131.1K")), (32768, "32K", ("32.8K",)),
                                      (4096, "4K", ("4.1K",))):
            at = run_page(page, context=str(context))
            no_exceptions(at)
            text = _page_text(at)
            assert f"{short} tokens" in text, (page, context)
            for bad in wrong:
                assert bad not in text, (page, context, bad)
            checked += 1
        if page != "pages/roofline.py":  # the context axes are labelled at powers of two
            assert '"ticktext":["1K","2K","4K"' in text.replace(" ", ""), page
    assert checked == 9
    with pytest.raises(AssertionError):  # the check itself can fail
        assert "128K tokens" not in _page_text(run_page("pages/kv_cache.py", context="131072"))


def test_history_caption_shows_no_server_path(tmp_path, monkeypatch):
    from apptest_util import plain, run_page
    from mla_core.store import history

    monkeypatch.setenv(history.ENV_VAR, str(tmp_path / "private" / "runs.sqlite3"))
    at = run_page("pages/benchmark.py")
    captions = plain(" ".join(c.value for c in at.caption))
    assert "runs.sqlite3" in captions and str(tmp_path) not in captions


def test_the_definitions_page_shows_docs_model_md():
    from apptest_util import no_exceptions, run_page

    at = run_page("pages/definitions.py")
    no_exceptions(at)
    with open(os.path.join(ROOT, "docs", "model.md"), encoding="utf-8") as f:
        assert at.markdown[0].value == f.read().strip()
