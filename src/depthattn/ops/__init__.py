"""Fast paths beside their plain references, each tested against the reference (tests/ops)."""

from .depth_mix import *  # noqa: F403 (the names of depth_mix.__all__)
from .depth_mix import __all__  # noqa: F401
