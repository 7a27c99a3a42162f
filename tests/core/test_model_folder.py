"""The model folder (samelang/core/model_folder.py): what a folder is, its records, its card sections,
and the one loader that merges an adapter onto the base model without a misleading load report."""

from __future__ import annotations

import json

from samelang.core import model_folder
from samelang.core.catalogue import ALIGNED_BIENCODER, LAMAR_RERANKER
from samelang.core.runtime.precision import EngineOptions, cpu_class, precision_device, resolve

EVAL = "## Evaluation (XQuAD test articles)"


def test_card_section_is_replaced_and_the_others_kept(tmp_path):
    (tmp_path / model_folder.CARD).write_text(f"# m\n\nintro\n\n{EVAL}\n\nold table\n\n## Ablation\n\nkept\n")
    model_folder.write_card_section(tmp_path, EVAL, "new table\n")
    text = (tmp_path / model_folder.CARD).read_text()
    assert "old table" not in text and text.count(EVAL) == 1
    assert text.index("intro") < text.index("new table") < text.index("## Ablation\n\nkept")
    assert model_folder.read_card_section(tmp_path, EVAL) == "new table\n"
    assert model_folder.read_card_section(tmp_path, "## Ablation") == "kept\n"
    # a new section goes after the others; the one before it is untouched
    model_folder.write_card_section(tmp_path, "## Inference precision", "fp32\n")
    text = (tmp_path / model_folder.CARD).read_text()
    assert text.index("new table") < text.index("kept") < text.index("## Inference precision\n\nfp32\n")
    assert model_folder.read_card_section(tmp_path, "## Missing") is None


