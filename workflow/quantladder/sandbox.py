"""The one sandbox runner: every rule that executes model-written code goes through here.

The seeds' rule is part of the method: the generation host never runs what the model wrote,
and where it runs (the scoring host) it runs with no network, a private filesystem, CPU / memory /
time limits and no view of the hidden answers.

    from quantladder.sandbox import Limits, run_sandboxed, host_python
    py, binds = host_python()
    res = run_sandboxed([py, "-I", "-S", "main.py"], {"main.py": "print(1)"}, Limits(wall_s=5),
                        extra_ro_binds=binds)
    res.kind   # ok / failed / timeout / memory / violation / sandbox_error

Backends
--------
``bubblewrap`` (default; ``apt-get install bubblewrap``). The sandbox gets new network, pid, ipc
and uts namespaces (so no network at all, only its own processes), read-only binds of the system
directories (/usr and its merged-/usr links, a few /etc files), a fresh /proc and /dev, and two
private size-limited tmpfs: /work (the cwd, where ``files`` are copied) and /tmp. Nothing else of
the host exists inside: not the project directory, results/, config/, $HOME, nor any answer file.
The environment is cleared. rlimits (address space, CPU seconds, processes, file size, open files)
are set by ``prlimit`` right before the command runs, as an unprivileged uid:

* as root (the dev machine, CI, cluster scoring nodes run us as root) the sandbox is set up in the
  host's user namespace and ``setpriv`` drops to a uid of its own (one per concurrent sandbox, from
  a range no host account uses), with no capabilities, no supplementary groups and no_new_privs.
  This matters: the kernel does not enforce RLIMIT_NPROC for uid 0, and a uid namespace that maps
  the sandbox user back onto root (bwrap ``--unshare-user --uid``) still counts as uid 0. With a
  real unprivileged uid a fork bomb stops at ``Limits.nproc``.
* as an ordinary user, bwrap makes a user namespace (``--unshare-user``), the process count of the
  namespace's user is its own, and the same ``prlimit`` applies.

As root, each sandbox also gets a memory cgroup of its own (``Limits.memory_bytes`` for all its
processes together; cgroup v1 memory controller or v2), joined before bwrap starts: RLIMIT_AS is
per process, so without it a program forking ``nproc`` children could still take nproc x address
space. Where no cgroup can be made, ``check_backend`` says so and the rlimits are the bound.

On the wall-clock timeout the sandbox's pid 1 is killed (bwrap reports its host pid on
``--info-fd``): when a pid namespace's init dies, the kernel kills every other process in it, so
every process the program started dies, whatever the privilege path and whether a cgroup exists.
``--die-with-parent`` alone is not enough as root: setpriv's uid change clears the parent-death
signal. ``check_backend`` refuses a backend on which a killed sandbox leaves a process alive.

``apptainer`` (clusters where unprivileged namespaces go through Apptainer): ``--containall
--cleanenv --no-home --net --network none`` with the same private /work, the same ``prlimit`` inside
(the image must provide util-linux and the interpreter). Choose the image with
``backend="apptainer:/path/image.sif"`` or ``$QUANTLADDER_APPTAINER_IMAGE``.

There is no unsandboxed fallback: when no backend works, :class:`SandboxUnavailable` says how to
install one.
"""

from __future__ import annotations

import errno
import glob
import itertools
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping, Sequence

from . import sandbox_procs as procs
from .errors import QuantladderError

MiB = 1 << 20
GiB = 1 << 30

BACKENDS = ("bubblewrap", "apptainer")

INSTALL_HELP = (
    "install a sandbox backend: on Debian/Ubuntu `apt-get install bubblewrap` (the project lists it "
    "in .ci/system-packages.txt); on a cluster without unprivileged namespaces use Apptainer "
    "(`apptainer` on PATH, backend 'apptainer:/path/to/image.sif' or $QUANTLADDER_APPTAINER_IMAGE). "
    "Model-written code is never run outside a sandbox."
)

# System paths bound read-only. /usr holds the interpreter and libraries on a merged-/usr system;
# the others are symlinks there (or real dirs on older layouts, bound as they are).
SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The few /etc files programs legitimately read (dynamic loader, time zone, TLS roots, fonts,
# alternatives symlinks). Not passwd/shadow/hosts: a minimal passwd is written instead.
ETC_RO = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
          "/etc/timezone", "/etc/alternatives", "/etc/ssl/certs", "/etc/ca-certificates",
          "/etc/fonts", "/etc/mime.types", "/etc/matplotlibrc")

