"""A 2-step CPU training run of the real base model with LoRA: it finishes,
changes the weights, and writes adapter, card, arguments and manifest."""

from __future__ import annotations

import json

import pytest
from safetensors.numpy import load_file

from samelang.training.biencoder import BiencoderArgs, train_biencoder


def test_two_step_smoke_run_changes_the_weights(tmp_path, base_model_path):
    out = tmp_path / "aligned"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="zh,ar", per_lang=4, batch_size=2, max_steps=2,
                         max_length=48, eval_every=1000, dev_n_articles=0, device="cpu")  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    weights = load_file(out / "adapter_model.safetensors")
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and max(abs(v).max() for v in lora_b) > 0  # LoRA B starts at zero: non-zero means trained
    targs = json.loads((out / "training_args.json").read_text())
    assert targs["loss"] == "jsd+nce" and targs["n_triplets"] == 8
    history = json.loads((out / "history.json").read_text())
    assert [h["step"] for h in history] == [1, 2] and all(h["jsd"] > 0 and h["nce"] > 0 for h in history)
    # every step's wall time is kept, so a resumed run knows its whole training time
    assert targs["train_seconds"] == pytest.approx(sum(h["seconds"] for h in history), abs=0.1)
    assert targs["steps"] == 2 and targs["steps_per_s"] > 0 and "[" in targs["trained_on"]
    assert {h["on"] for h in history} == {targs["trained_on"]}  # each step's machine: a resumed run keeps them apart
    manifest = json.loads((out / "samelang_manifest.json").read_text())
    assert manifest["kind"] == "lora-adapter" and manifest["adapter_sha256"]
    assert "samelang train biencoder" in (out / "README.md").read_text()
    assert not (out / "checkpoints").exists()


def test_adapter_loads_in_the_service_encoder(tmp_path, tiny_models, samelang_home):
    from samelang.core.models.encoder import Encoder

    out = tmp_path / "a"
    base = tiny_models["xlmr-mean"]  # what is checked is the loading path, for any base a user brings
    args = BiencoderArgs(out=out, base=str(base), langs="zh", per_lang=2, batch_size=2, max_steps=1,
                         max_length=32, dev_n_articles=0, device="cpu", lr=1e-2)  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    aligned, encoder = Encoder(out, home=samelang_home), Encoder(base, home=samelang_home)
    assert aligned.fingerprint != encoder.fingerprint and aligned.dim == encoder.dim == 32
    a = aligned.encode_passages(["Der Rhein ist ein Fluss."])
    b = encoder.encode_passages(["Der Rhein ist ein Fluss."])
    assert 0.5 < float((a * b).sum()) < 0.99999  # the adapter is applied, and the model is still near its base


def test_target_queries_add_their_two_terms(tmp_path, base_model_path):
    """``--target-queries``: q_t is trained against p_t and p_en, beside the seed's terms."""
    out = tmp_path / "tq"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="de", per_lang=4, batch_size=2, max_steps=1,
                         max_length=32, dev_n_articles=0, device="cpu", target_queries=True)  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    (step,) = json.loads((out / "history.json").read_text())
    assert step["nce_qt"] > 0 and step["nce_qt_en"] > 0
    assert step["loss"] == pytest.approx(step["jsd"] + step["nce"] + step["nce_qt"] + step["nce_qt_en"], rel=1e-5)
    assert "--target-queries" in (out / "README.md").read_text()


def test_hard_negatives_join_the_target_query_candidates():
    """``--hard-negatives``: q_t chooses p_t among the batch's paragraphs *and* each row's
    same-article negative; a negative that is another row's positive is left out."""
    import torch

    from samelang.training.biencoder import PASSAGE, QUERY, compute_loss
    from samelang.training.data import Triplet
    from samelang.training.losses import InfoNCELoss, JSDLoss

    gen = torch.Generator().manual_seed(0)
    table: dict[str, torch.Tensor] = {}

    def module(texts, role):  # a fixed random vector per text and role: the loss assembly is under test
        return torch.stack([table.setdefault(f"{role}:{t}", torch.randn(8, generator=gen)) for t in texts])

    rows = [
        Triplet("q0", "pe0", "pt0", "de", "g0", 1, "qt0", p_neg="pt9", neg_group="g9"),
        Triplet("q1", "pe1", "pt1", "de", "g1", 1, "qt1", p_neg="pt0", neg_group="g0"),  # g0 is row 0's positive
        Triplet("q2", "pe2", "pt2", "de", "g2", 2, "qt2", p_neg="pt8", neg_group="g8"),
    ]
    nce = InfoNCELoss(0.05)
    parts = compute_loss(module, "jsd+nce", rows, JSDLoss(), nce, target_queries=True, hard_negatives=True)
    q = module(["qt0", "qt1", "qt2"], QUERY)  # the role whose prompt the module adds
    cands = module(["pt0", "pt1", "pt2", "pt9", "pt8"], PASSAGE)
    assert parts["nce_qt"].item() == pytest.approx(nce(q, cands).item(), rel=1e-6)
    plain = compute_loss(module, "jsd+nce", rows, JSDLoss(), nce, target_queries=True)
    assert plain["nce_qt"].item() == pytest.approx(nce(q, cands[:3]).item(), rel=1e-6)
    assert parts["nce_qt"].item() > plain["nce_qt"].item()  # more negatives: a harder choice


