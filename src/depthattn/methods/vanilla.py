"""The vanilla decoder's module (descriptions/vanilla.py): the plain decoder, no hooks."""

from __future__ import annotations

from .base import CrossLayerMethod
from .descriptions.vanilla import VanillaDescription


class Vanilla(VanillaDescription, CrossLayerMethod):
    pass
