"""The published-figures page (AppTest), and the claims helpers it shows them with."""
import io

import pandas as pd
import pytest

from apptest_util import metric, no_exceptions, run_page
from mla_core.claims import (describe_expr, evaluate_all, evaluate_claim, format_figure, format_stated, load_claims,
                             summarize)

PAGE = "pages/claims.py"
CLAIMS = load_claims()
BY_ID = {c["id"]: c for c in CLAIMS}


@pytest.fixture(scope="module")
def page():
    at = run_page(PAGE)
    no_exceptions(at)
    return at


def _claims_table(at) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if "verdict" in d.value.columns and "stated" in d.value.columns)


def test_page_runs_and_shows_every_claim(page):
    assert not page.error and not page.warning
    df = _claims_table(page)
    assert len(df) == len(CLAIMS)
    assert list(df["id"]) == [c["id"] for c in CLAIMS]
    s = summarize(evaluate_all())
    assert metric(page, "Claims checked") == str(len(CLAIMS))
    assert metric(page, "Reproduced") == str(s["reproduced"])
    assert metric(page, "Differ") == str(s["differs"])
    assert s["reproduced"] + s["differs"] == len(CLAIMS)


@pytest.mark.parametrize("claim_id", ["absorbed-intensity-114", "1m-mla-65.4GiB", "1m-gqa8-698GiB", "blog-57x",
                                      "news-97.8ms", "blog-gqa8-128k-30.7GB", "mla-vs-mha-44x"])
def test_displayed_verdicts_equal_the_cores(page, claim_id):
    row = _claims_table(page).set_index("id").loc[claim_id]
    c = evaluate_claim(BY_ID[claim_id])
    assert row["verdict"] == c["verdict"]
    assert row["stated"] == format_stated(c["stated"])
    assert row["recomputed"] == format_figure(c["computed"], c["stated"]["unit"])
    if "as_claimed_value" in c:
        assert row["replay of the slip gives"] == format_figure(c["as_claimed_value"], c["stated"]["unit"])
        assert row["replay reproduces the stated figure"] == ("yes" if c["reason_confirmed"] else "no")
    else:
        assert row["replay of the slip gives"] == ""


def test_the_table_quotes_file_names_not_documents(page):
    df = _claims_table(page)
    # A description of the document and its file name: never a quotation from it.
    assert set(df["source"]) == {f'{c["source"]["title"]} ({c["source"]["seed"]})' for c in CLAIMS}
    assert all(s.endswith(".txt)") for s in df["source"])
    assert list(df["claim (paraphrased)"]) == [c["claim"] for c in CLAIMS]


def test_filters(page):
    at = page
    at.multiselect(key="claims_verdict").set_value(["differs"]).run()
    no_exceptions(at)
    df = _claims_table(at)
    evaluated = evaluate_all()
    assert len(df) == sum(c["verdict"] == "differs" for c in evaluated)
    assert set(df["verdict"]) == {"differs"}
    # The details expander is drawn only when opened; then it names every differing claim shown.
    details = [e for e in at.expander if "differing claims in detail" in e.label]
    assert details and not details[0].markdown  # closed: nothing inside was computed or sent
    at.session_state["_claims_details_open"] = True
    at.run()
    text = [e for e in at.expander if "differing claims in detail" in e.label][0].markdown[0].value
    assert [line.split(":")[0][5:].replace("\\", "") for line in text.splitlines() if line.startswith("#### ")] \
        == list(df["id"])
    assert "Replay of the slip" in text and "Recomputed as" in text
    at.session_state["_claims_details_open"] = False
    at.multiselect(key="claims_topic").set_value(["arithmetic intensity"]).run()
    df = _claims_table(at)
    assert list(df["id"]) == [c["id"] for c in evaluated if c["verdict"] == "differs"
                              and c["topic"] == "arithmetic intensity"]
    at.multiselect(key="claims_verdict").set_value([]).run()
    at.multiselect(key="claims_topic").set_value([]).run()
    seed = "002_7d66c40a2579a544.txt"
    at.multiselect(key="claims_source").set_value([seed]).run()
    df = _claims_table(at)
    assert len(df) == sum(c["source"]["seed"] == seed for c in CLAIMS)
    assert {s.rsplit("(", 1)[1].rstrip(")") for s in df["source"]} == {seed}
    assert at.query_params["claims_source"] == seed  # the filter is in the link
    at.multiselect(key="claims_source").set_value([]).run()
    assert len(_claims_table(at)) == len(CLAIMS)


def _downloads(monkeypatch) -> dict:
    """Capture what download buttons hand to Streamlit's media storage: {file name: bytes}."""
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    seen = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def spy(self, path_or_data, mimetype, kind, filename=None):
        seen[filename] = path_or_data
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", spy)
    return seen


