"""Bad command-line values: each a clear one-line error or a documented behaviour."""

import pytest
import torch

from depthattn.cli import main
from depthattn.data.tokenizer import start_token_id
from depthattn.evaluate.harness import run_harness
from depthattn.loading import open_model


def test_generate_with_an_empty_prompt_starts_a_document(tiny_run, capsys):
    assert main(["generate", str(tiny_run / "final"), "", "--max-new-tokens", "8", "--temperature", "0"]) == 0
    printed = capsys.readouterr().out.removesuffix("\n")
    # the greedy continuation of the document-start token, one full forward per token (no cache)
    opened = open_model(tiny_run / "final")
    ids = torch.tensor([[start_token_id(opened.tokenizer)]])
    with torch.no_grad():
        for _ in range(8):
            ids = torch.cat([ids, opened.model(ids).logits[:, -1:].argmax(-1)], dim=1)
    assert printed == opened.tokenizer.decode(ids[0], skip_special_tokens=True)


@pytest.mark.parametrize("argv, message", [
    (["generate", "{run}/final", "hi", "--temperature", "-1"], "a finite --temperature >= 0 (0: greedy)"),
    (["eval", "{run}/final", "--data", "{data}", "--block-size", "0"], "block size must be >= 1, got 0"),
    (["costs", "--preset", "tiny", "--num-loops", "0"], "--num-loops must be >= 1, got 0"),
    pytest.param(["eval", "{run}/final", "--data", "{data}", "--device", "cuda"], "CUDA is not available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_bad_values_are_one_clear_line(tiny_run, tiny_data, capsys, argv, message):
    assert main([arg.format(run=tiny_run, data=tiny_data) for arg in argv]) == 1
    assert message in capsys.readouterr().err


def test_harness_names_a_task_that_does_not_fit_the_context(tiny_run):
    pytest.importorskip("lm_eval")
    with pytest.raises(ValueError, match=r"depthattn_shakespeare_mc \(up to (\d+) tokens\) score continuations longer "
                                         r"than the context of 8 tokens.*pass --max-length \1 or more"):
        run_harness(tiny_run / "final", tasks=["depthattn_shakespeare_mc"], max_length=8, limit=4, any_corpus=True)


def test_a_read_only_file_system_is_one_line_naming_the_path(tiny_data, tmp_path, capsys):
    from tests.faults.conftest import train_args
    from tests.faults.test_full_disk import small_disk

    with small_disk(tmp_path / "disk", "1m", options="ro") as disk:
        assert main(train_args(tiny_data, disk / "run")) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"depthattn train: error: Read-only file system: {disk / 'run'}"]


def test_a_permission_error_is_one_line_naming_the_path(tmp_path, capsys, monkeypatch):
    import depthattn.commands.costs as costs

    def denied(args):
        raise PermissionError(13, "Permission denied", str(tmp_path / "run" / ".x.tmp"))

    monkeypatch.setattr(costs, "run", denied)
    assert main(["costs", "--preset", "3b"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"depthattn costs: error: permission denied: {tmp_path / 'run' / '.x.tmp'}; check the permissions of "
        f"{tmp_path / 'run'} or choose another folder")


def test_ctrl_c_outside_training_is_one_line(monkeypatch, capsys):
    import depthattn.commands.costs as costs

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(costs, "run", interrupted)
    assert main(["costs", "--preset", "3b"]) == 130
    assert capsys.readouterr().err.strip() == "depthattn: interrupted"


def test_a_model_field_of_the_wrong_type_is_named(tiny_data, tmp_path, capsys):
    from tests.faults.conftest import train_args

    assert main(train_args(tiny_data, tmp_path / "run", 2, 2, "--model.overrides.hidden_size", "abc")) == 1
    assert "hidden_size must be a positive integer, got 'abc'" in capsys.readouterr().err


def test_a_section_that_is_a_value_is_named_even_with_overrides(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('model = "tiny"\n')
    assert main(["train", "--config", str(config), "--model.overrides.hidden_size", "32"]) == 1
    assert "[model] must be a table of keys, got 'tiny'" in capsys.readouterr().err


def test_a_prompt_that_is_not_utf8_is_named(tiny_data, tmp_path, capsys):
    from tests.faults.conftest import train_args

    assert main(train_args(tiny_data, tmp_path / "run", 1, 1)) == 0
    capsys.readouterr()
    prompt = b"caf\xe9 \xff".decode("utf-8", errors="surrogateescape")  # as such bytes in argv reach Python
    assert main(["generate", str(tmp_path / "run" / "final"), prompt, "--max-new-tokens", "2"]) == 1
    assert "the prompt is not valid UTF-8 text" in capsys.readouterr().err


def test_generating_past_the_models_context_is_refused_with_the_room_left(tiny_data, tmp_path, capsys):
    from tests.faults.conftest import train_args

    assert main(train_args(tiny_data, tmp_path / "run", 1, 1, "--model.max_position_embeddings", "64")) == 0
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "run" / "final"), "", "--max-new-tokens", "100000"]) == 1
    assert ("a prompt of 1 tokens and 100000 new ones exceed the model's context of 64 tokens "
            "(max_position_embeddings): ask for at most 63 new tokens") in capsys.readouterr().err


def test_files_that_are_folders_or_not_utf8_are_named(tiny_run, tmp_path, capsys):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café au lait".encode("latin-1"))
    cases = [
        (["train", "--config", str(tmp_path)], f"training config {tmp_path} is a folder, not a file"),
        (["train", "--config", str(latin1)], f"{latin1} is not UTF-8 text, so not a TOML file"),
        (["eval", str(tiny_run / "final"), "--text", str(tmp_path)], f"text file {tmp_path} is a folder, not a file"),
        (["eval", str(tiny_run / "final"), "--text", str(latin1)], f"{latin1}: invalid UTF-8 at byte offset 3"),
    ]
    for argv, message in cases:
        assert main(argv) == 1, argv
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and message in error[0], (argv, error)


def test_a_depth_map_out_that_is_a_file_is_named(tiny_run, tiny_data, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    assert main(["depth-map", str(tiny_run / "final"), "--data", str(tiny_data), "--out", str(blocker),
                 "--samples", "1", "--seq-len", "16"]) == 1
    assert f"--out {blocker} is a file; name a folder" in capsys.readouterr().err
