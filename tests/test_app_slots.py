"""What a rerun may or may not draw (a warning, a note) sits in a slot (ui.layout.slot): the
elements after it keep their positions in the page's tree when it comes or goes, so the browser
updates them instead of mounting them anew (a table's grid, an expander, the headings)."""
import pytest

from apptest_util import no_exceptions, run_page


def _paths(at) -> dict[str, tuple]:
    """{element type and its first words: its position in the page's tree} of the main area."""
    out = {}

    def walk(node, path):
        for i, child in sorted(getattr(node, "children", {}).items()):
            p = path + (i,)
            if getattr(child, "children", None):
                walk(child, p)
            else:
                text = getattr(child, "label", None) if child.type == "dataframe" else getattr(child, "value", None)
                words = str(text if text is not None else getattr(child, "label", ""))[:40]
                out.setdefault(f"{child.type}: {words}", p)

    walk(at.main, ())
    return out


def _warnings(at) -> list[str]:
    return [w.value.replace("\\", "") for w in at.warning]  # Markdown-escaped


# DeepSeek-V3's max_position_embeddings is 163,840: 512K tokens draws a warning that 16K does not.
@pytest.mark.parametrize("page", ["pages/capacity.py", "pages/roofline.py", "pages/kv_cache.py"])
def test_a_warning_that_comes_and_goes_moves_no_later_element(page):
    runs = {}
    for context in (16384, 524288):
        at = run_page(page, model="deepseek-v3", context=str(context))
        no_exceptions(at)
        runs[context] = at
    short, long = runs[16384], runs[524288]
    assert not any("max_position_embeddings" in w for w in _warnings(short))
    assert any("max_position_embeddings" in w for w in _warnings(long))
    a, b = _paths(short), _paths(long)
    tables = [k for k in a if k.startswith("dataframe")]
    assert tables, sorted(a)
    for k in tables + [k for k in a if k.startswith(("subheader", "expander"))]:
        if k in b:  # a heading that names the context is another key
            assert a[k] == b[k], k
