"""Checkpoints of the Depth-Attention reference implementation (a Llama-based LLaMA-Factory fork) convert so that
our uncached logits equal what its training path computes (docs/method.md#the-reference-implementations-checkpoints).

The expected logits come from a plain loop over layers, positions and heads written here from that description:
q-norm before the rotation, k-norm after it, depth scores of the group-mean query against each source's normed
rotated key, softmax over sources and self in float32, mixed values passed on to later layers."""

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from depthattn import DepthAttentionForCausalLM
from depthattn.cli import main

SHAPE = dict(vocab_size=64, hidden_size=64, head_dim=16, intermediate_size=96, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=10000.0)
# Tolerances relative to the largest logit, from differences measured on an AMD EPYC over 8 seeds x 5 cases: the
# converted model's float32 logits differ from its float64 ones by up to 2.5e-6 of it, and between 1 and 2 threads
# by up to 2.8e-6; its float64 logits differ from the float64 loop by up to 2.2e-7 (its RoPE tables are float32).
# Ten times those; moving one weight by 1e-3 changes the logits by more (test_a_small_real_change_fails).
TOLERANCE = {torch.float32: 2.8e-5, torch.float64: 2.2e-6}


def write_reference_checkpoint(folder, seed=0, **settings):
    """A folder as the reference implementation saves it: a Llama config with its keys, Llama tensor names plus
    q_norm / k_norm, and the lm_head_layernorm it creates but never uses."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return 0.2 * torch.randn(*shape, generator=generator)

    def norm(size):
        return 0.5 + torch.rand(size, generator=generator)  # away from 1, so that placement matters

    h, d, q_heads, kv_heads = SHAPE["hidden_size"], SHAPE["head_dim"], SHAPE["num_attention_heads"], \
        SHAPE["num_key_value_heads"]
    weights = {"model.embed_tokens.weight": rand(SHAPE["vocab_size"], h), "model.norm.weight": norm(h),
               "lm_head.weight": rand(SHAPE["vocab_size"], h), "lm_head_layernorm.weight": norm(h)}
    for i in range(SHAPE["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        weights.update({
            layer + "self_attn.q_proj.weight": rand(q_heads * d, h),
            layer + "self_attn.k_proj.weight": rand(kv_heads * d, h),
            layer + "self_attn.v_proj.weight": rand(kv_heads * d, h),
            layer + "self_attn.o_proj.weight": rand(h, q_heads * d),
            layer + "mlp.gate_proj.weight": rand(SHAPE["intermediate_size"], h),
            layer + "mlp.up_proj.weight": rand(SHAPE["intermediate_size"], h),
            layer + "mlp.down_proj.weight": rand(h, SHAPE["intermediate_size"]),
            layer + "input_layernorm.weight": norm(h), layer + "post_attention_layernorm.weight": norm(h),
        })
        if settings.get("use_qk_norm", True):
            weights[layer + "self_attn.q_norm.weight"] = norm(d)
            weights[layer + "self_attn.k_norm.weight"] = norm(d)
    folder.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 256,
              "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
              "scale_embeds": False, **SHAPE, **settings}
    (folder / "config.json").write_text(json.dumps(config))
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return weights


def rms_norm(x, weight=None):
    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + SHAPE["rms_norm_eps"])
    return x if weight is None else weight * x


def rotate(x, position):
    """RoPE of one head vector at one position (the rotate-half convention)."""
    d = x.shape[-1]
    angles = position / SHAPE["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = torch.cat([angles.cos(), angles.cos()]), torch.cat([angles.sin(), angles.sin()])
    return x * cos + torch.cat([-x[d // 2:], x[:d // 2]]) * sin


def reference_logits(weights, ids, depth: bool, stride: int, window: int, qk_norm: bool = True):
    w = {k: v.double() for k, v in weights.items()}
    d, q_heads, kv_heads = SHAPE["head_dim"], SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"]
    group = q_heads // kv_heads
    layers = SHAPE["num_hidden_layers"]
    x = w["model.embed_tokens.weight"][ids]  # (T, D)
    length = len(ids)
    stored = []  # per layer: (normed rotated keys, values passed on) at every position and KV head
    for i in range(layers):
        def p(name, i=i):
            return w[f"model.layers.{i}.{name}"]

        h = rms_norm(x, p("input_layernorm.weight"))
        q_all, k_all, v_all = h @ p("self_attn.q_proj.weight").T, h @ p("self_attn.k_proj.weight").T, \
            h @ p("self_attn.v_proj.weight").T
        queries = torch.zeros(length, q_heads, d, dtype=torch.float64)
        keys = torch.zeros(length, kv_heads, d, dtype=torch.float64)
        values = v_all.view(length, kv_heads, d).clone()
        for t in range(length):
            for head in range(q_heads):
                q = q_all[t, head * d:(head + 1) * d]
                queries[t, head] = rotate(rms_norm(q, p("self_attn.q_norm.weight")) if qk_norm else q, t)
            for g in range(kv_heads):
                k = rotate(k_all[t, g * d:(g + 1) * d], t)
                keys[t, g] = rms_norm(k, p("self_attn.k_norm.weight")) if qk_norm else k
        sources = [j for j in range(i) if stride <= 1 or j % stride == 0 or j >= i - window] if depth else []
        if sources:
            mixed = torch.zeros_like(values)
            for t in range(length):
                for g in range(kv_heads):
                    depth_query = queries[t, g * group:(g + 1) * group].mean(0)
                    candidates = [(stored[j][0][t, g], stored[j][1][t, g]) for j in sources]
                    candidates.append((keys[t, g], values[t, g]))
                    scores = torch.stack([depth_query @ key / math.sqrt(d) for key, _ in candidates])
                    weights_ = torch.softmax(scores, 0)
                    mixed[t, g] = sum(a * value for a, (_, value) in zip(weights_, candidates, strict=True))
            values = mixed
        stored.append((keys, values))
        out = torch.zeros(length, q_heads * d, dtype=torch.float64)
        for t in range(length):
            for head in range(q_heads):
                g = head // group
                scores = torch.stack([queries[t, head] @ keys[s, g] / math.sqrt(d) for s in range(t + 1)])
                out[t, head * d:(head + 1) * d] = torch.softmax(scores, 0) @ values[:t + 1, g]
        x = x + out @ p("self_attn.o_proj.weight").T
        h = rms_norm(x, p("post_attention_layernorm.weight"))
        gate, up = h @ p("mlp.gate_proj.weight").T, h @ p("mlp.up_proj.weight").T
        x = x + (torch.nn.functional.silu(gate) * up) @ p("mlp.down_proj.weight").T
    return rms_norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def assert_close_to(logits, expected):
    """Within the tolerance of the logits' dtype, relative to the largest expected logit."""
    tolerance = TOLERANCE[logits.dtype] * expected.abs().max().item()
    torch.testing.assert_close(logits.double(), expected.double(), rtol=0, atol=tolerance)


