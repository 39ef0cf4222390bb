"""Checks of config values, with one wording for the backbone's fields (config.py) and the methods'
(methods/descriptions/): each raises ValueError naming the field, the value and what it must be."""

from __future__ import annotations

import difflib
import math


def check_choice(name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}"
                         + did_you_mean(value, allowed))


def did_you_mean(value, choices) -> str:
    """` (did you mean 'x'?)`, naming the choice closest to `value` where one is close; else an empty string."""
    close = difflib.get_close_matches(value, list(choices), 1) if isinstance(value, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_bool(name: str, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def check_int(name: str, value, low: int):
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def check_number(name: str, value, low: float | None = None):
    """A finite int or float, at least `low` if given."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
            or (low is not None and value < low):
        raise ValueError(f"{name} must be a finite number{'' if low is None else f' >= {low}'}, got {value!r}")
