"""`register` refuses a method that would run as something else than it says, or fail only at first use: an
`AttentionMixer` that changes nothing in attention, a multi-stream residual without its stream members."""

import pytest

from depthattn.methods import (
    DESCRIPTIONS,
    METHODS,
    AttentionMixer,
    FlopTerm,
    MethodDescription,
    NoExtraCost,
    register,
    unregister,
)
from depthattn.methods.streams import MultiStreamResidual

from ..helpers import tiny_config


def mixer(name: str, **members) -> type:
    """An `AttentionMixer` reading the step below, with `members` and no costs."""
    return type(name, (NoExtraCost, AttentionMixer), {
        "step_sources": staticmethod(lambda config: [[u - 1] if u else [] for u in range(config.unrolled_depth)]),
        **members})


def test_register_refuses_a_mixer_that_would_run_as_the_plain_decoder():
    with pytest.raises(ValueError, match=r"Idle \(cross_layer='idle'\) is an AttentionMixer but defines neither "
                                         r"forward .* nor attend .*plain decoder; define one"):
        register("idle", mixer("Idle"))
    assert "idle" not in METHODS


@pytest.mark.parametrize("member", ["forward", "attend"])
def test_register_takes_a_mixer_that_defines_forward_or_attend(member):
    hooks = {"forward": lambda self, attention, query, state, step, states: (state, None),
             "attend": lambda self, attention_fn, module, query, key, value, mask, step, states, position_embeddings,
             **kwargs: attention_fn(module, query, key, value, mask, **kwargs)}
    register("hooked", mixer("Hooked", **{member: hooks[member]}))
    unregister("hooked")


MULTI_STREAM = {  # everything a MultiStreamResidual leaves to its subclass
    "streams": classmethod(lambda cls, config: 2),
    "coefficient_term": classmethod(lambda cls, config: FlopTerm("coefficients", 0, "matmul", "weights")),
    "final_term": classmethod(lambda cls, config: FlopTerm("merge", 0, "elementwise")),
    "coefficients": lambda self, x, sublayer: None,
    "final": lambda self, stream: stream.x.sum(-2),
    "extra_parameters": classmethod(lambda cls, config: 0),
}


def multi_stream(name: str, without: str | None = None) -> type:
    return type(name, (MultiStreamResidual,), {k: v for k, v in MULTI_STREAM.items() if k != without})


@pytest.mark.parametrize("member", ["streams", "coefficient_term", "final_term", "coefficients"])
def test_a_multi_stream_residual_without_a_member_is_refused_before_use(member):
    partial = multi_stream("Partial", without=member)
    with pytest.raises(ValueError, match=rf"Partial \(cross_layer='partial'\) does not define {member}, which its "
                                         "family requires"):
        register("partial", partial)
    assert "partial" not in METHODS
    with pytest.raises(TypeError, match=f"abstract method.*{member}"):
        partial(tiny_config(), num_streams=2)


def test_a_complete_multi_stream_residual_registers():
    register("complete", multi_stream("Complete"))
    try:
        assert len(METHODS["complete"].flop_terms(tiny_config())) == 5
    finally:
        unregister("complete")


class Described(NoExtraCost, MethodDescription):
    module = "tests.methods.test_register_checks:Hooked"


class Hooked(Described, AttentionMixer):
    step_sources = staticmethod(lambda config: [[u - 1] if u else [] for u in range(config.unrolled_depth)])

    def forward(self, attention, query, state, step, states):
        return state, None


def test_a_description_brings_its_module_at_first_use_only():
    register("described", Described)
    try:
        assert DESCRIPTIONS["described"] is Described and METHODS["described"] is Hooked
    finally:
        unregister("described")


def test_a_description_must_name_a_module_deriving_from_it():
    with pytest.raises(ValueError, match=r"Nameless \(cross_layer='nameless'\) is a description without its module: "
                                         "set its module to 'package.module:Class'"):
        register("nameless", type("Nameless", (Described,), {"module": ""}))
    assert "nameless" not in DESCRIPTIONS
    stranger = type("Stranger", (Described,), {"module": "tests.methods.test_register_checks:Described"})
    register("stranger", stranger)  # its module is imported at first use only: then it is refused
    try:
        with pytest.raises(ValueError, match=r"Stranger.module is 'tests.methods.test_register_checks:Described', "
                                             "which is not a CrossLayerMethod deriving from Stranger"):
            METHODS["stranger"]
    finally:
        unregister("stranger")
