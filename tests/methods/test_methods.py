"""Each cross-layer baseline's own behaviour (docs/method.md#baselines): its documented initialisation, how it starts,
its parameter count. What every method must do (train, decode with a cache, save and load, declare its costs) is
tests/methods/test_conformance.py."""

import math
import sys

import pytest
import torch

from depthattn import DepthAttentionForCausalLM, count_parameters
from depthattn.methods import DESCRIPTIONS, INFERENCE_STATE, METHODS
from depthattn.ops.mhc import sinkhorn
from tests.helpers import perturb_method, tiny_config, tiny_model, with_backbone_of

# Each method in tiny settings that exercise its options (4 layers = 8 sublayers); what every method must do runs over
# tests/helpers.py's `method_cases()`, from the registry.
METHOD_SETTINGS = {
    "denseformer": dict(cross_layer="denseformer"),
    "denseformer-k2p2": dict(cross_layer="denseformer", denseformer_dilation=2, denseformer_period=2),
    "attnres": dict(cross_layer="attnres", attnres_block_size=3),
    "mhc": dict(cross_layer="mhc", mhc_streams=3),
    "hyper_connections": dict(cross_layer="hyper_connections", hc_streams=3),
    "value_residual": dict(cross_layer="value_residual"),
    "value_embeddings": dict(cross_layer="value_embeddings"),  # tables on steps 0, 1, 2, 3: "0101"
    "value_embeddings-pattern": dict(cross_layer="value_embeddings", value_embedding_pattern=".0.1"),
    "mudd": dict(cross_layer="mudd"),
    "moda": dict(cross_layer="moda"),
    "moda-merged": dict(cross_layer="moda", moda_impl="merged"),
}
NAMES = list(METHOD_SETTINGS)
ATOL = 1e-5


def method_model(name, perturbed=True, **overrides):
    model = tiny_model(**{**METHOD_SETTINGS[name], **overrides})
    return perturb_method(model) if perturbed else model


def vanilla_and(name, **overrides):
    """A vanilla model and a freshly initialised `name` model with the same backbone weights."""
    vanilla = tiny_model(cross_layer="vanilla")
    return vanilla, with_backbone_of(tiny_model(**{**METHOD_SETTINGS[name], **overrides}), vanilla)


def _cross_layer(model):
    return model.model.cross_layer


INIT_CHECKS = {  # the documented initialisation of each method's parameters
    "denseformer": lambda m: True,  # identity: checked by behaviour (exactly vanilla)
    "attnres": lambda m: bool((m.query == 0).all() and (m.gain == 1).all() and (m.recency_bias == 3).all()),
    "mhc": lambda m: bool(
        (m.alpha == 0.01).all() and torch.allclose(torch.sigmoid(m.bias[:, :m.num_streams]), torch.tensor(1 / 3))
        and (m.bias[:, m.num_streams:] == 0).all() and (m.final_logits == 0).all()
        and 0.9 < m.phi.std() / 0.02 < 1.1),
    "hyper_connections": lambda m: bool(
        (m.scales == 0.01).all() and (m.w_pre == 0).all() and (m.w_post == 0).all() and (m.w_res == 0).all()
        and (m.gain == 1).all() and (m.static_post == 1).all()
        and torch.equal(m.static_res, torch.eye(3).expand_as(m.static_res))
        and torch.equal(m.static_pre.argmax(-1), torch.arange(8) % 3) and (m.static_pre.sum(-1) == 1).all()),
    "value_residual": lambda m: bool((m.lambdas == 0.5).all() and m.lambdas.shape == (3, 2)),
    "value_embeddings": lambda m: bool((m.lambdas == 0.5).all() and 0.9 < m.tables.std() / 0.02 < 1.1),
    "moda": lambda m: bool(0.9 < m.mlp_kv.std() / 0.02 < 1.1),
    "mudd": lambda m: all(
        (m.block_parameters(b)[1] == 0).all() and torch.equal(m.block_parameters(b)[2][:, -1], torch.ones(
            m.block_parameters(b)[2].shape[0])) and (m.block_parameters(b)[2][:, :-1] == 0).all()
        and 0.8 < m.block_parameters(b)[0].std() * 32 ** 0.5 < 1.2 for b in range(1, 5)),
}


@pytest.mark.parametrize("name", NAMES)
def test_fresh_models_and_models_loaded_from_a_vanilla_checkpoint_get_the_documented_init(name, tmp_path):
    vanilla, fresh = vanilla_and(name)
    vanilla.save_pretrained(tmp_path)
    loaded = DepthAttentionForCausalLM.from_pretrained(tmp_path, config=fresh.config)  # method keys missing
    check = INIT_CHECKS[fresh.config.cross_layer]
    assert check(_cross_layer(fresh)) and check(_cross_layer(loaded))
    ids = torch.randint(0, 97, (2, 7))
    for key, tensor in vanilla.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key
    if fresh.config.cross_layer in ("denseformer", "mudd"):
        assert torch.equal(loaded(ids).logits, vanilla(ids).logits)


