"""A package's lazy names (PEP 562): each is imported from its module at its first use, so importing the package,
or one of its light modules, imports none of the heavy ones."""

import importlib
import sys


def lazy_names(package: str, modules: dict[str, str]):
    """The module `__getattr__` and `__dir__` of `package`, where `modules` maps each lazy name to the module of the
    package that defines it."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str):
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{modules[name]}", package), name)
        namespace[name] = value  # the next lookup finds it without this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *modules})

    return __getattr__, __dir__
