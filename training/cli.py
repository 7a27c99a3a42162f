"""``samelang train ...`` and ``samelang eval ...``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from indexes.corpora import XQUAD_LANGS

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


@train_app.command("reranker")
def train_reranker_cmd(
    out: Path = typer.Option(..., envvar=_env("out"), help="Output folder (adapter + head, or full model)."),
    stage: int = typer.Option(1, envvar=_env("stage"), help="1: English-anchored distillation; 2: alignment."),
    init: str = typer.Option(
        None, envvar=_env("init"), help="Stage 1: base path or hub id (default: the base); stage 2: stage-1 DIR."
    ),
    teacher: str = typer.Option(
        "cosine", envvar=_env("teacher"), help="Stage 1 teacher: 'cosine' (base bi-encoder) or a CrossEncoder path/id."
    ),
    langs: str = typer.Option(",".join(XQUAD_LANGS), envvar=_env("langs"), help="Languages (en required)."),
    n_sampled: int = typer.Option(3, envvar=_env("n_sampled"), help="Stage 1: sampled documents per question."),
    rounds: int = typer.Option(1, envvar=_env("rounds"), help="Stage 1: sampling rounds per question."),
    repeats: int = typer.Option(1, envvar=_env("repeats"), help="Stage 2: groups per question (R)."),
    lambda_lc: float = typer.Option(2.0, envvar=_env("lambda_lc"), help="Stage 2: weight of L_LC."),
    objective: str = typer.Option("full", envvar=_env("objective"), help="Stage 2: full | no-lc | no-rank."),
    epochs: float = typer.Option(1.0, envvar=_env("epochs")),
    max_steps: int = typer.Option(None, envvar=_env("max_steps"), help="Stop after this many steps."),
    batch_size: int = typer.Option(16, envvar=_env("batch_size"), help="Pairs (stage 1) or groups (stage 2)."),
    lr: float = typer.Option(2e-4, envvar=_env("lr")),
    full: bool = typer.Option(False, "--full", envvar=_env("full"), help="Full fine-tune instead of LoRA."),
    lora_r: int = typer.Option(16, envvar=_env("lora_r")),
    max_length: int = typer.Option(256, envvar=_env("max_length")),
    precision: str = typer.Option("auto", envvar=_env("precision"), help="auto | bf16 | fp32."),
    seed: int = typer.Option(0, envvar=_env("seed")),
    dev_questions: int = typer.Option(6, envvar=_env("dev_questions"), help="Dev-slice questions (0: none)."),
    eval_every: int = typer.Option(50, envvar=_env("eval_every")),
    save_every: int = typer.Option(50, envvar=_env("save_every")),
    device: str = typer.Option("auto", envvar=_env("device")),
    no_resume: bool = typer.Option(False, "--no-resume", help="Ignore checkpoints in --out."),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
) -> None:
    """Train the LAMAR cross-encoder: stage 1 (distillation) or stage 2 (ADR-MSE + language coherence)."""
    from .reranker import RerankerArgs, train_reranker

    try:
        args = RerankerArgs(
            out=out, stage=stage, init=init, teacher=teacher, langs=langs, n_sampled=n_sampled, rounds=rounds,
            repeats=repeats, lambda_lc=lambda_lc, objective=objective, epochs=epochs, max_steps=max_steps,
            batch_size=batch_size, lr=lr, full=full, lora_r=lora_r, max_length=max_length, precision=precision,
            seed=seed, dev_questions=dev_questions, eval_every=eval_every, save_every=save_every, device=device,
            resume=not no_resume,
        )  # fmt: skip
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    typer.echo(f"model: {train_reranker(args, home=home)}")


EVAL_HEADING = "## Evaluation (XQuAD test articles)"


PRECISION_HEADING = "## Inference precision"


def _write_card_evaluation(model_dir: Path, body: str, heading: str = EVAL_HEADING) -> None:
    """Replace one section of a model card (README.md), keeping the sections around it."""
    from indexes.atomic import atomic_write_text

    card = model_dir / "README.md"
    text = card.read_text() if card.exists() else f"# {model_dir.name}\n"
    head, _, rest = text.partition(heading)
    later = rest[rest.index("\n## ") + 1 :] if "\n## " in rest else ""
    head = head.rstrip("\n") + "\n\n"
    atomic_write_text(card, head + f"{heading}\n\n{body}" + ("\n" + later if later else ""))


def _evaluate(
    models: list[Path], with_base: bool, home: Path | None, names: list[str] | None = None, precision: str = "fp32"
) -> dict:
    """``evaluate`` for the base model (optional) and each model folder, in order."""
    from service.config import settings
    from service.models.base_model import ensure_base_model
    from service.models.encoder import Encoder
    from service.models.engine import EngineOptions

    from .evaluation.biencoder import embed_xquad, evaluate

    cfg = settings(home=home)
    base_path = ensure_base_model(cfg.home)
    names = (["base"] if with_base else []) + (names or [Path(m).name for m in models])
    results = {}
    for name, path in zip(names, ([base_path] if with_base else []) + models, strict=True):
        enc = Encoder(path, device=cfg.torch_device(), home=cfg.home, options=EngineOptions(precision=precision))
        results[name] = evaluate(embed_xquad(enc, cfg.home / "cache"))
        del enc
    return results


@eval_app.command("biencoder")
def eval_biencoder_cmd(
    model: list[Path] = typer.Option(None, envvar="SAMELANG_MODEL", help="Model folder(s); repeat to compare."),
    base: bool = typer.Option(True, "--base/--no-base", help="Include the base model as the reference column."),
    out: Path = typer.Option(
        Path("runs/eval-biencoder"), envvar="SAMELANG_EVAL_OUT", help="Folder for JSON + Markdown."
    ),
    card: bool = typer.Option(False, "--card", help="Write the table into each model's README.md card."),
    precision: str = typer.Option("fp32", envvar="SAMELANG_EVAL_PRECISION", help="fp32 (reference), int8, bf16."),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
) -> None:
    """Multi (Comp@10, Max@R, Max@R_norm), Mono-Same and Mono-Cross on the XQuAD test articles."""
    from indexes.atomic import atomic_write_text

    from .evaluation.biencoder import markdown

    results = _evaluate(list(model or []), base, home, precision=precision)
    table = markdown(results)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.json", json.dumps(results, indent=2))
    atomic_write_text(out / "results.md", table + "\n")
    typer.echo(table)
    if card:
        for path in model or []:
            _write_card_evaluation(Path(path), table + "\n\nData: XQuAD (CC-BY-SA 4.0). Base model: MIT.\n")
            # the numbers themselves, for the score regression (tests/regressions)
            name = Path(path).name
            scores = {"base": results["base"], name: results[name]} if "base" in results else {name: results[name]}
            atomic_write_text(Path(path) / "eval_results.json", json.dumps(scores, indent=2) + "\n")


ABLATION_LOSSES = "jsd+nce,nce,jsd,nce-psg"


@eval_app.command("biencoder-ablation", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def eval_ablation_cmd(
    ctx: typer.Context,
    runs: Path = typer.Option(
        Path("runs/ablation"), envvar="SAMELANG_ABLATION_RUNS", help="One sub-folder per loss setting."
    ),
    losses: str = typer.Option(ABLATION_LOSSES, help="Comma-separated loss settings."),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
) -> None:
    """The seed's ablation from one command: train each loss setting with the same flags, evaluate all.

    Extra arguments go to ``samelang train biencoder`` unchanged (same budget for every
    setting), e.g. ``samelang eval biencoder-ablation -- --per-lang 256 --max-length 128``.
    A setting whose folder already holds a finished model is evaluated, not retrained.
    """
    from typer.main import get_command

    from indexes.atomic import atomic_write_text

    from .evaluation.biencoder import markdown, markdown_ablation

    names = [x.strip() for x in losses.split(",") if x.strip()]
    train = get_command(train_app)
    info = {}
    for loss in names:
        folder = runs / loss
        if not (folder / "training_args.json").exists():
            typer.echo(f"training {loss} -> {folder}")
            train.main(["biencoder", "--out", str(folder), "--loss", loss, *ctx.args], standalone_mode=False)
        targs = json.loads((folder / "training_args.json").read_text())
        if targs["loss"] != loss:
            raise typer.BadParameter(f"{folder} holds a model trained with --loss {targs['loss']}", param_hint="--runs")
        steps = len(json.loads((folder / "history.json").read_text()))
        info[loss] = {**targs, "steps": steps}
    budgets = {(i["batch_size"], i["steps"], i["max_length"], i["lr"], i["per_lang"]) for i in info.values()}
    results = _evaluate([runs / x for x in names], True, home, names)
    table = markdown_ablation(results, info)
    if len(budgets) > 1:
        table += "\n\nWARNING: the runs do not share one budget (batch, steps, max length, lr, per-lang differ)."
    atomic_write_text(runs / "ablation.json", json.dumps({"runs": info, "results": results}, indent=2))
    atomic_write_text(runs / "ablation.md", table + "\n\n" + markdown(results) + "\n")
    typer.echo(table)


@eval_app.command("reranker")
def eval_reranker_cmd(
    model: list[Path] = typer.Option(
        None,
        envvar="SAMELANG_RERANKER",
        help="Cross-encoder folder(s); repeat to compare (e.g. the ablations). Default: the served one, else LAMAR.",
    ),
    retriever: Path = typer.Option(
        None, envvar="SAMELANG_MODEL", help="Bi-encoder giving the top-20 candidates (default: the served one)."
    ),
    reference: bool = typer.Option(
        True, "--reference/--no-reference", help="Add the no-reranker row (the retriever's cosine as the score)."
    ),
    cosine: list[str] = typer.Option(
        None,
        help="Also score by this bi-encoder's cosine (a folder, or 'base': the converted base model, which is "
        "the default stage-1 teacher); repeatable.",
    ),
    max_questions: int = typer.Option(
        None, envvar="SAMELANG_EVAL_MAX_QUESTIONS", help="First N test questions per language (CPU runs); all: 374."
    ),
    max_length: int = typer.Option(256, envvar="SAMELANG_RERANKER_MAX_LENGTH"),
    precision: str = typer.Option("fp32", envvar="SAMELANG_EVAL_PRECISION", help="Cross-encoder numerics."),
    cache: bool = typer.Option(
        True, "--cache/--no-cache", help="Reuse cross-encoder scores kept in $SAMELANG_HOME/cache (same model+pairs)."
    ),
    out: Path = typer.Option(Path("runs/eval-reranker"), envvar="SAMELANG_EVAL_OUT", help="JSON, Markdown, PNGs."),
    card: bool = typer.Option(False, "--card", help="Write the table into each model's README.md card."),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
) -> None:
    """Oracle language coherence, reranking of retrieved top-20, Mono-Same: XQuAD test articles.

    With several ``--model`` folders (stage 1, stage 2, the ``--objective`` ablations) it also
    prints the ablation table: each model's training settings beside its scores."""
    from indexes.atomic import atomic_write_bytes, atomic_write_text
    from service.config import settings
    from service.models.base_model import ensure_base_model
    from service.models.encoder import Encoder, model_fingerprint
    from service.models.engine import EngineOptions
    from service.models.registry import default_biencoder, default_cross_encoder
    from service.models.reranker import CrossEncoderReranker

    from .evaluation import reranker as ev
    from .evaluation.biencoder import embed_xquad

    cfg = settings(home=home)
    if not model:
        served = default_cross_encoder()
        if served is None:
            raise typer.BadParameter(
                "no reranker in models/: train one (`samelang train reranker`)", param_hint="--model"
            )
        model = [served]
    retriever = retriever or default_biencoder(cfg.home)
    device = cfg.torch_device()
    emb = embed_xquad(Encoder(retriever, device=device, home=cfg.home), cfg.home / "cache")
    results = {}
    if reference:
        results[f"no reranker ({Path(retriever).name} cosine)"] = ev.evaluate_reranker(
            ev.cosine_scorer(emb), emb, max_questions
        )
    for other in cosine or []:
        path = ensure_base_model(cfg.home) if other == "base" else Path(other)
        other_emb = embed_xquad(Encoder(path, device=device, home=cfg.home), cfg.home / "cache")
        results[f"{Path(path).name} cosine"] = ev.evaluate_reranker(ev.cosine_scorer(other_emb), emb, max_questions)
    texts = ev.load_texts()
    runs = {}
    for path in model:
        reranker = CrossEncoderReranker(
            path, device=device, max_length=max_length, home=cfg.home, options=EngineOptions(precision=precision)
        )
        identity = f"{model_fingerprint(Path(path))}|max_length={max_length}"
        identity += "" if reranker.numerics == "fp32" else f"|{reranker.numerics}"
        scorer = ev.cross_encoder_scorer(reranker, texts)
        scorer = ev.cached_scorer(scorer, cfg.home / "cache", identity) if cache else scorer
        results[Path(path).name] = ev.evaluate_reranker(scorer, emb, max_questions)
        runs[Path(path).name] = ev.training_summary(Path(path))
        del reranker
    table = ev.markdown(results)
    if len(model) > 1:
        table = ev.markdown_ablation(results, runs) + "\n\n" + table
    out.mkdir(parents=True, exist_ok=True)
    payload = {"retriever": str(retriever), "max_length": max_length, "runs": runs, "results": results}
    atomic_write_text(out / "results.json", json.dumps(payload, indent=2))
    atomic_write_text(out / "results.md", table + "\n")
    for name, r in results.items():
        slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
        atomic_write_bytes(out / f"top1-languages-{slug}.png", ev.heatmap_png(r, name))
    typer.echo(table)
    if card:
        for path in model:
            _write_card_evaluation(Path(path), f"Retriever: `{Path(retriever).name}`.\n\n{table}\n")
            name = Path(path).name
            scores = {k: v for k, v in results.items() if k == name or k.startswith("no reranker")}
            atomic_write_text(Path(path) / "eval_results.json", json.dumps(scores, indent=2) + "\n")


