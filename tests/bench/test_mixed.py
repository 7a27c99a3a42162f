"""``samelang bench --section burst`` and ``--section mixed``: the checks they apply, the writer that adds and
deletes documents while a server answers, and (slow) both sections end to end against real servers, over FAISS
and over a milvus-lite server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from samelang.bench.mixed import REJECT_MS, Writer, burst_check, mixed_check
from samelang.indexes.index import open_index


def test_a_burst_is_read_as_codes_latencies_and_the_queue_bound():
    answers = [(200, 900.0)] * 8 + [(429, 12.0)] * 10 + [(503, 30000.0)]
    out = {"answers": answers, "health": [(200, 3.0)] * 99 + [(200, 80.0)], "seconds": 2.0, "alone_ms": 100.0}
    m = burst_check(out, running=2, queued=2)
    assert (m["n"], m["ok"], m["rejected"], m["other"]) == (19, 8, 10, [503])
    assert m["max_429_ms"] == 12.0 and m["admitted_p99_ms"] == 900.0
    # 8 finished in 2 s: 4 per second; a full queue of 2 + 2 drains in 1 s, plus one request alone
    assert m["bound_ms"] == pytest.approx(1100.0)
    assert 3.0 < m["health_p99_ms"] <= 80.0 and m["health_bad"] == 0


def _soak(**change) -> dict:
    stats = {"search": {"requests": 3, "ok": [10.0, 20.0], "rejected": [5.0], "errors": []}}
    out = {"stats": stats, "write_errors": [], "rss_growth_pct": 2.0,
           "found": {"live": 4, "missing": [], "deleted": 2, "still_found": []}}  # fmt: skip
    for key, value in change.items():
        if key in ("missing", "still_found"):
            out["found"][key] = value
        elif key in ("rejected", "errors"):
            stats["search"][key] = value
        else:
            out[key] = value
    return out


def test_the_soak_names_each_promise_it_broke():
    assert mixed_check(_soak()) == []
    assert "1 answers not 200/429" in mixed_check(_soak(errors=["HTTP 503: deadline"]))[0]
    assert "429s slower than" in mixed_check(_soak(rejected=[REJECT_MS + 1]))[0]
    assert "added documents not found" in mixed_check(_soak(missing=["soak-x"]))[0]
    assert "deleted documents still found" in mixed_check(_soak(still_found=["soak-y"]))[0]
    assert "RSS grew 12.0%" in mixed_check(_soak(rss_growth_pct=12.0))[0]
    assert "writes failed" in mixed_check(_soak(write_errors=["OSError: disk full"]))[0]


def test_the_writer_adds_and_deletes_through_the_index_commands_functions(small_index, encoder):
    writer = Writer(small_index, encoder, encoder.analyzer, None, every=0.0)
    before = open_index(small_index, encoder.info)
    n = before.documents
    before.close()
    for _ in range(2):
        writer._add()
    writer._delete()
    after = open_index(small_index, encoder.info)
    try:
        assert after.documents == n + 6 - 2 and len(writer.live) == 4 and len(writer.deleted) == 2
        assert after.docs.existing_ids(list(writer.live)) == set(writer.live)
        assert after.docs.existing_ids(list(writer.deleted)) == set()
    finally:
        after.close()


@pytest.mark.slow  # real servers (the served default, twice, and a milvus-lite server): ~6 min on 2 cores
def test_burst_and_mixed_sections_run_against_real_servers(tmp_path, samelang_home):
    """``samelang bench --tiny --section burst --section mixed``: the burst gets only 200s and 429s; the soak,
    with writes every second on FAISS and on Milvus, answers no 5xx, finds every added document and none of
    the deleted ones. The timings are the bench's, not a test's (tiny sizes on a loaded machine)."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "samelang", "bench", "--tiny", "--section", "burst", "--section", "mixed",
           "--soak-seconds", "20", "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    burst, mixed = proc.stdout.split("\n## burst")[1].split("\n## mixed")
    codes = next(ln for ln in burst.splitlines() if ln.startswith("| 200 / 429 / other"))
    assert codes.endswith("/ - |"), codes
    for store in ("faiss", "milvus"):
        summary = next(ln for ln in mixed.splitlines() if ln.startswith(f"{store}: "))
        assert " all found;" in summary and ", 0 still found)" in summary, summary
    rows = [ln.split("|")[1:-1] for ln in mixed.splitlines() if ln.startswith("| /")]
    assert len(rows) == 16 and all(r[4].strip() == "0" for r in rows), rows  # no answer but 200 and 429
