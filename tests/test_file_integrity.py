"""A rung, an importance matrix and a benchmark's data are verified against their recorded sha256
before any figure is made from them (issue 32, item 4; docs/dataset.md, "What is verified when").

The damage the issue found: 4 MiB zeroed inside a built rung, its size and modification time kept:
the point ran on it. The stamp that spares a second hash (size, mtime, inode, ctime) misses such an
edit, because no user call can set a file's ctime back.
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


def test_a_rung_zeroed_in_place_is_refused_naming_the_file_and_both_hashes(tmp_path, smollm_q8, monkeypatch):
    rung = tmp_path / "Q8_0.gguf"
    shutil.copyfile(smollm_q8, rung)
    recorded = io.sha256_file_stamped(rung)  # what the quantize rule records (and stamps on this host)
    calls = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda p: calls.append(p) or real(p))
    io.verify_sha256(rung, recorded, what="rung file", recorded_in="Q8_0.gguf.json")
    assert calls == []  # unchanged since it was hashed here: the stamp answers
    zero_inside(rung, os.path.getsize(rung) // 2)
    with pytest.raises(DataError, match=rf"{re.escape(str(rung))}: this rung file's sha256 is "
                                        rf"(?!{recorded})[0-9a-f]{{64}}, "
                                        rf"but Q8_0\.gguf\.json records {recorded}"):
        io.verify_sha256(rung, recorded, what="rung file", recorded_in="Q8_0.gguf.json")
    assert len(calls) == 1  # the edit missed the stamp: hashed again


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
