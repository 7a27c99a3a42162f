"""``--data FILE``: a user's own pairs (JSONL, JSON, Parquet, CSV, TSV, a ``datasets`` folder) and SQuAD
file, read the same whatever the format, refused before any training step with the file, row and column
named, and trained on by each of the three trainers (the real base model, a few CPU steps)."""

from __future__ import annotations

import csv
import json

import pytest
from safetensors.numpy import load_file

from samelang.training.user_data import DataFileError, fill_negatives, key_of, read_pairs, read_squad

ROWS = [
    {"anchor": "Where is the Rhine?", "positive": "Der Rhein fließt durch Basel.", "negative": "Paris est en France.",
     "lang": "en"},
    {"anchor": "维多利亚和阿尔伯特博物馆在哪里？", "positive": "The V&A is in London.",
     "negatives": ["Die Donau ist lang.", "El Nilo es largo."]},
    {"anchor": "Who wrote Faust?", "positive": "Goethe schrieb den Faust.", "negative_1": "Берлин — столица.",
     "negative_2": "Roma è in Italia.", "lang": "en"},
    {"anchor": "What is the capital of Spain?", "positive": "Madrid es la capital de España.", "lang": "en"},
]  # fmt: skip


def _write(path, rows):
    """``rows`` in the format ``path``'s suffix names (a folder: ``datasets.save_to_disk``)."""
    columns = list(dict.fromkeys(c for r in rows for c in r))
    if path.suffix in (".jsonl", ".json"):
        text = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
        path.write_text(text if path.suffix == ".jsonl" else json.dumps(rows, ensure_ascii=False))
    elif path.suffix in (".csv", ".tsv"):
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, columns, delimiter="\t" if path.suffix == ".tsv" else ",")
            w.writeheader()
            w.writerows({k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for k, v in r.items()}
                        for r in rows)  # fmt: skip
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows]), path)
    else:
        import datasets

        datasets.Dataset.from_list([{c: r.get(c) for c in columns} for r in rows]).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("name", ["pairs.jsonl", "pairs.json", "pairs.csv", "pairs.tsv", "pairs.parquet", "pairs_ds"])
def test_every_format_reads_the_same_groups(tmp_path, name):
    groups = read_pairs(_write(tmp_path / name, ROWS))
    assert [g.query for g in groups] == [r["anchor"] for r in ROWS]
    assert [len(g.docs) for g in groups] == [2, 3, 3, 1]
    assert groups[1].docs == ("The V&A is in London.", "Die Donau ist lang.", "El Nilo es largo.")
    assert groups[2].docs[1:] == ("Берлин — столица.", "Roma è in Italia.")  # negative_N in their order
    # a given lang is taken as it is; a missing one is detected, as the service detects a query's
    assert groups[0].lang == "en" and groups[0].doc_langs == ("en", "en")
    assert groups[1].lang == "zh" and groups[1].doc_langs == ("en", "de", "es")
    assert groups[0].keys == (key_of(ROWS[0]["positive"]), key_of(ROWS[0]["negative"]))
    assert {g.source for g in groups} == {"data"}


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"anchor": "q", "positive": ""}, "row 2, column 'positive': needs a non-empty text, got nothing"),
        ({"anchor": 3, "positive": "p"}, "row 2, column 'anchor': needs a non-empty text, got int"),
        ({"anchor": "q", "postive": "p"}, "row 2: unknown column 'postive'"),
        ({"anchor": "q", "positive": "p", "negatives": "nope"}, "row 2, column 'negatives': a list of texts"),
        ({"anchor": "q", "positive": "p", "negatives": ["ok", ""]}, "row 2, column 'negatives[1]'"),
        ({"anchor": "q", "positive": "p", "lang": "English"}, "row 2, column 'lang': an ISO 639-1 code"),
        ({"anchor": "q", "positive": "p", "negatives": ["n"] * 65}, "row 2: 65 negatives; at most 64"),
    ],
)
def test_a_malformed_row_is_named_with_its_column(tmp_path, row, says):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataFileError) as e:
        read_pairs(path)
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value)