def test_card_section_starts_a_missing_card(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    model_folder.write_card_section(fresh, EVAL, "t\n")
    assert (fresh / model_folder.CARD).read_text() == f"# fresh\n\n{EVAL}\n\nt\n"


def test_manifest_round_trip_and_fingerprint(tmp_path):
    assert model_folder.read_manifest(tmp_path) is None
    manifest = {"name": "m", "kind": "lora-adapter", "source_sha256": "a" * 64, "adapter_sha256": "b" * 64}
    model_folder.write_manifest(tmp_path, manifest)
    assert model_folder.read_manifest(tmp_path) == manifest
    # the fingerprint reads the manifest's hashes only: the same hashes, the same identity
    other = tmp_path / "other"
    other.mkdir()
    model_folder.write_manifest(other, {**manifest, "name": "renamed", "created": "later"})
    assert model_folder.model_fingerprint(tmp_path) == model_folder.model_fingerprint(other)
    model_folder.write_manifest(other, {**manifest, "adapter_sha256": "c" * 64})
    assert model_folder.model_fingerprint(tmp_path) != model_folder.model_fingerprint(other)


def test_the_shipped_models_are_adapters():
    for path in (ALIGNED_BIENCODER, LAMAR_RERANKER):
        assert model_folder.is_adapter(path) and model_folder.is_model_folder(path)
        assert model_folder.read_manifest(path)["kind"].endswith("lora-adapter")
    # the reranker saves its trained head with the adapter; the bi-encoder needs none
    assert set(model_folder.adapter_saved_modules(LAMAR_RERANKER)) == {"classifier", "pooler"}
    assert model_folder.adapter_saved_modules(ALIGNED_BIENCODER) == ()


def test_base_model_is_a_full_checkpoint(base_model_path):
    assert model_folder.is_model_folder(base_model_path) and not model_folder.is_adapter(base_model_path)
    assert model_folder.read_manifest(base_model_path)["name"] == "multilingual-e5-small"


def test_inference_record_round_trip(tmp_path):
    here = precision_device("cpu")  # cpu:<this machine's class>
    other = "cpu:x86-avx2" if here != "cpu:x86-avx2" else "cpu:x86-amx"
    assert model_folder.read_inference(tmp_path) == {} and model_folder.recorded_precision(tmp_path, here) is None
    rows = [{"precision": "fp32"}, {"precision": "int8"}]
    model_folder.record_precision(tmp_path, other, "int8", rows, "other note")
    assert resolve(EngineOptions(), "cpu", tmp_path).precision == "fp32"  # measured on another class: not here
    model_folder.record_precision(tmp_path, here, "int8", rows, "cpu note")
    model_folder.record_precision(tmp_path, "cuda", "bf16", rows[:1], "gpu note")
    record = model_folder.read_inference(tmp_path)
    assert record["default_precision"] == {other: "int8", here: "int8", "cuda": "bf16"}
    assert record["comparison"] == {other: rows, here: rows, "cuda": rows[:1]}
    assert record["note"] == {other: "other note", here: "cpu note", "cuda": "gpu note"}
    assert model_folder.recorded_precision(tmp_path, "cuda") == "bf16"
    assert resolve(EngineOptions(), "cpu", tmp_path).precision == "int8"  # what precision=auto reads


def test_inference_record_upgrades_the_first_format(tmp_path):
    first = {"default_precision": {"cpu": "fp32"}, "comparison": [{"precision": "fp32"}], "note": "old"}
    (tmp_path / model_folder.INFERENCE).write_text(json.dumps(first))
    model_folder.record_precision(tmp_path, "cuda", "fp16", [], "new")
    record = model_folder.read_inference(tmp_path)
    assert record["default_precision"] == {"cpu:x86-avx2": "fp32", "cuda": "fp16"}  # measured on an AVX2 EPYC
    assert record["comparison"] == {"cpu:x86-avx2": [{"precision": "fp32"}], "cuda": []}
    assert record["note"] == {"cpu:x86-avx2": "old", "cuda": "new"}


def test_a_shipped_record_holds_only_for_the_model_it_names(tmp_path, monkeypatch, base_model_path):
    """The base model is converted under $SAMELANG_HOME on each machine; its record ships in models/."""
    import shutil

    converted = tmp_path / "home" / base_model_path.name  # a converted folder without a record of its own
    converted.mkdir(parents=True)
    shutil.copy(base_model_path / "samelang_manifest.json", converted)
    shipped = tmp_path / "shipped"
    (shipped / converted.name).mkdir(parents=True)
    record = {
        "default_precision": {precision_device("cpu"): "int8"},
        "fingerprint": model_folder.model_fingerprint(converted),
    }
    (shipped / converted.name / model_folder.INFERENCE).write_text(json.dumps(record))
    monkeypatch.setattr(model_folder, "SHIPPED_RECORDS", shipped)
    assert model_folder.recorded_precision(converted, precision_device("cpu")) == "int8"
    record["fingerprint"] = "another model"
    (shipped / converted.name / model_folder.INFERENCE).write_text(json.dumps(record))
    assert model_folder.recorded_precision(converted, precision_device("cpu")) is None


def test_cpu_classes():
    assert cpu_class({"avx2", "avx512f", "avx512_vnni", "amx_int8", "amx_tile", "amx_bf16"}) == "x86-amx"
    assert cpu_class({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}) == "x86-avx512-vnni"
    assert cpu_class({"avx2", "avx_vnni"}) == "x86-avx-vnni"
    assert cpu_class({"avx2", "fma"}) == "x86-avx2"  # the AMD EPYC the first records were measured on
    assert precision_device("cuda:0") == "cuda" and precision_device("cpu").startswith("cpu:")


def test_a_missing_section_goes_before_the_anchor_and_is_then_replaced_in_place(tmp_path):
    """The README's served-defaults table is kept with the same function as the cards' sections."""
    from samelang.core.model_folder import replace_section

    readme = tmp_path / "README.md"
    readme.write_text("# p\n\nintro\n\n## Data\n\nlicences\n")
    replace_section(readme, "## Served", "table v1\n", before="## Data")
    assert readme.read_text() == "# p\n\nintro\n\n## Served\n\ntable v1\n\n## Data\n\nlicences\n"
    replace_section(readme, "## Served", "table v2\n", before="## Data")
    assert readme.read_text() == "# p\n\nintro\n\n## Served\n\ntable v2\n\n## Data\n\nlicences\n"
