"""Sizes as a person writes them: a memory size ('24GiB', '24GB', bytes) and a context length ('32k').

The command line, the config's ``find:`` and ``recommend:`` sections and the recommender read them
here; ``where`` names the key or option the text came from, and what cannot be read is a ConfigError
that names it.
"""

from __future__ import annotations

import re

from .errors import ConfigError

_SIZE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
               "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_bytes(text: str | int | float, where: str) -> int:
    """'24GiB' → 25769803776; '24GB' is decimal (24e9); a bare 'G' means GiB, as llama.cpp prints it."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ConfigError(f"{where}: cannot read memory size {text!r}: write e.g. 24GiB, 16000MiB, 24GB or bytes")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_ctx(text: str | int, where: str) -> int:
    """'32768', '32k' or '32K' (= 32768 tokens)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+)\s*([kK]?)\s*", str(text))
    if not m:
        raise ConfigError(f"{where}: cannot read context length {text!r}: write tokens, e.g. 32768 or 32k")
    n = int(m.group(1)) * (1024 if m.group(2) else 1)
    if n <= 0:
        raise ConfigError(f"{where}: context length must be positive")
    return n
