"""Buffer-size strings as nccl-tests reads them: K/M/G suffixes are binary (1K = 1024)."""
from __future__ import annotations

import re

from .errors import InputError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40,
          "TIB": 1 << 40}
MAX_SIZES = 10_000
MAX_SIZE = 1 << 40        # 1T: a buffer per rank no machine we model holds more of
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, source: str = "size") -> int:
    """``"32KB"`` -> 32768. Raises InputError naming ``source`` on anything else."""
    if isinstance(text, int) and not isinstance(text, bool):
        if not 0 < text <= MAX_SIZE:
            raise InputError(source, str(text), "a positive size up to 1T")
        return text
    match = _SIZE.match(str(text))
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS:
        raise InputError(source, repr(text), "a size such as 1024, 1K, 32KB, 1M, 1MiB or 1G")
    value = float(match.group(1)) * _UNITS[unit]
    if value <= 0 or value != int(value):
        raise InputError(source, repr(text), "a positive whole number of bytes")
    if value > MAX_SIZE:
        raise InputError(source, repr(text), "a size up to 1T")
    return int(value)


def parse_size_range(text: str, source: str = "sizes") -> list[int]:
    """``"1K:1G[:x2]"`` -> [1024, 2048, ..., 2**30]; ``"1K,1M"`` -> a list; ``"1M"`` -> [1M].

    The step is a factor (``x4``) or an additive increment (``+1M``); the default is x2.
    """
    text = str(text).strip()
    if "," in text:
        return sorted({parse_size(part, source) for part in text.split(",") if part.strip()})
    parts = text.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0], source)]
    if len(parts) not in (2, 3):
        raise InputError(source, repr(text), "MIN:MAX[:xFACTOR|:+STEP], a list 1K,1M, or one size")
    low, high = parse_size(parts[0], source), parse_size(parts[1], source)
    if high < low:
        raise InputError(source, repr(text), "MIN not larger than MAX")
    step = parts[2].strip() if len(parts) == 3 else "x2"
    if step[:1] in ("x", "*"):
        try:
            factor = float(step[1:])
        except ValueError:
            factor = 0.0
        if not 1 < factor <= MAX_SIZE:
            raise InputError(source, repr(step), "a factor above 1 (and up to 1T), such as x2")

        def grow(size: int) -> int:
            return int(size * factor)
    elif step[:1] == "+":
        increment = parse_size(step[1:], source)

        def grow(size: int) -> int:
            return size + increment
    else:
        raise InputError(source, repr(step), "a step such as x2 or +1M")
    sizes = [low]
    while grow(sizes[-1]) <= high:  # checked as it grows: a tiny step must not run away
        if len(sizes) >= MAX_SIZES:
            raise InputError(source, repr(text), f"at most {MAX_SIZES} sizes")
        sizes.append(grow(sizes[-1]))
    return sizes


def format_size(nbytes: int) -> str:
    """2**20 -> '1M', 1536 -> '1536' (the shortest exact binary spelling)."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)
