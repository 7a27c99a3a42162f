"""The corpus readers, store and views on small files in each source's own format (no real store needed:
``fake_corpus_store`` in conftest.py swaps the declarations for ones whose sha256 are those files')."""

from __future__ import annotations

import hashlib
import lzma
import subprocess
from dataclasses import replace

import pytest

from samelang.corpora import sources
from samelang.corpora.store import CorpusMissing, snapshot_blob
from samelang.corpora.views import DEV_EVERY, ict_queries, load_views, split_of


@pytest.fixture()
def fake_store(fake_corpus_store):
    return fake_corpus_store


def test_every_view_is_read_from_each_format(fake_store):
    v = load_views(fake_store, require_filter=False)
    by_source = {r.source for r in v.qa}
    assert by_source == {"cmrc2018", "drcd", "arcd", "iapp_wiki_qa", "tydiqa_goldp"}
    row = next(r for r in v.qa if r.id == "cmrc2018-c1")
    assert (row.lang, row.query, row.positive) == ("zh", "中国的首都是哪里？", "北京是中国的首都。")
    assert row.negatives == ("北京有很多胡同。",)  # the other passage of its article
    assert row.positive[row.answers[0].start :].startswith("北京")
    drcd = next(r for r in v.qa if r.source == "drcd")  # converted to Simplified, offsets moved with it
    assert drcd.positive == "台湾的首都是台北。" and drcd.positive[drcd.answers[0].start :].startswith("台北")
    assert v.passages[drcd.positive_id].original == "臺灣的首都是臺北。"
    thai = next(r for r in v.qa if r.source == "iapp_wiki_qa")
    assert thai.positive[thai.answers[0].start :].startswith("สัตว์เลี้ยง")
    ru = next(r for r in v.qa if r.lang == "ru")
    assert ru.answers == () and ru.positive == "Москва — столица России."  # passage label only
    assert {(r.source, r.lang) for r in v.qa if r.source == "tydiqa_goldp"} == {
        ("tydiqa_goldp", "en"),
        ("tydiqa_goldp", "ru"),
    }


def test_an_xquad_article_is_dropped_by_its_title(fake_store):
    v = load_views(fake_store, require_filter=False)
    assert not any("超级碗" in r.positive for r in v.qa)
    assert v.drops["cmrc2018"]["xquad title"] == 1


def test_passages_the_filter_found_are_dropped_with_their_questions(fake_store):
    v = load_views(fake_store, require_filter=False)
    row = next(r for r in v.qa if r.id == "cmrc2018-c1")
    flagged = v.parallel[0].id
    w = load_views(fake_store, contamination={"dropped": {row.positive_id: {}, flagged: {}}})
    assert row.id not in {r.id for r in w.qa} and flagged not in {p.id for p in w.parallel}
    assert all(row.positive not in r.negatives for r in w.qa)  # nor as another question's negative
    assert w.drops["cmrc2018"]["cosine"] == 1 and w.drops["flores200"]["cosine"] == 1
    with pytest.raises(CorpusMissing, match="samelang data filter"):
        load_views(fake_store)  # no contamination.json: the views refuse to be read unfiltered


def test_parallel_passages_are_aligned_runs_of_one_document(fake_store):
    v = load_views(fake_store, require_filter=False)
    flores = [p for p in v.parallel if p.source == "flores200"]
    # 3 documents of 9 sentences: 4 + 5 each (a last lone sentence joins the passage before it)
    assert [len(p.sentences["en"]) for p in flores] == [4, 5] * 3
    assert all(
        len({p.doc}) == 1 and all(len(s) == len(p.sentences["en"]) for s in p.sentences.values()) for p in flores
    )
    assert flores[0].text("zh") == "zh sentence 0.zh sentence 1.zh sentence 2.zh sentence 3."
    assert flores[0].text("de", skip=1) == "de sentence 0. de sentence 2. de sentence 3."


def test_ict_queries_leave_their_sentence_out_of_the_positive_in_another_language(fake_store):
    v = load_views(fake_store, require_filter=False)
    assert len(v.ict) == 12 * len(v.parallel)
    for q in v.ict:
        assert q.query_lang != q.positive_lang
        assert q.query.replace(q.query_lang, q.positive_lang) not in q.positive
    assert ict_queries(v.parallel) == v.ict  # deterministic


def test_splits_are_by_document_and_fixed():
    parts = [split_of("src", f"doc{i}") for i in range(4000)]
    assert abs(parts.count("dev") / len(parts) - 1 / DEV_EVERY) < 0.01
    assert parts == [split_of("src", f"doc{i}") for i in range(4000)]


def test_a_changed_file_is_refused_at_read(fake_store):
    target = fake_store.root / "arcd" / "data" / "arcd.json.xz"
    target.write_bytes(lzma.compress(b'{"data": []}'))
    with pytest.raises(CorpusMissing, match="sha256 differs"):
        load_views(fake_store, require_filter=False)


def test_a_snapshot_blob_is_read_at_the_declared_commit(tmp_path):
    repo = tmp_path / "owner+name"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f.txt").write_text("first\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (repo / "f.txt").write_text("second\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    src = replace(sources.SOURCES[0], repo="owner/name", commit=commit)
    f = sources.SourceFile("f.txt", 6, hashlib.sha256(b"first\n").hexdigest())
    assert snapshot_blob(repo, src, f) == b"first\n"  # the declared commit, not the checkout's file
    assert snapshot_blob(repo, src, sources.SourceFile("absent.txt", 0, "")) is None


def test_a_filter_result_over_other_passages_is_refused(fake_store):
    v = load_views(fake_store, require_filter=False)
    assert load_views(fake_store, contamination={"dropped": {}, "sources": v.digests}).qa == v.qa
    stale = dict(v.digests, arcd="0" * 16)  # arcd re-imported with other passages since the filter ran
    with pytest.raises(CorpusMissing, match="computed over other arcd passages"):
        load_views(fake_store, contamination={"dropped": {}, "sources": stale})
