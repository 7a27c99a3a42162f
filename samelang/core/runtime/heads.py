"""What a forward pass returns, read from the model's own sentence-transformers configuration, so that any checkpoint
runs as its authors meant it, not as e5-small does:

* a bi-encoder pools as its ``Pooling`` module says (``mean``: e5; ``cls``: bge-m3; ``lasttoken``: decoder embedders)
  and prefixes queries and passages with the prompts its config names (:func:`pick_prompts`: ``query`` / ``document``,
  ``passage``, ``corpus``, jina's ``retrieval.query`` ...), as ``encode_query`` / ``encode_document`` would;
* a cross-encoder scores with its classifier's first logit, or, for a causal LM (Qwen3-Reranker style,
  sentence-transformers' ``LogitScore``), ``logit("yes") - logit("no")`` at the last token of the left-padded
  ``prefix + query + middle + document + suffix``: the pair in the model's own chat template (its ``query`` and
  ``document`` roles), else Qwen3-Reranker's instruction (:data:`QWEN3_RERANKER_TEMPLATE`).

A mode this engine does not implement is refused at load with its name, never run as another.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger("samelang")

POOLING_MODES = ("mean", "cls", "lasttoken")
QUERY_NAMES = ("query", "search_query", "retrieval.query")
DOCUMENT_NAMES = ("document", "passage", "corpus", "search_document", "retrieval.passage")
# Qwen3-Reranker's own format (its model card): what a causal LM without a pair template is scored with
QWEN3_RERANKER_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: ",
    "\n<Document>: ",
    "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
)
_Q, _D = "\x00SAMELANG_QUERY\x00", "\x00SAMELANG_DOCUMENT\x00"


def pick_prompts(prompts: dict[str, str], default_prompt_name: str | None = None) -> tuple[str, str]:
    """(query prompt, passage prompt) from a sentence-transformers ``prompts`` dict: the first
    non-empty of the usual names, then any name ending in ``query`` / ``passage`` or ``document``,
    then the default prompt, else none."""
    prompts = {k: v for k, v in (prompts or {}).items() if v}
    fallback = prompts.get(default_prompt_name or "", "")

    def pick(names: tuple[str, ...], endings: tuple[str, ...]) -> str:
        for n in names:
            if n in prompts:
                return prompts[n]
        return next((v for k, v in prompts.items() if k.endswith(endings)), fallback)

    return pick(QUERY_NAMES, ("query",)), pick(DOCUMENT_NAMES, ("passage", "document", "corpus"))


_LEGACY_POOLING = {  # sentence-transformers < 6 wrote one flag per mode
    "pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "lasttoken",
    "pooling_mode_max_tokens": "max", "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
}  # fmt: skip


def read_st_config(folder) -> dict:
    """A bi-encoder folder's pooling and prompts from its sentence-transformers files, without loading
    it (what a trainer needs of its base): ``{"pooling", "query_prompt", "passage_prompt"}``; a plain
    transformers folder pools by mean and has no prompts, as sentence-transformers would make it."""
    folder = Path(folder)

    def read(name: str) -> dict | list:
        f = folder / name
        return json.loads(f.read_text()) if f.exists() else {}

    mode = "mean"
    for module in read("modules.json") or []:
        if str(module.get("type", "")).endswith("Pooling"):
            cfg = read(str(Path(module.get("path", "")) / "config.json"))
            mode = cfg.get("pooling_mode") or next((m for k, m in _LEGACY_POOLING.items() if cfg.get(k)), "mean")
            if isinstance(mode, list):
                mode = mode[0]
    st = read("config_sentence_transformers.json")
    query, passage = pick_prompts(st.get("prompts") or {}, st.get("default_prompt_name"))
    return {"pooling": mode, "query_prompt": query, "passage_prompt": passage}


def pool(hidden, attention_mask, mode: str):
    """Token states ``(batch, seq, dim)`` pooled as ``mode`` says (right-padded inputs)."""
    import torch  # deferred: keeps torch out of start-up

    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":
        last = attention_mask.sum(1) - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def embed_meta(st_model, name: str) -> dict:
    """What the engine must know of a ``SentenceTransformer`` besides its transformer: dimension,
    pooling, prompts, window. Raises ``ValueError`` naming a pooling it does not implement."""
    from sentence_transformers.models import Pooling  # deferred: torch only when loading (5.x and 6.x path)

    pooling = next((m for m in st_model if isinstance(m, Pooling)), None)
    mode = "mean"
    if pooling is not None:  # sentence-transformers 6 names the mode, 5 keeps one flag per mode
        mode = getattr(pooling, "pooling_mode", None) or pooling.get_pooling_mode_str()
    if mode not in POOLING_MODES:
        raise ValueError(f"{name}: pooling {mode!r} is not one this engine runs ({', '.join(POOLING_MODES)})")
    if pooling is not None and not getattr(pooling, "include_prompt", True):
        raise ValueError(f"{name}: pooling that leaves the prompt out (include_prompt=False) is not implemented")
    query, passage = pick_prompts(getattr(st_model, "prompts", {}), getattr(st_model, "default_prompt_name", None))
    return {
        "dim": int(st_model.get_embedding_dimension()),
        "pooling": mode,
        "query_prompt": query,
        "passage_prompt": passage,
        "max_length": int(st_model.max_seq_length or 512),
    }


def positions(config) -> int | None:
    """The longest input the model's position table holds (RoBERTa-style models start counting after
    the padding id), or ``None`` when the config does not say."""
    n = getattr(config, "max_position_embeddings", None)
    if n is None:
        return None
    if getattr(config, "model_type", "") in ("xlm-roberta", "roberta"):
        n -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    return int(n)


def token_window(meta: dict, asked: int | None = None) -> int:
    """The tokens one input may hold: ``asked`` (else the model's own ``max_length``), never past its
    position table (``positions``): a longer window would index past it, in serving and in int8 calibration alike."""
    return min(int(asked or meta["max_length"]), int(meta.get("positions") or 1 << 30))


def is_causal_lm(hf_model) -> bool:
    archs = getattr(hf_model.config, "architectures", None) or [type(hf_model).__name__]
    return any(str(a).endswith("ForCausalLM") for a in archs)


def score_meta(cross_encoder, name: str) -> dict:
    """How a ``CrossEncoder`` scores: its first logit, or a causal LM's yes/no at the last token with
    the pair template (prefix, middle, suffix) and left padding."""
    hf = cross_encoder.model
    if not is_causal_lm(hf):
        return {"score": "logit", "positions": positions(hf.config)}
    yes, no = yes_no_ids(cross_encoder.tokenizer, name)
    template = causal_template(cross_encoder.tokenizer, name)
    return {"score": "yes-no", "yes_id": yes, "no_id": no, "template": list(template), "padding_side": "left"}


def yes_no_ids(tokenizer, name: str = "") -> tuple[int, int]:
    """The token ids of "yes" and "no" (a causal-LM reranker's two answers)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("yes", "no")]
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        raise ValueError(f"{name}: a causal-LM reranker is scored by its 'yes' and 'no' tokens, which its tokenizer "
                         "lacks")  # fmt: skip
    return ids[0], ids[1]


def causal_template(tokenizer, name: str = "") -> tuple[str, str, str]:
    """:func:`pair_template`, with the tokenizer's ``<bos>`` in front when it adds one and the template
    does not (Gemma reads text after ``<bos>``)."""
    prefix, middle, suffix = pair_template(tokenizer, name)
    bos = tokenizer.bos_token
    if bos and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id] and not prefix.startswith(bos):
        prefix = bos + prefix
    return prefix, middle, suffix


def template_jinja(template: tuple[str, str, str]) -> str:
    """A chat template that renders ``template`` around a ``query`` and a ``document`` message: what a
    trained causal reranker saves, so that sentence-transformers' ``CrossEncoder`` scores it as we do."""

    def pick(role: str) -> str:
        return "{{ (messages | selectattr('role', 'eq', '" + role + "') | first).content }}"

    prefix, middle, suffix = (json.dumps(x, ensure_ascii=False) for x in template)
    return "{{ " + prefix + " }}" + pick("query") + "{{ " + middle + " }}" + pick("document") + "{{ " + suffix + " }}"


def templated_pairs(pairs: list, template, encode_batch, max_length: int) -> tuple[list[str], list[bool]]:
    """``prefix + query + middle + document + suffix`` of each pair, its query and document cut together
    (longest first, at token boundaries) to ``max_length`` tokens (the window counts the pair, as a BERT
    pair's does; the instruction around it comes on top, and the suffix, whose last token is the one
    scored, is always kept); and whether each was cut. ``encode_batch``: the ``tokenizers`` backend's,
    without special tokens (ids and character offsets)."""
    prefix, middle, suffix = template
    queries, docs = encode_batch([str(a) for a, _ in pairs]), encode_batch([str(b) for _, b in pairs])
    texts, cut = [], []
    for (a, b), q, d in zip(pairs, queries, docs):
        q_ids, d_ids = fit_pair(q.ids, d.ids, max_length)
        texts.append(prefix + _cut_text(str(a), q, len(q_ids)) + middle + _cut_text(str(b), d, len(d_ids)) + suffix)
        cut.append(len(q_ids) + len(d_ids) < len(q.ids) + len(d.ids))
    return texts, cut


def _cut_text(text: str, enc, n_tokens: int) -> str:
    """``text`` up to the end of its first ``n_tokens`` tokens (``enc``: its encoding)."""
    if n_tokens >= len(enc.ids):
        return text
    return text[: enc.offsets[n_tokens - 1][1]] if n_tokens > 0 else ""


def pair_template(tokenizer, name: str = "") -> tuple[str, str, str]:
    """(prefix, middle, suffix) around the query and the document: the tokenizer's chat template
    rendered with the pair as ``query`` and ``document`` messages, when it is written for them,
    else Qwen3-Reranker's instruction."""
    template = getattr(tokenizer, "chat_template", None)
    # only a template written for the pair (it names both roles); a generic chat template would render
    # them as two chat turns, which no reranker was trained on
    if isinstance(template, str) and "query" in template and "document" in template:
        messages = [{"role": "query", "content": _Q}, {"role": "document", "content": _D}]
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False)
        except Exception:  # noqa: BLE001 - a template that cannot render these roles: the default below
            text = ""
        if isinstance(text, str) and text.count(_Q) == 1 and text.count(_D) == 1 and text.index(_Q) < text.index(_D):
            prefix, rest = text.split(_Q)
            middle, suffix = rest.split(_D)
            return prefix, middle, suffix
    log.info("%s: no chat template with query/document roles: scoring with Qwen3-Reranker's instruction", name)
    return QWEN3_RERANKER_TEMPLATE


