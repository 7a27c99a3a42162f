"""What the repository ships as a reranker: the last stage of a LAMAR run, never a starting point."""

from __future__ import annotations

import json

from samelang.core import catalogue


def test_only_finished_rerankers_are_shipped(tmp_path, monkeypatch):
    def adapter(name, stage=None, head=True):
        d = tmp_path / name
        d.mkdir()
        cfg = {"peft_type": "LORA", "modules_to_save": ["classifier", "pooler"] if head else None}
        (d / "adapter_config.json").write_text(json.dumps(cfg))
        if stage is not None:
            (d / "training_args.json").write_text(json.dumps({"stage": stage}))

    adapter("relevance", stage=0)  # the relevance stage: stage 1's teacher and starting point
    adapter("stage1", stage=1)  # stage 2's starting point
    adapter("lamar", stage=2)
    adapter("older")  # no training_args.json: an older finished run
    adapter("biencoder", head=False)  # a bi-encoder adapter saves no head
    monkeypatch.setattr(catalogue, "REPO_MODELS", tmp_path)
    assert [p.name for p in catalogue.shipped_cross_encoders()] == ["lamar", "older"]
