"""Method presets: named method settings, so that a training config can say `method = "depth_quarter"` (model
presets, the shapes, are `depthattn.train.MODEL_PRESETS`).

Every registered method is a preset under its own name (`cross_layer=<name>`, method defaults), and a method adds
named variants in its description's `presets` (Depth-Attention's ablations:
`depthattn.methods.descriptions.depth_attention`). A value that is a function receives the unrolled depth
`D = num_hidden_layers * num_loops` (docs/method.md#variants: depth counts unrolled steps).

`method_settings(name, num_hidden_layers, num_loops=1)` returns the `DepthAttentionConfig` fields of a preset.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from .field_checks import check_int
from .methods import DESCRIPTIONS


class _Presets(Mapping):
    """The presets, read from the method registry whenever asked, so a method registered later has its own."""

    def _all(self) -> dict[str, dict]:
        named = {}
        for method, described in DESCRIPTIONS.items():
            named[method] = {"cross_layer": method}
            named.update({name: {"cross_layer": method, **settings} for name, settings in described.presets.items()})
        return named

    def __getitem__(self, name: str) -> dict:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


METHOD_PRESETS: Mapping[str, dict] = _Presets()


def method_settings(name: str, num_hidden_layers: int, num_loops: int = 1) -> dict:
    """The config fields of preset `name` for a model of `num_hidden_layers` layers run `num_loops` times."""
    if name not in METHOD_PRESETS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHOD_PRESETS))}; got {name!r}")
    check_int("num_hidden_layers", num_hidden_layers, 1)
    check_int("num_loops", num_loops, 1)
    depth = num_hidden_layers * num_loops
    settings = {key: value(depth) if callable(value) else value for key, value in METHOD_PRESETS[name].items()}
    return {**settings, "num_loops": num_loops}
