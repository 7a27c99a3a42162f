"""Model cards: the evaluation section is replaced in place, the sections around it stay."""

from __future__ import annotations

from training.evaluation.biencoder import EVAL_HEADING
from training.evaluation.common import write_card_section


def test_card_evaluation_section_is_replaced_and_neighbours_kept(tmp_path):
    card = tmp_path / "README.md"
    card.write_text(f"# m\n\nintro\n\n{EVAL_HEADING}\n\nold table\n\n## Ablation\n\nkept\n")
    write_card_section(tmp_path, EVAL_HEADING, "new table\n")
    text = card.read_text()
    assert "old table" not in text and "new table" in text
    assert text.index("intro") < text.index("new table") < text.index("## Ablation\n\nkept")
    assert text.count(EVAL_HEADING) == 1
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    write_card_section(fresh, EVAL_HEADING, "t\n")
    assert (fresh / "README.md").read_text() == f"# fresh\n\n{EVAL_HEADING}\n\nt\n"
