"""``samelang train ...`` and ``samelang eval ...``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

train_app = typer.Typer(help="Train the models (CPU for small runs, GPUs via torchrun).", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluate on the held-out XQuAD test articles.", no_args_is_help=True)


def _env(name: str) -> str:
    return f"SAMELANG_TRAIN_{name.upper()}"


@train_app.command("biencoder")
def train_biencoder_cmd(
    out: Path = typer.Option(..., envvar=_env("out"), help="Output folder (adapter or full model)."),
    base: str = typer.Option(
        None, envvar=_env("base"), help="Base checkpoint path or hub id (default: converted e5-small)."
    ),
    langs: str = typer.Option("ar,de,el,es,hi,ro,ru,th,tr,vi,zh", envvar=_env("langs"), help="Target languages."),
    loss: str = typer.Option("jsd+nce", envvar=_env("loss"), help="jsd+nce | nce | jsd | nce-psg (seed ablations)."),
    epochs: float = typer.Option(1.0, envvar=_env("epochs")),
    max_steps: int = typer.Option(None, envvar=_env("max_steps"), help="Stop after this many steps."),
    batch_size: int = typer.Option(16, envvar=_env("batch_size"), help="Triplets per step and process."),
    lr: float = typer.Option(2e-4, envvar=_env("lr")),
    temperature: float = typer.Option(0.05, envvar=_env("temperature"), help="InfoNCE temperature."),
    per_lang: int = typer.Option(256, envvar=_env("per_lang"), help="Triplets per target language (0: all 816)."),
    tatoeba_per_lang: int = typer.Option(
        0, envvar=_env("tatoeba_per_lang"), help="Tatoeba pairs per language for L_JSD."
    ),
    full: bool = typer.Option(False, "--full", envvar=_env("full"), help="Full fine-tune instead of LoRA."),
    lora_r: int = typer.Option(16, envvar=_env("lora_r")),
    max_length: int = typer.Option(256, envvar=_env("max_length")),
    precision: str = typer.Option("auto", envvar=_env("precision"), help="auto | bf16 | fp32."),
    seed: int = typer.Option(0, envvar=_env("seed")),
    eval_every: int = typer.Option(50, envvar=_env("eval_every")),
    save_every: int = typer.Option(100, envvar=_env("save_every")),
    device: str = typer.Option("auto", envvar=_env("device")),
    no_resume: bool = typer.Option(False, "--no-resume", help="Ignore checkpoints in --out."),
) -> None:
    """Fine-tune the bi-encoder with L_JSD + L_NCE on XQuAD train-article triplets."""
    from .biencoder import BiencoderArgs, train_biencoder

    args = BiencoderArgs(
        out=out, base=base, langs=langs, loss=loss, epochs=epochs, max_steps=max_steps, batch_size=batch_size,
        lr=lr, temperature=temperature, per_lang=per_lang or None, tatoeba_per_lang=tatoeba_per_lang, full=full,
        lora_r=lora_r, max_length=max_length, precision=precision, seed=seed, eval_every=eval_every,
        save_every=save_every, device=device, resume=not no_resume,
    )  # fmt: skip
    typer.echo(f"model: {train_biencoder(args)}")


@eval_app.command("biencoder")
def eval_biencoder_cmd(
    model: list[Path] = typer.Option(None, envvar="SAMELANG_MODEL", help="Model folder(s); repeat to compare."),
    base: bool = typer.Option(True, "--base/--no-base", help="Include the base model as the reference column."),
    out: Path = typer.Option(
        Path("runs/eval-biencoder"), envvar="SAMELANG_EVAL_OUT", help="Folder for JSON + Markdown."
    ),
    card: bool = typer.Option(False, "--card", help="Write the table into each model's README.md card."),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
) -> None:
    """Multi (Comp@10, Max@R, Max@R_norm), Mono-Same and Mono-Cross on the XQuAD test articles."""
    from indexes.atomic import atomic_write_text
    from service.config import settings
    from service.models.base_model import ensure_base_model
    from service.models.encoder import Encoder

    from .evaluation.biencoder import embed_xquad, evaluate, markdown

    cfg = settings(home=home)
    base_path = ensure_base_model(cfg.home)
    paths = ([base_path] if base else []) + list(model or [])
    results = {}
    for path in paths:
        enc = Encoder(path, home=cfg.home)
        name = "base" if path == base_path else Path(path).name
        results[name] = evaluate(embed_xquad(enc, cfg.home / "cache"))
        del enc
    table = markdown(results)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.json", json.dumps(results, indent=2))
    atomic_write_text(out / "results.md", table + "\n")
    typer.echo(table)
    if card:
        for path in model or []:
            card_path = Path(path) / "README.md"
            text = card_path.read_text() if card_path.exists() else f"# {Path(path).name}\n"
            head = text.split("## Evaluation (XQuAD test articles)")[0]
            tail = "\n\nData: XQuAD (CC-BY-SA 4.0). Base model: MIT.\n"
            atomic_write_text(card_path, head + "## Evaluation (XQuAD test articles)\n\n" + table + tail)
