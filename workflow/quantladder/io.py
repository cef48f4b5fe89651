"""Small file helpers: hashing, and writes that never leave a half-written file looking complete."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .errors import DataError

log = logging.getLogger("quantladder.io")

CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def user_cache(*parts: str) -> Path:
    """quantladder's folder in the user's cache (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "quantladder", *parts)


# How a file's recorded sha256 is re-verified (docs/dataset.md, "Model files and data, by sha256").
# A stamp is a shortcut, not proof: a disk can change bytes under an unchanged (inode, size, mtime,
# ctime), so every job reads the file again, in full or in part:
FULL_HASH_BELOW = 1 << 30  # bytes: a file up to 1 GiB is hashed whole at every job (about 0.6 s here)
BLOCK = 4 << 20  # a larger file's stamp keeps a CRC-32 per 4 MiB block ...
SAMPLE_BLOCKS = 32  # ... of which every job reads the first, the last and 32 drawn at random (136 MiB)
STAMP_MAX_AGE_S = 24 * 3600  # and a stamp older than a day is renewed by a full hash


def _stamp_path(path: str | os.PathLike) -> tuple[Path, os.stat_result]:
    """Where this host keeps the sha256 of ``path`` in its present state, and that state.

    The stamp is (host, real path, device, inode, size, mtime, ctime): any write through the
    filesystem moves the file's ctime, which no user call can set back, so an edit in place that
    keeps the size and resets the mtime misses the stamp and is hashed again."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = hash_obj([os.uname().nodename, real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    return user_cache("verified", key[:2], key), st


def _hash_blocks(path: str | os.PathLike) -> tuple[str, list[int]]:
    """The file's sha256 and the CRC-32 of each of its BLOCK-sized blocks, in one read."""
    import zlib

    h, crcs = hashlib.sha256(), []
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
            crcs.append(zlib.crc32(block))
    return h.hexdigest(), crcs


def _sample_matches(path: str | os.PathLike, crcs: list[int]) -> bool:
    """The first, the last and SAMPLE_BLOCKS random blocks of the file against the stamp's CRCs."""
    import random
    import zlib

    n = len(crcs)
    picks = {0, n - 1} | {random.SystemRandom().randrange(n) for _ in range(SAMPLE_BLOCKS)} if n else set()
    with open(path, "rb") as f:
        for i in sorted(picks):
            f.seek(i * BLOCK)
            if zlib.crc32(f.read(BLOCK)) != crcs[i]:
                return False
    return True


def sha256_file_stamped(path: str | os.PathLike) -> str:
    """``sha256_file``, re-verified on a schedule rather than trusted (the constants above): a file
    under FULL_HASH_BELOW is hashed whole; a larger one whose stamp is younger than STAMP_MAX_AGE_S
    has its sampled blocks read and compared with the stamp's CRCs, and is hashed whole when one
    differs, when the stamp is older, or when there is none (docs/dataset.md: a 70 GB rung costs
    about 40 s of one core to hash whole, 0.1 s from the page cache to sample)."""
    import time

    stamp, st = _stamp_path(path)
    if st.st_size >= FULL_HASH_BELOW:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            rec = json.loads(stamp.read_text())
            if (time.time() - float(rec["verified_at"]) < STAMP_MAX_AGE_S and rec["block"] == BLOCK
                    and len(rec["sha256"]) == 64 and _sample_matches(path, rec["crc32"])):
                return rec["sha256"]
    digest, crcs = _hash_blocks(path)
    if st.st_size >= FULL_HASH_BELOW and _stamp_path(path)[1].st_ctime_ns == st.st_ctime_ns:
        with contextlib.suppress(OSError), atomic_path(stamp) as tmp:  # not written to while it was read
            tmp.write_text(json.dumps({"sha256": digest, "verified_at": time.time(), "block": BLOCK,
                                       "crc32": crcs}))
    return digest


