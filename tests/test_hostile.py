"""Hostile input across the app: the link parser under fuzzing, huge legal numbers, markup."""
import ast
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from apptest_util import ROOT, app, metric, no_exceptions, own_model
from mla_core.kv import kv_report
from mla_core.presets import load_model
from mla_core.units import format_bytes
from ui import params

names = st.sampled_from(list(params.PARAMS)) | st.text(max_size=30)
values = (st.text(max_size=50) | st.integers().map(str) | st.floats().map(repr)
          | st.sampled_from(["", "nan", "inf", "-1", "1e999", "0x10", "1_000", "٣", "９", "<b>x</b>", "\x00"]))


@settings(max_examples=500)
@given(query=st.dictionaries(names, values | st.lists(values, max_size=3), max_size=8))
def test_link_parser_never_raises(query):
    values_, warnings = params.parse_query(query)
    for key, value in values_.items():
        assert key in params.PARAMS
        # A value that parsed is what the parser would give again from its own text.
        assert params.PARAMS[key].parse(params.PARAMS[key].to_text(value)) == value
    assert all(isinstance(w, str) and "\n" not in w for w in warnings)


def test_huge_but_legal_numbers_stay_exact_in_the_app():
    at = app(model="deepseek-v3", context=str(10**15), batch=str(10**6), kv_dtype="bf16").run()
    no_exceptions(at)
    r = kv_report(load_model("deepseek-v3"), 10**15, 10**6, "bf16")
    assert r["kv_cache_bytes"] == 70272 * 10**21
    assert metric(at, "Batch of") == format_bytes(r["kv_cache_bytes"])
    for page in ("pages/capacity.py", "pages/roofline.py"):
        at.switch_page(page).run()
        no_exceptions(at)


