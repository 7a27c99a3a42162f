"""Which precision to serve: quality against fp32 on the eval tables, and speed, side by side.

The rule (issue 6): the default precision of a model is the fastest one whose loss against fp32 is
at most ``tolerance`` points on every metric of its eval table: Max@R_norm average and Mono-Same
nDCG@10 for the bi-encoder; oracle nDCG@1 and Mono-Same nDCG@10 for the reranker (the seed-002
slice of ``max_questions`` test questions per language). The choice and the table go into the
model folder's inference record (read by ``precision=auto``; :mod:`service.models.folder`) and
its card.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from indexes.corpora import load_xquad

BIENCODER_METRICS = ("max_r_norm", "mono_same_ndcg10")
RERANKER_METRICS = ("oracle_ndcg_at_1", "mono_same_ndcg10")


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up: first-call allocations, ONNX Runtime's kernel choice
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def speed_texts(n: int = 64) -> list[str]:
    """The first ``n`` English test-article paragraphs (the bench's texts)."""
    return [d.text for d in load_xquad(["en"], split="test").documents()[:n]]


def biencoder_row(encoder, emb_eval: dict, repeats: int = 3) -> dict:
    texts = speed_texts()
    sec = median_time(lambda: encoder.encode_passages(texts), repeats)
    return {
        "precision": encoder.precision,
        "backend": encoder.engine.backend_name,
        "max_r_norm": emb_eval["multi_average"]["max_r_norm"],
        "mono_same_ndcg10": emb_eval["mono_same_ndcg10_avg"],
        "passages_per_s": len(texts) / sec,
    }


def reranker_row(reranker, result: dict, repeats: int = 3) -> dict:
    texts = speed_texts(20)
    query = load_xquad(["en"], split="test").questions[0].text
    sec = median_time(lambda: reranker.score(query, texts), repeats)
    return {
        "precision": reranker.precision,
        "backend": reranker.engine.backend_name,
        "oracle_ndcg_at_1": result["oracle"]["ndcg_at_1"],
        "mono_same_ndcg10": result["mono_same"]["ndcg_at_10"],
        "rerank20_s": sec,
        "pairs_per_s": len(texts) / sec,
    }


def choose(rows: list[dict], metrics: tuple[str, ...], speed_key: str, tolerance: float = 0.3) -> dict:
    """Mark each row's largest loss against fp32 and whether it is within ``tolerance``; return the
    fastest admissible row (fp32 itself always is)."""
    ref = next(r for r in rows if r["precision"] == "fp32")
    for r in rows:
        r["max_loss_vs_fp32"] = max(float(ref[m] - r[m]) for m in metrics)
        r["within_tolerance"] = r["max_loss_vs_fp32"] <= tolerance
        r["speedup_vs_fp32"] = r[speed_key] / ref[speed_key]
    return max((r for r in rows if r["within_tolerance"]), key=lambda r: r[speed_key])


def markdown(rows: list[dict], metrics: tuple[str, ...], speed_key: str, chosen: str) -> str:
    names = {
        "max_r_norm": "Max@R_norm avg",
        "mono_same_ndcg10": "Mono-Same nDCG@10",
        "oracle_ndcg_at_1": "oracle nDCG@1",
        "passages_per_s": "passages/s",
        "pairs_per_s": "pairs/s",
    }
    head = ["precision", "backend", *[names[m] for m in metrics], "max loss vs fp32", names[speed_key], "x fp32"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = f"**{r['precision']}** (default)" if r["precision"] == chosen else r["precision"]
        cells = [p, r["backend"], *[f"{r[m]:.2f}" for m in metrics], f"{r['max_loss_vs_fp32']:+.2f}"]
        cells += [f"{r[speed_key]:.1f}", f"{r['speedup_vs_fp32']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_inference_card(model_dir: Path, rows: list[dict], chosen: str, note: str, device: str = "cpu") -> None:
    """Record the choice for ``device`` ("cpu" or "cuda") in the model folder's inference record
    (what ``precision=auto`` reads), keeping the other device's; the card section is written by the
    caller."""
    from service.models.folder import record_precision

    record_precision(model_dir, device, chosen, rows, note)


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def cpu_model() -> str:
    """The ``lscpu`` model line (the CPU the speeds were measured on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"
