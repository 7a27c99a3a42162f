"""Bulk embedding on Ray Data (``samelang index build --engine ray``): the corpus as a Ray dataset,
embedded by ``map_batches`` with the project's own encoder as a callable class (one model load per
actor, GPU actors where the cluster has GPUs), gathered back in corpus order for the index writer.

Why Ray Data: it is the standard way to run batch inference over a cluster; the same code runs on
a laptop's local Ray (the tests: 2 CPUs) and on a cluster reached with ``RAY_ADDRESS``. Each actor
runs the same :class:`~samelang.core.models.encoder.Encoder` as a single-process build, so the vectors
are the same (up to the batches' padding: at fp32 within 1e-5).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from samelang.core.catalogue import open_encoder
from samelang.core.runtime.precision import EngineOptions


class EmbedPassages:
    """The callable class of ``map_batches``: one encoder per actor, loaded once."""

    def __init__(self, model: str, home: str, precision: str, device: str, threads: int | None):
        options = EngineOptions(precision, threads=threads)
        self.encoder = open_encoder(Path(model), device=device, home=Path(home), options=options)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"i": batch["i"], "vector": self.encoder.encode_passages([str(t) for t in batch["text"]])}


def embed_with_ray(
    texts: list[str],
    model: Path,
    dim: int,
    home: Path,
    precision: str = "fp32",
    actors: int | None = None,
    batch_size: int = 64,
) -> np.ndarray:
    """(n, dim) passage vectors of ``texts`` in their order, embedded by Ray Data actors: on the Ray
    that ``RAY_ADDRESS`` names, else a local one. ``actors``: how many (default: one per GPU, else one
    per two CPUs), each given its share of the CPU threads."""
    import ray  # deferred: keeps ray out of start-up

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    actors = actors or (gpus if gpus else max(1, cpus // 2))
    threads = None if gpus else max(1, cpus // actors)
    ds = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)])
    out = ds.map_batches(
        EmbedPassages,
        fn_constructor_kwargs={"model": str(model), "home": str(home), "precision": precision,
                               "device": "cuda" if gpus else "cpu", "threads": threads},
        batch_size=batch_size, batch_format="numpy", concurrency=actors, num_gpus=1 if gpus else 0,
        num_cpus=0 if gpus else threads,
    )  # fmt: skip
    vecs = np.zeros((len(texts), dim), dtype=np.float32)
    seen = np.zeros(len(texts), dtype=bool)
    for batch in out.iter_batches(batch_format="numpy", batch_size=None):
        vecs[batch["i"]] = batch["vector"]
        seen[batch["i"]] = True
    if not seen.all():
        raise RuntimeError(f"Ray returned {int(seen.sum())} of {len(texts)} vectors")
    return vecs
