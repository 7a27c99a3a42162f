"""The one renderer of a model folder's card (its ``README.md``), after sentence-transformers'
``model_card.py``: the facts in :class:`ModelCardData`, the layout in ``model_card_template.md``
beside this file. A card is rendered once, when the folder is written; later the evaluation commands
replace one ``## `` section at a time (:func:`~samelang.core.model_folder.write_card_section`), so the
card's layout lives here and its sections' text lives with the commands that measure them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

TEMPLATE = Path(__file__).with_name("model_card_template.md")
EVAL_HEADING = "## Evaluation (XQuAD test articles)"
DATA_AND_LICENCES = "Data: XQuAD (CC-BY-SA 4.0). Base model: MIT."


@dataclass
class ModelCardData:
    """What a card says. ``reproduce``: the commands that rebuild the model, in order; ``trained``: one
    line on what it trained on, how long and where; ``eval_command``: the command that writes the
    evaluation section (named until it has); no ``eval_command``: a card without that section."""

    name: str
    summary: str
    usage: str
    reproduce: list[str] = field(default_factory=list)
    trained: str | None = None
    eval_command: str | None = None
    evaluation: str | None = None
    footer: str = DATA_AND_LICENCES


def render_model_card(data: ModelCardData) -> str:
    """The card's Markdown: the template filled, the parts a card lacks left out."""
    reproduce = "\nReproduce:\n\n```bash\n" + "\n".join(data.reproduce) + "\n```\n" if data.reproduce else ""
    has_eval = data.eval_command is not None or data.evaluation is not None
    evaluation = data.evaluation or f"Run `{data.eval_command}` to add the table."
    text = Template(TEMPLATE.read_text()).substitute(
        name=data.name,
        summary=data.summary.strip(),
        usage=data.usage.strip(),
        reproduce=reproduce,
        trained=f"\n{data.trained.strip()}\n" if data.trained else "",
        evaluation_heading=EVAL_HEADING if has_eval else "",
        evaluation=evaluation.strip() if has_eval else "",
        footer=data.footer,
    )
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
