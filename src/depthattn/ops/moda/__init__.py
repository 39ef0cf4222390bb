"""Mixture-of-Depths Attention's combined softmax (docs/method.md#moda): each query attends, in one softmax, over
the causal sequence keys of its layer and over the depth keys of its own token at earlier layers.

`naive.py` writes the combined softmax out; `merged.py` runs the sequence part through torch's
scaled_dot_product_attention, with the depth part entering as one extra key per query. Both take

    query (B, Hq, T, d), key, value (B, Hkv, S, d) (the cache's, S >= T, the queries are the last T positions),
    depth_key, depth_value (B, Hkv, T, n, d) (the n depth slots of each query's token),
    mask: None (causal), a bool (True: attend) or an additive float mask broadcastable to (B, Hq, T, S)

and return the output (B, T, Hq, d) and, from the reference only, the sequence part's weights (B, Hq, T, S).
"""

from .merged import moda_attention_merged
from .naive import additive_mask, moda_attention_reference

MODA_IMPLS = {"reference": moda_attention_reference, "merged": moda_attention_merged}

__all__ = ["MODA_IMPLS", "additive_mask", "moda_attention_merged", "moda_attention_reference"]
