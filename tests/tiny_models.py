"""Tiny random-weight stand-ins of the papers' model architectures, built from transformers configs
(no download): what a user brings on a GPU host (bge-m3: XLM-R with CLS pooling; multilingual-e5:
XLM-R/BERT with mean pooling and prompts; bge-reranker-v2-m3: XLM-R sequence classification;
Qwen3-Reranker: a Qwen3 causal LM scored by "yes"/"no"; Gemma 3), at a size that loads and trains
in a second. The tokenizer is a byte-level BPE trained here on bundled XQuAD text, so any language
tokenises; causal models get "yes"/"no" tokens and a chat template that carries a query/document
pair, as Qwen3-Reranker's does.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
from pathlib import Path

HIDDEN, LAYERS, HEADS = 32, 2, 2
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<mask>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
KINDS = ("xlmr-mean", "xlmr-cls", "bert", "xlmr-seqcls", "qwen3-causal", "gemma3-causal")
ROLE = {"xlmr-mean": "embed", "xlmr-cls": "embed", "bert": "embed", "xlmr-seqcls": "score",
        "qwen3-causal": "score", "gemma3-causal": "score"}  # fmt: skip

PAIR_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {{ (messages | selectattr('role', 'eq', 'query') | first).content }}\n"
    "<Document>: {{ (messages | selectattr('role', 'eq', 'document') | first).content }}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)


@functools.lru_cache(maxsize=1)
def _texts() -> tuple[str, ...]:
    from samelang.corpora import load_xquad

    return tuple(p.text for p in load_xquad(["en", "zh", "ar", "ru", "de", "hi", "th"]).paragraphs[:400])


def train_tokenizer(kind: str):
    """A byte-level BPE (600 pieces) with the specials and, for a causal LM, "yes"/"no" and the pair template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(_texts(), trainer)
    causal = kind.endswith("causal")
    if not causal:
        s, e = tok.token_to_id("<s>"), tok.token_to_id("</s>")
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", s), ("</s>", e)]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|endoftext|>" if causal else "<pad>", unk_token="<unk>",
        bos_token=None if causal else "<s>", eos_token="<|im_end|>" if causal else "</s>",
        cls_token=None if causal else "<s>", sep_token=None if causal else "</s>",
        mask_token=None if causal else "<mask>", model_max_length=512 if causal else 128,
        padding_side="left" if causal else "right",
    )  # fmt: skip
    if causal:
        fast.add_tokens(["yes", "no"])
        fast.chat_template = PAIR_TEMPLATE
    return fast


def _config(kind: str, vocab: int, pad: int):
    from transformers import BertConfig, Gemma3TextConfig, Qwen3Config, XLMRobertaConfig

    common = dict(vocab_size=vocab, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intermediate_size=2 * HIDDEN, pad_token_id=pad)  # fmt: skip
    if kind.startswith("xlmr"):
        return XLMRobertaConfig(**common, max_position_embeddings=132, type_vocab_size=1, num_labels=1)
    if kind == "bert":
        return BertConfig(**common, max_position_embeddings=130, type_vocab_size=2)
    causal = dict(common, num_key_value_heads=1, head_dim=HIDDEN // HEADS, max_position_embeddings=1024,
                  tie_word_embeddings=True)  # fmt: skip
    if kind == "qwen3-causal":
        return Qwen3Config(**causal)
    return Gemma3TextConfig(**causal, sliding_window=64, query_pre_attn_scalar=HIDDEN // HEADS)


def _model(kind: str, config):
    from transformers import (
        AutoModel,
        Gemma3ForCausalLM,
        Qwen3ForCausalLM,
        XLMRobertaForSequenceClassification,
    )

    if kind == "xlmr-seqcls":
        return XLMRobertaForSequenceClassification(config)
    if kind == "qwen3-causal":
        return Qwen3ForCausalLM(config)
    if kind == "gemma3-causal":
        return Gemma3ForCausalLM(config)
    return AutoModel.from_config(config)


def build_tiny(kind: str, out: Path, seed: int = 0) -> Path:
    """A checkpoint folder of ``kind`` (see :data:`KINDS`) at ``out``; a bi-encoder is a complete
    sentence-transformers folder (pooling and prompts in its config), the rest transformers folders."""
    import torch

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    torch.manual_seed(seed)
    tokenizer = train_tokenizer(kind)
    config = _config(kind, len(tokenizer), tokenizer.pad_token_id)
    model = _model(kind, config)
    hf = out if ROLE[kind] == "score" else out / "hf"
    model.save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    if ROLE[kind] == "embed":
        _sentence_transformer(kind, hf, out)
    return out


def _sentence_transformer(kind: str, hf: Path, out: Path) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer

    pooling = "cls" if kind == "xlmr-cls" else "mean"
    prompts = {"query": "query: ", "passage": "passage: "} if kind == "xlmr-mean" else {}
    if kind == "bert":  # jina-style prompt names
        prompts = {"retrieval.query": "Represent the query: ", "retrieval.passage": "Represent the document: "}
    modules = [Transformer(str(hf)), Pooling(HIDDEN, pooling_mode=pooling), Normalize()]
    st = SentenceTransformer(modules=modules, prompts=prompts)
    st.save(str(out))
    shutil.rmtree(hf)


def into_hub_cache(folder: Path, cache: Path, repo_id: str) -> Path:
    """Copy ``folder`` into the Hugging Face hub cache layout under ``cache`` (``models--org--name``,
    a snapshot named by a commit hash, ``refs/main`` pointing at it), as ``hf download`` leaves it."""
    sha = hashlib.sha1(repo_id.encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / sha
    shutil.copytree(folder, snap)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    return snap
