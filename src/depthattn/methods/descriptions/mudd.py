"""MUDDFormer's multiway dynamic dense connections (Xiao et al., arXiv 2502.12170), described: its connections' shapes
and its costs; the module: methods/mudd.py.

After block `i` (1-based, over the unrolled depth), weights per token are computed from its output `X_i`, over all
earlier outputs `X_0` (the embedding) .. `X_i`, separately for each input of the next block: its queries, keys,
values and residual ("qkvr"):

    A_i = GELU(rmsnorm(X_i) W1_i) W2_i + a_i          (B, T, C, i + 1), C = 4 ways (1 after the last block)
    X^c = sum_j A_i[c, j] X_j                         for c in q, k, v, r

The next block's attention reads its queries from `X^q`, keys from `X^k`, values from `X^v` (each through the layer's
attention norm), adds its output to `X^r`, and its MLP sublayer is the plain one. After the last block a single
residual way feeds the final norm. `rmsnorm` has no gain. Block 1 reads the embedding for every way.

Parameters, per block i: `W1_i` (D x K_i), `W2_i` (K_i x C (i + 1)), `a_i` (C (i + 1)), with K_i = C (i + 1)
(4 C (i + 1) after the last block, the released models' `expand_last`). The released models also round K up to a
multiple of 64, give the three ways their own attention norms and widen the MLP with depth; here K is the paper's
C (i + 1), the ways share the layer's attention norm (the backbone keeps Qwen3's keys), and the MLP is the
backbone's.
Inference state: no state across tokens (the KV cache is vanilla's); while a token is processed, the embedding and
every block output so far, and the query, key and value ways beside the residual one.
"""

from __future__ import annotations

from .base import FlopTerm, ResidualDescription

WAYS = 4  # query, key, value, residual
LAST_EXPAND = 4  # the hidden width after the last block is 4 x its ways x sources


class MUDDDescription(ResidualDescription):
    module = "depthattn.methods.mudd:MUDD"
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: the embedding and every "
        "block output so far, and the query, key and value ways beside the residual one: up to L + 3 hidden vectors "
        "(L = unrolled depth); over a prefill of T tokens, T times that."
    )

    @staticmethod
    def shapes(config) -> list[tuple[int, int, int]]:
        """(ways C, sources n, hidden width K) of the dense connection after each block 1 .. L."""
        depth = config.unrolled_depth
        shapes = []
        for block in range(1, depth + 1):
            ways, sources = (WAYS, block + 1) if block < depth else (1, block + 1)
            shapes.append((ways, sources, ways * sources * (LAST_EXPAND if block == depth else 1)))
        return shapes

    @classmethod
    def extra_parameters(cls, config):
        D = config.hidden_size
        return sum(D * K + K * C * n + C * n for C, n, K in cls.shapes(config))

    @classmethod
    def flop_terms(cls, config):
        D, shapes = config.hidden_size, cls.shapes(config)
        return [
            FlopTerm("dense weights: rmsnorm(X_i) W1 W2, 2 D K + 2 K C n per block", sum(
                2 * D * K + 2 * K * C * n for C, n, K in shapes), "matmul", "weights"),
            FlopTerm("dense mixes: C ways over n outputs, 2 C n D per block",
                     sum(2 * C * n * D for C, n, _ in shapes), "matmul"),
        ]

    @classmethod
    def io_elements(cls, config):
        # per block: the weights read X_i; each way reads the n outputs and writes one vector
        D, shapes = config.hidden_size, cls.shapes(config)
        return {"read": D * sum(1 + C * n for C, n, _ in shapes), "write": D * sum(C for C, _, _ in shapes)}

    @classmethod
    def extra_state_elements(cls, config, context):
        # during the last block: X_0 .. X_{L-1} and the q, k, v ways, beside the residual stream vanilla has too
        return (config.unrolled_depth + 3) * context * config.hidden_size
