"""Gradient (activation) checkpointing recomputes each decoder layer in the backward pass: same gradients, for every
conformance case (tests/helpers.py's `method_cases`), flat and looped. Reentrant checkpointing gives them too where
the method declares it safe (`reentrant_checkpointing_safe`), and is refused elsewhere."""

import pytest
import torch

from depthattn.methods import METHODS
from tests.helpers import perturb_method, tiny_model


def gradients(settings: dict, checkpointing: dict | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    model = perturb_method(tiny_model(**settings)).train()
    if checkpointing is not None:
        model.activation_checkpointing_enable(checkpointing or None)
        assert all(layer.gradient_checkpointing for layer in model.model.layers)
    model(ids, labels=ids).loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}


def assert_same_gradients(got: dict, expected: dict):
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("looped", [False, True])
def test_same_gradients_with_checkpointing(method_settings, looped):
    # looped: 2 layers run twice, the unrolled depth of the variants' 4 layers
    settings = {**method_settings, "num_hidden_layers": 2, "num_loops": 2} if looped else method_settings
    assert_same_gradients(gradients(settings, {}), gradients(settings, None))


def test_reentrant_checkpointing_gives_the_same_gradients_or_is_refused(method_settings):
    # reentrant checkpointing would silently drop the gradients that flow beside a layer's positional tensor inputs
    # (depth states, a stream object)
    if not METHODS[method_settings["cross_layer"]].reentrant_checkpointing_safe:
        with pytest.raises(ValueError, match="use_reentrant=True would lose the gradients"):
            tiny_model(**method_settings).activation_checkpointing_enable({"use_reentrant": True})
        return
    assert_same_gradients(gradients(method_settings, {"use_reentrant": True}), gradients(method_settings, None))


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