def fit_pair(query: list[int], doc: list[int], room: int) -> tuple[list[int], list[int]]:
    """The query and document token ids cut to ``room`` together, longest first (transformers'
    ``longest_first`` truncation)."""
    lq, ld = len(query), len(doc)
    if lq + ld <= room:
        return query, doc
    half = room // 2
    if lq > half and ld > room - half:
        return query[:half], doc[: room - half]
    return (query, doc[: room - lq]) if ld > lq else (query[: room - ld], doc)


def pooled_module(model, kind: str, meta: dict | None = None):
    """The transformers ``model`` wrapped to return what the engine wants of one pass: pooled token
    states (``embed``; the pooling of ``meta``), one score per row (``score``) or, of a question
    answering model, each token's start and end logits (``span``: ``(batch, tokens, 2)``)."""
    import torch  # deferred: keeps torch out of start-up

    meta = meta or {}
    pooling, score = meta.get("pooling", "mean"), meta.get("score", "logit")
    yes, no = meta.get("yes_id"), meta.get("no_id")

    class Pooled(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            if kind == "score" and score == "yes-no":  # left-padded: the last position is the last token
                logits = self.m(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1).logits[:, -1]
                return (logits[:, yes] - logits[:, no]).unsqueeze(1)
            if kind == "score":
                return self.m(input_ids=input_ids, attention_mask=attention_mask).logits[:, :1]
            if kind == "span":
                out = self.m(input_ids=input_ids, attention_mask=attention_mask)
                return torch.stack([out.start_logits, out.end_logits], dim=-1)
            return pool(self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, attention_mask,
                        pooling)  # fmt: skip

    return Pooled(model).eval()
