"""A rung, an importance matrix and a benchmark's data are verified against their recorded sha256
before any figure is made from them (issue 32, item 4; docs/dataset.md, "What is verified when").

The damage the issues found: 4 MiB zeroed inside a built rung, its size and modification time kept
(issue 32), then the same under an unchanged ctime too, on an ext4 image written underneath (issue 41):
a stamp is a shortcut, not proof, so every job reads the file again, whole or sampled.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from quantladder import benchmarks, io
from quantladder.errors import DataError


@pytest.fixture(autouse=True)
def own_stamp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def zero_inside(path: Path, offset: int, length: int = 4 << 20) -> None:
    """Zero ``length`` bytes at ``offset`` in place, then put the modification time back."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\0" * length)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


def _stamp_as_if_unchanged(path: Path, digest: str, crcs: list[int]) -> None:
    """The disk changed the bytes under the stamp: (device, inode, size, mtime, ctime) as they are now,
    the digest and block CRCs of before (an ext4 image written underneath, a controller's silent error)."""
    import json
    import time

    stamp, _ = io._stamp_path(path)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"sha256": digest, "verified_at": time.time(), "block": io.BLOCK, "crc32": crcs}))


def _refused(rung: Path, recorded: str):
    return pytest.raises(DataError, match=rf"{re.escape(str(rung))}: this rung file's sha256 is "
                                          rf"(?!{recorded})[0-9a-f]{{64}}, but Q8_0\.gguf\.json records {recorded}")


def test_a_rung_zeroed_under_an_unchanged_stamp_is_refused_naming_the_file_and_both_hashes(tmp_path, smollm_q8):
    """A rung under 1 GiB is hashed whole at every job: a stamp that still matches proves nothing."""
    rung = tmp_path / "Q8_0.gguf"
    shutil.copyfile(smollm_q8, rung)
    recorded, crcs = io._hash_blocks(rung)
    io.verify_sha256(rung, recorded, what="rung file", recorded_in="Q8_0.gguf.json")
    zero_inside(rung, os.path.getsize(rung) // 2)
    _stamp_as_if_unchanged(rung, recorded, crcs)
    with _refused(rung, recorded):
        io.verify_sha256(rung, recorded, what="rung file", recorded_in="Q8_0.gguf.json")


@pytest.fixture
def large(monkeypatch):
    """The large-file schedule on a small rung: every file counts as large, blocks of 1 MiB."""
    monkeypatch.setattr(io, "FULL_HASH_BELOW", 0)
    monkeypatch.setattr(io, "BLOCK", 1 << 20)
    calls = []
    real = io._hash_blocks
    monkeypatch.setattr(io, "_hash_blocks", lambda p: calls.append(p) or real(p))
    return calls


def test_a_large_rung_is_sampled_at_every_job_and_hashed_whole_when_its_stamp_is_old(tmp_path, smollm_q8, large):
    import json

    rung = tmp_path / "Q8_0.gguf"
    shutil.copyfile(smollm_q8, rung)
    recorded = io.sha256_file_stamped(rung)  # what the quantize rule records (and stamps on this host)
    assert recorded == io.sha256_file(rung) and len(large) == 1
    io.verify_sha256(rung, recorded, what="rung file", recorded_in="Q8_0.gguf.json")
    assert len(large) == 1  # the stamp is young and the sampled blocks match: no full hash
    stamp, _ = io._stamp_path(rung)
    rec = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**rec, "verified_at": rec["verified_at"] - io.STAMP_MAX_AGE_S - 1}))
    io.verify_sha256(rung, recorded, what="rung file", recorded_in="Q8_0.gguf.json")
    assert len(large) == 2  # a day old: hashed whole, and stamped anew
    assert json.loads(stamp.read_text())["verified_at"] > rec["verified_at"]


def test_a_large_rung_damaged_under_an_unchanged_stamp_is_caught_by_the_sample(tmp_path, smollm_q8, large):
    """Damage over every other block (a failed disk, a wrong file with the same size and times):
    32 random blocks all miss it with probability 2^-32. A single damaged 4 MiB block in a 70 GB rung
    is not caught this way, only by the next day's full hash: docs/dataset.md says so."""
    rung = tmp_path / "Q8_0.gguf"
    shutil.copyfile(smollm_q8, rung)
    recorded, crcs = io._hash_blocks(rung)
    for i in range(1, len(crcs), 2):
        zero_inside(rung, i * io.BLOCK, 4096)
    _stamp_as_if_unchanged(rung, recorded, crcs)
    with _refused(rung, recorded):
        io.verify_sha256(rung, recorded, what="rung file", recorded_in="Q8_0.gguf.json")
    assert len(large) == 2  # the sample missed the stamp: hashed whole, and refused


def test_a_benchmarks_data_changed_after_it_was_pinned_is_refused(tmp_path):
    from quantladder.benchmarks.code.data import humaneval_file

    data = tmp_path / "HumanEval.jsonl.gz"
    shutil.copyfile(humaneval_file(), data)
    bench = benchmarks.create("humaneval", {"enabled": True, "path": str(data), "limit": 2})
    source = bench.fetch_source(str(tmp_path))
    assert bench.pinned_files(source) == {str(data): io.sha256_file(data)}
    bench.verify_source(source, "source.json")
    zero_inside(data, 100, 64)
    with pytest.raises(DataError, match=rf"{re.escape(str(data))}: this humaneval data file's sha256 is .*"
                                        rf"but source\.json records {source['sha256']}"):
        bench.verify_source(source, "source.json")


@pytest.mark.slow
def test_through_snakemake_a_point_on_a_rung_zeroed_in_place_fails(tmp_path, smollm_q8):
    """The issue's case on the real rules: a built rung (its sidecar written as the quantize rule
    writes it) loses 4 MiB in place, size and mtime kept; its point's job fails at its start with the
    error naming the file and both hashes, and writes no figure."""
    from test_code_e2e import _snakemake, make_workdir

    wd, d, target = make_workdir(tmp_path / "wd", smollm_q8)
    rung = wd / "resources/models/smollm2/quantized/Q8_0.gguf"
    rung.unlink()
    shutil.copyfile(smollm_q8, rung)
    side = io.read_json(f"{rung}.json")
    side["sha256"] = io.sha256_file_stamped(rung)
    io.write_json(f"{rung}.json", side)
    zero_inside(rung, 64 << 20)
    proc = _snakemake(wd, target)
    assert proc.returncode != 0
    log = (wd / "logs/generate/testcard/points/smollm2/Q8_0/f16/humaneval.log").read_text() + proc.stderr
    assert re.search(rf"{re.escape(str(rung.relative_to(wd)))}: this rung file's sha256 is [0-9a-f]{{64}}, but "
                     rf"\S+Q8_0\.gguf\.json records {side['sha256']}", log), log[-3000:]
    assert not (d / "generations.jsonl").exists() and not (d / "metrics.json").exists()
