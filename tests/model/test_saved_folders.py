"""Folders saved by an earlier depthattn still load and give their logits: tests/model/saved_927d8db/ holds tiny
models of every method family, saved at commit 927d8db (before the method protocols were split) by its make.py,
each with the logits that code computed (expected.safetensors)."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import depthattn  # noqa: F401  (registers the model with the Auto classes)

SAVED = Path(__file__).parent / "saved_927d8db"


def check_logits(model, expected):
    with torch.no_grad():
        logits = model(expected["input_ids"]).logits
    # float32 on another CPU sums in another order: within 2e-5 of the largest logit, below a real change (next test)
    torch.testing.assert_close(logits, expected["logits"], rtol=0, atol=2e-5 * expected["logits"].abs().max().item())


@pytest.mark.parametrize("name", sorted(p.name for p in SAVED.iterdir() if p.is_dir()))
def test_a_folder_saved_before_loads_and_gives_its_logits(name):
    model = AutoModelForCausalLM.from_pretrained(SAVED / name).eval()
    check_logits(model, load_file(str(SAVED / name / "expected.safetensors")))


@pytest.mark.parametrize("name", ["depth_bias", "value_residual", "mudd", "moda"])
def test_one_mixing_weight_moved_by_1e_3_fails_the_check(name):
    model = AutoModelForCausalLM.from_pretrained(SAVED / name).eval()
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "cross_layer" in n).view(-1)[0] += 1e-3
    with pytest.raises(AssertionError):
        check_logits(model, load_file(str(SAVED / name / "expected.safetensors")))


def test_every_method_family_is_covered():
    assert {"vanilla", "depth_attention", "depth_bias", "value_residual", "mudd", "hyper_connections",
            "moda"} <= {p.name for p in SAVED.iterdir()}
