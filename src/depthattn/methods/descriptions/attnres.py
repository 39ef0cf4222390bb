"""Block Attention Residuals (Kimi Team, arXiv 2603.15031), in the form docs/method.md#baselines fixes, described: its
config field, its candidates and its costs; the module: methods/attnres.py.

Before every sublayer `s >= 1` and once before the final norm, an aggregator reads a softmax mixture over
{block snapshots, running stream}: the running stream is the plain residual stream (embedding plus every sublayer
output so far); a snapshot of it is kept at the start and at every block end (every `attnres_block_size`
sublayers; attention and MLP count one each). Candidates are the snapshots taken before the current position
and the running stream. Logits are `<w * g, x> / rms(x)` with a pseudo-query `w` (zero at init) and an RMSNorm
gain `g` (ones), plus a recency bias `b` on the running stream (3.0 at init); softmax in float32. The
sublayer reads the mixture and adds its output to the running stream.

Sublayer 0 has one candidate (the embedding) and no aggregator. Parameters: `2 * unrolled_depth` aggregators
(sublayers 1 .. 2L-1 and the final one) of `2 * hidden_size + 1` each.
At initialisation each aggregator weighs the running stream `e^3 / (e^3 + m)` and each of its `m` snapshots
`1 / (e^3 + m)`: close to, but not exactly, the plain residual.

The paper's form (preset `attnres_paper`): `attnres_sources = "blocks"` mixes the embedding, each completed
block's sum of sublayer outputs and the current block's partial sum (differences of the same snapshots) instead of
their prefix sums, and `attnres_recency_bias = false` drops the bias (`2 * hidden_size` parameters per aggregator).
Without the bias the aggregator is the one fla-core and Liger-Kernel ship as Triton kernels (`attnres_impl`).
"""

from __future__ import annotations

from ...field_checks import check_bool, check_choice, check_int
from .base import ConfigField, FlopTerm, ResidualDescription

SOURCES = ("prefix", "blocks")
IMPL_NAMES = ("reference", "fla", "liger")  # depthattn.ops.attnres.ATTNRES_IMPLS


class AttnResDescription(ResidualDescription):
    module = "depthattn.methods.attnres:AttnRes"
    config_fields = {
        "attnres_block_size": ConfigField(12, "Sublayers (attention and MLP count one each) per block."),
        "attnres_sources": ConfigField("prefix", (
            'What an aggregator mixes: "prefix" (the running stream and its snapshots at the block ends) or '
            '"blocks" (the paper\'s: the embedding, each completed block\'s output sum, the current partial sum).')),
        "attnres_recency_bias": ConfigField(True, (
            "A learned bias (3.0 at init) on the most recent source's logit; false: the paper's aggregator.")),
        "attnres_impl": ConfigField("reference", (
            'How an aggregator is computed, same results: "reference" (written out), "fla" (fla-core\'s fused '
            'Triton kernel) or "liger" (Liger-Kernel\'s); the kernels need a GPU and attnres_recency_bias false.')),
    }
    presets = {"attnres_paper": {"attnres_sources": "blocks", "attnres_recency_bias": False}}
    switchable_fields = ("attnres_impl",)
    switch_values = {"attnres_impl": ("reference",)}  # "fla" and "liger" need a GPU
    checked_variants = {
        "blocks_of_3": {"attnres_block_size": 3},  # several blocks in a tiny model
        "paper_blocks_of_3": {"attnres_block_size": 3, "attnres_sources": "blocks", "attnres_recency_bias": False},
    }
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: one snapshot of the "
        "stream per block, ceil(2L / block_size) hidden vectors (L = unrolled depth); over a prefill, T times that."
    )

    @classmethod
    def check_config(cls, config):
        check_int("attnres_block_size", config.attnres_block_size, 1)
        check_choice("attnres_sources", config.attnres_sources, SOURCES)
        check_bool("attnres_recency_bias", config.attnres_recency_bias)
        check_choice("attnres_impl", config.attnres_impl, IMPL_NAMES)
        if config.attnres_impl != "reference" and config.attnres_recency_bias:
            raise ValueError(f"attnres_impl {config.attnres_impl!r}: the library kernels have no recency bias; set "
                             "attnres_recency_bias false (the paper's aggregator) or use attnres_impl 'reference'")

    @staticmethod
    def candidates(config, sublayer: int) -> int:
        """Candidates the aggregator before `sublayer` (2L: the final one) reads in our model: snapshots taken
        before it (the embedding and the running stream at each earlier block end) plus the running stream."""
        B = config.attnres_block_size
        return (sublayer - 1) // B + 2 if sublayer >= 1 else 1

    @staticmethod
    def snapshots(config) -> int:
        """Snapshots held at the end of a pass: the embedding and the stream at every block end but the last."""
        return (2 * config.unrolled_depth - 1) // config.attnres_block_size + 1

    @classmethod
    def extra_parameters(cls, config):
        # per aggregator: w, gain and the recency bias
        return 2 * config.unrolled_depth * (2 * config.hidden_size + bool(config.attnres_recency_bias))

    @classmethod
    def flop_terms(cls, config):
        # an aggregator over n candidates: logits <w*g, x>/rms(x) (2 n D) and the mixture (2 n D)
        D, S = config.hidden_size, 2 * config.unrolled_depth
        inner = sum(cls.candidates(config, s) for s in range(1, S))  # sublayers 1 .. 2L-1
        final = cls.candidates(config, S)
        return [
            FlopTerm("aggregator logits, sublayers 1..2L-1", 2 * D * inner, "matmul", "weights"),
            FlopTerm("aggregator mixtures, sublayers 1..2L-1", 2 * D * inner, "elementwise"),
            FlopTerm("aggregator before sublayer 0 (1 candidate): counted by the paper only", 4 * D, "elementwise",
                     "mix", model=False),
            FlopTerm("final aggregator logits (before the final norm): in our model only", 2 * D * final, "matmul",
                     "weights", paper=False),
            FlopTerm("final aggregator mixture: in our model only", 2 * D * final, "elementwise", paper=False),
        ]

    @classmethod
    def io_elements(cls, config):
        # paper convention: aggregators before sublayers 0 .. 2L-1 (see depthattn.evaluate.costs); each reads its
        # candidates twice (logits pass, mixture pass) and writes the mixture
        D, S = config.hidden_size, 2 * config.unrolled_depth
        candidates = sum(cls.candidates(config, s) for s in range(S))
        return {"read": 2 * D * candidates, "write": D * S}

    @classmethod
    def extra_state_elements(cls, config, context):
        return cls.snapshots(config) * context * config.hidden_size  # one snapshot of the stream per block
