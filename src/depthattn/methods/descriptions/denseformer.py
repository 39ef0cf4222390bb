"""DenseFormer (Pagliardini et al., arXiv 2402.02622): depth-weighted averaging (DWA) after every block, described:
its config fields, which outputs each DWA averages and its costs; the module: methods/denseformer.py.

After block `i` (1-based, over the unrolled depth), the next block reads `Y_i = sum_m alpha_{i,m} X_m` over the
embedding `X_0` and the raw block outputs `X_m` (each block's input plus its two sublayer outputs).
Dilation `k` keeps only `m` with `(i - m) % k == 0`; period `p` puts a DWA after every `p`-th block only
(the paper's "k x p DenseFormer"); the other blocks pass their output on unchanged.

Parameters: one weight vector per DWA, `i // k + 1` scalars for block `i`; `L(L+3)/2` for k = p = 1.
"""

from __future__ import annotations

from ...field_checks import check_int
from .base import ConfigField, FlopTerm, ResidualDescription


class DenseFormerDescription(ResidualDescription):
    module = "depthattn.methods.denseformer:DenseFormer"
    config_fields = {
        "denseformer_dilation": ConfigField(1, "k: the DWA after block `i` (1-based) averages the block outputs `m` "
                                               "with `(i - m) % k == 0`."),
        "denseformer_period": ConfigField(1, "p: a DWA after every p-th block only (the paper's k x p DenseFormer)."),
    }
    checked_variants = {"k2p2": {"denseformer_dilation": 2, "denseformer_period": 2}}
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: the embedding and every "
        "block output so far, up to L hidden vectors (L = unrolled depth); over a prefill of T tokens, T x L."
    )

    @classmethod
    def check_config(cls, config):
        for name in cls.config_fields:
            check_int(name, getattr(config, name), 1)

    @staticmethod
    def dwa_sources(config) -> dict[int, list[int]]:
        """Block i (1-based) -> the outputs m its DWA averages (X_0 the embedding), in increasing order (the block
        itself last), for the blocks followed by a DWA."""
        k, p = config.denseformer_dilation, config.denseformer_period
        return {i: list(range(i % k, i + 1, k)) for i in range(1, config.unrolled_depth + 1) if i % p == 0}

    @classmethod
    def live_outputs(cls, config) -> int:
        """Peak number of earlier block outputs X_m (m < i) still needed by a DWA at or after block i."""
        dwas = cls.dwa_sources(config)
        last_use: dict[int, int] = {}
        for block, sources in dwas.items():
            for m in sources:
                last_use[m] = max(last_use.get(m, 0), block)
        return max((sum(1 for m, last in last_use.items() if m < i <= last) for i in dwas), default=0)

    @classmethod
    def extra_parameters(cls, config):
        return sum(len(sources) for sources in cls.dwa_sources(config).values())  # L(L+3)/2 at k = p = 1

    @classmethod
    def flop_terms(cls, config):
        # DWA after block i: Y_i = sum_m alpha_{i,m} X_m over its sources; L(L+3)/2 * 2D at k = p = 1
        terms = sum(len(sources) for sources in cls.dwa_sources(config).values())
        return [FlopTerm("depth-weighted averages, 2 D per averaged output", 2 * config.hidden_size * terms,
                         "matmul")]

    @classmethod
    def io_elements(cls, config):
        dwas = cls.dwa_sources(config)
        D = config.hidden_size
        return {"read": D * sum(len(s) for s in dwas.values()), "write": D * len(dwas)}

    @classmethod
    def extra_state_elements(cls, config, context):
        return cls.live_outputs(config) * context * config.hidden_size  # every earlier block output, L at k = p = 1
