"""The combined softmax with the sequence part in torch's scaled_dot_product_attention.

The depth part of each query enters as one extra key: its value is the depth values mixed by their own softmax,
and its score, carried by the additive mask (the key itself is zero), is the log-sum-exp of the depth scores. A
softmax over the sequence scores and that one score gives the depth part exactly its share of the combined
softmax, so the output equals the reference's (tests/ops/test_moda.py), gradients included.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .naive import additive_mask, depth_mix, depth_scores


def moda_attention_merged(query, key, value, depth_key, depth_value, mask, scale: float):
    B, Hq, T, d = query.shape
    depth = depth_scores(query, depth_key, scale)  # (B, Hq, T, n), float32 at least
    depth_out = depth_mix(torch.softmax(depth, dim=-1), depth_value).to(query.dtype)  # (B, Hq, T, d)
    own = torch.full((T, T), float("-inf"), device=query.device).fill_diagonal_(0)  # each query its own extra key
    extra = own + depth.logsumexp(-1, keepdim=True)  # (B, Hq, T, T): the depth part's score on the diagonal
    sequence = additive_mask(mask, query, key.shape[2]).expand(B, Hq, T, key.shape[2])
    groups = Hq // key.shape[1]
    keys = torch.cat([key.repeat_interleave(groups, dim=1), query.new_zeros(B, Hq, T, d)], dim=2)  # (B, Hq, S+T, d)
    values = torch.cat([value.repeat_interleave(groups, dim=1), depth_out], dim=2)
    mask = torch.cat([sequence, extra], dim=-1).to(query.dtype)
    out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale)  # (B, Hq, T, d)
    return out.transpose(1, 2).contiguous(), None
