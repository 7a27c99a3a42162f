"""Section "peers": our engine against what a user would run instead, on the same model and texts.

infinity-emb (its torch and optimum/ONNX Runtime engines) is installed into a virtual environment
of its own under ``$SAMELANG_HOME/peers/`` (its pins, numpy<2 and sentence-transformers<4 among
them, never touch ours; torch is the same local CPU build) and driven through
:mod:`samelang.bench.peer_worker`, which keeps it loaded while the rounds alternate between it and us.
fastembed is not in the table: it loads its models from a hub (its local-path mode needs a graph
that outputs token states and the hub's file layout), which this workplace cannot reach.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from samelang.core.catalogue import default_weights
from samelang.core.models.encoder import Encoder
from samelang.core.runtime.precision import EngineOptions, resolve
from samelang.corpora import load_xquad
from samelang.indexes.vectors import normalise

INFINITY = "infinity-emb==0.0.78"
# what infinity-emb 0.0.78 runs with (found by installing it here): the local CPU torch; an optimum that
# still has its ONNX Runtime models and BetterTransformer (optimum 2 dropped both), whose import needs
# transformers < 4.49; a pyarrow (through datasets) that still runs on infinity's numpy < 2
PEER_REQUIREMENTS = ("torch==2.13.0", f"{INFINITY.replace('==', '[torch,optimum]==')}", "optimum[onnxruntime]<2",
                     "transformers<4.49", "pyarrow<22")  # fmt: skip
READY = "samelang-peer-ready"


def peer_venv(home: Path, log=print) -> Path:
    """The peers' virtual environment, made once (~3 min; a half-made one is made again)."""
    venv = Path(home) / "peers" / "infinity-emb-0.0.78"
    if (venv / READY).exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    log(f"samelang bench: installing {INFINITY} into its own venv {venv} (once) ...")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of ours in its pip's view
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, PEER_REQUIREMENTS[0]], check=True, env=env)  # first: then no CUDA build is pulled in
    subprocess.run([*pip, *PEER_REQUIREMENTS], check=True, env=env)
    (venv / READY).write_text(" ".join(PEER_REQUIREMENTS) + "\n")
    return venv


def peer_model(model: Path, home: Path) -> Path:
    """``model`` as the peers' transformers (< 4.49) can read it: the same files (linked), but the
    tokenizer config names the fast tokenizer class that version knows (ours is written by
    transformers 5, whose ``TokenizersBackend`` it does not)."""
    out = Path(home) / "peers" / "models" / model.name
    out.mkdir(parents=True, exist_ok=True)
    for f in model.iterdir():
        link = out / f.name
        if f.name != "tokenizer_config.json" and not link.exists():
            link.symlink_to(f.resolve())
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    if cfg.get("tokenizer_class") == "TokenizersBackend":
        cfg["tokenizer_class"] = "XLMRobertaTokenizerFast"  # multilingual-e5-small's (an XLM-R vocabulary)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    return out


