"""The precision rule and its record: the default is the fastest precision within the
tolerance of fp32 on every metric; each device's choice is kept in inference.json, where the
service's ``precision=auto`` reads it."""

from __future__ import annotations

import json

from samelang.core.runtime.precision import EngineOptions, precision_device, resolve
from samelang.evaluation.precision import BIENCODER_METRICS, choose, markdown, write_inference_card


def rows(int8_loss: float, int8_speed: float = 2.0) -> list[dict]:
    return [
        {"precision": "fp32", "backend": "onnx", "max_r_norm": 90.0, "mono_same_ndcg10": 80.0, "passages_per_s": 1.0},
        {
            "precision": "int8", "backend": "onnx", "max_r_norm": 90.0 - int8_loss, "mono_same_ndcg10": 80.1,
            "passages_per_s": int8_speed,
        },
    ]  # fmt: skip


def test_fastest_within_tolerance_wins_and_fp32_is_always_admissible():
    assert choose(rows(0.29), BIENCODER_METRICS, "passages_per_s")["precision"] == "int8"
    r = rows(0.31)
    assert choose(r, BIENCODER_METRICS, "passages_per_s")["precision"] == "fp32"
    assert [x["within_tolerance"] for x in r] == [True, False] and r[1]["speedup_vs_fp32"] == 2.0
    assert abs(r[1]["max_loss_vs_fp32"] - 0.31) < 1e-9  # the worst metric counts, not the average
    assert choose(rows(0.1, int8_speed=0.5), BIENCODER_METRICS, "passages_per_s")["precision"] == "fp32"
    table = markdown(r, BIENCODER_METRICS, "passages_per_s", "fp32")
    assert "**fp32** (default)" in table and "+0.31" in table


def test_on_a_cpu_only_onnx_precisions_are_served():
    """bf16 runs on torch: serving it would bring torch and a second copy of the weights into the
    server, so on a CPU it is measured and shown but never chosen; on a GPU it is."""
    r = rows(0.0) + [dict(rows(0.0)[1], precision="bf16", backend="torch", passages_per_s=3.0)]
    assert choose(r, BIENCODER_METRICS, "passages_per_s")["precision"] == "int8"
    assert [x["servable"] for x in r] == [True, True, False]
    assert "bf16 (not served on CPU: torch)" in markdown(r, BIENCODER_METRICS, "passages_per_s", "int8")
    assert choose(r, BIENCODER_METRICS, "passages_per_s", on_gpu=True)["precision"] == "bf16"


def test_each_device_keeps_its_own_choice(tmp_path):
    cpu_rows = rows(0.1)
    choose(cpu_rows, BIENCODER_METRICS, "passages_per_s")
    here = precision_device("cpu")
    write_inference_card(tmp_path, cpu_rows, "int8", "cpu note", here)
    gpu_rows = [dict(r, precision=p) for r, p in zip(rows(0.0), ("fp32", "bf16"))]
    choose(gpu_rows, BIENCODER_METRICS, "passages_per_s")
    write_inference_card(tmp_path, gpu_rows, "bf16", "gpu note", "cuda")
    card = json.loads((tmp_path / "inference.json").read_text())
    assert card["default_precision"] == {here: "int8", "cuda": "bf16"}
    assert set(card["comparison"]) == {here, "cuda"} and card["note"][here] == "cpu note"
    assert resolve(EngineOptions(), "cpu", tmp_path).precision == "int8"
    assert resolve(EngineOptions(), "cuda", tmp_path).precision == "bf16"


def test_the_reader_is_read_on_the_dev_articles_as_answer_reads():
    """The reader's choice set: the dev articles' questions (never a test article), each over its
    gold paragraph, which holds one of its answers, then another of its article, which holds none."""
    from samelang.corpora import dev_articles, load_xquad
    from samelang.evaluation.precision import reader_questions

    asked = reader_questions(5)
    dev = {(q.lang, q.text) for q in load_xquad(split="train").questions if q.article in set(dev_articles())}
    assert len(asked) == 5 * 12 and {lang for _, lang, _, _ in asked} == {lang for lang, _ in dev}
    for question, lang, golds, passages in asked:
        assert (lang, question) in dev
        assert any(g in passages[0] for g in golds)
        assert len(passages) <= 2 and not any(g in p for g in golds for p in passages[1:])
    assert sum(len(p) == 2 for *_, p in asked) >= 50
    from samelang.corpora import XQUAD_LANGS
    from samelang.training.reader_data import dev_questions

    calibrated = dev_questions(XQUAD_LANGS, dev_articles(), per_lang=5)  # the trainer's calibration pairs
    assert [(q, p) for q, _, _, p in asked] == [(ex.question, [ex.context, *o[:1]]) for ex, o in calibrated]


def test_the_reader_gets_its_own_precision_record(tmp_path, tiny_reader, samelang_home):
    """``samelang eval precision --reader``: fp32 and int8 answer the same dev questions, each timed; the
    choice lands in the reader's own inference record, where the server's ``precision=auto`` reads it."""
    import shutil

    from samelang.core.models.reader import ExtractiveReader
    from samelang.evaluation.precision import PrecisionEvalOptions, PrecisionEvaluation

    reader = tmp_path / "reader"
    shutil.copytree(tiny_reader, reader)  # the session's reader keeps no record
    options = PrecisionEvalOptions(reranker="none", record_biencoder=False, reader=str(reader), precision=["int8"],
                                   reader_questions=2, repeats=1, card=True, out=tmp_path / "out",
                                   home=samelang_home)  # fmt: skip
    data = PrecisionEvaluation(options, log=lambda *a: None).run().data
    rows = data["reader_rows"]
    assert [r["precision"] for r in rows] == ["fp32", "int8"] and all(r["backend"] == "onnx" for r in rows)
    assert all(0 <= r["f1"] <= 100 and 0 <= r["em"] <= r["f1"] + 1e-9 and r["reads_per_s"] > 0 for r in rows)
    assert "biencoder_rows" not in data and "reranker_rows" not in data
    here = precision_device("cpu")
    record = json.loads((reader / "inference.json").read_text())
    assert record["default_precision"] == {here: data["reader_default"]}
    assert resolve(EngineOptions(), "cpu", reader).precision == data["reader_default"]
    assert ExtractiveReader(reader, home=samelang_home).describe()["precision"] == data["reader_default"]
    assert "## Inference precision" in (reader / "README.md").read_text()
