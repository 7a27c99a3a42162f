"""Options are declared once (samelang.core.options): the flag, its env twin, its help and the
reproduce command all come from one pydantic field."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import typer
from typer.main import get_command

from samelang.core import options
from samelang.evaluation.pipeline import PipelineEvalOptions
from samelang.service.config import ServiceSettings
from samelang.training.biencoder import BiencoderArgs
from samelang.training.lamar import RerankerArgs, full_recipe, reproduce_command


def test_a_flag_beats_its_env_variable_which_beats_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("SAMELANG_TRAIN_LR", "0.5")
    monkeypatch.setenv("SAMELANG_TRAIN_LORA_R", "4")
    args = options.parse_options(BiencoderArgs, ["--out", str(tmp_path), "--lr", "0.25"])
    assert args.lr == 0.25  # flag over variable
    assert args.lora_r == 4  # variable over default
    assert args.batch_size == BiencoderArgs.model_fields["batch_size"].default  # default
    monkeypatch.setenv("SAMELANG_PORT", "9001")
    assert options.parse_options(ServiceSettings, []).port == 9001
    assert options.parse_options(ServiceSettings, ["--port", "9002"]).port == 9002


def test_shared_options_keep_their_one_variable(monkeypatch, tmp_path):
    """``--home`` is SAMELANG_HOME in every command, whatever the command's prefix."""
    monkeypatch.setenv("SAMELANG_HOME", str(tmp_path / "h"))
    assert options.parse_options(RerankerArgs, ["--out", "x"]).home == tmp_path / "h"
    assert options.parse_options(PipelineEvalOptions, []).home == tmp_path / "h"
    assert options.env_name(RerankerArgs, "home") == "SAMELANG_HOME"
    assert options.env_name(RerankerArgs, "lambda_lc") == "SAMELANG_TRAIN_LAMBDA_LC"


def test_list_options_repeat_on_the_command_line_and_comma_separate_in_the_environment(monkeypatch):
    monkeypatch.setenv("SAMELANG_EVAL_CROSS_ENCODER", "a=x,b=y")
    assert options.parse_options(PipelineEvalOptions, []).cross_encoder == ["a=x", "b=y"]
    got = options.parse_options(PipelineEvalOptions, ["--retriever", "base", "--retriever", "al=models/al"])
    assert got.retriever == ["base", "al=models/al"]


@pytest.mark.parametrize(
    "cls, prog, argv",
    [
        (BiencoderArgs, "samelang train biencoder", ["--out", "runs/a b", "--loss", "nce", "--per-lang", "0",
                                                     "--full", "--lr", "1e-05", "--max-steps", "7"]),
        (RerankerArgs, "samelang train reranker", ["--out", "r2", "--stage", "2", "--init", "r1",
                                                   "--objective", "no-lc", "--lambda-lc", "0.5", "--no-resume"]),
        (ServiceSettings, "samelang serve", ["--langs", "en", "--no-rerank", "--generator", "none"]),
    ],
)  # fmt: skip
def test_the_reproduce_command_round_trips(cls, prog, argv, monkeypatch):
    for name in cls.model_fields:  # an inherited variable would leak into both sides
        monkeypatch.delenv(options.env_name(cls, name), raising=False)
    parsed = options.parse_options(cls, argv)
    command = options.reproduce_command(prog, parsed)
    assert command.startswith(prog + " ")
    assert options.parse_options(cls, shlex.split(command)[len(shlex.split(prog)) :]) == parsed


def test_reranker_card_recipe_starts_from_the_stage_one_command(tmp_path):
    s1 = RerankerArgs(out=tmp_path / "s1", n_sampled=2, seed=3)
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "training_args.json").write_text(__import__("json").dumps(s1.saved()))
    s2 = RerankerArgs(out=tmp_path / "s2", stage=2, init=str(tmp_path / "s1"), eval_every=5)
    first, second = full_recipe(s2).splitlines()
    assert first == reproduce_command(s1) and "--n-sampled 2" in first and "--seed 3" in first
    assert "--stage 2" in second and "--eval-every" not in second  # how a run is carried out is not the recipe


def test_help_shows_each_option_with_its_variable_and_default():
    app = typer.Typer(add_completion=False)
    app.command()(options.command(BiencoderArgs)(lambda a: None))
    helps = {p.opts[0]: p.help for p in get_command(app).params if p.opts[0] != "--help"}
    assert {flag for flag, _, _ in options.documented(BiencoderArgs)} == set(helps)
    for flag, env, _ in options.documented(BiencoderArgs):
        assert f"env: {env}" in helps[flag]
    assert "default: 0.05" in helps["--temperature"] and "InfoNCE" in helps["--temperature"]


def test_a_bad_value_is_a_usage_error_naming_the_flag_and_its_variable(tmp_path):
    with pytest.raises(typer.BadParameter, match=r"--lr / SAMELANG_TRAIN_LR"):
        options.build(BiencoderArgs, {"out": tmp_path, "lr": -1})
    with pytest.raises(typer.BadParameter, match="stage 2 continues"):
        options.build(RerankerArgs, {"out": tmp_path, "stage": 2})


def test_saved_training_args_leave_out_the_cache_folder(tmp_path):
    args = BiencoderArgs(out=tmp_path, home=Path("/somewhere"))
    assert "home" not in args.saved() and args.saved()["out"] == str(tmp_path)