# The sandbox's own uids when we start as root: far above any account or subuid range in use.
UID_BASE = 3_000_000_000
_uid_counter = itertools.count()
_uid_lock = threading.Lock()

SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "MPLBACKEND": "Agg",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    # Numeric libraries start a thread per core; threads count against RLIMIT_NPROC.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "3",
}


class SandboxUnavailable(QuantladderError):
    """No sandbox backend works on this host; the message says how to install one."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0  # wall-clock seconds, start-up included; then the whole namespace is killed
    cpu_s: int = 10  # RLIMIT_CPU per process (SIGXCPU, then SIGKILL)
    address_space_bytes: int = 4 * GiB  # RLIMIT_AS per process (numpy/pandas need ~1 GiB of mappings)
    nproc: int = 64  # RLIMIT_NPROC for the sandbox's uid: processes + threads
    file_size_bytes: int = 16 * MiB  # RLIMIT_FSIZE: largest file a process may write
    open_files: int = 256  # RLIMIT_NOFILE
    output_bytes: int = 1 * MiB  # captured per stream (stdout, stderr); the rest is dropped
    disk_bytes: int = 64 * MiB  # size of each private tmpfs (/work, /tmp, /dev/shm)
    # All processes of the sandbox together (a memory cgroup, where this host lets us make one):
    # RLIMIT_AS is per process, so without it nproc x address space is the only bound.
    memory_bytes: int = 4 * GiB

    def __post_init__(self):
        for name in ("wall_s", "cpu_s", "address_space_bytes", "nproc", "file_size_bytes",
                     "open_files", "output_bytes", "disk_bytes", "memory_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox Limits.{name} must be positive, got {getattr(self, name)!r}")


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    kind: str  # ok / failed / timeout / memory / violation / sandbox_error
    signal: int | None = None  # the signal that ended the program, if one did
    truncated: bool = False  # some output was dropped (over Limits.output_bytes)
    backend: str = ""
    detail: str = ""
    oom_kills: int = 0  # processes the sandbox's memory cgroup killed (0 where there is none)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


# ---------------------------------------------------------------------------------------------
# backend discovery


_probe_cache: dict[str, str] = {}
_probe_lock = threading.Lock()


def _parse_backend(backend: str) -> tuple[str, str | None]:
    name, _, arg = backend.partition(":")
    if name not in BACKENDS:
        raise SandboxUnavailable(f"sandbox backend {backend!r} is unknown (use one of {BACKENDS}); "
                                 + INSTALL_HELP)
    return name, (arg or None)


def check_backend(backend: str = "bubblewrap") -> str:
    """Make sure the backend can start a sandbox here; returns a one-line description.

    Raises SandboxUnavailable (with install instructions) otherwise. The probe runs a trivial
    command inside a real sandbox once per process and backend.
    """
    with _probe_lock:
        if backend in _probe_cache:
            return _probe_cache[backend]
    name, arg = _parse_backend(backend)
    if name == "bubblewrap":
        exe = shutil.which("bwrap")
        if not exe:
            raise SandboxUnavailable("bubblewrap (`bwrap`) is not on PATH; " + INSTALL_HELP)
        if os.geteuid() == 0:
            for tool in ("setpriv", "prlimit"):
                if not os.path.exists(f"/usr/bin/{tool}"):
                    raise SandboxUnavailable(f"/usr/bin/{tool} (util-linux) is missing; it drops the "
                                             "sandbox to an unprivileged uid and sets its rlimits")
    else:
        exe = shutil.which("apptainer") or shutil.which("singularity")
        if not exe:
            raise SandboxUnavailable("apptainer is not on PATH; " + INSTALL_HELP)
        if not (arg or os.environ.get("QUANTLADDER_APPTAINER_IMAGE")):
            raise SandboxUnavailable("the apptainer backend needs an image: backend "
                                     "'apptainer:/path/image.sif' or $QUANTLADDER_APPTAINER_IMAGE")
    if name == "bubblewrap":
        seccomp_filter()  # raises SandboxUnavailable with install instructions when it cannot be built
    # The probe also asserts that a nested user namespace is refused inside (bwrap's own
    # --assert-userns-disabled covers only the unprivileged path).
    probe = ("echo sandbox-ok; if [ -x /usr/bin/unshare ]; then /usr/bin/unshare -U /bin/true 2>/dev/null "
             "&& echo userns-allowed; fi; exit 0")
    res = _run(["/bin/sh", "-c", probe], {}, Limits(wall_s=30), backend, (), probe=True)
    if res.kind != "ok" or "sandbox-ok" not in res.stdout:
        raise SandboxUnavailable(
            f"the {name} sandbox does not start on this host ({exe}): "
            f"rc={res.returncode} {res.stderr.strip()[:500]!r}; " + INSTALL_HELP)
    if name == "bubblewrap" and "userns-allowed" in res.stdout:
        raise SandboxUnavailable(f"the {name} sandbox ({exe}) lets a program create a user namespace; "
                                 "the seccomp filter did not load (bwrap --seccomp)")
    _check_kill(name, exe, backend)
    desc = (f"{name} ({exe}; {'root: setpriv to a private uid' if os.geteuid() == 0 else 'user namespace'}"
            "; timeout: every process killed")
    if name == "bubblewrap":
        cg = procs.memory_cgroup_root()
        desc += (f"; memory cap: {'cgroup ' + cg[0] if cg else 'none, RLIMIT_AS per process only'}"
                 "; seccomp: no nested user namespaces, no ptrace)")
    else:
        desc += ")"
    with _probe_lock:
        _probe_cache[backend] = desc
    return desc


def _check_kill(name: str, exe: str, backend: str) -> None:
    """Refuse a backend whose kill leaves a process of the sandbox alive: a program that started a
    daemon in a session of its own and sleeps on as the sandbox's pid 1 (the code harness's shape)
    is killed as on a timeout, and the daemon and pid 1 must both be gone (the pipes they hold are
    closed) within sandbox_procs.KILL_GRACE_S. Which privilege path and whether a cgroup exists do
    not matter."""
    probe = "setsid -f sleep 600 && echo kill-probe-ready; exec sleep 600"
    res = _run(["/bin/sh", "-c", probe], {}, Limits(wall_s=30), backend, (), probe=True, as_init=True,
               kill_on=b"kill-probe-ready")
    if "kill-probe-ready" not in res.stdout:
        raise SandboxUnavailable(f"the {name} sandbox's kill probe did not start ({exe}): rc={res.returncode} "
                                 f"{res.stderr.strip()[:300]!r} (it needs util-linux's setsid inside)")
    if res.kind != "timeout":
        raise SandboxUnavailable(f"the {name} sandbox ({exe}) cannot be killed whole here: {res.detail}; a "
                                 "program could outlive its wall-clock limit")


@dataclass(frozen=True)
class Interpreter:
    """A Python to run inside the sandbox: its executable, the host paths it needs bound read-only,
    and the paths under those binds (or under the system dirs) that it must not see (site dirs)."""

    exe: str
    ro_binds: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()


def host_python(python: str | None = None) -> Interpreter:
    """An interpreter to run inside the sandbox, and what of the host it sees.

    Default (``python=None``): the base interpreter of the running Python with its standard library
    only: the executable, its shared libpython and the stdlib directory are bound, and every
    site-packages / dist-packages directory of the base and of the system Pythons is hidden (an
    empty read-only directory in its place), so no installed package, and no data shipped in one,
    is visible. ``python`` may be a virtual environment's interpreter (e.g. the BigCodeBench scoring
    env built from envs/bigcodebench-eval.txt): the venv and its base are bound, the base's site
    directories hidden unless the venv includes them.
    """
    if python is None:
        exe = Path(getattr(sys, "_base_executable", None) or sys.executable)
        if not exe.is_absolute() or not exe.exists():
            exe = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        exe = exe.resolve()
        binds = [str(exe)]
        stdlib = {sysconfig.get_paths(vars={"installed_base": sys.base_prefix, "base": sys.base_prefix,
                                            "installed_platbase": sys.base_exec_prefix,
                                            "platbase": sys.base_exec_prefix})[k] for k in ("stdlib", "platstdlib")}
        binds += [str(Path(d).resolve()) for d in sorted(stdlib) if Path(d).is_dir()]
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):
            lib = Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("INSTSONAME") or "")
            if lib.is_file():
                binds.append(f"{lib.resolve()}:{lib}")
        binds = [b for b in dict.fromkeys(binds) if not _under_system(b.split(":")[0])]
        return Interpreter(str(exe), tuple(binds), _site_dirs([sys.base_prefix, sys.base_exec_prefix]))
    p = Path(python).absolute()
    if not p.exists():
        raise SandboxUnavailable(f"sandbox interpreter {python!r} does not exist (build the scoring "
                                 "environment first, see envs/)")
    binds: list[str] = []
    bases: list[str] = []
    keep_base_site = False
    venv = p.parent.parent
    if (venv / "pyvenv.cfg").exists():
        binds.append(str(venv))
        home = None
        for line in (venv / "pyvenv.cfg").read_text().splitlines():
            k, _, v = line.partition("=")
            if k.strip() == "home":
                home = v.strip()
            elif k.strip() == "include-system-site-packages":
                keep_base_site = v.strip().lower() == "true"
        if home:
            binds.append(str(Path(home).resolve().parent))
            bases.append(str(Path(home).resolve().parent))
    real = p.resolve()
    binds.append(str(real.parent.parent))
    bases.append(str(real.parent.parent))
    out: list[str] = []
    for b in binds:
        if not _under_system(b) and b not in out:
            out.append(b)
    hidden = () if keep_base_site else tuple(d for d in _site_dirs(bases) if not d.startswith(str(venv) + "/"))
    return Interpreter(str(p), tuple(out), hidden)


def _site_dirs(prefixes: Sequence[str]) -> tuple[str, ...]:
    """The site-packages / dist-packages directories of these prefixes and of the system Pythons."""
    pats = [f"{pre}/{lib}/python3*/{kind}" for pre in dict.fromkeys(prefixes) for lib in ("lib", "lib64")
            for kind in ("site-packages", "dist-packages")]
    pats += ["/usr/lib/python3/dist-packages", "/usr/lib/python3*/*-packages",
             "/usr/local/lib/python3*/*-packages", "/usr/lib64/python3*/*-packages"]
    found: list[str] = []
    for pat in pats:
        for d in sorted(glob.glob(pat)):
            if os.path.isdir(d) and not os.path.islink(d) and d not in found:
                found.append(d)
    return tuple(found)


def _under_system(path: str) -> bool:
    return any(path == s or path.startswith(s + "/") for s in ("/usr", "/bin", "/lib", "/lib64"))


# ---------------------------------------------------------------------------------------------
# the runner


def run_sandboxed(argv: list[str], files: Mapping[str, bytes | str], limits: Limits = Limits(),
                  backend: str = "bubblewrap", extra_ro_binds: Sequence[str] = (), hidden: Sequence[str] = (),
                  as_init: bool = False) -> SandboxResult:
    """Run ``argv`` in a fresh sandbox whose cwd (/work) holds ``files``; never raises for what
    the program does, only SandboxUnavailable when no sandbox can be made.

    ``files`` maps relative paths (subdirectories allowed) to contents. ``extra_ro_binds`` are host
    paths made visible read-only at the same path ("src:dest" binds elsewhere), e.g. an interpreter
    installation; ``hidden`` are paths (under those binds or the system dirs) replaced by an empty
    read-only directory (see :func:`host_python`). ``as_init``: the command itself is pid 1 of the
    sandbox's pid namespace, so that no signal from its descendants reaches it (the code harness).
    """
    check_backend(backend)
    return _run(argv, files, limits, backend, extra_ro_binds, hidden=hidden, as_init=as_init)


def _run(argv, files, limits: Limits, backend: str, extra_ro_binds, probe: bool = False, hidden=(),
         as_init: bool = False, kill_on: bytes | None = None) -> SandboxResult:
    """``kill_on``: end the run as a timeout as soon as the program has printed this (the backend
    check's kill probe)."""
    if not argv:
        raise ValueError("run_sandboxed: argv is empty")
    name, arg = _parse_backend(backend)
    fds: list[int] = []
    cleanup: list[str] = []
    cg = None
    info_r = None
    try:
        if name == "bubblewrap":
            # bwrap writes the host pid of the sandbox's pid 1 on this pipe (--info-fd): the kill's target.
            info_r, info_w = os.pipe()
            fds.append(info_w)
            cmd, pass_fds, uid = _bwrap_command(list(argv), files, limits, extra_ro_binds, fds, hidden, as_init,
                                                info_fd=info_w)
            cg = procs.make_cgroup(uid, limits.memory_bytes) if os.geteuid() == 0 else None
            if cg is not None:
                # Join the cgroup before bwrap starts: every process of the sandbox is born in it.
                cmd = ["/bin/sh", "-c", 'echo $$ > "$0" || exit 125; exec "$@"', f"{cg[1]}/cgroup.procs", *cmd]
        else:
            image = arg or os.environ.get("QUANTLADDER_APPTAINER_IMAGE")
            cmd, pass_fds = _apptainer_command(list(argv), files, limits, extra_ro_binds, image, cleanup, hidden)
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, pass_fds=pass_fds, close_fds=True,
                                    start_new_session=True, env={"PATH": "/usr/bin:/bin"})
        except OSError as e:
            raise SandboxUnavailable(f"could not start {cmd[0]}: {e}; " + INSTALL_HELP) from e
        finally:
            for fd in fds:  # the child holds its own copies until bwrap has copied the files in
                os.close(fd)
            fds.clear()
        out, err, timed_out, truncated, outlived = _collect(
            proc, t0 + limits.wall_s, limits.output_bytes, lambda: procs.kill_sandbox(proc, info_r), kill_on)
        wall = time.perf_counter() - t0
        oom_kills = 0
        if cg is not None:
            oom_kills = procs.cgroup_oom_kills(cg)
            procs.kill_cgroup(cg)  # nothing should be left; if anything is, it goes now
    finally:
        for fd in fds + ([info_r] if info_r is not None else []):
            os.close(fd)
        for d in cleanup:
            shutil.rmtree(d, ignore_errors=True)
        if cg is not None:
            procs.remove_cgroup(cg[1])
    rc = proc.returncode
    stdout = out.decode("utf-8", errors="replace")
    stderr = err.decode("utf-8", errors="replace")
    kind, sig, detail = classify(rc, stderr, timed_out, backend=name)
    if oom_kills and kind not in ("ok", "timeout"):
        kind, detail = "memory", f"memory cgroup limit ({oom_kills} process(es) killed)"
    if outlived:  # the backend check refuses a backend where this happens; never a verdict of the program's
        kind, detail = "sandbox_error", f"a sandbox process held its output {procs.KILL_GRACE_S:g} s after the kill"
    return SandboxResult(returncode=rc, stdout=stdout, stderr=stderr, timed_out=timed_out, wall_s=wall,
                         kind=kind, signal=sig, truncated=truncated, backend=backend, detail=detail,
                         oom_kills=oom_kills)


