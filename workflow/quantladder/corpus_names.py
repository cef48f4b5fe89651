"""What a corpus's name and source say about it, without reading it: planning (the DAG, the passes
a family takes) needs these, and nothing that loads a corpus (docs/corpora.md)."""

from __future__ import annotations

import re

from .errors import ConfigError

NAME_RE = re.compile(r"^(?P<domain>[a-z0-9]+)-(?P<language>[a-z0-9]+(?:-[a-z0-9]+)*)(?:\.(?P<part>[a-z0-9_]+))?$")


def parse_name(name: str) -> dict:
    """``manual-zh-cn.calib`` -> {domain: manual, language: zh-cn, part: calib}."""
    m = NAME_RE.match(name)
    if not m:
        raise ConfigError(f"corpora.{name}: a corpus is named <domain>-<language>[.<part>] in lowercase "
                          "(e.g. prose-en, code-python, manual-zh-cn, manual-es.calib); see docs/corpora.md")
    return {"domain": m["domain"], "language": m["language"], "part": m["part"]}


def is_chat(source: dict) -> bool:
    """A chat corpus: conversations rendered through the model's chat template."""
    return source.get("builtin") == "humaneval-chat"
