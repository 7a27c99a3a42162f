"""The one card renderer: the template's layout, the parts a card lacks left out, and a card the
evaluation commands can then update one section at a time."""

from __future__ import annotations

from samelang.core.model_folder import read_card_section, write_card, write_card_section
from samelang.core.models.model_card import DATA_AND_LICENCES, EVAL_HEADING, ModelCardData, render_model_card


def test_a_trained_models_card_has_recipe_training_line_and_evaluation_placeholder(tmp_path):
    data = ModelCardData(
        name="m",
        summary="What it is.",
        usage="Load it with `samelang`.",
        reproduce=["samelang train reranker --stage 1 --out a", "samelang train reranker --stage 2 --out m"],
        trained="Trained for 3 steps.",
        eval_command="samelang eval reranker --model <this folder> --card",
    )
    card = render_model_card(data)
    assert card.startswith("# m\n\nWhat it is.\n\nLoad it with `samelang`.\n\nReproduce:\n\n```bash\n")
    assert "--stage 1 --out a\nsamelang train reranker --stage 2 --out m\n```\n\nTrained for 3 steps.\n" in card
    assert f"{EVAL_HEADING}\n\nRun `samelang eval reranker --model <this folder> --card` to add the table." in card
    assert card.endswith(f"\n\n{DATA_AND_LICENCES}\n") and "\n\n\n" not in card
    write_card(tmp_path, card)
    write_card_section(tmp_path, EVAL_HEADING, "| table |\n")
    assert read_card_section(tmp_path, EVAL_HEADING).strip() == "| table |"
    assert (tmp_path / "README.md").read_text().count("Reproduce:") == 1


def test_a_converted_models_card_has_no_recipe_nor_evaluation():
    card = render_model_card(ModelCardData(name="base (converted)", summary="Converted.", usage="Prompts.", footer=""))
    assert card == "# base (converted)\n\nConverted.\n\nPrompts.\n"