@eval_app.command("precision")
def eval_precision_cmd(
    biencoder: Path = typer.Option(None, help="Bi-encoder folder (default: the served one)."),
    reranker: Path = typer.Option(None, help="Cross-encoder folder (default: the served one; 'none' to skip)."),
    precision: list[str] = typer.Option(
        None, help="Precisions to compare with fp32 (default: int8, and bf16 where the CPU has it natively)."
    ),
    max_questions: int = typer.Option(6, help="Reranker slice: test questions per language."),
    tolerance: float = typer.Option(0.3, help="Largest admissible loss against fp32, in points, on any metric."),
    repeats: int = typer.Option(3, help="Speed: timed repetitions (median)."),
    card: bool = typer.Option(False, "--card", help="Write inference.json and the card section of each model."),
    out: Path = typer.Option(Path("runs/eval-precision"), envvar="SAMELANG_EVAL_OUT"),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
) -> None:
    """fp32 vs int8 (vs bf16): eval-table quality and speed side by side; picks each model's default
    precision: the fastest within ``--tolerance`` points of fp32 on every metric."""
    from indexes.atomic import atomic_write_text
    from service.config import settings
    from service.models.encoder import Encoder, model_fingerprint
    from service.models.engine import EngineOptions, cpu_has_bf16
    from service.models.registry import default_biencoder, default_cross_encoder
    from service.models.reranker import CrossEncoderReranker

    from .evaluation import precision as pr
    from .evaluation import reranker as ev
    from .evaluation.biencoder import embed_xquad, evaluate

    cfg = settings(home=home)
    cache, device = cfg.home / "cache", cfg.torch_device()
    on_gpu = device.startswith("cuda")
    alternatives = ["bf16", "fp16"] if on_gpu else ["int8"] + (["bf16"] if cpu_has_bf16() else [])
    precisions = ["fp32", *(precision or alternatives)]
    biencoder = biencoder or default_biencoder(cfg.home)
    skip = reranker is not None and str(reranker).lower() == "none"
    reranker_path = None if skip else (reranker or default_cross_encoder())
    cpu = pr.cpu_model()
    report, sections = {"cpu": cpu, "biencoder": str(biencoder), "reranker": str(reranker_path)}, {}

    rows, emb_fp32 = [], None
    for p in dict.fromkeys(precisions):
        enc = Encoder(biencoder, device=device, home=cfg.home, options=EngineOptions(precision=p))
        emb = embed_xquad(enc, cache)
        emb_fp32 = emb if p == "fp32" else emb_fp32
        rows.append(pr.biencoder_row(enc, evaluate(emb), repeats))
        typer.echo(f"bi-encoder {p}: {rows[-1]}")
        del enc
    chosen = pr.choose(rows, pr.BIENCODER_METRICS, "passages_per_s", tolerance)["precision"]
    sections[Path(biencoder)] = (rows, chosen, pr.markdown(rows, pr.BIENCODER_METRICS, "passages_per_s", chosen))
    report["biencoder_rows"], report["biencoder_default"] = rows, chosen

    if reranker_path is not None:
        texts, rows = ev.load_texts(), []
        for p in dict.fromkeys(precisions):
            rr = CrossEncoderReranker(reranker_path, device=device, home=cfg.home, options=EngineOptions(precision=p))
            identity = f"{model_fingerprint(Path(reranker_path))}|max_length=256"
            identity += "" if rr.numerics == "fp32" else f"|{rr.numerics}"
            scorer = ev.cached_scorer(ev.cross_encoder_scorer(rr, texts), cache, identity)
            rows.append(pr.reranker_row(rr, ev.evaluate_reranker(scorer, emb_fp32, max_questions), repeats))
            typer.echo(f"reranker {p}: {rows[-1]}")
            del rr
        chosen = pr.choose(rows, pr.RERANKER_METRICS, "pairs_per_s", tolerance)["precision"]
        sections[Path(reranker_path)] = (rows, chosen, pr.markdown(rows, pr.RERANKER_METRICS, "pairs_per_s", chosen))
        report["reranker_rows"], report["reranker_default"] = rows, chosen

    how = (
        f"Measured on {pr.device_name(device) if on_gpu else cpu} ({cfg.threads or 'all'} threads): "
        f"speed = median of {repeats} runs over the first 64 "
        "English test paragraphs (bi-encoder) or one query x 20 paragraphs (reranker); quality on the XQuAD test "
        f"articles (reranker: {max_questions} questions per language, candidates from the fp32 retriever). "
        f"Default = the fastest precision within {tolerance} points of fp32 on every metric. "
        "Command: `samelang eval precision --card`."
    )
    out.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(f"### {path.name}\n\n{table}" for path, (_, _, table) in sections.items()) + "\n\n" + how
    atomic_write_text(out / "results.json", json.dumps(report, indent=2))
    atomic_write_text(out / "results.md", text + "\n")
    typer.echo(text)
    if card:
        for path, (rows, chosen, table) in sections.items():
            pr.write_inference_card(path, rows, chosen, how, "cuda" if on_gpu else "cpu")
            heading = PRECISION_HEADING + (" on GPU" if on_gpu else "")
            _write_card_evaluation(path, f"{table}\n\n{how}\n", heading=heading)