def test_files_that_are_not_tables_are_refused_clearly(tmp_path):
    (tmp_path / "broken.jsonl").write_text('{"anchor": "q", "positive": "p"}\n{"anchor": \n')
    with pytest.raises(DataFileError, match=r"broken.jsonl: row 2: not valid JSON"):
        read_pairs(tmp_path / "broken.jsonl")
    (tmp_path / "x.xlsx").write_text("")
    with pytest.raises(DataFileError, match=r"unknown format .xlsx; use .jsonl"):
        read_pairs(tmp_path / "x.xlsx")
    with pytest.raises(DataFileError, match="no such file"):
        read_pairs(tmp_path / "missing.jsonl")
    (tmp_path / "empty.csv").write_text("anchor,positive\n")
    with pytest.raises(DataFileError, match="no rows"):
        read_pairs(tmp_path / "empty.csv")
    import datasets

    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[3:])})
    splits.save_to_disk(str(tmp_path / "splits"))
    with pytest.raises(DataFileError, match=r"holds the splits \['train'\]; pass one split's folder"):
        read_pairs(tmp_path / "splits")


def test_rows_without_negatives_get_other_rows_positives_never_their_own_meaning():
    import dataclasses

    from samelang.training.relevance_first import RankingGroup

    groups = [RankingGroup(f"q{i}", "en", (f"p{i % 3}",), ("en",), (key_of(f"p{i % 3}"),), "data") for i in range(6)]
    filled = fill_negatives(groups, 2, seed=0)
    assert [len(g.docs) for g in filled] == [3] * 6
    for g in filled:
        assert len(set(g.keys)) == 3 and g.docs[0] not in g.docs[1:]  # p0 is never a negative of a p0 row
    assert fill_negatives(groups, 2, seed=0) == filled  # seeded
    full = dataclasses.replace(groups[0], docs=("p0", "a", "b"), doc_langs=("en",) * 3, keys=("k", "a", "b"))
    assert fill_negatives([full, *groups[1:]], 2, seed=0)[0] == full  # enough already: left as it is


SQUAD = {
    "data": [
        {"title": "Rhein", "paragraphs": [
            {"context": "Der Rhein fließt durch Basel und Köln.", "qas": [
                {"id": "a", "question": "Durch welche Stadt fließt der Rhein?",
                 "answers": [{"text": "Basel", "answer_start": 23}]},
                {"id": "b", "question": "Wie lang ist der Nil?", "answers": [], "is_impossible": True},
            ]},
            {"context": "Köln hat einen Dom.", "qas": [
                {"id": "c", "question": "Was hat Köln?", "answers": [{"text": "einen Dom", "answer_start": 9}],
                 "lang": "de"},
            ]},
        ]},
    ]
}  # fmt: skip


def test_squad_reads_answers_no_answer_questions_and_each_articles_other_passages(tmp_path):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(SQUAD, ensure_ascii=False))
    examples, others = read_squad(path)
    assert [(e.question[:5], e.answers, e.lang, e.source) for e in examples] == [
        ("Durch", (("Basel", 23),), "de", "data"),
        ("Wie l", (), "de", "data"),
        ("Was h", (("einen Dom", 9),), "de", "data"),
    ]
    assert others[0] == ["Köln hat einen Dom."] and others[2] == ["Der Rhein fließt durch Basel und Köln."]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=3),
         "question 1 (data[0].paragraphs[0].qas[0]).answers[0], field 'answer_start': 3 does not point at 'Basel'"),
        (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].pop("question"),
         "question 3 (data[0].paragraphs[1].qas[0]), field 'question': needs str, got nothing"),
        (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].update(answers=[]),
         "question 3 (data[0].paragraphs[1].qas[0]), field 'answers': empty; mark"),
        (lambda d: d["data"][0]["paragraphs"][1].update(context=7), "data[0].paragraphs[1], field 'context'"),
        (lambda d: d.pop("data"), "top level, field 'data': needs list"),
    ],
)  # fmt: skip
def test_a_malformed_squad_question_is_named(tmp_path, edit, says):
    doc = json.loads(json.dumps(SQUAD))
    edit(doc)
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(doc, ensure_ascii=False))
    with pytest.raises(DataFileError) as e:
        read_squad(path)
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value)


# ----------------------------------------------------------------------------- the trainers


