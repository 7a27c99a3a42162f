"""The ``samelang`` command: the composition root that joins each package's commands.

It sits above ``indexes``, ``service``, ``evaluation`` and ``training`` so that none of them
has to import upward.

The training and bench commands are joined only when the command line asks for them (or for the
full help): ``training`` imports torch, ~0.4 GB of resident memory and ~2 s of start-up that a
server answering from ONNX never uses. ``samelang serve``, ``index`` and ``models`` run without it.
"""

from __future__ import annotations

import sys

import typer

from samelang.cli.operations import index_app, models_app
from samelang.service.serve import serve

SERVICE_COMMANDS = ("serve", "index", "models")


def build_app(full: bool = True) -> typer.Typer:
    """The command tree: every command (``full``), or only the service's (no torch import)."""

    app = typer.Typer(
        help="samelang: find the answer in every language, hand the reader the one in theirs.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )
    app.add_typer(models_app, name="models")
    app.add_typer(index_app, name="index")
    app.command("serve")(serve)
    if full:
        from samelang.cli.bench import bench  # deferred: keeps the bench (faiss, numpy) out of start-up
        from samelang.cli.evaluate import eval_app  # deferred: keeps the judge's imports out of start-up
        from samelang.cli.train import adapt_cmd, data_app, train_app  # deferred: keeps torch out of start-up
        # (it also joins `eval biencoder-ablation`, which trains, to eval_app)

        app.add_typer(train_app, name="train")
        app.add_typer(eval_app, name="eval")
        app.add_typer(data_app, name="data")
        app.command("bench")(bench)
        app.command("adapt")(adapt_cmd)
    return app


def __getattr__(name: str):
    """``samelang.cli.app``: the full command tree, built on first use (tests drive it in process)."""
    if name == "app":
        globals()["app"] = build_app(full=True)
        return globals()["app"]
    raise AttributeError(name)


def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def main() -> None:  # pragma: no cover - entry point
    build_app(full=_command(sys.argv[1:]) not in SERVICE_COMMANDS)()


if __name__ == "__main__":  # pragma: no cover
    main()