PIPELINE_SECTION = "## Served defaults: the end-to-end evaluation"
PIPELINE_COMMAND = "samelang eval pipeline --card"


@eval_app.command("pipeline")
def eval_pipeline_cmd(
    retriever: list[str] = typer.Option(
        None, help="Bi-encoder NAME=DIR (or 'base'); repeat. Default: base and every bi-encoder in models/."
    ),
    cross_encoder: list[str] = typer.Option(
        None, help="Cross-encoder NAME=DIR; repeat. Default: every cross-encoder in models/."
    ),
    full: bool = typer.Option(False, "--full", help="Reranked rows on all 374 questions per language too."),
    per_lang: int = typer.Option(48, envvar="SAMELANG_EVAL_SAMPLE", help="Sample: questions per language (>= 48)."),
    http: bool = typer.Option(True, "--http/--no-http", help="Also measure the served defaults over HTTP /answer."),
    card: bool = typer.Option(
        False, "--card", help="Serve the winning row: write models/serving.json and the README section."
    ),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Reuse cross-encoder scores kept in the cache."),
    max_questions: int = typer.Option(
        None, help="Smoke runs only: the first N test questions per language (the table then says so)."
    ),
    out: Path = typer.Option(Path("runs/eval-pipeline"), envvar="SAMELANG_EVAL_OUT", help="JSON + Markdown."),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
) -> None:
    """What the reader gets, end to end: every retriever x reranker x candidate strategy through the
    served pipeline on the XQuAD test articles (12-language pool, bilingual pools, Mono-Same)."""
    import time

    from indexes.atomic import atomic_write_text
    from service.config import settings
    from service.models.registry import ALIGNED_BIENCODER, BASE, LAMAR_RERANKER, served_defaults

    from .evaluation import pipeline as ev

    cfg = settings(home=home)
    t0 = time.perf_counter()

    def named(items: list[str] | None, found: dict[str, Path]) -> dict[str, Path]:
        if not items:
            return found
        out = {}
        for item in items:
            name, _, path = item.partition("=")
            out[name] = Path(path or name)
        return out

    from service.models.base_model import ensure_base_model

    base = ensure_base_model(cfg.home)
    found_r = {BASE: base, **({ALIGNED_BIENCODER.name: ALIGNED_BIENCODER} if ALIGNED_BIENCODER.exists() else {})}
    retrievers = {k: (base if str(v) == BASE else v) for k, v in named(retriever, found_r).items()}
    ces = named(cross_encoder, {LAMAR_RERANKER.name: LAMAR_RERANKER} if LAMAR_RERANKER.exists() else {})
    if per_lang < 48 and not full:
        typer.echo(f"note: --per-lang {per_lang} is below the documented sample of 48 questions per language")
    if card and (max_questions or per_lang < 48):
        raise typer.BadParameter("--card needs the documented sample (>= 48 per language, no --max-questions)")
    before = served_defaults()
    evaluation = ev.PipelineEvaluation(
        cfg.home, retrievers, ces, full=full, per_lang=per_lang, cache=cache, log=typer.echo,
        max_questions=max_questions, served=(before.retriever, before.reranker, before.candidates),
    )  # fmt: skip
    rows = evaluation.run()
    chosen = ev.best_row(rows)
    baseline = next((r for r in rows if (r.retriever, r.reranker, r.strategy) == (BASE, "none", "documents")), None)
    if card:
        ev.write_served_defaults(chosen, baseline, evaluation)
    http_result = None
    if http:
        served = served_defaults()
        retr = evaluation.built.get(served.retriever)
        if retr is None:
            typer.echo(f"served retriever {served.retriever!r} was not evaluated: no HTTP check")
        else:
            http_result = ev.served_over_http(evaluation, retr, evaluation.ces)
    table = ev.markdown(rows, chosen, http_result)
    minutes = (time.perf_counter() - t0) / 60
    how = ev.how_text(evaluation, minutes)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"rows": [{"name": r.name, "retriever": r.retriever, "reranker": r.reranker, "strategy": r.strategy,
                         **r.results} for r in rows],
               "chosen": chosen.name, "http": http_result, "minutes": round(minutes, 1),
               "sample_positions": evaluation.sample.tolist()}  # fmt: skip
    atomic_write_text(out / "results.json", json.dumps(payload, indent=2))
    atomic_write_text(out / "results.md", table + "\n\n" + how + "\n")
    typer.echo(table + "\n\n" + how)
    if card:
        readme = Path(__file__).resolve().parents[1] / "README.md"
        ev.write_readme_section(readme, PIPELINE_SECTION, table, how, chosen, baseline)
        typer.echo(f"served defaults -> models/serving.json; table -> {readme.name} ({PIPELINE_SECTION[3:]})")
