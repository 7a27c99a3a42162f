"""The ``samelang`` command: the composition root that joins each package's commands.

It sits above ``indexes``, ``service`` and ``training`` so that none of them
has to import upward.
"""

from __future__ import annotations

import typer

from bench.cli import bench
from service.cli import index_app, models_app, serve
from training.cli import eval_app, train_app

app = typer.Typer(
    help="samelang: find the answer in every language, hand the reader the one in theirs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(models_app, name="models")
app.add_typer(index_app, name="index")
app.command("serve")(serve)
app.add_typer(train_app, name="train")
app.add_typer(eval_app, name="eval")
app.command("bench")(bench)


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