CASES = {
    "released": dict(use_depth_attention=True, depth_attention_stride=2, depth_attention_recent_window=0,
                     use_qk_norm=True),
    "window": dict(use_depth_attention=True, depth_attention_stride=3, depth_attention_recent_window=1),
    "legacy-names": dict(recurrent_model=True, cross_layer_pattern="depth_softmax", cross_layer_mode="depth_softmax",
                         depth_softmax_stride=1),
    "vanilla-qknorm": dict(use_depth_attention=False, use_qk_norm=True),
    "no-qknorm": dict(use_depth_attention=True, depth_attention_stride=2, use_qk_norm=False),
}


@pytest.mark.parametrize("case", CASES)
def test_converted_reference_checkpoint_matches_its_semantics(tmp_path, case):
    settings = CASES[case]
    weights = write_reference_checkpoint(tmp_path / "ref", **settings)
    model = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "ref").eval()
    depth = settings.get("use_depth_attention", False) or "cross_layer_pattern" in settings
    stride = settings.get("depth_attention_stride", settings.get("depth_softmax_stride", 1))
    window = settings.get("depth_attention_recent_window", 0)
    assert model.config.cross_layer == ("depth_attention" if depth else "vanilla")
    ids = torch.randint(0, SHAPE["vocab_size"], (7,))
    expected = reference_logits(weights, ids, depth, stride, window, settings.get("use_qk_norm", True))
    for dtype in TOLERANCE:  # float32 as run; float64 holds the conversion to a tighter bound
        assert_close_to(model.to(dtype)(ids[None]).logits[0], expected)


