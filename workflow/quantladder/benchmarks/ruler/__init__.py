"""RULER long-context retrieval (Hsieh et al. 2024, github.com/NVIDIA/RULER) at 4K-128K tokens.

One shape, as every benchmark here: items (``build``: RULER's generators in ``tasks``, haystacks in
``haystack``, QA data in ``qa``) -> prompts in the model's own chat template -> answers (``run``,
resumable) -> scores (``score``: string_match_all / string_match_part, per task and length, the
average per length, the effective length). KV-cache types come from the point, never from here.
"""

from .tasks import SYNTHETIC, TASKS, TaskSpec, task  # noqa: F401

# Bumped when item generation or scoring changes what a RULER figure means; it goes into the rules'
# params, because Snakemake does not track the modules a script imports.
RULER_VERSION = "1"

# The defaults of config/schemas/ruler.schema.yaml, for callers that did not validate.
DEFAULTS = {
    "tasks": list(SYNTHETIC),
    "lengths": [4096, 8192, 16384, 32768, 65536, 131072],
    "samples": 10,
    "seed": 42,
    "cap_to_trained_context": True,
    "essay": {"builtin": "pydoc-topics"},
    "qa": {},
    "threshold": 85.6,
    "time_budget_s": None,
}


def resolve_settings(section: dict | None) -> dict:
    """benchmarks.ruler with defaults filled; unknown task names fail here, naming the key."""
    s = {**DEFAULTS, **{k: v for k, v in (section or {}).items() if v is not None or k == "time_budget_s"}}
    for name in s["tasks"]:
        task(name)
    qa_needed = {TASKS[n].args["dataset"] for n in s["tasks"] if TASKS[n].kind == "qa"}
    missing = sorted(d for d in qa_needed if d not in (s.get("qa") or {}))
    if missing:
        from ...errors import ConfigError

        raise ConfigError(f"benchmarks.ruler.tasks asks for QA on {missing}: name their sources under "
                          f"benchmarks.ruler.qa.<dataset> (huggingface_hub or a local path)")
    return s


def anchor_score(entry: dict) -> float:
    """The anchor gate's hook (quantladder.anchors looks it up here); see ``anchor``."""
    from .anchor import anchor_score as _score

    return _score(entry)
