"""The command line, end to end: the demo (at a few steps), generate, and errors for bad input."""

import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

from depthattn.cli import COMMANDS, main
from depthattn.study.store import CellStore


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo at 2 steps: its folder and what it wrote to stderr."""
    out = tmp_path_factory.mktemp("demo")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main(["demo", "--out", str(out), "--steps", "2", "--eval-tokens", "8192"]) == 0
    return out, stderr.getvalue()


@pytest.fixture(scope="module")
def demo_dir(demo_run):
    return demo_run[0]


def test_demo_of_fewer_steps_warms_up_for_fewer_and_warns_of_nothing(demo_run):
    assert not [line for line in demo_run[1].splitlines() if line.startswith("warning:")]
    settings = json.loads((demo_run[0] / "vanilla" / "train_config.json").read_text())
    assert settings["optim"]["warmup_steps"] == 0  # the study's 20 of 200 steps, for 2


def test_demo_writes_models_plot_and_table(demo_dir, capsys):
    for method in ("depth_attention", "vanilla"):
        assert (demo_dir / method / "final" / "model.safetensors").exists()
        assert (demo_dir / method / "final" / "tokenizer.json").exists()
    assert (demo_dir / "loss_curves.png").stat().st_size > 10_000


def test_demo_rerun_reuses_finished_work(demo_dir, capsys):
    assert main(["demo", "--out", str(demo_dir), "--steps", "2", "--eval-tokens", "8192"]) == 0
    out = capsys.readouterr().out
    assert "reusing the prepared corpus" in out and out.count("finished earlier with these settings; reusing it") == 2
    assert "scored on the first 8,192 of" in out and "the study scores all of it" in out
    assert "| Depth-Attention |" in out and "| vanilla" in out


def test_demo_rerun_by_another_spelling_of_its_folder_reuses_it(demo_dir, capsys, monkeypatch):
    """--out given relative, then as another path to the same folder: it was "a run with other settings", and the
    advice was to remove the finished runs."""
    monkeypatch.chdir(demo_dir.parent)
    assert main(["demo", "--out", f"./{demo_dir.name}/", "--steps", "2", "--eval-tokens", "8192"]) == 0
    assert capsys.readouterr().out.count("finished earlier with these settings; reusing it") == 2


def test_demo_never_reuses_a_model_trained_with_other_settings(demo_dir):
    with pytest.raises(SystemExit, match="holds a run with other settings \\(train.steps was 2, now 3\\): remove"):
        main(["demo", "--out", str(demo_dir), "--steps", "3", "--eval-tokens", "8192"])


@pytest.mark.parametrize("option, message", [(["--eval-tokens", "1"], "--eval-tokens must be at least 2"),
                                             (["--steps", "0"], "--steps must be at least 1, got 0")])
def test_demo_refuses_a_bad_option_before_it_starts(tmp_path, capsys, option, message):
    assert main(["demo", "--out", str(tmp_path), *option]) == 1
    assert f"depthattn demo: error: {message}" in capsys.readouterr().err  # --steps 0 trained the default 200
    assert not any(tmp_path.iterdir())


def test_generate_from_a_saved_model(demo_dir, capsys):
    assert main(["generate", str(demo_dir / "depth_attention" / "final"), "ROMEO.", "--max-new-tokens", "8",
                 "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO.")


def test_generate_compiled_gives_the_eager_greedy_text(demo_dir, capsys):
    """The decoding steps compiled whole (the eager backend: dynamo's graph, no code generation) over a static
    cache give the same greedy text as eager decoding."""
    argv = ["generate", str(demo_dir / "depth_attention" / "final"), "ROMEO.", "--max-new-tokens", "8",
            "--temperature", "0"]
    assert main(argv) == 0
    eager = capsys.readouterr().out
    assert main([*argv, "--compile", "eager"]) == 0
    assert capsys.readouterr().out == eager
    assert main([*argv, "--method-field", "depth_impl=reference"]) == 0
    assert capsys.readouterr().out == eager
    from depthattn.loading import load_model

    loaded = load_model(demo_dir / "depth_attention" / "final", method_fields={"depth_impl": "reference"})
    assert loaded.config.depth_impl == "reference"


@pytest.fixture(scope="module")
def moda_dir(tmp_path_factory):
    from depthattn.data.tokenizer import word_level_tokenizer
    from tests.helpers import tiny_model

    folder = tmp_path_factory.mktemp("moda")
    tokenizer = word_level_tokenizer(["the", "cat", "sat", "on", "a", "mat"])
    tokenizer.save_pretrained(folder)
    tiny_model(cross_layer="moda", vocab_size=len(tokenizer)).save_pretrained(folder)
    return folder


def test_generate_switches_any_method_field_that_changes_how_it_computes_not_what(moda_dir, capsys):
    argv = ["generate", str(moda_dir), "the cat", "--max-new-tokens", "6", "--temperature", "0"]
    assert main(argv) == 0
    reference = capsys.readouterr().out
    assert main([*argv, "--method-field", "moda_impl=merged"]) == 0
    assert capsys.readouterr().out == reference


@pytest.mark.parametrize("field, message", [
    ("depth_impl=reference", "depth_impl is not a switchable field of cross_layer='moda' (switchable: moda_impl)"),
    ("moda_impl=fused", "moda_impl must be one of 'reference', 'merged'; got 'fused'"),
    ("depth_mix=uniform", "--method-field 'depth_mix=uniform': give NAME=VALUE, NAME a field that a method switches "
                          "(attnres_impl, depth_impl, mhc_impl, moda_impl; the others change what a model computes)"),
    ("moda_impl", "--method-field 'moda_impl': give NAME=VALUE"),
])
def test_generate_refuses_a_method_field_the_method_does_not_switch(moda_dir, capsys, field, message):
    assert main(["generate", str(moda_dir), "the", "--max-new-tokens", "1", "--method-field", field]) == 1
    assert message in capsys.readouterr().err


def test_a_method_field_value_is_a_literal_where_the_default_is_not_a_string(monkeypatch):
    from depthattn.loading import parse_method_fields
    from depthattn.methods import DESCRIPTIONS

    monkeypatch.setattr(DESCRIPTIONS["depth_attention"], "switchable_fields", ("depth_impl", "depth_window"))
    assert parse_method_fields(["depth_window=2", "depth_impl=1"]) == {"depth_window": 2, "depth_impl": "1"}
    with pytest.raises(ValueError, match="depth_window=two: not a Python literal, as depth_window's values are "
                                         r"\(its default: 0\)"):
        parse_method_fields(["depth_window=two"])


@pytest.mark.parametrize("argv, message", [
    (["train", "--optim.lrr", "1"], "did you mean 'lr'"),
    (["train", "--config", "missing.toml"], "does not exist"),
    (["generate", "nowhere", "hi"], "model folder nowhere does not exist"),
    (["generate", "cli_test_file.txt", "hi"], "cli_test_file.txt is a file, not a model folder"),
    (["convert", "cli_test_file.txt", "out"], "cli_test_file.txt is a file; pass the folder of a saved model"),
    (["generate", "nowhere", "hi", "--compile", "nope"], "unknown --compile backend 'nope'"),
    (["prepare", "--input", "missing.txt", "--out", "x"], "missing.txt"),
    (["costs", "--preset", "tiny", "--methods", ","], "--methods ',' names no method"),
    (["eval", "nowhere", "--data", "x", "--out", "."], "--out . is a folder; name a file"),  # before any scoring
])
def test_errors_are_one_clear_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cli_test_file.txt").write_text("a file where a folder belongs")
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_demo_trains_the_study_base_setting(tmp_path):
    from depthattn.commands.demo import STUDY_CONFIG, demo_config
    from depthattn.study import Study, cell_key

    study = Study.load(STUDY_CONFIG)  # the tests run from the repository root
    demo = demo_config(study.base["data"]["path"], tmp_path, "vanilla", 200).to_dict()
    assert cell_key(demo) == cell_key(study.setting_config({}))


def test_demo_quotes_the_study_from_its_committed_results():
    from depthattn.commands.demo import STEPS, STUDY_CONFIG, study_quote
    from depthattn.study import Study, summarize, verdict

    study = Study.load(STUDY_CONFIG)
    quote = study_quote(STEPS)
    da = summarize(study, CellStore.of(study).read_results(study))[""].row("depth_attention").difference
    assert quote[0] == (f"Depth-Attention − vanilla: {da.diff_mean:+.4f} nats, 95% CI [{da.diff_low:+.4f}, "
                        f"{da.diff_high:+.4f}], p = {da.p_value:.3g}, lower in {da.wins}/{da.n} seeds")
    search = Study.load(STUDY_CONFIG.parent / "search.toml")  # value embeddings in the same setting: another study
    ve = summarize(search, CellStore.of(search).read_results(search))[""].row("value_embeddings").difference
    assert f"value embeddings − vanilla: {ve.diff_mean:+.4f} nats, 95% CI [{ve.diff_low:+.4f}, " \
           f"{ve.diff_high:+.4f}], p = {ve.p_value:.3g}, lower in {ve.wins}/{ve.n} seeds" in quote
    depth = Study.load(STUDY_CONFIG.parent / "depth.toml")
    sixteen = summarize(depth, CellStore.of(depth).read_results(depth))["layers=16"].row("depth_attention").difference
    assert f"  layers=16 (depth): {sixteen.diff_mean:+.4f} [{sixteen.diff_low:+.4f}, " \
           f"{sixteen.diff_high:+.4f}], lower in {sixteen.wins}/{sixteen.n} seeds: {verdict(sixteen)}" in quote
    assert not any("(retrofit)" in line for line in quote)  # converted models are not this comparison
    assert study_quote(STEPS // 2) == [f"(the study's numbers are for {STEPS} steps; this run trained {STEPS // 2})"]


def test_training_ends_with_a_summary_that_says_where_the_model_is_and_how_to_score_it(tiny_data, tmp_path, capsys):
    from tests.faults.conftest import train_args

    out_dir = tmp_path / "run"
    assert main(train_args(tiny_data, out_dir, 4, 2, "--train.eval_every", "2")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-4].startswith("done: 4 steps, ") and "last training loss" in out[-4]
    assert out[-3].startswith("validation loss ") and "the first batch (train.eval_batches) of the" in out[-3]
    assert main(train_args(tiny_data, tmp_path / "all", 2, 2, "--train.eval_batches", "1000")) == 0
    validation = capsys.readouterr().out.splitlines()[-3]  # a split of fewer batches: all of them, not "the first 1000"
    assert re.fullmatch(r"validation loss \d\.\d{4} on all \d+ batches \(train.eval_batches is 1000\) of the held-out "
                        "split", validation), validation
    from depthattn.commands.train import scored_batches
    from depthattn.train.config import TrainConfig

    one_batch = TrainConfig.load(None, ["--data.path", str(tiny_data), "--train.batch_size", "100000"])
    assert scored_batches(one_batch) == f"its only batch (train.eval_batches is {one_batch.train.eval_batches})"
    assert out[-2] == f"model: {out_dir / 'final'}" and (out_dir / "final" / "model.safetensors").exists()
    assert out[-1] == f"score it on the whole held-out split: depthattn eval {out_dir / 'final'} --data {tiny_data}"


def test_plot_draws_the_curves_of_run_folders(demo_dir, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert main(["plot", str(demo_dir / "vanilla"), str(demo_dir / "depth_attention" / "metrics.jsonl"),
                 "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and f"plot: {out}" in capsys.readouterr().out
    assert main(["plot", str(tmp_path), "--out", str(out)]) == 1
    assert f"{tmp_path} holds no metrics.jsonl: pass a training run's folder" in capsys.readouterr().err


@pytest.mark.parametrize("lines, message", [
    ('{"step": 1, "loss": 2.0}\n', "have no 'tokens': it is not a metrics.jsonl that depthattn train wrote"),
    ('{"step": 1, "tok\n{"step": 2, "tokens": 8, "loss": 2.0}\n', "line 1: not valid JSON"),
    ("[1, 2]\n", "line 1: a JSON list, not a record"),
])
def test_plot_names_a_metrics_file_it_cannot_read(tmp_path, capsys, lines, message):
    (tmp_path / "metrics.jsonl").write_text(lines)
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "p.png")]) == 1
    err = capsys.readouterr().err
    assert f"depthattn plot: error: {tmp_path / 'metrics.jsonl'}" in err and message in err
    assert not (tmp_path / "p.png").exists()


OPTIONAL_EXTRAS = ("matplotlib", "lm_eval", "uvicorn", "fastapi", "pyarrow", "tensorboard", "submitit", "datasets",
                   "vllm", "triton", "wandb")


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["study", "--help"], ["serve", "--help"]])
def test_help_imports_its_command_only_and_no_optional_extra(argv):
    """`depthattn --help` costs what `import depthattn` costs (torch and transformers' configuration code; the
    modeling code waits for the first config: tests/test_registration.py); the CLI must not add an extra's import on
    top (each command imports its extras where it runs), nor the modules of commands not run
    (`python -m benchmarks.startup` times it against `transformers --help`)."""
    code = ("import sys, depthattn.cli\ntry:\n    depthattn.cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    loaded = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    extras = {m.split(".")[0] for m in loaded} & set(OPTIONAL_EXTRAS)
    assert "usage: depthattn" in done.stdout and not extras, extras
    commands = [m for m in loaded if m.startswith("depthattn.commands.")]
    assert commands == ([] if argv == ["--help"] else [f"depthattn.commands.{COMMANDS[argv[0]][0]}"])


def test_every_command_has_its_help(capsys):
    with pytest.raises(SystemExit, match="0"):
        main(["--help"])
    listed = capsys.readouterr().out
    for name in COMMANDS:
        assert f"\n    {name}" in listed
        with pytest.raises(SystemExit, match="0"):
            main([name, "--help"])
        assert capsys.readouterr().out.startswith(f"usage: depthattn {name} ")


def test_an_option_a_command_does_not_take_is_shown_with_that_commands_usage(capsys):
    with pytest.raises(SystemExit, match="2"):
        main(["generate", "runs/x/final", "Once upon", "--prompt", "a time"])
    error = capsys.readouterr().err
    assert error.startswith("usage: depthattn generate ") and "model prompt" in error, error
    assert "depthattn generate: error: unrecognized arguments: --prompt a time" in error, error


def test_train_help_says_the_batch_size_is_per_process(capsys):
    with pytest.raises(SystemExit, match="0"):
        main(["train", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "train.batch_size is per process and micro-step: under torchrun a step takes batch_size x grad_accum x " \
           "processes sequences" in helped
    assert "--tasks-per-cell splits" in helped


def test_generate_help_shows_the_sampling_defaults(capsys):
    with pytest.raises(SystemExit, match="0"):
        main(["generate", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    for option, default in (("--temperature", "0.8"), ("--top-k", "50"), ("--seed", "0"), ("--max-new-tokens", "64")):
        assert re.search(rf"{option} \S+ [^-]*\(default {re.escape(default)}\)", helped), option


def test_generate_prints_no_weights_loading_bar(tmp_path):
    """transformers draws a "Loading weights" bar at every load; a fresh process, as the bar's switch is global."""
    from depthattn.data.tokenizer import word_level_tokenizer
    from tests.helpers import tiny_model

    tokenizer = word_level_tokenizer(("the", "a", "of"))
    tokenizer.save_pretrained(tmp_path)
    tiny_model(vocab_size=len(tokenizer)).save_pretrained(tmp_path)
    env = {name: value for name, value in os.environ.items() if name != "HF_HUB_DISABLE_PROGRESS_BARS"}  # bars on
    done = subprocess.run([sys.executable, "-m", "depthattn", "generate", str(tmp_path), "the", "--max-new-tokens",
                           "2"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.startswith("the"), done.stderr
    assert "Loading weights" not in done.stderr and "%|" not in done.stderr, done.stderr


def test_a_refused_run_leaves_no_folder_behind(tiny_data, tmp_path, capsys):
    out_dir = tmp_path / "new" / "run"
    for refused, message in ((["--model.overrides.hidden_size", "30"], "head_dim is not set"),  # once the data is read
                             (["--data.path", str(tmp_path / "nowhere")], "no manifest.json")):
        assert main(["train", "--data.path", str(tiny_data), "--train.out_dir", str(out_dir), *refused]) == 1
        assert message in capsys.readouterr().err
        assert not (tmp_path / "new").exists()
    (tmp_path / "new").mkdir()  # a folder that was there stays
    assert main(["train", "--data.path", str(tmp_path / "nowhere"), "--train.out_dir", str(out_dir)]) == 1
    assert (tmp_path / "new").is_dir() and not out_dir.exists()


def test_generate_with_a_prompt_that_fills_the_context_asks_for_a_shorter_prompt(tiny_data, tmp_path, capsys):
    import re

    from tests.faults.conftest import train_args

    assert main(train_args(tiny_data, tmp_path / "run", 1, 1, "--model.max_position_embeddings", "32")) == 0
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "run" / "final"), "the end " * 40, "--max-new-tokens", "4"]) == 1
    refused = re.search(r"a prompt of (\d+) tokens and 4 new ones exceed the model's context of 32 tokens "
                        r"\(max_position_embeddings\): the prompt alone fills it; shorten the prompt by at least "
                        r"(\d+) tokens", capsys.readouterr().err)
    assert refused and int(refused[2]) == int(refused[1]) + 4 - 32


def test_plot_names_a_metrics_file_given_here_by_its_folder(demo_dir, tmp_path, monkeypatch):
    from depthattn.evaluate import plots

    drawn = {}
    monkeypatch.setattr(plots, "plot_loss_curves", lambda runs, out, *args, **kwargs: drawn.update(runs) or out)
    monkeypatch.chdir(demo_dir / "vanilla")
    assert main(["plot", "metrics.jsonl", str(demo_dir / "depth_attention"), "--out", str(tmp_path / "c.png")]) == 0
    assert sorted(drawn) == ["depth_attention", "vanilla"]  # the first was "" in the legend
