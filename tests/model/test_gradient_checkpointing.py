"""Gradient (activation) checkpointing recomputes each decoder layer in the backward pass: same gradients."""

import pytest
import torch

from tests.helpers import METHOD_SETTINGS, tiny_model

CASES = {"depth_attention": dict(depth_stride=1), "depth_bias": dict(depth_stride=1, depth_score_bias=True),
         "looped": dict(num_loops=2), "value_residual": METHOD_SETTINGS["value_residual"],
         "mhc": METHOD_SETTINGS["mhc"], "attnres": METHOD_SETTINGS["attnres"]}


@pytest.mark.parametrize("case", CASES)
def test_same_gradients_with_checkpointing(case):
    ids = torch.randint(0, 97, (2, 9))
    grads = []
    for checkpointing in (False, True):
        model = tiny_model(**CASES[case]).train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert all(layer.gradient_checkpointing for layer in model.model.layers)
        model(ids, labels=ids).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_reentrant_checkpointing_is_refused_where_state_flows_beside_the_layer_inputs():
    # it would silently drop the gradients that flow through the depth states (not positional tensors)
    for settings in (dict(), METHOD_SETTINGS["mhc"]):
        with pytest.raises(ValueError, match="use_reentrant=True would lose the gradients"):
            tiny_model(**settings).activation_checkpointing_enable({"use_reentrant": True})


def test_reentrant_checkpointing_of_the_vanilla_decoder_gives_the_same_gradients():
    ids = torch.randint(0, 97, (2, 9))
    grads = []
    for kwargs in (None, {"use_reentrant": True}):
        model = tiny_model(cross_layer="vanilla").train()
        if kwargs:
            model.activation_checkpointing_enable(kwargs)
        model(ids, labels=ids).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_training_option_gives_the_same_losses(tiny_data, tmp_path):
    from depthattn.run_metrics import read_metrics
    from depthattn.train import TrainConfig, train

    losses = []
    for checkpointing in (False, True):
        out = tmp_path / str(checkpointing)
        train(TrainConfig.from_dict({
            "model": {"overrides": {"hidden_size": 32, "intermediate_size": 64}},
            "data": {"path": str(tiny_data), "seq_len": 32},
            "train": {"out_dir": str(out), "steps": 3, "batch_size": 4, "eval_every": 3, "eval_batches": 1,
                      "checkpoint_every": 3, "progress": False, "activation_checkpointing": checkpointing}}))
        losses.append([r["loss"] for r in read_metrics(out / "metrics.jsonl")])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