def test_run_timing_counts_steps_recorded_before_timing_at_the_median():
    from samelang.training.runs import run_timing, timing_line

    history = [{"step": 1}, {"step": 2, "seconds": 2.0}, {"step": 3, "seconds": 4.0}, {"step": 4, "seconds": 3.0}]
    t = run_timing(history, seconds=9.0)
    assert t["train_seconds"] == pytest.approx(12.0) and t["untimed_steps"] == 1
    assert t["steps_per_s"] == pytest.approx(4 / 12.0, abs=1e-4)
    assert "1 steps before timing" in timing_line(t)
    assert t["median_step_s"] == 3.0 and "(median 3.0 s a step)" in timing_line(t)  # a pause does not move it
    assert run_timing([{"step": 1}], seconds=5.0)["train_seconds"] == 5.0  # nothing timed: this process's time
    assert "segments" not in t


def test_run_timing_keeps_the_machines_of_a_resumed_run_apart():
    """A run resumed on another machine: each machine's steps and median seconds a step (a paused
    step does not move the median), in step order, and the card says both."""
    from samelang.training.runs import run_timing, timing_line

    slow, fast = "AMD EPYC [avx2]", "AMD EPYC [avx2 avx512f avx512_bf16]"
    history = [{"step": i, "seconds": 10.0, "on": slow} for i in range(1, 4)]
    history += [{"step": 4, "seconds": 900.0, "on": slow}]  # paused mid-step (SIGSTOP)
    history += [{"step": i, "seconds": 4.0, "on": fast} for i in range(5, 7)]
    t = run_timing(history, seconds=1.0)
    assert t["train_seconds"] == pytest.approx(938.0)
    assert t["segments"] == [
        {"on": slow, "steps": [1, 4], "median_step_s": 10.0},
        {"on": fast, "steps": [5, 6], "median_step_s": 4.0},
    ]
    line = timing_line(t)
    assert f"on {slow} (steps 1-4, median 10.0 s a step), then {fast} (steps 5-6, median 4.0 s a step)" in line
    assert "segments" not in run_timing(history[4:], seconds=1.0)  # one machine: the plain line


def test_the_corpus_views_add_their_three_terms(tmp_path, base_model_path, fake_corpus_store):
    (fake_corpus_store.root / "contamination.json").write_text('{"dropped": {}}')
    out = tmp_path / "corpus"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="zh", per_lang=2, batch_size=2, max_steps=2,
                         max_length=32, dev_n_articles=0, device="cpu", corpus=True, corpus_batch=3,
                         corpora=fake_corpus_store.root, hold_out="drcd")  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    history = json.loads((out / "history.json").read_text())
    assert all(h["nce_qa"] > 0 and h["nce_ict"] > 0 and h["jsd_par"] > 0 for h in history)
    terms = ("jsd", "nce", "nce_qa", "nce_ict", "jsd_par")
    assert all(abs(h["loss"] - sum(v for k, v in h.items() if k in terms)) < 1e-3 for h in history)
    assert json.loads((out / "training_args.json").read_text())["hold_out"] == "drcd"


def test_a_run_stopped_early_keeps_the_schedule_it_was_started_with(tmp_path, base_model_path):
    """``--schedule-steps``: the learning rate follows a schedule longer than the steps run (a run
    cut short at ``--max-steps`` and exported), and the card's reproduce command says so."""
    out = tmp_path / "cut"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="zh", per_lang=2, batch_size=2, max_steps=2,
                         schedule_steps=20, warmup=0.1, max_length=32, dev_n_articles=0, device="cpu")  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    lrs = [h["lr"] for h in json.loads((out / "history.json").read_text())]
    # 20 scheduled steps, 2 of warm-up: still at the peak after 2; a 2-step schedule would have decayed to 0
    assert lrs == pytest.approx([args.lr, args.lr])
    assert "--schedule-steps 20" in (out / "README.md").read_text()


def test_init_continues_an_adapter_over_its_own_base(tmp_path, tiny_models, samelang_home):
    """``--init ADAPTER``: the adapter's weights trained on (not a new LoRA from zero) and saved over
    the same base, which the service loads as it loads any adapter."""
    import numpy as np

    from samelang.core.models.encoder import Encoder

    first = BiencoderArgs(out=tmp_path / "first", base=str(tiny_models["xlmr-mean"]), langs="zh", per_lang=2,
                          batch_size=2, max_steps=1, max_length=32, dev_n_articles=0, device="cpu",
                          lr=1e-2)  # fmt: skip
    train_biencoder(first, log=lambda *a: None)
    later = first.model_copy(update={"out": tmp_path / "later", "base": None, "init": str(first.out), "seed": 1})
    train_biencoder(later, log=lambda *a: None)
    a, b = load_file(first.out / "adapter_model.safetensors"), load_file(later.out / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    moved = [k for k in a if "lora_B" in k and not np.allclose(a[k], b[k])]
    assert moved and all(np.abs(a[k]).max() > 0 for k in moved)  # trained on from the first run's B, not from zero
    manifests = [json.loads((x / "samelang_manifest.json").read_text()) for x in (first.out, later.out)]
    assert manifests[0]["base"] == manifests[1]["base"]
    assert f"--init {first.out}" in (later.out / "README.md").read_text()
    served = Encoder(later.out, home=samelang_home).encode_passages(["Der Rhein ist ein Fluss."])
    assert served.shape == (1, 32)  # the tiny base's width
    with pytest.raises(ValueError, match="--init continues a bi-encoder over its own base: drop --base"):
        BiencoderArgs(out=tmp_path / "x", base="b", init="a")


def test_the_time_budget_counts_every_steps_wall_time_over_resumes():
    from samelang.training.trainer import out_of_time

    said = []
    history = [{"step": i, "seconds": 20.0} for i in range(1, 4)]  # 60 s, two of them before a resume
    assert not out_of_time(history, None, said.append) and not out_of_time(history, 1.01, said.append)
    assert out_of_time(history, 1.0, said.append) and said == ["stopping after 3 steps: --max-minutes 1 used up"]