class PeerWorker:
    """One peer engine in its own process (see :mod:`samelang.bench.peer_worker`)."""

    def __init__(self, venv: Path, engine: str, model: Path, log_file: Path):
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0",
               "DO_NOT_TRACK": "1"}  # fmt: skip
        env.pop("PYTHONPATH", None)  # nothing of ours on its path
        self.log = open(log_file, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            # -I: isolated, so that samelang/bench/ (its profile.py would shadow the standard library's) is off its path
            [str(venv / "bin" / "python"), "-I", str(Path(__file__).with_name("peer_worker.py")), engine, str(model)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
        )  # fmt: skip
        t0 = time.perf_counter()
        first = self.proc.stdout.readline()
        if not first:
            self.close()
            raise RuntimeError(f"peer {engine} did not start (log: {log_file})")
        self.load_seconds = time.perf_counter() - t0

    def embed(self, texts: list[str], vectors: bool = False) -> tuple[float, np.ndarray | None]:
        self.proc.stdin.write(json.dumps({"op": "embed", "texts": texts, "vectors": vectors}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("peer worker died (see its log)")
        out = json.loads(line)
        return out["seconds"], (np.asarray(out["vectors"], dtype=np.float32) if vectors else None)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def _last_error(log: Path) -> str | None:
    """The last line of a peer's log that names an error (what the table says when it did not start)."""
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return None
    ours = [ln.split("PeerError: ", 1)[1] for ln in lines if ln.startswith("PeerError: ")]
    errors = [ln.strip() for ln in lines if "Error" in ln]
    return (ours or errors or [None])[-1]


def _measure(ours: dict, peers: dict, passages, queries, prompts, ref_p, repeats: int):
    """Per engine: passage-batch seconds (alternating rounds), one-query seconds, min cosine vs ``ref_p``."""
    p_prompt, q_prompt = prompts
    agree = {}
    for name, enc in ours.items():
        agree[name] = float((normalise(enc.encode_passages(passages)) * ref_p).sum(1).min())
    for name, peer in peers.items():
        _, v = peer.embed([p_prompt + t for t in passages], vectors=True)
        agree[name] = float((normalise(v) * ref_p).sum(1).min())
    batch: dict[str, list[float]] = {k: [] for k in [*ours, *peers]}
    single: dict[str, list[float]] = {k: [] for k in batch}
    for _ in range(repeats):  # alternating rounds
        for name, enc in ours.items():
            t0 = time.perf_counter()
            enc.encode_passages(passages)
            batch[name].append(time.perf_counter() - t0)
        for name, peer in peers.items():
            batch[name].append(peer.embed([p_prompt + t for t in passages])[0])
    for q in queries:
        for name, enc in ours.items():
            t0 = time.perf_counter()
            enc.encode_queries([q])
            single[name].append(time.perf_counter() - t0)
        for name, peer in peers.items():
            single[name].append(peer.embed([q_prompt + q])[0])
    return batch, single, agree


def bench_peers(cfg, table) -> str:
    """Passages/s (the embed section's texts), single-query latency (median over queries) and the
    agreement with our fp32 vectors, for our engine at each precision and infinity-emb's engines."""

    path = Path(default_weights(cfg.home))
    x = load_xquad(["en"], split="test")
    n = 8 if cfg.tiny else 160
    passages = [d.text for d in x.documents()[:n]]
    queries = [q.text for q in x.questions[: 5 if cfg.tiny else 40]]
    ours = {p: Encoder(path, home=cfg.home, options=EngineOptions(precision=p)) for p in ("fp32", "int8")}
    served = resolve(EngineOptions(), "cpu", path).precision
    fp32 = ours["fp32"]
    p_prompt, q_prompt = fp32._passage_prompt, fp32._query_prompt
    ref_p = normalise(fp32.encode_passages(passages))
    home = cfg.home or Path(os.environ.get("SAMELANG_HOME", Path.home() / ".cache" / "samelang"))
    venv, model = peer_venv(home), peer_model(path, home)
    peers, failed = {}, {}
    for engine in ("infinity-torch", "infinity-optimum"):
        try:
            peers[engine] = PeerWorker(venv, engine, model, Path(cfg.out) / f"peer-{engine}.log")
        except RuntimeError as e:
            failed[engine] = _last_error(Path(cfg.out) / f"peer-{engine}.log") or str(e)
    if not peers:
        raise RuntimeError(f"no peer engine started: {failed}")
    try:
        batch, single, agree = _measure(ours, peers, passages, queries, (p_prompt, q_prompt), ref_p, cfg.repeats)
    finally:
        for peer in peers.values():
            peer.close()
    best_peer = min((statistics.median(batch[k]) for k in peers), default=None)
    labels = {"infinity-torch": "infinity-emb 0.0.78, torch engine (fp32)",
              "infinity-optimum": "infinity-emb 0.0.78, optimum engine (ONNX Runtime fp32)"}  # fmt: skip
    rows = []
    for name in batch:
        sec = statistics.median(batch[name])
        label = labels.get(name) or f"samelang engine {name} (onnx)" + (" **served**" if name == served else "")
        rows.append([label, f"{n / sec:.1f}", f"{best_peer / sec:.2f}x" if best_peer else "-",
                     f"{1000 * statistics.median(single[name]):.1f}", f"{agree[name]:.5f}"])  # fmt: skip
    head = [f"embedding ({path.name}, {n} en paragraphs; in process, no HTTP)", "passages/s",
            "vs best peer", "1 query ms (median)", "min cosine vs our fp32"]  # fmt: skip
    rows += [[labels[k], "-", "-", "-", "did not start: " + why.replace("|", "/")[:160]] for k, why in failed.items()]
    return table(head, rows) + (
        f"\n\nMedians of {cfg.repeats} alternating rounds (passages) and of {len(queries)} queries. Each peer runs "
        f"in its own process and venv ({INFINITY}, torch 2.13.0 CPU) and is timed inside that process, "
        "around its own embed call, so neither side pays for IPC. fastembed: not run (it loads models from a hub)."
    )
