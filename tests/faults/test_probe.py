"""A user's bad inputs, command by command, each a one-line error naming the problem: the fault probe's cases (a
session ran about ninety, by hand, as a new user would; the ones that printed tracebacks were fixed and are tested
where they were fixed, the rest are here)."""

import pytest

from depthattn.cli import main

T = ["--model.overrides.hidden_size", "32", "--model.overrides.intermediate_size", "64",
     "--model.overrides.num_hidden_layers", "2", "--data.seq_len", "32", "--train.batch_size", "2",
     "--train.progress", "false", "--optim.warmup_steps", "1"]

CASES = {  # name: (argv with {data}, {model}, {tmp} placeholders, what the one line says)
    "prepare a missing file": (["prepare", "--out", "{tmp}/d", "--input", "{tmp}/nonexistent.txt"],
                               "input file not found: {tmp}/nonexistent.txt"),
    "prepare a binary file": (["prepare", "--out", "{tmp}/d", "--input", "{tmp}/binary.bin"],
                              "unsupported input file type: {tmp}/binary.bin"),
    "prepare an empty folder": (["prepare", "--out", "{tmp}/d", "--input", "{tmp}/empty"],
                                "input folder {tmp}/empty holds no files"),
    "prepare negative workers": (["prepare", "--out", "{tmp}/d", "--workers", "-3"], "workers must be at least 1"),
    "prepare a folder without tokenizer": (["prepare", "--out", "{tmp}/d", "--tokenizer", "{tmp}/empty"],
                                           "{tmp}/empty holds no tokenizer.json"),
    "train on no dataset": (["train", "--data.path", "{tmp}/nonexist", "--train.out_dir", "{tmp}/r", *T],
                            "no manifest.json in {tmp}/nonexist"),
    "train zero steps": (["train", "--data.path", "{data}", "--train.steps", "0", *T],
                         "train.steps must be > 0 and finite, got 0"),
    "train steps abc": (["train", "--data.path", "{data}", "--train.steps", "abc", *T],
                        "override --train.steps: 'abc' is not a valid int"),
    "train lr nan": (["train", "--data.path", "{data}", "--optim.lr", "nan", *T], "optim.lr must be > 0 and finite"),
    "train unknown key": (["train", "--data.path", "{data}", "--train.bogus_key", "1", *T],
                          "unknown key 'bogus_key'"),
    "train fractional batch": (["train", "--data.path", "{data}", "--train.batch_size", "2.5"],
                               "'2.5' is not a valid int"),
    "train a missing config": (["train", "--config", "{tmp}/nonexistent.toml"],
                               "training config {tmp}/nonexistent.toml does not exist"),
    "train a TOML syntax error": (["train", "--config", "{tmp}/syntax.toml"], "{tmp}/syntax.toml is not valid TOML"),
    "train a value of the wrong type": (["train", "--config", "{tmp}/wrongtype.toml"],
                                       "[train]: steps must be of type int, got 'three'"),
    "generate from no folder": (["generate", "{tmp}/nonexist", "hi"], "model folder {tmp}/nonexist does not exist"),
    "generate a negative count": (["generate", "{model}", "hi", "--max-new-tokens", "-1"],
                                  "need --max-new-tokens >= 1"),
    "generate at temperature nan": (["generate", "{model}", "hi", "--temperature", "nan"],
                                    "a finite --temperature >= 0"),
    "generate with an unknown backend": (["generate", "{model}", "hi", "--compile", "nosuchbackend"],
                                         "unknown --compile backend 'nosuchbackend'"),
    "eval an empty text": (["eval", "{model}", "--text", "{tmp}/empty.txt"], "hold no text, so there is nothing"),
    "eval block size 0": (["eval", "{model}", "--text", "{tmp}/some.txt", "--block-size", "0"],
                          "block size must be >= 1, got 0"),
    "eval a block past the context": (["eval", "{model}", "--text", "{tmp}/some.txt", "--block-size", "100000"],
                                      "block size 100000 exceeds the model's max_position_embeddings"),
    "eval stride past the block": (["eval", "{model}", "--text", "{tmp}/some.txt", "--block-size", "16", "--stride",
                                    "32"], "stride must lie in [1, block size 16], got 32"),
    "depth-map zero samples": (["depth-map", "{model}", "--data", "{data}", "--out", "{tmp}/dm", "--samples", "0"],
                               "--samples and --seq-len must be >= 1"),
    "depth-map an unknown split": (["depth-map", "{model}", "--data", "{data}", "--out", "{tmp}/dm", "--split",
                                    "bogus"], "unknown split 'bogus'"),
    "depth-map on a CPU asked for CUDA": (["depth-map", "{model}", "--data", "{data}", "--out", "{tmp}/dm",
                                          "--device", "cuda"], "CUDA is not available on this machine"),
}


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "some.txt").write_text("To be, or not to be, that is the question. " * 20)
    (tmp_path / "syntax.toml").write_text("[train\nsteps = 3\n")
    (tmp_path / "wrongtype.toml").write_text('[train]\nsteps = "three"\n')
    return tmp_path


@pytest.mark.parametrize("case", CASES)
def test_a_bad_input_is_one_line_naming_it(case, inputs, tiny_data, tiny_run, capsys):
    if "cuda" in case:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    argv, message = CASES[case]
    fill = dict(data=str(tiny_data), model=str(tiny_run / "final"), tmp=str(inputs))
    assert main([arg.format(**fill) for arg in argv]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"depthattn {argv[0]}: error: ") and message.format(**fill) in error, error
