"""Two-step CPU runs of both LAMAR stages on the real base model with LoRA: they finish, change
the weights, write adapter + head, card, arguments and manifest, and the service's
CrossEncoder loader scores exactly as the trained module does."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from samelang.training.lamar import RerankerArgs, RerankerModule, train_reranker


@pytest.fixture(scope="module")
def stages(tmp_path_factory, base_model_path, samelang_home):
    root = tmp_path_factory.mktemp("lamar")
    common = dict(langs="en,zh", batch_size=2, max_steps=2, max_length=48, dev_questions=0, device="cpu",
                  home=samelang_home)  # fmt: skip
    s1 = RerankerArgs(out=root / "stage1", stage=1, n_sampled=1, **common)
    train_reranker(s1, log=lambda *a: None)
    # stage 2's own --teacher is unused (it distils nothing): its card names the one stage 1 distilled
    s2 = RerankerArgs(out=root / "stage2", stage=2, init=str(root / "stage1"), lr=1e-2, teacher="unused", **common)
    train_reranker(s2, log=lambda *a: None)
    return s1, s2


def test_both_stages_train_and_save(stages):
    s1, s2 = stages
    w1, w2 = load_file(s1.out / "adapter_model.safetensors"), load_file(s2.out / "adapter_model.safetensors")
    lora_b = [v for k, v in w1.items() if "lora_B" in k]
    assert lora_b and max(abs(v).max() for v in lora_b) > 0  # LoRA B starts at zero: non-zero means trained
    heads = [k for k in w1 if "classifier" in k or "pooler" in k]
    assert len(heads) == 4  # the new pooler and head travel with the adapter
    assert w1.keys() == w2.keys() and any(not np.array_equal(w1[k], w2[k]) for k in w1)  # stage 2 moved on
    h1 = json.loads((s1.out / "history.json").read_text())
    h2 = json.loads((s2.out / "history.json").read_text())
    assert [h["step"] for h in h1] == [1, 2] and all(h["distill"] > 0 for h in h1)
    assert all(h["rank"] > 0 and h["lc"] > 0 and h["loss"] == pytest.approx(h["rank"] + h["lc"]) for h in h2)
    targs = json.loads((s2.out / "training_args.json").read_text())
    assert targs["stage"] == 2 and targs["n_instances"] > 0 and targs["lambda_lc"] == 2.0
    assert json.loads((s2.out / "samelang_manifest.json").read_text())["kind"] == "cross-encoder-lora-adapter"
    card = (s2.out / "README.md").read_text()
    assert "samelang train reranker --stage 2" in card and f"--init {s1.out}" in card
    # the recipe starts with the stage-1 command that built --init (read from its training_args.json)
    recipe = card.split("```bash\n")[1].split("```")[0].splitlines()
    assert recipe[0].startswith("samelang train reranker --stage 1") and f"--out {s1.out}" in recipe[0]
    assert "--max-steps 2" in recipe[0] and recipe[1].startswith("samelang train reranker --stage 2")
    assert f"Stage-1 teacher: `{s1.teacher}`" in card and s1.teacher != s2.teacher
    assert not (s2.out / "checkpoints").exists()


def test_service_loader_scores_like_the_trained_module(stages, samelang_home):
    from samelang.core.models.cross_encoder import CrossEncoderReranker

    _, s2 = stages
    module = RerankerModule(RerankerArgs(out=s2.out, stage=2, init=str(s2.out), max_length=48), samelang_home)
    query = "Wie viele Punkte gab die Verteidigung der Panthers ab?"
    docs = ["The Panthers defense gave up just 308 points.", "黑豹队的防守只丢了308分。", "Paris is in France."]
    with torch.no_grad():
        want = torch.sigmoid(module.eval()([query] * 3, docs)).numpy()
    got = CrossEncoderReranker(s2.out, max_length=48, home=samelang_home).score(query, docs)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_ablation_table_reads_the_training_runs(stages):
    from samelang.evaluation.reranker import markdown_ablation, training_summary

    s1, s2 = stages
    runs = {"stage1": training_summary(s1.out), "stage2": training_summary(s2.out), "ref": {}}
    assert runs["stage1"]["stage"] == 1 and runs["stage1"]["steps"] == 2 and runs["stage2"]["objective"] == "full"
    row = {
        "oracle": {"ndcg_at_1": 90.0, "per_lang": {"en": {"ndcg_at_1": 80.0}, "zh": {"ndcg_at_1": 100.0}}},
        "retrieved": {"ndcg_at_1": 70.0, "ndcg_at_10": 75.0},
        "mono_same": {"ndcg_at_10": 88.0},
    }
    table = markdown_ablation({k: row for k in runs}, runs).splitlines()
    assert len(table) == 5
    assert "| stage1 | stage 1 (teacher `cosine`) | 90.00 | 80.00 (en) |" in table[2] and "| 2 x 2 |" in table[2]
    assert "stage 1 + 2: L_rank + 2.0 L_LC" in table[3] and "2 x 2 groups" in table[3]
    assert table[4].startswith("| ref | - |")


def test_arguments_are_checked(tmp_path):
    """Checked where they are declared; on the command line each error names its flag."""
    with pytest.raises(ValueError, match="(?s)stage.*less than or equal to 2"):
        RerankerArgs(out=tmp_path, stage=3)
    with pytest.raises(ValueError, match="--init"):
        RerankerArgs(out=tmp_path, stage=2)
    with pytest.raises(ValueError, match="(?s)objective.*'full', 'no-lc' or 'no-rank'"):
        RerankerArgs(out=tmp_path, stage=2, init="x", objective="nope")


def test_the_relevance_stage_trains_on_the_corpus_views(tmp_path, fake_corpus_store, samelang_home):
    (fake_corpus_store.root / "contamination.json").write_text('{"dropped": {}}')
    args = RerankerArgs(
        out=tmp_path / "stage0", stage=0, corpora=fake_corpus_store.root, hold_out="arcd", langs="en,zh",
        negatives_per_query=2, batch_size=3, max_steps=2, max_length=48, dev_questions=0, device="cpu",
        home=samelang_home,
    )  # fmt: skip
    said = []
    train_reranker(args, log=said.append)
    history = json.loads((args.out / "history.json").read_text())
    assert [h["step"] for h in history] == [1, 2] and all(h["relevance"] > 0 for h in history)
    assert any("relevance groups:" in s and "arcd" in s for s in said)
    assert "relevance stage" in (args.out / "README.md").read_text()
    # stage 1 distils it: a relevance model is a CrossEncoder folder the teachers take
    assert json.loads((args.out / "training_args.json").read_text())["stage"] == 0


def test_a_reranker_that_keeps_its_first_layers_is_served_with_them(tmp_path, tiny_models, samelang_home):
    from samelang.core.models.cross_encoder import CrossEncoderReranker

    common = dict(langs="en,zh", batch_size=2, max_steps=1, max_length=48, dev_questions=0, device="cpu",
                  home=samelang_home)  # fmt: skip
    base = tiny_models["xlmr-seqcls"]  # two layers: the first one kept
    s1 = RerankerArgs(out=tmp_path / "s1", stage=1, n_sampled=1, layers=1, init=str(base), **common)
    train_reranker(s1, log=lambda *a: None)
    s2 = RerankerArgs(out=tmp_path / "s2", stage=2, init=str(s1.out), lr=1e-2, **common)
    train_reranker(s2, log=lambda *a: None)
    for out in (s1.out, s2.out):  # the second stage keeps the layers its --init kept
        assert json.loads((out / "samelang_manifest.json").read_text())["base_layers"] == 1
    module = RerankerModule(RerankerArgs(out=s2.out, stage=2, init=str(s2.out), max_length=48), samelang_home)
    assert module.layers == 1 and len(module.model.base_model.model.base_model.encoder.layer) == 1
    query, docs = "Wer war der erste Direktor?", ["Henry Cole was the first director.", "Paris is in France."]
    with torch.no_grad():
        want = torch.sigmoid(module.eval()([query] * 2, docs)).numpy()
    served = CrossEncoderReranker(s2.out, max_length=48, home=samelang_home)
    np.testing.assert_allclose(served.score(query, docs), want, atol=1e-5)
    with pytest.raises(ValueError, match="keeps 1 layers"):
        RerankerModule(RerankerArgs(out=tmp_path / "x", stage=2, init=str(s2.out), layers=2), samelang_home)


def test_the_recipe_relevance_then_stage_1_it_teaches_then_stage_2_with_corpus_groups(
    tmp_path, fake_corpus_store, samelang_home, tiny_models
):
    """Round 4's recipe at toy size, over a tiny XLM-R cross-encoder (the plumbing is the same for any base,
    e5-small's own stages are the fixture above): the relevance stage's adapter is stage 1's teacher (its
    English scores, loaded as the service loads it) and starting point; stage 2 adds groups from the corpus's
    parallel passages (``--ict-groups``) to the XQuAD ones."""
    from samelang.corpora.views import load_views

    digests = load_views(fake_corpus_store, require_filter=False).digests
    (fake_corpus_store.root / "contamination.json").write_text(json.dumps({"dropped": {}, "sources": digests}))
    common = dict(langs="en,zh", batch_size=2, max_steps=1, max_length=48, dev_questions=0, device="cpu",
                  home=samelang_home, corpora=fake_corpus_store.root)  # fmt: skip
    s0 = RerankerArgs(out=tmp_path / "s0", stage=0, init=str(tiny_models["xlmr-seqcls"]), negatives_per_query=1,
                      **common)  # fmt: skip
    train_reranker(s0, log=lambda *a: None)
    s1 = RerankerArgs(out=tmp_path / "s1", stage=1, init=str(s0.out), teacher=str(s0.out), n_sampled=1, **common)
    train_reranker(s1, log=lambda *a: None)
    said = []
    s2 = RerankerArgs(out=tmp_path / "s2", stage=2, init=str(s1.out), ict_groups=6, **common)
    train_reranker(s2, log=said.append)
    assert any("coherence groups:" in s and "6 from the corpus" in s for s in said)
    (step,) = json.loads((s2.out / "history.json").read_text())
    assert step["rank"] > 0 and step["lc"] > 0
    card = (s2.out / "README.md").read_text()
    assert "--ict-groups 6" in card and f"--teacher {s0.out}" in card