def verify_sha256(path: str | os.PathLike, expected: str | None, *, what: str, recorded_in: str) -> None:
    """Refuse a file whose bytes are not the ones its record names, before any figure is made from it."""
    if not expected:
        raise DataError(f"{path}: {recorded_in} records no sha256 for this {what}, so it cannot be verified; "
                        "make it again (delete both and run `snakemake --cores all` again)")
    actual = sha256_file_stamped(path)
    if actual != expected.lower():
        raise DataError(f"{path}: this {what}'s sha256 is {actual}, but {recorded_in} records {expected}: the file "
                        "changed after it was made or fetched (a damaged disk, a copy over it); delete it and its "
                        "record and run `snakemake --cores all` again to make or fetch it again. (A file under "
                        f"{FULL_HASH_BELOW >> 30} GiB is hashed whole at every job; a larger one is sampled at "
                        f"every job and hashed whole when its last full hash is over {STAMP_MAX_AGE_S // 3600} h "
                        "old: docs/dataset.md)")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> str:
    """One spelling per value, so that equal objects hash equal."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def hash_obj(obj: Any) -> str:
    return sha256_bytes(canonical_json(obj).encode())


PARTIAL_SUFFIX = ".partial"


def _stale_partials(path: Path) -> list[Path]:
    """Temporary files of earlier writers of ``path`` whose process is gone (a killed job's)."""
    out = []
    for p in path.parent.glob(f".{glob_escape(path.name)}.*{PARTIAL_SUFFIX}"):
        pid = p.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            out.append(p)
    return out


def glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only on success.

    The temporary name starts with a dot, carries the writer's pid and ends in ``.partial``, so
    nothing globbing for outputs takes it for a finished file, and the next writer of the same
    path removes what a killed writer left (a SIGKILL runs no cleanup).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in _stale_partials(path):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=PARTIAL_SUFFIX, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; outputs are ordinary files
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


REWRITE = ("delete it and run `snakemake --cores all` again (the default target, with your --configfile): the "
           "rule that writes it runs again")


def read_json(path: str | os.PathLike, required: tuple[str, ...] = ()) -> Any:
    """A JSON file; damage (a truncated write, a hand edit) is an error naming the file and the fix.

    ``required``: keys the file must have (its reader's contract): their absence is named too."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not JSON ({e}): the file is damaged; {REWRITE}") from None
    if required:
        if not isinstance(doc, dict):
            raise DataError(f"{path}: a JSON {type(doc).__name__}, not an object; the file is damaged; {REWRITE}")
        missing = [k for k in required if k not in doc]
        if missing:
            raise DataError(f"{path}: no {', '.join(map(repr, missing))}; the file is damaged; {REWRITE}")
    return doc


class CorruptLineError(DataError):
    pass


@dataclass(frozen=True)
class ItemFileKind:
    """A kind of per-item file: the keys each record must have, and what restores a damaged one.

    ``restore`` is formatted with ``path`` (the file) and ``dir`` (its folder). A declared output is
    written once, whole, with its count and sha256 recorded in the JSON file ``meta`` beside it
    (under ``n_key`` and ``sha_key``), so deleting one of its lines leaves a file that no longer
    matches its record: what restores it is making it again."""

    name: str
    required: tuple[str, ...]
    restore: str
    meta: str | None = None
    n_key: str | None = None
    sha_key: str | None = None
    meta_required: tuple[str, ...] = ()  # what every version of the record has held


# The default target plans every missing file of the plan (rules/common.smk, get_final_outputs).
_RERUN = "run `snakemake --cores all` again (the default target, with your --configfile)"
ITEMS = ItemFileKind(
    "items", ("id",),
    "delete {path} and {dir}/items.json, then " + _RERUN + ": rule benchmark_items makes the items again from "
    "the benchmark's source, and every point of the family that used them is generated again (from its store "
    "where an item is unchanged)", meta="items.json", n_key="n_items", sha_key="sha256",
    meta_required=("n_items", "sha256"))
GENERATIONS = ItemFileKind(
    "generations", ("item_id", "finish_reason"),
    "delete {path}, then " + _RERUN + ": rule generate writes it again from the replies kept in "
    "{dir}/.generations.store.jsonl and generates only the items missing there",
    meta="generations.json", n_key="generated", sha_key="sha256",
    meta_required=("generated",))
VERDICTS = ItemFileKind(
    "verdicts", ("item_id", "correct"),
    "delete {path}, then " + _RERUN + ": rule score writes it again from the verdicts kept in "
    "{dir}/.verdicts.store.jsonl and scores only the items missing there",
    meta="metrics.json", n_key="scored", sha_key="verdicts_sha256")
GENERATION_STORE = ItemFileKind(
    "generation store", ("item_id", "key"),
    "delete that line (or the file), then " + _RERUN + ": the items it held are generated again")
VERDICT_STORE = ItemFileKind(
    "verdict store", ("item_id", "key"),
    "delete that line (or the file), then " + _RERUN + ": the items it held are scored again")
ANY = ItemFileKind("per-item", (), "delete the file and " + _RERUN)


class JsonlFile:
    """The one reader and writer of per-item files (generations, verdicts, item lists).

    One JSON object per line, appended and fsynced one record at a time, so that a killed job keeps
    every finished item. Reading is strict where strictness protects figures:
    - a torn last line (no newline: a kill or a full disk mid-append) is not a record; ``repair()``
      cuts the file back to the last complete record (and logs it) before anything is appended, so
      a new record never merges with a torn one;
    - any other line that is not a JSON object with its kind's keys is an error naming ``file:line``
      and what restores the data, never silently skipped (a skipped line is a lost item, and a
      reader that stops there loses the rest);
    - ``read_recorded`` also checks the count and sha256 recorded beside a declared file.
    A failed append (full disk) truncates the file back to where it was before raising.
    """

    def __init__(self, path: str | os.PathLike, kind: ItemFileKind = ANY):
        self.path = Path(path)
        self.kind = kind

    def _advice(self) -> str:
        return self.kind.restore.format(path=self.path, dir=self.path.parent)

    def _scan(self, data: bytes | None = None) -> tuple[list[dict], int, int]:
        """(records, bytes of the complete part, bytes of a torn tail)."""
        if data is None:
            if not self.path.exists():
                return [], 0, 0
            data = self.path.read_bytes()
        records: list[dict] = []
        good = 0
        lines = data.split(b"\n")
        tail = lines.pop()  # after the last newline: b"" when the file ends cleanly
        for no, line in enumerate(lines, start=1):
            if line.strip():
                where = f"{self.path}:{no}"
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise CorruptLineError(
                        f"{where}: not a JSON record ({e.msg if hasattr(e, 'msg') else e}); the {self.kind.name} "
                        f"file is damaged in the middle, so it cannot be trusted past this line: {self._advice()}"
                    ) from None
                if not isinstance(rec, dict):
                    raise CorruptLineError(f"{where}: a JSON {type(rec).__name__}, not a record; {self._advice()}")
                missing = [k for k in self.kind.required if k not in rec]
                if missing:
                    raise CorruptLineError(f"{where}: a {self.kind.name} record without "
                                           f"{', '.join(map(repr, missing))}; {self._advice()}")
                records.append(rec)
            good += len(line) + 1
        return records, good, len(tail)

    def read(self) -> list[dict]:
        """Every complete record; a torn tail is left out (and left alone: see ``repair``)."""
        records, _, torn = self._scan()
        if torn:
            log.warning("%s: a torn last line (%d bytes) is not a record and is ignored", self.path, torn)
        return records

    def read_declared(self) -> tuple[list[dict], dict]:
        """A declared output and the record beside it (the kind's ``meta``), checked against its count
        and sha256 (either absent where the record predates it): a file edited after it was written
        (a line deleted, as this advice said once) would otherwise pass for a smaller plan."""
        meta_path = self.path.with_name(self.kind.meta)
        meta = read_json(meta_path, required=self.kind.meta_required)
        if not isinstance(meta, dict):
            raise DataError(f"{meta_path}: a JSON {type(meta).__name__}, not an object; the file is damaged; {REWRITE}")
        n, sha = meta.get(self.kind.n_key), meta.get(self.kind.sha_key)
        if not self.path.exists():
            raise DataError(f"{self.path}: no such {self.kind.name} file, though {meta_path} records it; "
                            f"{self._advice()}")
        data = self.path.read_bytes()
        records, _, torn = self._scan(data)
        actual = sha256_bytes(data)
        if torn or (n is not None and len(records) != n) or (sha and actual != sha):
            raise DataError(
                f"{self.path} holds {len(records)} records" + (f" and a torn last line ({torn} bytes)" if torn else "")
                + f" (sha256 {actual}), but {meta_path} records {n if n is not None else 'no count'} "
                f"(sha256 {sha or 'not recorded'}): the file was changed after it was written, and what is "
                f"measured from it would cover other items than planned; {self._advice()}")
        return records, meta

    def repair(self) -> list[dict]:
        """Cut a torn tail back to the last complete record; return the records."""
        records, good, torn = self._scan()
        if torn:
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
            log.warning("%s: cut a torn last line (%d bytes) back to the last complete record (%d records)",
                        self.path, torn, len(records))
        return records

    def append(self, record: dict) -> None:
        """One record, written and fsynced through the raw descriptor: a buffered file object would
        flush again (and fail again, on a full disk) before its truncate, leaving a torn tail."""
        line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, start)  # the file as it was: no torn tail for the next reader
                raise
        finally:
            os.close(fd)

    def write(self, records) -> None:
        """Replace the whole file atomically (a finished output: written once, in order)."""
        with atomic_path(self.path) as tmp:
            with open(tmp, "w") as f:
                for r in records:
                    f.write(json.dumps(r, sort_keys=True, default=str) + "\n")
                f.flush()
                os.fsync(f.fileno())


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    JsonlFile(path).append(record)


def read_jsonl(path: str | os.PathLike, kind: ItemFileKind = ANY) -> list[dict]:
    """Every complete record of a per-item file; a corrupt line is an error naming file:line."""
    return JsonlFile(path, kind).read()


def write_jsonl(path: str | os.PathLike, records) -> None:
    JsonlFile(path).write(records)
