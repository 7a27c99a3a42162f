"""The bench's own arithmetic and CLI guard rails (the benchmark itself never runs in the tests)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from samelang.bench.run import build_models


def test_flops_per_token_of_the_real_encoder(base_model_path):
    from transformers import AutoModel

    from samelang.bench.common import encoder_flops_per_token

    model = AutoModel.from_pretrained(base_model_path)
    dense = encoder_flops_per_token(model, seq_len=0)
    # the expected figure: ~42.5 MFLOP per token in the dense layers of multilingual-e5-small
    assert 42e6 <= dense <= 43e6, dense
    assert encoder_flops_per_token(model, seq_len=184) - dense == 4 * 184 * 384 * 12  # attention's two matmuls


def test_machine_line_names_cores_and_isa():
    from samelang.bench.common import cpu_line

    line = cpu_line()
    assert f"{os.cpu_count()} cores" in line and ("AVX" in line or "no AVX2" in line)


def test_unknown_section_is_refused():
    from samelang.cli import app

    result = CliRunner().invoke(app, ["bench", "--section", "gpu"])
    assert result.exit_code == 2 and "unknown section" in result.output


# section -> (the table's header cells after the first, the first cells of its rows); the first
# header cell names the model or corpus, so only its start is checked
TABLES = {
    "build": ("corpus", ["bi-encoder", "paragraphs", "build s", "paragraphs/s", "x vs base",
                        "2,880 paragraphs s (projected)", "model load s", "precision"],
              None),  # a row per bi-encoder of build_models(): base, served, the newest fused pair unless served
    "scale": ("vectors", ["index", "params", "build s", "bytes/vector", "recall@10", "p50 ms", "p95 ms"],
              ["1,000", "1,000", "1,000"]),
    "embed": ("encoder (", ["passages/s", "tokens/s", "vs ST fp32", "% of fp32 peak"],
              ["sentence-transformers encode fp32, batch 32 (reference)", "samelang engine fp32"]),
    "rerank": ("reranker (", ["latency s", "pairs/s", "vs CrossEncoder"],
               ["sentence-transformers CrossEncoder.predict fp32, batch 32 (reference)", "samelang engine fp32"]),
    "http": ("route", ["concurrency", "requests", "errors", "p50 ms", "p95 ms", "p99 ms", "req/s", "x vs c=1",
                      "server CPU ms/req", "client CPU ms/req"],
             ["/search", "/search", "/rerank", "/rerank"]),
    "memory": ("server", ["python + libraries", "encoder", "index", "reranker", "generator", "language_id",
                          "RSS after traffic", "peak", "torch imported"],
               ["--generator none", "embedded generator (default)"]),
    "stream": ("what the client waits for", ["n", "p50 ms", "p90 ms", "p50 / /search p50"],
               ["/search", "streamed /answer: `passages` event", "streamed /answer: first `token` event",
                "streamed /answer: `done` event", "/answer, not streamed"]),
    "soak": ("traffic", ["requests", "errors", "p50 ms"],
             ["search", "search_rerank", "rerank", "answer", "diagnose", "hang_up"]),
    "scale-10m": ("vectors", ["data model", "index", "params", "build s", "bytes/vector", "index GB", "recall@10",
                              "p50 ms", "p95 ms"], ["20,000"]),
    "milvus": ("vectors", ["store", "index", "params", "build s", "disk bytes/vector", "recall@10", "p50 ms",
                           "p95 ms"], ["2,000", "2,000", "2,000", "2,000"]),
    "train": ("configuration", ["bf16", "s / step", "steps/s", "x vs fp32", "tokens / step", "peak RSS MB"],
              ["fp32 (the reference)", "auto (bf16 where the CPU has it)", "auto, --lora-dropout 0"]),
}  # fmt: skip


def first_table(text: str) -> list[list[str]]:
    """The cells of the first Markdown table in ``text``, header first, separator row dropped."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    block = []
    for ln in text.splitlines()[text.splitlines().index(lines[0]) :]:
        if not ln.startswith("|"):
            break
        block.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return [block[0]] + block[2:]


