"""Loading a model folder into sentence-transformers (samelang/core/models/loading.py): transformers'
load reports explained in one line, or shown when something is not explained."""

from __future__ import annotations

import logging

from samelang.core.catalogue import LAMAR_RERANKER
from samelang.core.models import loading

REPORT = (
    "BertForSequenceClassification LOAD REPORT from: /x\n"
    "Key                      | Status  | \n"
    "-------------------------+---------+-\n"
    "classifier.bias          | MISSING | \n"
    "bert.pooler.dense.bias   | MISSING | \n"
    "bert.encoder.layer.{0, 1}.output.dense.weight | UNEXPECTED | \n"
)


def test_load_report_rows_are_explained_or_reported(caplog):
    covered = {"classifier": "from the adapter's saved modules", "pooler": "from the adapter's saved modules"}
    expected = REPORT.rsplit("bert.encoder", 1)[0]
    with caplog.at_level(logging.WARNING, logger="samelang"):
        notes = loading._explain("m", [expected], covered)
    assert notes == ["classifier+pooler from the adapter's saved modules"] and not caplog.records
    with caplog.at_level(logging.WARNING, logger="samelang"):
        loading._explain("m", [REPORT], covered)  # an unexpected weight is still shown, with the report
    assert "bert.encoder.layer.{0, 1}.output.dense.weight" in caplog.text and "LOAD REPORT" in caplog.text
    with caplog.at_level(logging.WARNING, logger="samelang"):
        caplog.clear()
        loading._explain("m", [expected], {"pooler": "unused"})  # a head the adapter does not save
    assert "classifier.bias" in caplog.text


def test_adapter_loads_quietly_with_one_info_line(samelang_home, caplog, capfd):
    from samelang.core.models.cross_encoder import load_cross_encoder

    with caplog.at_level(logging.INFO, logger="samelang"):
        model = load_cross_encoder(LAMAR_RERANKER, home=samelang_home)
    out, err = capfd.readouterr()
    assert "LOAD REPORT" not in out + err and "MISSING" not in out + err and "Consider training" not in out + err
    lines = [r.getMessage() for r in caplog.records if r.name == "samelang"]
    assert lines == [
        "lamar-e5-small: base multilingual-e5-small + LoRA adapter (r=16) merged; "
        "classifier+pooler from the adapter's saved modules"
    ]
    assert not model.training