@pytest.mark.parametrize("name", ["denseformer", "denseformer-k2p2", "mudd"])
def test_at_identity_init_is_exactly_vanilla(name):
    vanilla, model = vanilla_and(name)
    ids = torch.randint(0, 97, (2, 10))
    assert torch.equal(model(ids).logits, vanilla(ids).logits)
    assert not torch.equal(perturb_method(model)(ids).logits, vanilla(ids).logits)


def test_value_residual_starts_as_the_uniform_first_layer_depth_ablation():
    """lambda = (0.5, 0.5): V'_l = (V_0 + V_l) / 2, i.e. Depth-Attention with source {0} and a uniform mix."""
    vanilla, model = vanilla_and("value_residual")
    ablation = with_backbone_of(tiny_model(depth_stride=4, depth_mix="uniform"), vanilla)
    ids = torch.randint(0, 97, (2, 10))
    torch.testing.assert_close(model(ids).logits, ablation(ids).logits, rtol=0, atol=1e-6)
    assert (model(ids).logits - vanilla(ids).logits).abs().max() > 1e-2
    with torch.no_grad():  # lambda = (0, 1) turns it off
        _cross_layer(model).lambdas.copy_(torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(model(ids).logits, vanilla(ids).logits, rtol=0, atol=1e-6)


def test_value_embeddings_mix_a_table_row_of_each_token_into_the_chosen_values():
    vanilla, model = vanilla_and("value_embeddings-pattern")  # ".0.1": steps 1 and 3, tables 0 and 1
    ve = _cross_layer(model)
    assert ve.tables.shape == (2, 97, 16) and ve.lambdas.shape == (2, 2)
    ids = torch.randint(0, 97, (2, 10))
    assert (model(ids).logits - vanilla(ids).logits).abs().max() > 1e-3
    with torch.no_grad():  # lambda = (1, 0) turns it off
        ve.lambdas.copy_(torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(model(ids).logits, vanilla(ids).logits, rtol=0, atol=1e-6)
    with torch.no_grad():  # with the row of token t set, V' of step 1 is exactly that row wherever t occurs
        ve.lambdas.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
        ve.tables[0, 5] = torch.arange(16.0)
    cache = model(torch.tensor([[5, 7, 5]]), use_cache=True).cache
    values = cache.layers[1].values  # (1, Hkv, T, d): the mixed values
    assert torch.equal(values[0, :, 0].flatten(), torch.arange(16.0)) and torch.equal(values[0, :, 2], values[0, :, 0])


def test_value_embeddings_need_token_ids_and_a_valid_pattern():
    model = method_model("value_embeddings")
    with pytest.raises(ValueError, match="token ids"):
        model(inputs_embeds=torch.randn(1, 3, 32))
    for bad in ("0.1", "01x1", "1.1.", 12):
        with pytest.raises(ValueError, match="value_embedding_pattern"):
            tiny_config(cross_layer="value_embeddings", value_embedding_pattern=bad)
    from depthattn.methods.value_embeddings import speedrun_pattern
    assert speedrun_pattern(12) == "012......012"
    assert speedrun_pattern(8) == "012..012"
    assert speedrun_pattern(4) == "0101"


def test_mudd_reads_queries_keys_and_values_from_their_own_ways():
    vanilla, model = vanilla_and("mudd")
    mudd = _cross_layer(model)
    ids = torch.randint(0, 97, (2, 10))
    for way in range(3):  # a dynamic weight on one way only changes the output
        with torch.no_grad():
            for block in range(1, 4):
                _, proj_out, _ = mudd.block_parameters(block)
                proj_out.zero_()
                proj_out.view(proj_out.shape[0], 4, -1)[:, way].normal_(0, 1)
        assert (model(ids).logits - vanilla(ids).logits).abs().max() > 1e-3, way
    x = torch.randn(2, 5, 32)
    assert mudd.weights(x, 1).shape == (2, 5, 4, 2) and mudd.weights(x, 4).shape == (2, 5, 1, 5)


def test_mhc_starts_near_a_plain_residual_and_exactly_at_alpha_zero():
    ids = torch.randint(0, 97, (2, 10))
    vanilla, model = vanilla_and("mhc")
    difference = (model(ids).logits - vanilla(ids).logits).abs().max()
    assert 0 < difference < 1e-3  # alpha = 0.01: the dynamic mappings are live but small
    vanilla, model = vanilla_and("mhc", mhc_alpha_init=0.0)
    torch.testing.assert_close(model(ids).logits, vanilla(ids).logits, rtol=0, atol=ATOL)


@pytest.mark.parametrize("perturbed", [False, True])
def test_mhc_residual_mix_is_doubly_stochastic(perturbed):
    mhc = _cross_layer(method_model("mhc", perturbed=perturbed))  # 20 Sinkhorn iterations
    streams = torch.randn(2, 5, 3, 32)
    for sublayer in range(mhc.num_sublayers):
        pre, post, res = mhc.coefficients(streams, sublayer)
        assert (res >= 0).all() and (pre > 0).all() and (post > 0).all() and res.shape == (2, 5, 3, 3)
        torch.testing.assert_close(res.sum(-1), torch.ones(2, 5, 3), rtol=0, atol=1e-6)
        torch.testing.assert_close(res.sum(-2), torch.ones(2, 5, 3), rtol=0, atol=1e-6)
    assert torch.allclose(sinkhorn(torch.zeros(3, 3), 1), torch.full((3, 3), 1 / 3))


def test_hyper_connections_start_as_the_static_residual_and_near_vanilla():
    vanilla, model = vanilla_and("hyper_connections")
    hc = _cross_layer(model)
    pre, post, res = hc.coefficients(torch.randn(2, 4, 3, 32), 4)
    assert torch.equal(pre, torch.tensor([0.0, 1.0, 0.0]).expand(2, 4, 3))  # e_{4 mod 3}
    assert torch.equal(post, torch.ones(2, 4, 3)) and torch.equal(res, torch.eye(3).expand(2, 4, 3, 3))
    ids = torch.randint(0, 97, (2, 10))
    # identical streams; the final sum is 3x the vanilla hidden state, which the final RMSNorm undoes up to eps
    assert (model(ids).logits - vanilla(ids).logits).abs().max() < 1e-2


def test_attnres_starts_with_the_recency_bias_weights():
    attnres = _cross_layer(method_model("attnres", perturbed=False))
    assert [attnres.snapshot_count(s) for s in range(9)] == [0, 1, 1, 1, 2, 2, 2, 3, 3]
    candidates = torch.randn(3, 2, 4, 32)  # two snapshots and the running stream
    weights = attnres.weights(candidates, 5)
    expected = torch.tensor([1.0, 1.0, math.e**3]) / (2 + math.e**3)
    torch.testing.assert_close(weights, expected[:, None, None].expand(3, 2, 4))


PARAMETER_COUNTS = {  # tiny config: L = 4, D = 32, 8 sublayers
    "denseformer": 4 * 7 // 2,                       # L(L+3)/2
    "denseformer-k2p2": (2 // 2 + 1) + (4 // 2 + 1),  # DWAs after blocks 2 and 4
    "attnres": 8 * (2 * 32 + 1),
    "mhc": 8 * ((2 * 3 + 9) * (3 * 32 + 1) + 3) + 3,
    "hyper_connections": 8 * (32 * (3 + 3) + 2 + 2 * 3 + 9),
    "value_residual": 2 * 3,
    "value_embeddings": 2 * 97 * 16 + 2 * 4,  # tables "0101": 2 x vocab x d_kv, 2 lambdas per chosen step
    "value_embeddings-pattern": 2 * 97 * 16 + 2 * 2,
    # after block i of 4: C = 4 ways (1 after the last), n = i + 1 sources, K = C n (4 C n after the last)
    "mudd": sum(32 * K + K * C * n + C * n for C, n, K in [(4, 2, 8), (4, 3, 12), (4, 4, 16), (1, 5, 20)]),
    "moda": 3 * 2 * 16 * 32,  # the MLP-slot key and value projections of layers 0-2 (layer 3's is never read)
    "moda-merged": 3 * 2 * 16 * 32,
}


@pytest.mark.parametrize("name", PARAMETER_COUNTS)
def test_parameter_count(name):
    counts = count_parameters(method_model(name, perturbed=False))
    vanilla = count_parameters(tiny_model(cross_layer="vanilla"))
    assert counts["extra_over_vanilla"] == PARAMETER_COUNTS[name]
    assert counts["total"] == vanilla["total"] + PARAMETER_COUNTS[name] and vanilla["extra_over_vanilla"] == 0
    assert count_parameters(tiny_model())["extra_over_vanilla"] == 0  # Depth-Attention adds none


def test_every_method_states_its_inference_state():
    assert set(INFERENCE_STATE) == set(METHODS) == {"vanilla", "depth_attention", *METHODS}
    for name, cls in METHODS.items():
        assert "Across tokens: none" in INFERENCE_STATE[name]
        doc = sys.modules[DESCRIPTIONS[name].__module__].__doc__ + sys.modules[cls.__module__].__doc__
        assert "arXiv" in doc and "Parameters" in doc and "nitialisation" in doc


def test_left_padded_batch_generation_with_a_hidden_state_method():
    model = method_model("mhc")
    prompts = [torch.randint(1, 97, (n,)).tolist() for n in (3, 6)]
    ids = torch.tensor([[0] * 3 + prompts[0], prompts[1]])
    mask = (torch.arange(6)[None] >= torch.tensor([[3], [0]])).long()
    batched = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    for i, prompt in enumerate(prompts):
        alone = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert batched[i, -4:].tolist() == alone[0, -4:].tolist()


def test_moda_describes_the_kernels_it_switches_between():
    """MoDA's description names its kernels without importing them; they are the ones its module switches to."""
    from depthattn.ops.moda import MODA_IMPLS

    described = DESCRIPTIONS["moda"]
    assert described.switch_values["moda_impl"] == tuple(MODA_IMPLS) == described.module_class().switch_values[
        "moda_impl"]
    with pytest.raises(ValueError, match=r"moda_impl must be one of 'reference', 'merged'; got 'merge' \(did you "
                                         r"mean 'merged'\?\)"):
        tiny_config(cross_layer="moda", moda_impl="merge")
