"""The Slurm profile renders from site.yaml alone: partitions, account, card -> gres, groups."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import yaml
from snakemake.profiles import ProfileConfigFileParser

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"


def render(monkeypatch, site: dict | None = None, card: str | None = None, tmp_path=None) -> dict:
    """The profile as Snakemake parses it (YTE rendering included), as {key: value or list}."""
    if site is not None:
        path = tmp_path / "site.yaml"
        path.write_text(yaml.safe_dump(site))
        monkeypatch.setenv("QUANTLADDER_SITE", str(path))
    else:
        monkeypatch.delenv("QUANTLADDER_SITE", raising=False)
    if card:
        monkeypatch.setenv("QUANTLADDER_CARD", card)
    else:
        monkeypatch.delenv("QUANTLADDER_CARD", raising=False)
    monkeypatch.chdir(REPO)
    stream = io.StringIO(PROFILE.read_text())
    stream.name = str(PROFILE)
    return dict(ProfileConfigFileParser().parse(stream))


SITE = {
    "account": "proj42", "card": "h100-80gb",
    "cards": {"h100-80gb": {"partition": "gpu-h100", "gpu_model": "h100"}, "any-gpu": {}},
    "partitions": {"gpu": "gpu", "sandbox": "scoring", "cpu": "short"},
    "jobs": 50, "cpus_per_gpu_job": 6, "cpus_per_cpu_job": 12, "cpus_per_sandbox_job": 2,
    "scoring_jobs_per_submission": 8, "scoring_parallel": 3,
}


def test_committed_site_renders(monkeypatch):
    prof = render(monkeypatch)
    assert prof["executor"] == "slurm" and prof["slurm-status-command"] == "squeue"
    assert "perplexity:slurm_partition=gpu" in prof["set-resources"]
    assert "score:slurm_partition=sandbox" in prof["set-resources"]


def test_site_file_decides_partitions_account_and_gres(monkeypatch, tmp_path):
    prof = render(monkeypatch, SITE, tmp_path=tmp_path)
    res = prof["set-resources"]
    for rule in ("perplexity", "generate", "anchor_generate", "tool_anchor_gate"):
        assert f"{rule}:slurm_partition=gpu-h100" in res
        # the GPU count is the rule's own `gpu=` resource (quantladder.resources.HOSTS; the Slurm dry-run test
        # in test_slurm.py reads it off the planned jobs): the profile adds the card's model, not a count
        assert f"{rule}:gpu_model=h100" in res and not any(r.startswith(f"{rule}:gpu=") for r in res)
    for rule in ("score", "anchor_gate"):
        assert f"{rule}:slurm_partition=scoring" in res
        assert not any(r.startswith(f"{rule}:gpu") for r in res)
    assert "speed:slurm_extra='--exclusive'" in res and "energy:slurm_extra='--exclusive'" in res
    assert not any(r.startswith("perplexity:slurm_extra") for r in res)
    assert "quantize:slurm_partition=short" in res
    assert "slurm_account=proj42" in prof["default-resources"]
    assert "slurm_partition=short" in prof["default-resources"]
    assert prof["config"] == ["card=h100-80gb"]
    assert "perplexity=6" in prof["set-threads"] and "quantize=12" in prof["set-threads"]
    assert "score=scoring" in prof["groups"] and prof["group-components"] == ["scoring=8"]
    assert prof["resources"] == ["scoring_slots=3"] and prof["set-resource-scopes"] == ["scoring_slots=local"]
    assert prof["jobs"] == "50"


def test_another_card_for_one_run(monkeypatch, tmp_path):
    prof = render(monkeypatch, SITE, card="any-gpu", tmp_path=tmp_path)
    assert prof["config"] == ["card=any-gpu"]
    assert "perplexity:slurm_partition=gpu" in prof["set-resources"]  # the default GPU partition
    assert not any(r.startswith("perplexity:gpu_model") for r in prof["set-resources"])


def test_unknown_card_is_refused(monkeypatch, tmp_path):
    with pytest.raises(Exception, match="not under `cards:`"):
        render(monkeypatch, SITE, card="tpu-v5", tmp_path=tmp_path)


def test_bare_profile_name_finds_the_profile(monkeypatch):
    """`--profile slurm` from the repository root: the ./slurm link."""
    from snakemake.cli import get_profile_dir

    monkeypatch.chdir(REPO)
    found = get_profile_dir("slurm")
    assert found is not None and Path(os.path.realpath(found[1])) == PROFILE