def test_unsafe_html_only_with_constant_text():
    """Every unsafe_allow_html=True call passes a module-level constant, never user text."""
    offenders = []
    for folder in ("pages", "ui", "."):
        base = os.path.join(ROOT, folder)
        for name in os.listdir(base):
            if not name.endswith(".py"):
                continue
            path = os.path.join(base, name)
            tree = ast.parse(open(path, encoding="utf-8").read())
            constants = {t.id for node in tree.body if isinstance(node, ast.Assign)
                         for t in node.targets if isinstance(t, ast.Name) and isinstance(node.value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and any(
                        k.arg == "unsafe_allow_html" and getattr(k.value, "value", False) is True for k in node.keywords):
                    arg = node.args[0] if node.args else None
                    if not (isinstance(arg, ast.Name) and arg.id in constants):
                        offenders.append(f"{folder}/{name}:{node.lineno}")
    assert not offenders, offenders


# --- found by trying to break the app (regressions) -----------------------------------------------

def _no_live_markdown(texts):
    """No link or image markup survives unescaped, and no autolink can form."""
    import re

    for t in texts:
        assert not re.search(r"(?<!\\)\]\(", t), t
        assert "://" not in t and "www." not in t.lower(), t


def test_markdown_in_link_parameters_is_not_rendered():
    at = app(**{"![p](http://127.0.0.1:9/unk.png)": "1", "model": "[Log in again](http://evil.example/)",
                "kv_dtype": "www.evil.example"}).run()
    no_exceptions(at)
    _no_live_markdown([w.value for w in at.warning])


def test_markdown_in_an_uploaded_name_is_not_rendered():
    cfg = {"_name_or_path": "![p](http://127.0.0.1:9/name.png)[CLICK ME](http://evil.example/)", "model_type": "llama",
           "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "torch_dtype": "bfloat16"}
    for page in ("pages/kv_cache.py", "pages/capacity.py", "pages/roofline.py"):
        at = app(model="upload", config=params.encode_config(cfg), kv_dtype="fp8_ds_mla").run()
        if page != "pages/kv_cache.py":
            at.switch_page(page).run()
        no_exceptions(at)
        _no_live_markdown([e.value for e in [*at.warning, *at.error, *at.caption]])


def test_markdown_in_a_pasted_config_error_is_not_rendered():
    at = own_model(app().run())
    at.text_area(key="_paste").input('{"torch_dtype": ["![](//127.0.0.1:9/a.png)"], "num_hidden_layers": 4, '
                                     '"num_attention_heads": 8, "hidden_size": 1024, "model_type": "[x](http://e.x)"}')
    at.run()
    at.button[[b.label for b in at.button].index("Use the pasted config")].click().run()
    no_exceptions(at)
    assert at.error
    _no_live_markdown([e.value for e in at.error])


def test_link_values_the_widgets_cannot_show_are_warned_not_dropped():
    from apptest_util import shown

    at = app(model="deepseek-v3", gqa_groups="7", block_size="17", batch="5000000").run()
    no_exceptions(at)
    text = shown(at.warning)
    assert "GQA groups 7" in text and "batch" in text
    assert at.dataframe, "the comparison table is drawn"
    assert at.session_state["block_size"] == 17  # kept, and offered by the selectbox
    r = kv_report(load_model("deepseek-v3"), 131072, 1, "auto", "latent", 17)
    assert metric(at, "Per sequence") == format_bytes(r["kv_cache_bytes_per_sequence"])


def test_huge_integers_in_a_result_are_refused_and_formatting_survives_them():
    import json

    import pytest

    from mla_core.store.errors import InvalidResult
    from mla_core.store.schema import validate_result

    sample = json.load(open(os.path.join(ROOT, "data", "samples", "cpu-2core-quick.json")))
    for path in (("device", "free_memory_bytes"), ("results", 3, "bytes"), ("results", 0, "shape", "buffer_bytes")):
        bad = json.loads(json.dumps(sample))
        node = bad
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = 10**400
        with pytest.raises(InvalidResult, match="out of range"):
            validate_result(json.dumps(bad))
    assert format_bytes(10**400) == "8.27e+375 YiB"


def test_cli_refuses_meaningless_device_figures_and_fifos(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "mla_core", "roofline", "--model", "deepseek-v3", "--context", "1",
                        "--bandwidth-tbps", "5e-324", "--peak-tflops", "5e-324", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "Infinity" not in p.stdout and len(p.stderr.strip().splitlines()) == 1
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "mla_core", "bench", "--validate", str(fifo)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "regular file" in p.stderr
    p = subprocess.run([sys.executable, "-m", "mla_core", "kv", "--attention", "mha", "--layers", "2", "--heads", "4",
                        "--kv-lora-rank", "5", "--context", "8"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--attention mla" in p.stderr


def test_history_leaves_a_foreign_sqlite_file_alone(tmp_path):
    import hashlib
    import sqlite3

    import pytest

    from mla_core.store import history
    from mla_core.store.errors import BenchError

    path = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.commit()
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(BenchError, match="something else"):
        history.list_runs(path=str(path))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_history_reports_a_damaged_run_body(tmp_path):
    import json
    import sqlite3

    import pytest

    from mla_core.store import history
    from mla_core.store.errors import BenchError

    path = str(tmp_path / "h.sqlite3")
    sample = json.load(open(os.path.join(ROOT, "data", "samples", "cpu-2core-quick.json")))
    run_id = history.save_run(sample, source="import", path=path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET json = ? WHERE id = ?", ('{"broken', run_id))
    conn.commit()
    conn.close()
    with pytest.raises(BenchError, match="damaged"):
        history.get_run(run_id, path=path)
    [run] = json.loads(history.export_json(path=path))["runs"]  # exported, marked, its body left out
    assert "no longer matches the sha256" in run["damaged"] and "result" not in run
    assert "sha256" in history.list_runs(path=path)[0]["damaged"]
    assert history.delete_run(run_id, path=path)


def test_history_on_a_read_only_store_is_reported_not_moved_aside(tmp_path, monkeypatch):
    """Root ignores file modes, so the read-only store is simulated by opening it read-only."""
    import json
    import sqlite3

    from mla_core.store import history
    from mla_core.store.errors import BenchError

    path = str(tmp_path / "h.sqlite3")
    sample = json.load(open(os.path.join(ROOT, "data", "samples", "cpu-2core-quick.json")))
    history.save_run(sample, source="import", path=path)
    real_connect = sqlite3.connect
    monkeypatch.setattr(history.sqlite3, "connect",
                        lambda p, **kw: real_connect(f"file:{p}?mode=ro", uri=True, **kw))
    for call in (lambda: history.save_run(sample, source="import", path=path),
                 lambda: history.delete_run(1, path=path), lambda: history.list_runs(path=path)):
        try:
            call()
        except BenchError as e:
            assert "read-only" in str(e) or "readonly" in str(e), e
    assert not list(tmp_path.glob("*.corrupt-*"))
    monkeypatch.undo()
    assert len(history.list_runs(path=path)) == 1  # nothing lost
