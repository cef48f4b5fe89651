"""Small file helpers: hashing, and writes that never leave a half-written file looking complete."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
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


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as f:
        return json.load(f)


class CorruptLineError(DataError):
    pass


class JsonlFile:
    """The one reader and writer of per-item files (generations, verdicts, item lists).

    One JSON object per line, appended and fsynced one record at a time, so that a killed job keeps
    every finished item. Reading is strict where strictness protects figures:
    - a torn last line (no newline: a kill or a full disk mid-append) is not a record; ``repair()``
      cuts the file back to the last complete record (and logs it) before anything is appended, so
      a new record never merges with a torn one;
    - any other line that is not a JSON object is an error naming ``file:line`` and the fix, never
      silently skipped (a skipped line is a lost item, and a reader that stops there loses the rest).
    A failed append (full disk) truncates the file back to where it was before raising.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def _scan(self) -> tuple[list[dict], int, int]:
        """(records, bytes of the complete part, bytes of a torn tail)."""
        if not self.path.exists():
            return [], 0, 0
        data = self.path.read_bytes()
        records: list[dict] = []
        good = 0
        lines = data.split(b"\n")
        tail = lines.pop()  # after the last newline: b"" when the file ends cleanly
        for no, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise CorruptLineError(
                        f"{self.path}:{no}: not a JSON record ({e.msg if hasattr(e, 'msg') else e}); the file is "
                        "damaged in the middle, so it cannot be trusted past this line: delete that line (the "
                        "item is generated or scored again) or the whole file") from None
                if not isinstance(rec, dict):
                    raise CorruptLineError(f"{self.path}:{no}: a JSON {type(rec).__name__}, not a record; "
                                           "delete that line or the file")
                records.append(rec)
            good += len(line) + 1
        return records, good, len(tail)

    def read(self) -> list[dict]:
        """Every complete record; a torn tail is left out (and left alone: see ``repair``)."""
        records, _, torn = self._scan()
        if torn:
            log.warning("%s: a torn last line (%d bytes) is not a record and is ignored", self.path, torn)
        return records

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
        line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:
            start = f.tell()
            try:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                with contextlib.suppress(OSError):
                    f.truncate(start)
                raise

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


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every complete record of a per-item file; a corrupt line is an error naming file:line."""
    return JsonlFile(path).read()


def write_jsonl(path: str | os.PathLike, records) -> None:
    JsonlFile(path).write(records)
