"""``samelang eval adapt``'s table pieces: the rows it asks (base dense, the served retriever and default, the
adapted retriever alone and reranked as served), the guard's lines, and its own section of the evaluation page."""

from __future__ import annotations

from pathlib import Path

from samelang.core.catalogue import served_defaults
from samelang.evaluation.serving_rule import ShapeRow
from samelang.training.adapt_eval import SECTION, guard_lines, rows_for, write_section


def test_rows_put_the_adapted_retriever_beside_the_base_and_the_served_default():
    s = served_defaults()
    rows = rows_for(Path("/x/adapted"))
    assert rows[0] == ShapeRow("base") and rows[1].retriever == s.retriever and not rows[1].reranked
    adapted = [r for r in rows if r.retriever == "/x/adapted"]
    assert adapted[0].lexical == s.lexical_weight and not adapted[0].reranked
    assert len(rows) == len(set(rows)) and (len(adapted) == 2) == s.rerank
    if s.rerank:
        assert adapted[1].reranker == s.reranker and adapted[1].fusion == s.rerank_fusion


def test_guard_lines_and_the_section_replace_only_themselves(tmp_path):
    report = {"documents": 5414, "translation_links": 12, "training_groups": 5000,
              "dev": {"before": {"found_at_1": 40.0, "queries": 9}, "after": {"found_at_1": 45.0, "queries": 9}},
              "guard": {"before": {"partial": 80.0}, "after": {"partial": 79.6}},
              "verdict": {"serve": True, "why": "held-out found@1 +5.0 points"}}  # fmt: skip
    text = guard_lines(report)
    assert "5,414 documents" in text and "40.0 -> 45.0 (9 queries)" in text and "| after | 79.6 |" in text
    assert text.endswith("The guard's decision: serve (held-out found@1 +5.0 points).")
    doc = tmp_path / "evaluation.md"
    doc.write_text("# Evaluation\n\n## Shapes\n\nkept\n")
    write_section(doc, f"{SECTION}\n\nfirst\n")
    write_section(doc, f"{SECTION}\n\nsecond\n")
    body = doc.read_text()
    assert body.count(SECTION) == 1 and "second" in body and "first" not in body and "## Shapes\n\nkept" in body
    doc.write_text(body + "\n## Later\n\nalso kept\n")
    write_section(doc, f"{SECTION}\n\nthird\n")
    assert "third\n\n## Later\n\nalso kept" in doc.read_text()
