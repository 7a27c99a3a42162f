"""Whether two ``results.json`` files of ``samelang eval pipeline --shapes`` say the same, key by key, timings aside.

Why: a change that should not change behaviour (a refactor) must leave the judge's every number and choice as
they were; the timings (p50s, minutes) and what is decided from them alone (``too_slow``, ``slower_not_better``)
vary from run to run and are set aside.

    samelang eval pipeline --shapes --tiny --no-card --out /tmp/old   # at the commit before
    samelang eval pipeline --shapes --tiny --no-card --out /tmp/new   # at the commit after
    python scripts/experiments/same_results.py /tmp/old/shapes-tiny/results.json /tmp/new/shapes-tiny/results.json
"""

from __future__ import annotations

import json
import sys

TIMING = ("p50", "_ms", "minutes", "seconds", "docs_per_s", "too_slow", "slower_not_better")


def flat(x, path: str = ""):
    """(path, leaf) for every leaf of a JSON value."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from flat(v, f"{path}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from flat(v, f"{path}[{i}]")
    else:
        yield path, x


def main(old: str, new: str) -> int:
    a, b = (dict(flat(json.load(open(p, encoding="utf-8")))) for p in (old, new))
    keys = set(a) | set(b)
    timing = {k for k in keys if any(t in k.lower() for t in TIMING)}
    differ = [k for k in sorted(keys - timing) if a.get(k, "<missing>") != b.get(k, "<missing>")]
    print(f"{len(keys)} keys, {len(timing)} timing keys set aside, {len(differ)} differ")
    for k in differ[:50]:
        print(f"  {k}: {a.get(k, '<missing>')} -> {b.get(k, '<missing>')}")
    return int(bool(differ))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
