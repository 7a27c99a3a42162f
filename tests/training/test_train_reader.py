"""The extractive reader's trainer: window labels that point at the answer, the threshold
calibration on hand-made margins, and a three-step CPU run whose folder the service's reader loads
and reads exactly as the trained module does."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from samelang.core.catalogue import REPO_MODELS
from samelang.core.models.reader import ExtractiveReader, Span, best_spans, read_reader_config
from samelang.core.runtime.precision import EngineOptions
from samelang.corpora import dev_articles
from samelang.training.reader import calibrate, windows
from samelang.training.reader_data import ReadingExample, build_reading_examples, dev_questions


def test_window_labels_cover_the_answer_and_windows_without_it_are_no_answer(base_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base_model_path))
    context = " ".join(f"Sentence number {i} is here." for i in range(40)) + " The answer is Zanzibar city."
    start = context.index("Zanzibar city")
    ex = ReadingExample("Where is the answer?", context, (("Zanzibar city", start),), "en", "test")
    rows = windows(tok, [ex], max_length=64, stride=16)
    assert len(rows) > 3  # a long passage is read in overlapping windows
    labelled = [r for r in rows if r["start"]]
    assert len(labelled) >= 1 and all(r["start"] == r["end"] == 0 for r in rows if r not in labelled)
    for r in labelled:
        span = tok.decode(r["input_ids"][r["start"] : r["end"] + 1])
        assert span.strip() == "Zanzibar city"
    none = windows(tok, [ReadingExample("Where?", "A short passage.", (), "en", "neg")], 64, 16)
    assert [(r["start"], r["end"]) for r in none] == [(0, 0)]


def test_windows_are_the_ones_transformers_makes_without_transformers(base_model_path):
    """The served reader cuts windows with the ``tokenizers`` library alone; they are the windows
    transformers' fast tokenizer makes (what the reader was trained on before), long passages,
    long questions and scripts without spaces included."""
    from transformers import AutoTokenizer

    from samelang.core.models.reader import Windows

    tok = AutoTokenizer.from_pretrained(str(base_model_path))
    data = dev_questions(("en", "zh", "th", "ar"), dev_articles(3), per_lang=4)
    questions = [q.question for q, _ in data] + ["Why? " * 80]  # the last is cut to a third of the window
    passages = [q.context * 3 for q, _ in data] + [data[0][0].context]
    got = Windows(tok, 128, 32).features(questions, passages)
    # served, the engine's own tokenizer (truncating at the model's length) cuts the questions: the same windows
    from samelang.core.runtime.onnx_export import backend_tokenizer

    engines = backend_tokenizer(tok)
    engines.enable_truncation(512)
    served = Windows(engines, 128, 32)
    assert served.plain is engines and served.features(questions, passages) == got
    cut = [q if len(tok.tokenize(q)) <= 42 else None for q in questions]
    want = tok([q or "x" for q in cut], passages, truncation="only_second", max_length=128, stride=32,
               return_overflowing_tokens=True, return_offsets_mapping=True)  # fmt: skip
    rows = [k for k, i in enumerate(want["overflow_to_sample_mapping"]) if cut[i] is not None]
    mine = [k for k, i in enumerate(got["overflow_to_sample_mapping"]) if cut[i] is not None]
    assert len(rows) == len(mine) > len(questions)  # long passages: several windows each
    for k, m in zip(rows, mine):
        assert got["input_ids"][m] == want["input_ids"][k]
        seq = want.sequence_ids(k)
        offsets = [tuple(o) if s == 1 else None for o, s in zip(want["offset_mapping"][k], seq)]
        assert got["offset_mapping"][m] == offsets
    long_q = [m for m, i in enumerate(got["overflow_to_sample_mapping"]) if i == len(questions) - 1]
    assert long_q and all(len(got["input_ids"][m]) <= 128 for m in long_q)
    assert sum(o is not None for o in got["offset_mapping"][long_q[0]]) > 40  # the passage keeps its room


def test_best_span_is_inside_the_passage_and_measured_against_no_answer():
    start = np.array([5.0, 0.0, 9.0, 1.0, 0.0])
    end = np.array([5.0, 0.0, 0.0, 8.0, 0.0])
    offsets = [None, None, (0, 4), (5, 9), (10, 12)]  # the first two tokens are the question's
    margin, s, e = best_spans(start, end, offsets, max_answer_tokens=30)
    assert (margin, s, e) == (9.0 + 8.0 - 10.0, 0, 9)
    assert best_spans(start, end, offsets, max_answer_tokens=1)[1:] == (0, 4)  # one token at most: [2, 2]


def test_calibration_picks_the_margin_that_maximises_expected_f1():
    # answerable: margins 5 (F1 100), 1 (F1 0: a wrong span); unanswerable: margins 2, -1
    t, f1 = calibrate([5.0, 1.0], [2.0, -1.0], [100.0, 0.0], share=0.5)
    assert 2.0 < t <= 5.0 and f1 == pytest.approx(75.0)  # answer the first, abstain on the other three
    t, f1 = calibrate([5.0, 1.0], [2.0, -1.0], [100.0, 0.0])  # reads without an answer are 10% by default
    assert 2.0 < t <= 5.0 and f1 == pytest.approx(0.9 * 50 + 0.1 * 100)
    # the share decides: two right answers, the second with a margin below an unanswerable read's
    t, _ = calibrate([5.0, 1.0], [2.0], [100.0, 100.0], share=0.5)
    assert t > 2.0  # abstaining weighs as much as answering: the second answer is given up
    t, f1 = calibrate([5.0, 1.0], [2.0], [100.0, 100.0], share=0.1)
    assert t <= 1.0 and f1 == pytest.approx(90.0)  # both answered, the rare unanswerable read answered too
    t, f1 = calibrate([None], [None], [0.0], share=0.5)  # nothing to answer with: abstaining is all there is
    assert f1 == pytest.approx(50.0) and np.isfinite(t)
    t, f1 = calibrate([3.0], [4.0], [0.0], share=0.5)  # every answer is wrong: a threshold above every margin
    assert t > 4.0 and np.isfinite(t) and f1 == pytest.approx(50.0)


def test_reading_examples_keep_the_dev_articles_out_and_add_no_answer_passages():
    dev = dev_articles(3)
    ex = build_reading_examples(None, ("en",), dev, negatives=0.5, seed=0)
    rows = dev_questions(("en",), dev, per_lang=5, distractors=2)
    # fewer where the article's other paragraphs hold the answer too ('Islam' in an article on Islamism)
    assert len(rows) == 5 and all(len(o) <= 2 for _, o in rows) and sum(len(o) == 2 for _, o in rows) >= 3
    for q, others in rows:  # a distractor never holds the answer
        assert all(q.context not in others and not any(t in o for t, _ in q.answers) for o in others)
    dev_q = {q.question for q, _ in dev_questions(("en",), dev)}
    assert dev_q and not dev_q & {e.question for e in ex}
    negatives = [e for e in ex if not e.answers]
    assert 0.3 < len(negatives) / (len(ex) - len(negatives)) < 0.7
    for e in ex:
        if e.answers:
            text, start = e.answers[0]
            assert e.context[start : start + len(text)] == text
        else:
            assert e.source.endswith(":negative")


def test_windows_that_cannot_hold_a_passage_are_refused():
    from samelang.core.models.reader import check_windows
    from samelang.training.reader import ReaderArgs

    check_windows(384, 128)
    with pytest.raises(ValueError, match="stride 128 must be below"):
        check_windows(128, 128)
    with pytest.raises(ValueError, match="stride"):
        ReaderArgs(out="x", max_length=96, stride=80)


def test_training_writes_a_calibrated_adapter_that_the_service_reader_loads(tiny_reader, tiny_models, samelang_home):
    w = load_file(tiny_reader / "adapter_model.safetensors")
    assert any("qa_outputs" in k for k in w) and max(abs(v).max() for k, v in w.items() if "lora_B" in k) > 0
    cfg = read_reader_config(tiny_reader)
    assert np.isfinite(cfg["threshold"]) and set(cfg["f1"]) == {"en", "zh"} and cfg["questions"] == 6
    assert (cfg["max_length"], cfg["stride"], cfg["passages"]) == (96, 32, 2)
    manifest = json.loads((tiny_reader / "samelang_manifest.json").read_text())
    assert manifest["kind"] == "extractive-reader-lora-adapter"
    assert manifest["base"] == str(tiny_models["xlmr-mean"].resolve())  # --base: any encoder a user brings
    card = (tiny_reader / "README.md").read_text()
    assert (
        "samelang train reader" in card
        and "--max-steps 3" in card
        and "calibrated for 10% of reads without an answer" in card
    )
    assert not (tiny_reader / "checkpoints").exists()
    sources = json.loads((tiny_reader / "training_args.json").read_text())["sources"]
    assert list(sources) == ["xquad"] and sources["xquad"]["questions"] > 0 < sources["xquad"]["no_answer"]
    assert f"| xquad | {sources['xquad']['questions']:,} | {sources['xquad']['no_answer']:,} |" in card

    reader = ExtractiveReader(tiny_reader, home=samelang_home)
    assert reader.threshold == cfg["threshold"] and (reader.max_length, reader.stride) == (96, 32)  # as calibrated
    passages = ["Denver beat Carolina 24-10 in Super Bowl 50.", "The game was played in Santa Clara, California."]
    spans = reader.spans("Where was the game played?", passages)
    assert len(spans) == 2 and spans[0].score >= spans[1].score
    for s in spans:
        assert passages[s.passage][s.start : s.end].strip() == s.text and s.text
    # the served model is the trained one: the logits of the adapter applied by peft itself, on torch
    # and on the ONNX graph the CPU default exports
    from peft import PeftModel
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    base = AutoModelForQuestionAnswering.from_pretrained(str(tiny_models["xlmr-mean"]), num_labels=2)  # its --base
    ref = PeftModel.from_pretrained(base, str(tiny_reader)).eval()
    batch = AutoTokenizer.from_pretrained(str(tiny_models["xlmr-mean"]))(["Where?"], [passages[1]])
    with torch.inference_mode():
        out = ref(**{k: torch.tensor(v) for k, v in batch.items()})
    want = torch.stack([out.start_logits, out.end_logits], -1)[0].numpy()
    on_torch = ExtractiveReader(tiny_reader, home=samelang_home, options=EngineOptions("fp32", "torch"))
    for served in (on_torch, reader):
        engine, _ = served._engine
        assert np.allclose(engine.run_tokens(batch["input_ids"])[0], want, atol=1e-3), engine.describe()
    assert reader.describe() == {"precision": "fp32", "backend": "onnx"}
    again = on_torch.spans("Where was the game played?", passages)
    assert [(a.text, a.passage) for a in again] == [(a.text, a.passage) for a in spans]
    assert [a.score for a in again] == pytest.approx([a.score for a in spans], abs=1e-2)
    forced = ExtractiveReader(tiny_reader, home=samelang_home, threshold=1e9)
    assert forced.read("Where was the game played?", passages) is None  # below the threshold: no answer
    best = ExtractiveReader(tiny_reader, home=samelang_home, threshold=-1e9).read("Where?", passages)
    assert isinstance(best, Span) and best.text
    with pytest.raises(ValueError, match="finite"):
        ExtractiveReader(tiny_reader, home=samelang_home, threshold=float("inf"))
    with pytest.raises(ValueError, match="no extractive reader"):  # a folder of another kind is refused
        ExtractiveReader(REPO_MODELS / "lamar-e5-small-v3", home=samelang_home)


def test_a_later_stage_continues_from_the_readers_weights_and_its_card_chains_the_commands(
    tiny_reader, samelang_home, tmp_path
):
    from samelang.training.reader import ReaderArgs, train_reader

    out = tmp_path / "stage2"
    args = ReaderArgs(out=out, init=tiny_reader, langs="en,zh", corpus=False, batch_size=4, max_steps=2, max_length=96,
                      stride=32, dev_per_lang=3, lr=1e-3, seed=1, device="cpu", home=samelang_home)  # fmt: skip
    train_reader(args, log=lambda *a: None)
    before, after = load_file(tiny_reader / "adapter_model.safetensors"), load_file(out / "adapter_model.safetensors")
    assert before.keys() == after.keys()  # the same adapter and head, trained on
    moved = [k for k in before if not np.allclose(before[k], after[k])]
    assert moved and all(("lora_" in k or "qa_outputs" in k) for k in moved)
    record = json.loads((out / "training_args.json").read_text())
    assert [r["steps"] for r in record["earlier"]] == [3] and record["earlier"][0]["out"] == str(tiny_reader)
    card = (out / "README.md").read_text()
    first, second = card.index("--max-steps 3"), card.index("--max-steps 2")
    assert first < second and f"--init {tiny_reader}" in card[second - 400 :] and "Stage 1: 3 steps" in card
    # a card written before the data table existed gets it from --calibrate-only, counted again
    counted = record.pop("sources")
    (out / "training_args.json").write_text(json.dumps(record))
    # (calibrated on English alone: the count is the recorded run's, English and Chinese)
    train_reader(args.model_copy(update={"calibrate_only": True, "langs": "en"}), log=lambda *a: None)
    assert json.loads((out / "training_args.json").read_text())["sources"] == counted  # the same examples
    assert f"| xquad | {counted['xquad']['questions']:,} |" in (out / "README.md").read_text()
    assert (
        json.loads((out / "samelang_manifest.json").read_text())["base"]
        == json.loads((tiny_reader / "samelang_manifest.json").read_text())["base"]
    )  # over its reader's own base
    with pytest.raises(ValueError, match="drop --base"):
        ReaderArgs(out=out, init=tiny_reader, base="elsewhere")
    with pytest.raises(ValueError, match="not a LoRA reader"):
        train_reader(ReaderArgs(out=tmp_path / "x", init=tmp_path, corpus=False, device="cpu", home=samelang_home))


def test_cross_language_examples_ask_in_one_language_and_answer_from_anothers_paragraph():
    from samelang.corpora import load_xquad
    from samelang.training.reader_data import cross_language_examples

    dev = dev_articles(3)
    out = cross_language_examples(("en", "zh", "de"), 0.5, seed=0, exclude_articles=dev)
    questions = {(q.lang, q.text) for q in load_xquad(["en", "zh", "de"], split="train").questions}
    assert 0.4 < len(out) / len(questions) < 0.6  # about half of the questions, each once
    for ex in out[:200]:
        (text, start), *_ = ex.answers
        assert ex.context[start : start + len(text)] == text and ex.source == "xquad-cross"
        assert (ex.lang, ex.question) in questions and ex.question not in ex.context
    paragraph_langs = {x: {p.text for p in load_xquad([x], split="train").paragraphs} for x in ("en", "zh", "de")}
    assert all(ex.context not in paragraph_langs[ex.lang] for ex in out)  # always another language's paragraph
    assert cross_language_examples(("en", "zh"), 0.0, seed=0) == []
    assert cross_language_examples(("en", "zh", "de"), 0.5, seed=0, exclude_articles=dev) == out  # seeded


def test_mined_no_answer_examples_take_the_first_mined_passage_without_the_answer():
    """Each drawn question is asked over the first passage the retriever ranked for it that holds none of its
    answers (a passage that holds one is passed over), labelled no answer; the draw is seeded."""
    from samelang.corpora import load_xquad
    from samelang.training.reader_data import mined_no_answer_examples

    dev = dev_articles(3)
    x = load_xquad(["en", "zh"], split="train")
    texts = {(p.lang, p.group): p.text for p in x.paragraphs}
    other = {q.lang: texts[(q.lang, q.group)] for q in x.questions if q.article == 0}  # a paragraph of article 0
    # the "retriever" ranks the gold paragraph first (it holds the answer), then a paragraph of article 0
    wrong = {f"xquad-{q.lang}-{q.id}": [texts[(q.lang, q.group)], other["zh" if q.lang == "en" else "en"]]
             for q in x.questions}  # fmt: skip
    out = mined_no_answer_examples(("en", "zh"), 0.5, 0, wrong, exclude_articles=dev)
    asked = [q for q in x.questions if q.article not in dev]
    assert 0.4 < len(out) / len(asked) < 0.6
    questions = {(q.lang, q.text): q for q in asked}
    for ex in out:
        q = questions[(ex.lang, ex.question)]
        assert ex.answers == () and ex.source == "xquad:mined-negative"
        assert ex.context == other["zh" if q.lang == "en" else "en"]  # the second: the first held the answer
    assert mined_no_answer_examples(("en", "zh"), 0.5, 0, wrong, exclude_articles=dev) == out
    assert mined_no_answer_examples(("en", "zh"), 0.0, 0, wrong) == []
    assert mined_no_answer_examples(("en", "zh"), 1.0, 0, {}) == []  # nothing mined, nothing added


def test_the_reader_mines_with_the_ranking_groups_list_and_adds_nothing_else(tmp_path, monkeypatch):
    """``--mined-negatives``: the mining retriever searched with the very queries and collection of the
    ranking groups (one cached list serves both); without it the examples are those of before."""
    from samelang.training import relevance_first
    from samelang.training.mining import Retriever
    from samelang.training.reader import ReaderArgs

    calls = []

    def fake_mine(queries, docs, retriever, home, depth, log):
        calls.append(([q.id for q in queries], [d.id for d in docs], retriever))
        by_lang = {}
        for d in docs:
            by_lang.setdefault(d.lang, []).append(d)
        return {q.id: [d.id for d in by_lang[q.lang] if d.metadata["key"] != q.key][:2] for q in queries}

    monkeypatch.setattr(relevance_first, "mine_negatives", fake_mine)
    dev, langs = dev_articles(3), ("en", "zh")
    args = dict(out=tmp_path / "r", corpus=False, langs="en,zh", home=tmp_path, mine_with="base+bm25=0.1")
    before = ReaderArgs(**args).examples(langs, dev)
    assert calls == []
    mined = ReaderArgs(**args, mined_negatives=0.5).examples(langs, dev, log=lambda *a: None)
    assert Counter(e for e in mined if e.source != "xquad:mined-negative") == Counter(before)  # the same draws
    added = [e for e in mined if e.source == "xquad:mined-negative"]
    assert added and all(e.answers == () for e in added)
    relevance_first.build_ranking_groups(None, tmp_path, Retriever("base", 0.1), langs=langs, exclude_articles=dev)
    assert calls[0][:2] == calls[1][:2] and calls[0][2] == Retriever("base", 0.1)