def _collect(proc: subprocess.Popen, deadline: float, limit: int, kill, kill_on: bytes | None = None
             ) -> tuple[bytes, bytes, bool, bool, bool]:
    """Read both pipes until the program ends or the deadline passes (then ``kill()`` the sandbox and
    read on until every process holding the pipes is gone, at most sandbox_procs.KILL_GRACE_S).

    Each stream keeps its first ``limit`` bytes minus a tail window, plus its last bytes, so that a
    verdict line printed at the end survives a program that floods its output. Returns (stdout,
    stderr, timed out, truncated, outlived): outlived when a pipe was still open KILL_GRACE_S after the
    kill, i.e. a process of the sandbox survived it.
    """
    tail_keep = min(16384, max(1024, limit // 4))
    head_keep = max(0, limit - tail_keep)
    bufs = {proc.stdout: [bytearray(), bytearray(), 0], proc.stderr: [bytearray(), bytearray(), 0]}
    sel = selectors.DefaultSelector()
    for f in bufs:
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ)
    timed_out = False
    killed_at = None
    open_streams = 2
    while open_streams:
        now = time.perf_counter()
        if killed_at is None and now >= deadline:
            timed_out = True
            kill()
            killed_at = now
        if killed_at is not None and now - killed_at > procs.KILL_GRACE_S:
            break
        events = sel.select(timeout=0.1 if killed_at is not None else min(deadline - now, 0.5))
        for key, _ in events:
            try:
                chunk = os.read(key.fileobj.fileno(), 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            if kill_on is not None and key.fileobj is proc.stdout and kill_on in chunk:
                deadline = time.perf_counter()
            head, tail, total = bufs[key.fileobj]
            bufs[key.fileobj][2] = total + len(chunk)
            room = head_keep - len(head)
            if room > 0:
                head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                tail += chunk
                if len(tail) > tail_keep:
                    del tail[: len(tail) - tail_keep]
    outlived = bool(open_streams)
    # Both pipes closed (or the sandbox was killed): every process of the namespace is gone or going.
    try:
        proc.wait(timeout=max(0.0, deadline - time.perf_counter()) + 5)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill()
        proc.wait()
    sel.close()
    for f in bufs:
        f.close()
    truncated = False
    out = []
    for f in (proc.stdout, proc.stderr):
        head, tail, total = bufs[f]
        if total > len(head) + len(tail):
            truncated = True
            out.append(bytes(head) + b"\n[... output truncated by the sandbox ...]\n" + bytes(tail))
        else:
            out.append(bytes(head) + bytes(tail))
    return out[0], out[1], timed_out, truncated, outlived


_MEMORY_PAT = re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory", re.I)
_VIOLATION_PAT = re.compile(
    r"PermissionError|Operation not permitted|Read-only file system|Network is unreachable|"
    r"Connection refused|No space left on device|File too large|Resource temporarily unavailable|"
    r"Temporary failure in name resolution|Name or service not known|Too many open files")


def classify(rc: int | None, stderr: str, timed_out: bool, backend: str = "bubblewrap"
             ) -> tuple[str, int | None, str]:
    """(kind, signal, detail) of a finished sandbox run, seen from outside."""
    sig = None
    if rc is not None and rc < 0:
        sig = -rc
    elif rc is not None and rc > 128 and rc - 128 < 65:  # bwrap reports a signalled child as 128+n
        sig = rc - 128
    if timed_out:
        return "timeout", sig, "wall-clock limit"
    if rc == 0:
        return "ok", None, ""
    if sig == signal.SIGXCPU:
        return "timeout", sig, "CPU-time limit (SIGXCPU)"
    if sig == signal.SIGXFSZ:
        return "violation", sig, "file-size limit (SIGXFSZ)"
    if sig == signal.SIGSYS:
        return "violation", sig, "forbidden system call (SIGSYS)"
    head = stderr.lstrip()[:2000]
    if rc == 125 and "cgroup.procs" in head:
        return "sandbox_error", sig, head.splitlines()[0]
    if backend == "bubblewrap" and head.startswith("bwrap:") or head.startswith(("setpriv:", "prlimit:")):
        return "sandbox_error", sig, head.splitlines()[0] if head else ""
    tail = stderr[-4000:]
    if _MEMORY_PAT.search(tail) or (sig == signal.SIGSEGV and "MemoryError" in stderr):
        return "memory", sig, "address-space limit"
    if _VIOLATION_PAT.search(tail):
        return "violation", sig, _VIOLATION_PAT.search(tail).group(0)
    if sig == signal.SIGKILL:
        return "memory", sig, "killed (SIGKILL): out of memory"
    return "failed", sig, ""


def _check_rel(path: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if p.is_absolute() or not p.parts or ".." in p.parts:
        raise ValueError(f"sandbox file {path!r}: use a relative path inside the work dir")
    return p


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("ql-sandbox", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _next_uid() -> int:
    with _uid_lock:
        n = next(_uid_counter)
    # One uid per concurrent sandbox, so RLIMIT_NPROC counts only that sandbox's processes.
    return UID_BASE + ((os.getpid() & 0xFFFF) << 12) + (n & 0xFFF)


# Syscalls the sandbox refuses (libseccomp, through pyseccomp; loaded by bwrap --seccomp):
# - a new user namespace (unshare/clone with CLONE_NEWUSER; clone3, whose flags a filter cannot read,
#   answers ENOSYS so that the C library falls back to clone): inside one a program could mount its own
#   tmpfs and write past the disk limit, or remount what the sandbox made read-only. bwrap's
#   --disable-userns does this only with a user namespace of its own (the unprivileged path); the filter
#   holds on both paths;
# - reading or writing another process's memory (ptrace, process_vm_readv/writev): the code harness's
#   verdict process must stay out of reach of the program's process (same uid);
# - kernel facilities a scored program never needs and that reach beyond the sandbox's namespaces
#   (keyrings are per uid, not per namespace; bpf, perf events, userfaultfd, io_uring).
CLONE_NEWUSER = 0x10000000
_DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key", "request_key", "bpf",
           "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
           "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsmount",
           "fspick", "mount_setattr")
_seccomp_bpf: list[bytes] = []


def seccomp_filter() -> bytes:
    """The sandbox's seccomp program (compiled BPF, as bwrap --seccomp reads it); built once."""
    if _seccomp_bpf:
        return _seccomp_bpf[0]
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as e:  # OSError/RuntimeError: libseccomp.so.2 not found
        raise SandboxUnavailable(f"the seccomp filter cannot be built ({type(e).__name__}: {e}); install "
                                 "libseccomp (`apt-get install libseccomp2`) and pyseccomp (pyproject.toml)") from e
    except RuntimeError as e:
        raise SandboxUnavailable(f"the seccomp filter cannot be built ({e}); `apt-get install libseccomp2`") from e
    import tempfile

    f = sc.SyscallFilter(sc.ALLOW)
    for call in ("unshare", "clone"):
        f.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for call in _DENIED:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), call)
        except (OSError, ValueError, RuntimeError):  # a syscall this libseccomp does not know
            continue
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        _seccomp_bpf.append(out.read())
    return _seccomp_bpf[0]


def _prlimit_argv(limits: Limits, prlimit: str = "/usr/bin/prlimit") -> list[str]:
    cpu = max(1, int(limits.cpu_s))
    return [prlimit, f"--as={int(limits.address_space_bytes)}", f"--cpu={cpu}:{cpu + 1}",
            f"--nproc={int(limits.nproc)}", f"--fsize={int(limits.file_size_bytes)}",
            f"--nofile={int(limits.open_files)}", "--core=0", "--"]


def _parse_bind(spec: str) -> tuple[str, str]:
    src, sep, dest = spec.partition(":")
    src = os.path.abspath(src)
    dest = os.path.abspath(dest) if sep else src
    return src, dest


_bwrap_version: list[tuple[int, ...]] = []


def bwrap_version() -> tuple[int, ...]:
    """The installed bubblewrap's version (0.8 added --disable-userns); (0,) when it does not say."""
    if not _bwrap_version:
        try:
            out = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout
            m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
            _bwrap_version.append(tuple(int(x) for x in m.groups() if x is not None) if m else (0,))
        except (OSError, subprocess.SubprocessError):
            _bwrap_version.append((0,))
    return _bwrap_version[0]


def _bwrap_command(argv, files, limits: Limits, extra_ro_binds, fds: list[int], hidden=(),
                   as_init: bool = False, info_fd: int | None = None) -> tuple[list[str], list[int], int]:
    root = os.geteuid() == 0
    cmd = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
           "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if as_init:
        cmd.append("--as-pid-1")
    pass_fds: list[int] = []
    if info_fd is not None:
        cmd += ["--info-fd", str(info_fd)]
        pass_fds.append(info_fd)
    uid = gid = 65534
    if root:
        uid = gid = _next_uid()
    else:
        # bwrap's own guard against nested user namespaces needs a user namespace of its own, which
        # is the unprivileged path; as root the seccomp filter below is the guard (see seccomp_filter).
        cmd += ["--unshare-user", "--uid", str(uid), "--gid", str(gid)]
        if bwrap_version() >= (0, 8):
            cmd += ["--disable-userns", "--assert-userns-disabled"]
    fd = _memfd(seccomp_filter())
    fds.append(fd)
    pass_fds.append(fd)
    cmd += ["--seccomp", str(fd)]
    for p in SYSTEM_RO:
        if os.path.islink(p):
            cmd += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            cmd += ["--ro-bind", p, p]
    made: set[str] = {"/", "/etc", "/work", "/tmp"}
    cmd += ["--perms", "0755", "--dir", "/etc"]
    for p in ETC_RO:
        if os.path.exists(p):
            cmd += _parents(p, made) + ["--ro-bind", p, p]
    # /dev/shm: POSIX semaphores (multiprocessing) live there; bounded like the other tmpfs.
    # /proc is read-only: no process can write its own (or another's) memory through /proc/*/mem.
    cmd += ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev",
            "--perms", "01777", "--size", str(int(limits.disk_bytes)), "--tmpfs", "/dev/shm",
            "--perms", "01777", "--size", str(int(limits.disk_bytes)), "--tmpfs", "/tmp",
            "--perms", "0777", "--size", str(int(limits.disk_bytes)), "--tmpfs", "/work"]
    # Extra binds come after the private tmpfs, so that one under /tmp (a venv in a temp dir) is
    # not hidden by it.
    for spec in extra_ro_binds:
        src, dest = _parse_bind(spec)
        if not os.path.exists(src):
            raise SandboxUnavailable(f"sandbox bind {src!r} does not exist")
        cmd += _parents(dest, made) + ["--ro-bind", src, dest]
    for path in hidden:  # after the binds that hold them: an empty read-only directory in their place
        if os.path.isdir(path):
            cmd += ["--perms", "0555", "--size", "4096", "--tmpfs", path, "--remount-ro", path]
    passwd = f"root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/tmp:/usr/sbin/nologin\n"
    group = f"root:x:0:\nsandbox:x:{gid}:\n"
    for dest, data in (("/etc/passwd", passwd.encode()), ("/etc/group", group.encode())):
        fd = _memfd(data)
        fds.append(fd)
        pass_fds.append(fd)
        cmd += ["--perms", "0644", "--file", str(fd), dest]
    dirs_made: set[str] = set()
    for rel, content in files.items():
        p = _check_rel(rel)
        for parent in reversed(p.parents[:-1] if len(p.parts) > 1 else []):
            d = f"/work/{parent}"
            if d not in dirs_made:
                cmd += ["--perms", "01777", "--dir", d]
                dirs_made.add(d)
        data = content.encode() if isinstance(content, str) else bytes(content)
        fd = _memfd(data)
        fds.append(fd)
        pass_fds.append(fd)
        cmd += ["--perms", "0644", "--file", str(fd), f"/work/{p}"]
    cmd += ["--remount-ro", "/", "--chdir", "/work", "--clearenv"]
    for k, v in SANDBOX_ENV.items():
        cmd += ["--setenv", k, v]
    cmd += ["--setenv", "USER", "sandbox", "--setenv", "LOGNAME", "sandbox", "--"]
    if root:
        cmd += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    cmd += _prlimit_argv(limits) + argv
    return cmd, pass_fds, uid


