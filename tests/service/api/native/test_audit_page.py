"""The bias-audit page in a real browser: Debian's headless Chromium driven by Playwright (no browser
download: ``executable_path``), against a real server over the XQuAD en+zh test index. The page
loads, runs an audit through ``/diagnose`` and draws the heatmap; bad input shows the API's own
message. A screenshot of the rendered audit is kept as an artifact of the run."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from samelang.corpora import load_xquad
from samelang.evaluation.collection_shapes import present_versions
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from tests.service.conftest import make_app, running

ROOT = Path(__file__).resolve().parents[4]
# every flag keeps the browser off a network it has no business on (the machine has none)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip


def chromium() -> str:
    path = os.environ.get("SAMELANG_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no Chromium: install Debian's package with `bash scripts/install_chromium.sh` "
                    "(or point SAMELANG_CHROMIUM at a Chromium binary)")  # fmt: skip
    return path


def artifacts() -> Path:
    out = Path(os.environ.get("SAMELANG_ARTIFACTS") or ROOT / ".artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 1400})
    try:
        yield context.new_page()
    finally:
        context.close()


def test_the_page_runs_an_audit_and_draws_the_heatmap(server, page):
    page.goto(f"{server}/audit")
    assert page.title() == "samelang: language-bias audit"
    page.wait_for_selector("#pair option[value='en-zh']", state="attached")
    assert page.input_value("#pair") == "en-zh"
    page.check("input[name=source][value=dataset]")
    page.click("#run")
    page.wait_for_selector("#results:not([hidden])", timeout=300_000)
    # the heatmap is the API's top-1 language matrix: rows = query languages, columns = document languages
    api = httpx.post(f"{server}/diagnose", json={"dataset": "xquad", "pair": "en-zh", "split": "test"}, timeout=300)
    matrix = api.json()["top1_lang_matrix"]
    cells = page.locator("#heatmap td.cell")
    assert cells.count() == sum(len(row) for row in matrix.values()) == 4
    shown = {(c.evaluate("e => e.parentElement.firstChild.textContent"), c.evaluate(
        "e => e.closest('table').tHead.rows[0].cells[e.cellIndex].textContent")): float(c.get_attribute("data-value"))
        for c in cells.all()}  # fmt: skip
    assert shown == {(r, c): v for r, row in matrix.items() for c, v in row.items()}
    per_lang = page.locator("#per-lang tbody tr")
    assert per_lang.count() == 2 and per_lang.nth(0).locator("td").nth(1).text_content() == str(
        api.json()["per_query_lang"]["en"]["queries"]
    )
    assert page.locator("#worst tbody tr").count() == 25
    assert page.locator("#error").is_hidden()
    page.screenshot(path=str(artifacts() / "audit-page.png"), full_page=True)


def cells_of(page, selector: str) -> dict[tuple[str, str], float]:
    """A drawn heatmap as {(row label, column label): value}."""
    cells = page.locator(f"{selector} td.cell")
    return {(c.evaluate("e => e.parentElement.firstChild.textContent"), c.evaluate(
        "e => e.closest('table').tHead.rows[0].cells[e.cellIndex].textContent")): float(c.get_attribute("data-value"))
        for c in cells.all()}  # fmt: skip


@pytest.fixture(scope="module")
def partial_server(tmp_path_factory, encoder, service_settings, pipeline):
    """A collection as users have it: the en+zh test paragraphs as the shape judge's partial-translation
    shape builds them over two languages (English for ~60% of paragraphs, Chinese for ~25%, at least one
    each), with no group labels."""
    docs = load_xquad(["en", "zh"], split="test").documents()
    keep = present_versions("partial", sorted({d.group for d in docs}), langs=["en", "zh"])
    docs = [replace(d, group=None) for d in docs if (d.group, d.lang) in keep]
    out = tmp_path_factory.mktemp("idx") / "xquad-en-zh-partial"
    build_index(out, docs, encoder.encode_passages, encoder.info, source="xquad:en,zh:test:partial")
    index = open_index(out, encoder.info)
    try:
        with running(make_app(service_settings, pipeline, index=index)) as url:
            yield url
    finally:
        index.close()


def test_the_page_audits_sampled_queries_without_labels(partial_server, page):
    """The default source: queries sampled from the index, no labels, over a partial-translation
    collection. The page draws the top-k's languages (query language x result language, the index's
    own row first) as the API reports them, and hides what needs labels. The screenshot is kept
    (audit-bias.png)."""
    page.goto(f"{partial_server}/audit")
    assert page.is_checked("input[name=source][value=sample]")
    page.fill("#sample", "40")
    page.fill("#seed", "7")
    page.click("#run")
    page.wait_for_selector("#results:not([hidden])", timeout=300_000)
    api = httpx.post(f"{partial_server}/diagnose", json={"sample": 40, "seed": 7, "bias_k": 10}, timeout=300).json()
    bias = api["bias"]
    assert api["labelled"] == 0 and bias["queries"] == {"en": 20, "zh": 20}
    assert bias["index_langs"]["en"] > 60  # mostly English
    want = {(r, c): v for r, row in bias["result_langs"].items() for c, v in row.items()}
    want |= {("index", c): v for c, v in bias["index_langs"].items()}
    assert cells_of(page, "#bias-heatmap") == want and len(want) == 6
    assert page.locator("#bias-heatmap tr.reference th").text_content() == "index"
    rows = page.locator("#bias-lang tbody tr")
    assert rows.count() == 2
    for i, lang in enumerate(sorted(bias["result_langs"])):
        tds = rows.nth(i).locator("td")
        assert tds.nth(0).text_content() == lang and tds.nth(1).text_content() == str(bias["queries"][lang])
        assert tds.nth(2).text_content() == f"{bias['jsd'][lang]:.3f}"
        assert tds.nth(3).text_content() == f"{bias['sees_other'][lang]:.1f}"
    summary = page.text_content("#summary")
    assert "40 queries (0 labelled)" in summary and f"{bias['mean_jsd']:.3f} bits" in summary
    assert page.locator("#labelled").is_hidden() and page.locator("#worst-section").is_hidden()
    assert page.locator("#error").is_hidden()
    page.screenshot(path=str(artifacts() / "audit-bias.png"), full_page=True)


def test_bad_input_shows_the_api_message(server, page):
    page.goto(f"{server}/audit")
    page.check("input[name=source][value=paste]")
    page.fill("#queries", '{"query": "Who founded the museum?", "lang": "en", "relevant": ["no-such-paragraph"]}')
    page.click("#run")
    page.wait_for_selector("#error:not([hidden])")
    message = page.text_content("#error")
    assert "422" in message and "no-such-paragraph" in message
    assert "invalid_request: queries[].relevant: 1 relevant ids are not in the served index" in message
    assert page.locator("#results").is_hidden()
    # text that is not JSON is caught on the page, naming the line
    page.fill("#queries", '{"query": "ok", "relevant": ["a"]}\n{not json')
    page.click("#run")
    page.wait_for_function("document.querySelector('#error').textContent.startsWith('Line 2 is not valid JSON')")


def test_the_page_asks_for_the_api_key(service_settings, pipeline, page):
    cfg = service_settings.model_copy(update={"api_key": "s3cret"})
    with running(make_app(cfg, pipeline)) as url:
        page.goto(f"{url}/audit")  # the page itself needs no key
        page.wait_for_selector("#error:not([hidden])")
        assert "401" in page.text_content("#error") and "Enter the API key" in page.text_content("#error")
        page.fill("#api-key", "s3cret")
        page.dispatch_event("#api-key", "change")
        page.wait_for_selector("#pair option[value='en-zh']", state="attached")
        page.click("#run")
        page.wait_for_selector("#results:not([hidden])", timeout=300_000)
        assert page.locator("#error").is_hidden()
