"""The mixed soak (samelang/bench/mixed.py) once per setting of ``samelang serve``'s front process, one after
another on the same machine: does a 429 come within 50 ms, and what does the front cost in answers?

Why: the front process (samelang/service/front.py) was built because a 429 answered by the server process waited
behind the model work's threads; this is the measurement that kept it (docs/performance.md, the mixed section's
notes). Each item is FRONT:NICE (``1:5``: the front, the server process at nice 5; ``0:0``: one process).

    python scripts/experiments/front_ab.py faiss 120 1:5 0:0
    python scripts/experiments/front_ab.py milvus 120 1:5 0:0 1:0
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from samelang.bench.common import BenchConfig
from samelang.bench.mixed import REJECT_MS, format_mixed, mixed_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", choices=("faiss", "milvus"))
    ap.add_argument("seconds", type=float)
    ap.add_argument("settings", nargs="+", help="FRONT:NICE items, e.g. 1:5 0:0")
    args = ap.parse_args()
    for item in args.settings:
        front, nice = item.split(":")
        os.environ["SAMELANG_FRONT"] = "true" if front == "1" else "false"  # the served process reads its settings
        os.environ["SAMELANG_SERVER_NICE"] = nice
        out = mixed_run(BenchConfig(out=Path(tempfile.mkdtemp(prefix="front-ab-"))), args.store, args.seconds)
        rej = sorted(ms for s in out["stats"].values() for ms in s["rejected"])
        ok = sum(len(s["ok"]) for s in out["stats"].values())
        p = (rej[len(rej) // 2], rej[int(len(rej) * 0.99)], rej[-1]) if rej else (0.0, 0.0, 0.0)
        print(f"== {args.store} front {front} nice {nice}: 429s {len(rej)}, slower than {REJECT_MS:.0f} ms: "
              f"{sum(r > REJECT_MS for r in rej)}, 429 p50/p99/slowest {p[0]:.1f}/{p[1]:.1f}/{p[2]:.1f} ms; "
              f"200s {ok}", flush=True)  # fmt: skip
        print(format_mixed(out), flush=True)


if __name__ == "__main__":
    main()
