"""Model cards: the evaluation section is replaced in place, the sections around it stay."""

from __future__ import annotations

from samelang.core.model_folder import write_card_section
from samelang.core.models.model_card import EVAL_HEADING


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


def test_shipped_cards_reproduce_their_training_args():
    """The last command of each shipped card's recipe reads back (through the CLI's own parser)
    to the options its training_args.json recorded: what changes the model, exactly."""
    import json
    import shlex
    from pathlib import Path

    from samelang.core.options import parse_options
    from samelang.training.biencoder import BiencoderArgs
    from samelang.training.lamar import RerankerArgs
    from samelang.training.reader import ReaderArgs
    from samelang.training.runs import OPERATIONAL

    models = Path(__file__).resolve().parents[2] / "models"
    trained = sorted(p.parent for p in models.glob("*/training_args.json"))
    assert {"e5-small-aligned", "lamar-e5-small", "lamar-e5-small-v3-relevance"} <= {p.name for p in trained}
    trainers = {"biencoder": BiencoderArgs, "reranker": RerankerArgs, "reader": ReaderArgs}
    for folder in trained:
        card = (folder / "README.md").read_text()
        command = card.split("```bash\n")[1].split("```")[0].strip().splitlines()[-1]
        cls = trainers[shlex.split(command)[2]]  # samelang train <trainer> ...
        parsed = parse_options(cls, shlex.split(command)[3:]).saved()
        saved = json.loads((folder / "training_args.json").read_text())
        # an option added after the model was trained must default to what training did then
        recorded = {k: saved.get(k, cls.model_fields[k].default) for k in parsed if k not in OPERATIONAL}
        assert {k: v for k, v in parsed.items() if k not in OPERATIONAL} == recorded, folder.name