@pytest.mark.slow  # ~4.5 min on 2 cores: the default run stays near 20 min; each section's parts have their own tests
def test_every_section_runs_at_tiny_sizes_and_prints_its_table(tmp_path, samelang_home):
    """``samelang bench --tiny`` with every section (soak, scale-10m, milvus, train included): each prints its table
    with docs/performance.md's columns and one row per measurement. One process, as a user runs it; the sizes
    are a handful of inputs (1-2 minutes on 2 cores), so the numbers mean nothing here."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)
    sections = [a for s in TABLES for a in ("--section", s)]
    cmd = [
        sys.executable,
        "-m",
        "samelang",
        "bench",
        "--tiny",
        *sections,
        "--soak-seconds",
        "1",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("# samelang bench --tiny") and (tmp_path / "bench.md").read_text().strip() == out.strip()
    chunks = out.split("\n## ")[1:]
    assert [c.split(" ", 1)[0] for c in chunks] == list(TABLES)
    for chunk in chunks:
        name = chunk.split(" ", 1)[0]
        first, head, rows = TABLES[name]
        if name == "build":
            rows = ["XQuAD en (slice)"] * len(build_models(samelang_home))
        table = first_table(chunk)
        bare = [[c.split(" (")[0] for c in row] for row in table]  # without "(onnx)", "(134 GFLOP/s)", ...
        assert table[0][0].startswith(first) and bare[0][1:] == [h.split(" (")[0] for h in head], (name, table[0])
        assert [r[0] for r in bare[1:]] == [r.split(" (")[0] for r in rows], (name, table)
        assert all(len(r) == len(table[0]) for r in table), (name, table)
        if name == "memory":  # served from ONNX and llama.cpp, the server never imports torch
            assert all(r[table[0].index("torch imported")] == "no" for r in table[1:]), table
        if name in ("http", "soak"):
            errors = table[0].index("errors")
            assert all(r[errors] == "0" for r in table[1:]), (name, table)


@pytest.mark.slow
def test_peers_section_runs_infinity_in_its_own_venv(tmp_path, samelang_home):
    """``samelang bench --tiny --section peers``: installs infinity-emb into its own venv (once, ~3 min),
    runs its torch and ONNX engines on the served model beside ours, and they agree with our fp32
    vectors (the same model: a peer that embedded something else would be a wrong comparison)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "samelang", "bench", "--tiny", "--section", "peers", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    table = first_table(proc.stdout.split("## peers", 1)[1])
    assert table[0][1:] == ["passages/s", "vs best peer", "1 query ms (median)", "min cosine vs our fp32"]
    rows = {r[0].split(" (")[0].replace(" **served**", ""): r for r in table[1:]}
    assert {"samelang engine fp32", "infinity-emb 0.0.78, torch engine", "infinity-emb 0.0.78, optimum engine"} <= set(
        rows
    )
    for name, row in rows.items():
        if name.startswith("infinity") or name == "samelang engine fp32":
            assert float(row[4]) >= 0.999, (name, row)


def test_a_run_writes_its_tables_under_its_own_command_in_the_performance_page(tmp_path):
    """``--doc``: the section is headed by the command, its tables are replaced by the next run of that
    command while the notes after the marker stay, and the sections of other commands stay too."""
    from samelang.bench.common import BenchConfig
    from samelang.bench.run import DOC_END, doc_heading, write_doc

    doc = tmp_path / "performance.md"
    cfg = BenchConfig(sections=("embed", "rerank"), quick=True)
    head = doc_heading(cfg)
    other = "## `samelang bench --section http`\n\nhttp\n"
    doc.write_text(f"# Performance\n\n{head}\n\nold\n\n{DOC_END}\n\nA note.\n\n{other}")
    for n in (1, 2):
        parts = [
            "# samelang bench --quick\n\nMachine: CPU X [avx2]",
            f"## embed (3 s)\n\ntable {n}",
            "## rerank (1 s)\n\nr",
        ]
        write_doc(cfg, parts, doc)
    text = doc.read_text()
    assert head == "## `samelang bench --quick --section embed --section rerank`"
    assert text.count(head) == 1 and "table 2" in text and "table 1" not in text and "old" not in text
    assert text.index("Machine: CPU X [avx2]") < text.index("### embed (3 s)") < text.index(DOC_END)
    assert text.index(DOC_END) < text.index("A note.") < text.index(other)
    assert doc_heading(BenchConfig()) == "## `samelang bench`"
    write_doc(BenchConfig(), parts, doc)  # a command without a section gets one at the end
    assert doc.read_text().rstrip().endswith(DOC_END) and doc.read_text().count("## `samelang bench`\n") == 1
