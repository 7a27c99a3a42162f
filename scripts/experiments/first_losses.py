"""Each trainer's first 20 losses on a fixed seed, and a resume from a checkpoint written at step 10.

Why: a change to the training loop must not change what it trains. Run this at two commits and
compare the JSON files key by key (``--compare A B``, atol 1e-6): the losses of 20 steps of the
bi-encoder, the reranker's three stages and the reader, on the base model at tiny sizes, and the
losses of steps 11-20 after resuming from the step-10 checkpoint an earlier commit wrote
(``--checkpoints DIR`` keeps them; ``--resume-from DIR`` resumes from them).

    python scripts/experiments/first_losses.py --out /tmp/old.json --checkpoints /tmp/ckpt   # old commit
    python scripts/experiments/first_losses.py --out /tmp/new.json --resume-from /tmp/ckpt   # new commit
    python scripts/experiments/first_losses.py --compare /tmp/old.json /tmp/new.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

STEPS, AT = 20, 10
TINY = dict(device="cpu", max_steps=STEPS, save_every=AT, seed=7, lr=1e-3)


def runs(home: Path, work: Path) -> dict:
    """Trainer name -> (train function, args factory given an output folder); stage 2 continues from
    the stage-1 model this run trained (``work/reranker-1``)."""
    from samelang.training.biencoder import BiencoderArgs, train_biencoder
    from samelang.training.reader import ReaderArgs, train_reader

    try:
        from samelang.training.lamar import RerankerArgs, train_reranker
    except ImportError:  # a commit before the trainer's module was named for its recipe
        from samelang.training.reranker import RerankerArgs, train_reranker

    rr = dict(langs="en,zh", batch_size=2, max_length=48, dev_questions=0, home=home, corpus=False, **TINY)
    return {
        "biencoder": (train_biencoder, lambda out: BiencoderArgs(out=out, langs="zh", batch_size=4, per_lang=40,
                                                                 dev_n_articles=0, corpus=False, home=home, **TINY)),
        "reranker-0": (train_reranker, lambda out: RerankerArgs(out=out, stage=0, **rr)),
        "reranker-1": (train_reranker, lambda out: RerankerArgs(out=out, stage=1, n_sampled=1, **rr)),
        "reranker-2": (train_reranker, lambda out: RerankerArgs(out=out, stage=2, teacher="unused",
                                                                init=str(work / "reranker-1"), **rr)),
        "reader": (train_reader, lambda out: ReaderArgs(out=out, langs="en,zh", corpus=False, batch_size=4,
                                                         max_length=96, stride=32, dev_per_lang=3, home=home, **TINY)),
    }  # fmt: skip


def losses(out: Path) -> list[float]:
    return [h["loss"] for h in json.loads((out / "history.json").read_text())]


def keep_checkpoints(keep: Path) -> None:
    """Copy every checkpoint a run writes to ``keep/<run name>`` (a run deletes its own at the end)."""
    import importlib.util

    owner = "samelang.training." + ("trainer" if importlib.util.find_spec("samelang.training.trainer") else "loop")
    loop = importlib.import_module(owner)  # where the loop's checkpoint writer lives at this commit
    save = loop.save_checkpoint

    def saving(o, step, *a, **k):
        save(o, step, *a, **k)
        name = f"step-{step:06d}"
        shutil.copytree(o / "checkpoints" / name, keep / Path(o).name / name, dirs_exist_ok=True)

    loop.save_checkpoint = saving


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--checkpoints", type=Path, help="keep each run's step-10 checkpoint here")
    p.add_argument("--resume-from", type=Path, help="also resume each run from the checkpoints kept here")
    p.add_argument("--compare", nargs=2, type=Path)
    p.add_argument("--only", nargs="+", help="these runs alone (reranker-2 needs reranker-1 before it)")
    a = p.parse_args()
    if a.compare:
        sys.exit(compare(*a.compare))
    from samelang.core.settings import Settings

    home, result, work = Settings().home, {}, Path(tempfile.mkdtemp())
    chosen = runs(home, work)
    if a.checkpoints:
        keep_checkpoints(a.checkpoints)
    for name, (train, make) in chosen.items() if not a.only else ((n, chosen[n]) for n in a.only):
        out = work / name
        train(make(out), log=lambda *x: None)
        result[name] = losses(out)
        if a.resume_from and (a.resume_from / name).exists():
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / name
                shutil.copytree(a.resume_from / name / f"step-{AT:06d}", out / "checkpoints" / f"step-{AT:06d}")
                train(make(out).model_copy(update={"resume": True}), log=lambda *x: None)
                result[f"{name} resumed"] = losses(out)
        print(name, " ".join(f"{x:.6f}" for x in result[name][:5]), "...", flush=True)
    a.out.write_text(json.dumps(result, indent=1))
    shutil.rmtree(work, ignore_errors=True)


def compare(old: Path, new: Path, atol: float = 1e-6) -> int:
    """0 when every trainer's losses agree within ``atol``, a resumed run's with the uninterrupted one's too."""
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    bad = 0
    print(f"{'run':<22}{'steps':>6}{'max |diff|':>14}  verdict")
    for name in sorted(set(a) | set(b)):
        ref = a.get(name) or a.get(name.removesuffix(" resumed"))
        got = b.get(name)
        if ref is None or got is None or len(ref) != len(got):
            print(f"{name:<22}{'-':>6}{'-':>14}  MISSING or length differs")
            bad += 1
            continue
        diff = max(abs(x - y) for x, y in zip(ref, got, strict=True))
        bad += diff > atol
        print(f"{name:<22}{len(got):>6}{diff:>14.2e}  {'same' if diff <= atol else 'DIFFERENT'}")
    return int(bad > 0)


if __name__ == "__main__":
    main()
