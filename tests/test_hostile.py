"""Hostile input across the app: the link parser under fuzzing, huge legal numbers, markup."""
import ast
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from apptest_util import ROOT, app, metric, no_exceptions
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
