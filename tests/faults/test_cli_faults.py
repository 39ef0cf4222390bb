"""Bad command-line values: each a clear one-line error or a documented behaviour."""

import pytest
import torch

from depthattn.cli import main
from depthattn.evaluate.harness import run_harness


def test_generate_with_an_empty_prompt_starts_a_document(tiny_run, capsys):
    assert main(["generate", str(tiny_run / "final"), "", "--max-new-tokens", "8", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.strip()


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
        run_harness(tiny_run / "final", tasks=["depthattn_shakespeare_mc"], max_length=8, limit=4)