@pytest.mark.parametrize("dtype", TOLERANCE)
def test_a_small_real_change_fails(tmp_path, dtype):
    """One norm weight moved by 1e-3: a change neither tolerance may hide."""
    weights = write_reference_checkpoint(tmp_path / "ref", **CASES["released"])
    model = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "ref").eval().to(dtype)
    with torch.no_grad():
        model.model.layers[1].input_layernorm.weight[0] += 1e-3
    ids = torch.randint(0, SHAPE["vocab_size"], (7,))
    with pytest.raises(AssertionError):
        assert_close_to(model(ids[None]).logits[0], reference_logits(weights, ids, True, 2, 0))


def test_k_norm_placement_matters(tmp_path):
    """The plain Qwen3 order (k-norm before the rotation) gives other logits on the same tensors."""
    write_reference_checkpoint(tmp_path / "ref", **CASES["released"])
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 7))
    reference = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "ref")
    qwen3_order = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "ref", k_norm_after_rope=False)
    assert (reference(ids).logits - qwen3_order(ids).logits).abs().max() > 1e-3


def test_cached_decoding_of_a_converted_reference_checkpoint_matches_its_full_forward(tmp_path):
    write_reference_checkpoint(tmp_path / "ref", **CASES["window"])
    model = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "ref").eval()
    ids = torch.randint(0, SHAPE["vocab_size"], (2, 9))
    out = model(ids[:, :4], use_cache=True)
    steps = [out.logits]
    for t in range(4, 9):
        out = model(ids[:, t:t + 1], cache=out.cache, use_cache=True)
        steps.append(out.logits)
    assert_close_to(torch.cat(steps, 1), model(ids, use_cache=False).logits)


@pytest.mark.parametrize("bad, message", [
    (dict(scale_embeds=True), "scale_embeds"),
    (dict(no_residual=True), "no_residual"),
    (dict(cross_layer_mode="depth_softmax_head0"), "depth_softmax_head0"),
    (dict(cross_layer_pattern="dense"), "dense"),
])
def test_reference_options_without_an_equivalent_are_refused(tmp_path, bad, message):
    write_reference_checkpoint(tmp_path / "ref", use_depth_attention=True, **bad)
    with pytest.raises(ValueError, match=message):
        DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "ref")


def test_a_missing_tensor_is_an_error(tmp_path):
    write_reference_checkpoint(tmp_path / "ref", use_qk_norm=False)
    config = json.loads((tmp_path / "ref" / "config.json").read_text())
    (tmp_path / "ref" / "config.json").write_text(json.dumps({**config, "use_qk_norm": True}))
    with pytest.raises(ValueError, match="missing .*q_norm"):
        DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "ref")


def test_convert_command_writes_a_loadable_folder_with_the_tokenizer(tmp_path, capsys):
    weights = write_reference_checkpoint(tmp_path / "ref", **CASES["released"])
    (tmp_path / "ref" / "tokenizer.json").write_text("{}")
    (tmp_path / "ref" / "special_tokens_map.json").write_text("{}")
    assert main(["convert", str(tmp_path / "ref"), str(tmp_path / "out")]) == 0
    assert "cross_layer=depth_attention, depth_stride=2" in capsys.readouterr().out
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"tokenizer.json", "special_tokens_map.json", "config.json"} <= written
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left
    model = DepthAttentionForCausalLM.from_pretrained(tmp_path / "out")
    ids = torch.randint(0, SHAPE["vocab_size"], (6,))
    assert_close_to(model(ids[None]).logits[0], reference_logits(weights, ids, True, 2, 0))

    assert main(["convert", str(tmp_path / "ref"), str(tmp_path / "out")]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "ref"), str(tmp_path / "vanilla"), "--cross-layer", "vanilla"]) == 0
    assert DepthAttentionForCausalLM.from_pretrained(tmp_path / "vanilla").config.cross_layer == "vanilla"
