"""The plain reference: `depthattn.depth.depth_mix` (docs/method.md#the-operation), which every fast path is tested against."""

from depthattn.depth import depth_mix as depth_mix_reference

__all__ = ["depth_mix_reference"]
