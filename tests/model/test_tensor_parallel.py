"""Tensor parallelism as Qwen3's (`base_model_tp_plan`): `from_pretrained(..., tp_plan="auto")` under torchrun with
2 gloo processes on CPU shards the heads and gives the unsharded model's logits and greedy tokens, for every
conformance case (tests/helpers.py's `method_cases`) whose method takes 2 ranks (`check_tensor_parallel`); the
others refuse them naming tensor_parallel_size."""

import json
import os
import sys

import pytest

from depthattn.methods import METHODS
from tests.helpers import method_cases, perturb_method, registered_toy, tiny_model
from tests.worlds import run_world

RANKS = 2


def test_two_processes_shard_the_heads_and_agree_with_the_whole_model(tmp_path, one_world):
    folders, refused = [], {}
    with registered_toy():
        for name, settings in method_cases().items():
            # a vocabulary the 2 processes divide: transformers before 5.21 refuses to shard lm_head otherwise
            model = tiny_model(vocab_size=96, **settings)
            try:
                METHODS[model.config.cross_layer].check_tensor_parallel(model.config, RANKS)
            except ValueError as error:
                refused[name] = str(error)
                continue
            perturb_method(model).save_pretrained(tmp_path / name)
            folders.append(str(tmp_path / name))
    assert all("tensor_parallel_size" in reason for reason in refused.values()), refused
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(RANKS),
               "-m", "tests.model.tensor_parallel_worker", *folders]
    # on CPU even where a GPU is: 2 ranks on one GPU make transformers' NCCL set-up fail
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = run_world(command, timeout=240, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULTS "))
    results = json.loads(line.removeprefix("RESULTS "))
    assert list(results) == folders
    for folder, check in results.items():
        assert check["q_rows_here"] == check["q_rows"] // RANKS, folder  # each rank holds its share of query heads
        assert check["max_logit_difference"] < 1e-5 and check["same_tokens"], (folder, check)


@pytest.mark.parametrize("plan", ["base_model_tp_plan", "base_model_pp_plan"])
def test_the_plans_name_modules_that_exist(plan):
    model = tiny_model()
    config_plan = getattr(model.config, plan)
    names = {name for name, _ in model.model.named_modules()}
    for pattern in config_plan:
        assert any(name == pattern or (pattern.replace("*", "0") == name) for name in names), pattern
