"""The bench's own arithmetic and CLI guard rails (the benchmark itself never runs in the tests)."""

from __future__ import annotations

import os

from typer.testing import CliRunner


def test_flops_per_token_of_the_real_encoder(base_model_path):
    from transformers import AutoModel

    from bench.run import encoder_flops_per_token

    model = AutoModel.from_pretrained(base_model_path)
    dense = encoder_flops_per_token(model, seq_len=0)
    # the figure: ~42.5 MFLOP per token in the dense layers of multilingual-e5-small
    assert 42e6 <= dense <= 43e6, dense
    assert encoder_flops_per_token(model, seq_len=184) - dense == 4 * 184 * 384 * 12  # attention's two matmuls


def test_machine_line_names_cores_and_isa():
    from bench.run import cpu_line

    line = cpu_line()
    assert f"{os.cpu_count()} cores" in line and ("AVX" in line or "no AVX2" in line)


def test_unknown_section_is_refused():
    from samelang.cli import app

    result = CliRunner().invoke(app, ["bench", "--section", "gpu"])
    assert result.exit_code == 2 and "unknown section" in result.output