def test_csv_download_holds_raw_numbers(monkeypatch):
    seen = _downloads(monkeypatch)
    at = run_page(PAGE)
    no_exceptions(at)
    data = seen["published_figures_recomputed.csv"]
    csv = pd.read_csv(io.BytesIO(data if isinstance(data, bytes) else data.encode()))
    assert len(csv) == len(CLAIMS)
    evaluated = {c["id"]: c for c in evaluate_all()}
    for _, row in csv.iterrows():
        assert row["recomputed_value"] == pytest.approx(evaluated[row["id"]]["computed"], rel=1e-12)
        assert row["verdict"] == evaluated[row["id"]]["verdict"]


def test_presentation_mode_runs():
    at = run_page(PAGE, present="1")
    no_exceptions(at)
    assert len(_claims_table(at)) == len(CLAIMS)


# --- helpers in mla_core.claims --------------------------------------------------------------------

def test_summarize_counts():
    s = summarize(evaluate_all())
    assert s["total"] == len(CLAIMS)
    assert sum(g["claims"] for g in s["by_topic"]) == s["total"] == sum(g["claims"] for g in s["by_source"])
    assert sum(g["differs"] for g in s["by_topic"]) == s["differs"]
    assert s["reason_confirmed"] <= s["replayed"] <= s["differs"]
    assert [g["source"] for g in s["by_source"]] == sorted({c["source"]["seed"] for c in CLAIMS})


@pytest.mark.parametrize("value, unit, text", [
    (241.7778, "flop/B", "241.8 flop/B"),
    (56.8889, "x", "56.89x"),
    (35136.0, "elements", "35,136 elements"),
    (93.3388, "%", "93.34%"),
    (0.53687, "GB", "0.5369 GB"),
    (9.99996, "ms", "10 ms"),
    (0, "x", "0x"),
    (float("nan"), "GB", "n/a"),
])
def test_format_figure(value, unit, text):
    assert format_figure(value, unit) == text


def test_format_stated_and_describe_expr():
    assert format_stated({"value": 44, "text": "44", "unit": "x", "approx": True}) == "~44x"
    assert format_stated({"value": 2998272, "text": "2998272", "unit": "elements"}) == "2,998,272 elements"
    assert format_stated({"value": 68.6, "text": "68.6", "unit": "KiB"}) == "68.6 KiB"
    assert describe_expr(BY_ID["v3-latent-elements"]["compute"]) == "kv_bytes_per_token(deepseek-v3, bf16, latent) / 2"
    text = describe_expr(BY_ID["news-93pct-vs-32-heads"]["compute"])
    assert text.startswith("100 * (1 - kv_bytes_per_token(deepseek-v2") and "MHA(layers=60, heads=32" in text
    assert describe_expr(BY_ID["mha-intensity-1"]["compute"]).startswith("attention_intensity(MHA(")


def test_accuracy_section_shows_the_cores_checks():
    from mla_core.serving import accuracy

    at = run_page("pages/claims.py")
    no_exceptions(at)
    acc = accuracy()
    assert metric(at, "Published figures checked") == str(acc["cases"])
    assert metric(at, "At or under their bound") == f"{acc['cases']} of {acc['cases']}"
    table = next(d.value for d in at.dataframe if "efficiency" in d.value.columns)
    assert list(table["efficiency"]) == [f"{r['efficiency']:.1%}" for r in acc["rows"]]
    assert list(table["bound"]) == [float(f"{r['bound_per_gpu']:.4g}") for r in acc["rows"]]
    # a time keeps its digits: the dstack TPOT (25.73 ms, data/serving_measurements.json) is not rounded to 0
    tpot = next(i for i, r in enumerate(acc["rows"]) if r["id"] == "dstack-deepseek-r1-h200-vllm-tp8-c4-tpot")
    assert table["measured"][tpot] == 0.02573 and table["unit"][tpot] == "s (TPOT)"


def test_accuracy_of_the_estimate_shows_the_cores_table():
    from mla_core.serving.published import estimate_accuracy

    at = run_page("pages/claims.py")
    no_exceptions(at)
    assert not [e for e in at.expander if "Accuracy of the estimate" in e.label][0].children  # closed: nothing drawn
    at.session_state["_claims_estimate_open"] = True
    at.run(timeout=600)
    no_exceptions(at)
    acc = estimate_accuracy()
    assert metric(at, "Cases estimated") == str(acc["summary"]["cases"])
    assert metric(at, "Median |error| of the estimate") == f"{acc['summary']['median_abs_error_pct']:.1f}%"
    table = next(d.value for d in at.dataframe if "estimate from" in d.value.columns)
    assert list(table["figure"]) == [c["id"] for c in acc["cases"]]
    assert list(table["error (%)"]) == pytest.approx([c["error_pct"] for c in acc["cases"]], rel=1e-12)
    # the dstack TPOT (25.73 ms measured, data/serving_measurements.json) and the core's estimate of it
    i = next(i for i, c in enumerate(acc["cases"]) if c["id"] == "dstack-deepseek-r1-h200-vllm-tp8-c4-tpot")
    assert table["measured"][i] == 0.02573 and table["estimate"][i] == float(f"{acc['cases'][i]['estimate']:.4g}")
