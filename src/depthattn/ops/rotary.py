"""Rotary position embedding (RoPE, rotate-half form) of one tensor, shared by the decoder and the methods that
compare keys across layers."""

import torch


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, d) rotated at the positions of cos, sin (B, T, d)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, d)
    return x * cos + rotate_half(x) * sin