def test_the_biencoder_trains_on_the_users_pairs_alone(tmp_path, base_model_path):
    from samelang.training.biencoder import BiencoderArgs, train_biencoder

    data = _write(tmp_path / "pairs.parquet", ROWS)
    out = tmp_path / "mine"
    args = BiencoderArgs(out=out, base=str(base_model_path), data=data, data_only=True, batch_size=2, max_steps=2,
                         max_length=32, dev_n_articles=0, device="cpu")  # fmt: skip
    said = []
    train_biencoder(args, log=said.append)
    history = json.loads((out / "history.json").read_text())
    terms = [sorted(k for k in h if k not in ("step", "lr", "seconds", "on")) for h in history]
    assert terms == [["loss", "nce_data"]] * 2
    assert all(h["nce_data"] > 0 for h in history)
    record = json.loads((out / "training_args.json").read_text())
    assert record["n_pairs"] == 4 and record["n_triplets"] == 0 and "--data-only" in (out / "README.md").read_text()
    assert any("--data: 4 pairs" in s and "(alone)" in s for s in said)
    lora_b = [v for k, v in load_file(out / "adapter_model.safetensors").items() if "lora_B" in k]
    assert max(abs(v).max() for v in lora_b) > 0  # trained
    # mixed: the seed's terms and the user's in one step
    mixed = args.model_copy(update={"out": tmp_path / "mixed", "data_only": False, "langs": "de", "per_lang": 2,
                                    "max_steps": 1})  # fmt: skip
    train_biencoder(mixed, log=lambda *a: None)
    (step,) = json.loads((mixed.out / "history.json").read_text())
    assert step["loss"] == pytest.approx(step["jsd"] + step["nce"] + step["nce_data"], rel=1e-5)
    with pytest.raises(ValueError, match="--data-only trains on --data FILE alone: drop --corpus"):
        BiencoderArgs(out=out, data=data, data_only=True, corpus=True)


def test_a_malformed_file_fails_before_the_first_step(tmp_path, base_model_path, samelang_home):
    from samelang.training.biencoder import BiencoderArgs, train_biencoder
    from samelang.training.lamar import RerankerArgs, train_reranker

    bad = tmp_path / "bad.csv"
    bad.write_text("anchor,positive\nq1,p1\nq2,\n")
    common = dict(data=bad, data_only=True, max_steps=1, device="cpu")
    with pytest.raises(DataFileError, match=r"bad.csv: row 2, column 'positive'"):
        train_biencoder(BiencoderArgs(out=tmp_path / "b", base=str(base_model_path), **common), log=lambda *a: None)
    with pytest.raises(DataFileError, match=r"bad.csv: row 2, column 'positive'"):
        train_reranker(RerankerArgs(out=tmp_path / "r", stage=0, home=samelang_home, **common), log=lambda *a: None)
    assert not (tmp_path / "b").exists() and not (tmp_path / "r").exists()  # nothing trained, nothing written


def test_the_reranker_relevance_stage_trains_on_the_users_pairs(tmp_path, samelang_home):
    from samelang.training.lamar import RerankerArgs, train_reranker

    data = _write(tmp_path / "pairs.jsonl", ROWS)
    args = RerankerArgs(out=tmp_path / "r0", stage=0, data=data, data_only=True, negatives_per_query=2, batch_size=2,
                        max_steps=2, max_length=48, dev_questions=0, device="cpu", home=samelang_home)  # fmt: skip
    said = []
    train_reranker(args, log=said.append)
    history = json.loads((args.out / "history.json").read_text())
    assert [h["step"] for h in history] == [1, 2] and all(h["relevance"] > 0 for h in history)
    assert json.loads((args.out / "training_args.json").read_text())["n_instances"] == 4
    assert any("the user's pairs in" in s and "alone" in s for s in said)
    assert f"the user's pairs in `{data}` alone" in (args.out / "README.md").read_text()
    with pytest.raises(ValueError, match="--data-only trains the relevance stage"):
        RerankerArgs(out=tmp_path / "x", stage=1, data=data, data_only=True)


def test_the_reader_trains_on_a_squad_file(tmp_path, tiny_models, samelang_home):
    from samelang.training.reader import ReaderArgs, train_reader

    path = tmp_path / "squad.json"
    path.write_text(json.dumps(SQUAD, ensure_ascii=False))
    args = ReaderArgs(out=tmp_path / "reader", base=str(tiny_models["xlmr-mean"]), data=path, data_only=True,
                      langs="en,de", batch_size=2, max_steps=2,
                      max_length=64, stride=16, dev_per_lang=2, lr=1e-3, device="cpu", home=samelang_home)  # fmt: skip
    train_reader(args, log=lambda *a: None)
    record = json.loads((args.out / "training_args.json").read_text())
    assert record["sources"] == {"data": {"questions": 3, "no_answer": record["sources"]["data"]["no_answer"]}}
    assert record["n_instances"] == 3 + record["sources"]["data"]["no_answer"] and record["steps"] == 2
    assert f"the user's SQuAD file `{path}` alone" in (args.out / "README.md").read_text()