def _parents(dest: str, made: set[str]) -> list[str]:
    """bwrap creates missing parent dirs of a mount point as 0700, unreadable once we drop to an
    unprivileged uid: create them 0755 first (empty: only the bound subtree is visible)."""
    out: list[str] = []
    parts = PurePosixPath(dest).parts
    for i in range(2, len(parts)):
        d = str(PurePosixPath(*parts[:i]))
        if d not in made:
            made.add(d)
            out += ["--perms", "0755", "--dir", d]
    return out


def _apptainer_command(argv, files, limits: Limits, extra_ro_binds, image: str | None,
                       cleanup: list[str], hidden=()) -> tuple[list[str], list[int]]:
    """Apptainer: the image is the read-only system; the work dir is a host temp dir copied in.

    Files are passed through a private host temp dir (bound as /work, removed after the run);
    Apptainer's own --containall gives a private /tmp and no $HOME. Apptainer has no tmpfs size
    option, so RLIMIT_FSIZE is what bounds the files written there.
    """
    import tempfile

    exe = shutil.which("apptainer") or shutil.which("singularity")
    if not image:
        raise SandboxUnavailable("the apptainer backend needs an image (see sandbox.py)")
    work = tempfile.mkdtemp(prefix="ql-sandbox-")
    os.chmod(work, 0o1777)
    cleanup.append(work)
    for rel, content in files.items():
        p = Path(work) / _check_rel(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else bytes(content))
    cmd = [exe, "exec", "--containall", "--cleanenv", "--no-home", "--no-privs", "--pid", "--ipc",
           "--net", "--network", "none", "--writable-tmpfs", "--bind", f"{work}:/work", "--pwd", "/work"]
    for spec in extra_ro_binds:
        src, dest = _parse_bind(spec)
        cmd += ["--bind", f"{src}:{dest}:ro"]
    if hidden:
        empty = tempfile.mkdtemp(prefix="ql-sandbox-empty-")
        cleanup.append(empty)
        for path in hidden:
            cmd += ["--bind", f"{empty}:{path}:ro"]
    for k, v in SANDBOX_ENV.items():
        cmd += ["--env", f"{k}={v}"]
    cmd += [image] + _prlimit_argv(limits, prlimit="prlimit") + argv
    return cmd, []
