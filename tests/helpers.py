"""Tiny models and configs shared by the tests."""

import contextlib

import torch
from torch.utils.flop_counter import FlopCounterMode

import depthattn
from depthattn.evaluate import costs
from depthattn.methods import METHODS, register, unregister
from tests.methods.toy_method import ToyValueGain


def tiny_config(**overrides) -> depthattn.DepthAttentionConfig:
    settings = dict(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0,
    )
    settings.update(overrides)
    return depthattn.DepthAttentionConfig(**settings)


def tiny_model(dtype=torch.float32, seed=0, **overrides) -> depthattn.DepthAttentionForCausalLM:
    torch.manual_seed(seed)
    model = depthattn.DepthAttentionForCausalLM(tiny_config(**overrides)).to(dtype).eval()
    with torch.no_grad():  # norms away from 1 so that a q/k-norm bug cannot hide
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    return model


def perturb_method(model, scale=0.2, seed=1):
    """Move the method's parameters away from their initialisation, as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.model.cross_layer.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator).to(param))
    return model


def with_backbone_of(model, source):
    """Copy every backbone tensor of `source` (a model without method parameters) into `model`."""
    missing, unexpected = model.load_state_dict(source.state_dict(), strict=False)
    assert not unexpected and all(key.startswith("model.cross_layer.") for key in missing)
    return model


def method_model(settings: dict, perturbed: bool = True, **overrides) -> depthattn.DepthAttentionForCausalLM:
    """A tiny model of `settings` (and `overrides`), its method's parameters moved off their initialisation unless
    not `perturbed`."""
    model = tiny_model(**{**settings, **overrides})
    return perturb_method(model) if perturbed else model


def vanilla_and(settings: dict, **overrides):
    """A vanilla model and a freshly initialised model of `settings` with the same backbone weights."""
    vanilla = tiny_model(cross_layer="vanilla")
    return vanilla, with_backbone_of(tiny_model(**{**settings, **overrides}), vanilla)


def assert_documented_init(settings: dict, check, tmp_path):
    """`check(method module)` holds for a fresh model of `settings` and for one loaded from a vanilla checkpoint (the
    method's keys missing there), whose backbone is the checkpoint's. Returns (the vanilla model, the loaded one)."""
    vanilla, fresh = vanilla_and(settings)
    vanilla.save_pretrained(tmp_path)
    loaded = depthattn.DepthAttentionForCausalLM.from_pretrained(tmp_path, config=fresh.config)
    assert check(fresh.model.cross_layer) and check(loaded.model.cross_layer)
    for key, tensor in vanilla.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key
    return vanilla, loaded


def extra_parameters(settings: dict) -> int:
    """The parameters a tiny model of `settings` has beyond the vanilla model with its backbone (checked against the
    totals)."""
    counts = depthattn.count_parameters(tiny_model(**settings))
    vanilla = depthattn.count_parameters(tiny_model(cross_layer="vanilla"))
    assert vanilla["extra_over_vanilla"] == 0 and counts["total"] == vanilla["total"] + counts["extra_over_vanilla"]
    return counts["extra_over_vanilla"]


def prefill_then_decode(model, ids: torch.Tensor, prompt_len: int):
    """Logits of a cached prefill of ids[:, :prompt_len] and then one cached step per remaining token,
    concatenated along T (to compare with the uncached forward's), and the final cache."""
    out = model(ids[:, :prompt_len], use_cache=True)
    steps = [out.logits]
    for t in range(prompt_len, ids.shape[1]):
        out = model(ids[:, t:t + 1], cache=out.cache, use_cache=True)
        steps.append(out.logits)
    return torch.cat(steps, 1), out.cache


# FLOPs as torch.utils.flop_counter.FlopCounterMode counts them: matmul-like ops (its default registry: mm, bmm,
# addmm, ..., plus aten.mv, which it lacks), and elementwise ops with formulas of ours (a mul or add: 1 FLOP per
# output element; a sum or mean: 1 per input element).
aten = torch.ops.aten
FLOP_BATCH, FLOP_SEQ = 2, 6


def _mv_flop(matrix_shape, vector_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * matrix_shape[0] * matrix_shape[1]


def _out_numel(*args, out_shape=None, **kwargs) -> int:
    return out_shape.numel() if isinstance(out_shape, torch.Size) else 0


def _in_numel(shape, *args, out_shape=None, **kwargs) -> int:
    return shape.numel()


MATMUL = {aten.mv: _mv_flop}
ELEMENTWISE = {aten.mul: _out_numel, aten.add: _out_numel, aten.sum: _in_numel, aten.mean: _in_numel}


def counted_flops(model, mapping, ops=None) -> int:
    """FLOPs of one forward pass on FLOP_BATCH x FLOP_SEQ tokens, over the ops in `ops` (default: every counted op)."""
    ids = torch.randint(0, model.config.vocab_size, (FLOP_BATCH, FLOP_SEQ), generator=torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with torch.no_grad(), counter:
        model(input_ids=ids, use_cache=False)
    counts = counter.get_flop_counts().get("Global", {})
    return sum(v for op, v in counts.items() if ops is None or op in ops)


def flop_model(**overrides):
    """A model whose depth mixing is the reference's: its torch ops map one-to-one onto the analytic count (the
    fused forms compute the same values with other ops, e.g. bmm)."""
    torch.manual_seed(0)
    return depthattn.DepthAttentionForCausalLM(tiny_config(**{"depth_impl": "reference", **overrides})).eval()


def extra_flops_per_token(overrides, mapping, ops=None, patch=None) -> float:
    """Counted FLOPs per token of the model of `overrides` minus those of the vanilla model with its backbone;
    `patch(method)` changes the method module first."""
    method = flop_model(**overrides)
    if patch is not None:
        patch(method.model.cross_layer)
    vanilla = flop_model(**{**overrides, "cross_layer": "vanilla"})
    return (counted_flops(method, mapping, ops) - counted_flops(vanilla, mapping, ops)) / (FLOP_BATCH * FLOP_SEQ)


def assert_matmul_flops_exact(settings: dict):
    """The analytic matmul FLOPs per token of a model of `settings` are exactly those FlopCounterMode counts."""
    record = costs.method_costs(tiny_config(**settings))
    assert extra_flops_per_token(settings, MATMUL) == record["model_flops_per_token"]["matmul"]


def fixed_weight_flops(settings: dict, fix_weights) -> tuple[int, int, depthattn.DepthAttentionConfig]:
    """For a hidden-state method: (the FLOPs per token FlopCounterMode counts in the model with the mixing weights held
    fixed by `fix_weights(method module)` (so that norms, softmax, sigmoid and Sinkhorn, which the paper does not
    count, do not run), the analytic "mix" terms the model runs, the config); the model's terms also sum to its
    total."""
    config = tiny_config(**settings)
    record = costs.method_costs(config)
    mixing = sum(t["flops"] for t in record["flop_terms"] if t["model"] and t["role"] == "mix")
    assert record["model_flops_per_token"]["total"] == sum(t["flops"] for t in record["flop_terms"] if t["model"])
    return extra_flops_per_token(settings, {**MATMUL, **ELEMENTWISE}, patch=fix_weights), mixing, config


def assert_value_sum_flops(settings: dict):
    """For a method that mixes two value vectors per step (value residual, value embeddings): the elementwise FLOPs
    FlopCounterMode counts are the analytic ones but one add per mixed step (a 2-term weighted sum counts 2 * 2 d_kv
    by convention; the model runs 2 multiplies and 1 add)."""
    config = tiny_config(**settings)
    record = costs.method_costs(config)
    d_kv = config.num_key_value_heads * config.head_dim
    counted = extra_flops_per_token(settings, ELEMENTWISE, ops=set(ELEMENTWISE))
    mixed_steps = sum(METHODS[config.cross_layer](config).acts_at(u) for u in range(config.unrolled_depth))
    assert counted == record["model_flops_per_token"]["elementwise"] - d_kv * mixed_steps


def state_at_context(settings: dict, context: int = 1000) -> int:
    """Extra state in bytes (float32) at the peak of a prefill of `context` tokens (`depthattn.evaluate.costs`)."""
    record = costs.method_costs(tiny_config(**settings), context=context, dtype_bytes=4)
    return record["extra_state_bytes_at_context"]


def flop_weights(*shape) -> torch.Tensor:
    """Fixed mixing weights (FLOP_BATCH, FLOP_SEQ, *shape) for `fixed_weight_flops`, drawn outside the counter."""
    return torch.rand(FLOP_BATCH, FLOP_SEQ, *shape, generator=torch.Generator().manual_seed(0))


def fixed_stream_coefficients(method):
    """For `fixed_weight_flops`: a multi-stream method's (pre, post, res) coefficients held fixed."""
    n = method.num_streams
    fixed = (flop_weights(n), flop_weights(n), flop_weights(n, n))
    method.coefficients = lambda x, sublayer: fixed


# The conformance cases (tests/methods/test_conformance.py and every capability's test): every registered method at
# its defaults in 2 layers, each variant it declares (`checked_variants`) in 4 (their options need depth to show: 8
# sublayers), and a method registered from outside the package, the toy (tests/methods/toy_method.py), registered
# while a test runs (`registered_toy`).
TOY = "toy"


def method_cases(variants: bool = True) -> dict[str, dict]:
    """By case name, the config settings of each case (with `variants=False`: of each method at its defaults)."""
    cases = {}
    for name, method in METHODS.items():
        cases[name] = dict(cross_layer=name, num_hidden_layers=2)
        cases.update({f"{name}-{variant}": dict(cross_layer=name, **fields)
                      for variant, fields in method.checked_variants.items() if variants})
    return {**cases, TOY: dict(cross_layer=TOY, num_hidden_layers=2)}


@contextlib.contextmanager
def registered_toy():
    """The toy method registered (as an outside package's method would be) while the block runs."""
    register(TOY, ToyValueGain)
    try:
        yield TOY
    finally:
        unregister(TOY)
