"""``/answer`` with the extractive reader, over a real server: the span is text of a cited passage,
its language is that passage's, it streams as one token, the request's ``answer_mode`` wins over the
server's, a reader below its threshold answers nothing, and extractive without a reader is a 422 naming the fix."""

from __future__ import annotations

import httpx
import pytest

from samelang.core.models.reader import ExtractiveReader, Span
from samelang.retrieval.hits import Hit, Ranked, Version
from samelang.retrieval.options import Defaults
from samelang.retrieval.reading import in_reader_language, read
from tests.service.api.native.test_streaming import read_stream
from tests.service.conftest import make_app, running

QUESTION = "Which team won Super Bowl 50?"


@pytest.fixture(scope="module")
def reader_url(service_settings, pipeline, tiny_reader, samelang_home):
    reader = ExtractiveReader(tiny_reader, home=samelang_home, threshold=-1e9)  # always answers
    app = make_app(service_settings, pipeline, reader=reader, defaults=Defaults(answer_mode="extractive"))
    with running(app) as url:
        yield url


def test_the_answer_is_a_span_of_the_passage_it_cites(reader_url):
    with httpx.Client(base_url=reader_url, timeout=120) as c:
        body = c.post("/answer", json={"query": QUESTION, "passages": 2}).raise_for_status().json()
    assert body["answer_mode"] == "extractive" and body["answer"]
    [cited] = body["citations"]
    passage = next(p for p in body["passages"] if p["id"] == cited)
    assert body["answer"] in passage["text"] and body["answer_lang"] == passage["lang"] == "en"


def test_the_request_mode_wins_and_extractive_streams_one_token(reader_url):
    with httpx.Client(base_url=reader_url, timeout=120) as c:
        plain = c.post("/answer", json={"query": QUESTION}).raise_for_status().json()
        generative = c.post("/answer", json={"query": QUESTION, "answer_mode": "generative"}).raise_for_status()
    assert generative.json()["answer_mode"] == "generative" and generative.json()["answer"] is None  # no generator
    events = read_stream(reader_url, {"query": QUESTION})
    assert [e for e, _ in events] == ["passages", "token", "done"]
    assert events[0][1]["answer_mode"] == "extractive" and events[1][1]["text"] == plain["answer"]
    done = events[2][1]
    assert {k: done[k] for k in ("answer", "answer_lang", "citations")} == {
        k: plain[k] for k in ("answer", "answer_lang", "citations")
    }


def test_below_its_threshold_the_reader_answers_nothing(service_settings, pipeline, tiny_reader, samelang_home):
    unsure = ExtractiveReader(tiny_reader, home=samelang_home, threshold=1e9).load()  # as a server loads it
    app = make_app(service_settings, pipeline, reader=unsure)
    with running(app) as url, httpx.Client(base_url=url, timeout=120) as c:
        body = c.post("/answer", json={"query": QUESTION, "answer_mode": "extractive"}).raise_for_status().json()
    assert body["answer"] is None and body["citations"] == [] and body["passages"]


def test_extractive_without_a_reader_is_a_422_naming_the_fix(client):
    r = client.post("/answer", json={"query": QUESTION, "answer_mode": "extractive"})
    assert r.status_code == 422 and "answer_mode" in r.text and "--reader" in r.text
    r = client.post("/answer", json={"query": QUESTION, "answer_mode": "spoken"})
    assert r.status_code == 422 and "answer_mode" in r.text


def test_a_hit_in_another_language_is_read_and_cited_in_the_readers_version(pipeline):
    """A hit whose group has a version in the reader's language becomes that version (cited as the
    passage, the other language among its versions); with no such version it stays."""
    zh_row = next(r for r, lang in enumerate(pipeline.doc_langs) if lang == "zh")
    en_row = next(r for r, lang in enumerate(pipeline.doc_langs) if lang == "en")
    [en_doc, zh_doc] = pipeline.index.docs.get_rows([en_row, zh_row])
    hit = Hit(en_doc, 1.0, 1.0, [Version(zh_row, zh_doc.id, "zh")])
    lone = Hit(en_doc, 1.0, 1.0, [])
    swapped, kept = in_reader_language(pipeline, [hit, lone], "zh")
    assert swapped.doc.id == zh_doc.id and [v.id for v in swapped.versions] == [en_doc.id]
    assert kept is lone and in_reader_language(pipeline, [hit], "en") == [hit]
    assert in_reader_language(pipeline, [hit], None) == [hit]
    ranked = Ranked("zh", True, [swapped, kept], [], False, True)
    pipe = pipeline.replace(reader=Always(swapped.doc.text[:4]))
    answered = read(pipe, "?", ranked)
    assert answered.cited == (zh_doc.id,) and answered.lang == "zh"  # the cited id is a returned passage's


class Always:
    """A reader that finds ``text`` at the start of the first passage."""

    name = "always"

    def __init__(self, text):
        self.text = text

    def read(self, question, passages):
        return Span(self.text, 0, 0, len(self.text), 1.0)


def test_a_server_refuses_to_start_extractive_without_a_reader(service_settings):
    from samelang.service.components import load_components

    cfg = service_settings.model_copy(update={"answer_mode": "extractive", "reader": "none"})
    with pytest.raises(ValueError, match="--answer-mode extractive needs a reader"):
        load_components(cfg)
