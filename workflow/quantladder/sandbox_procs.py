"""The sandbox's processes on the host: the memory cgroup that bounds them together, and the kill
that ends all of them (quantladder.sandbox runs them; its docstring says why each is there)."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time

# ---------------------------------------------------------------------------------------------
# memory cgroups: one per sandbox, where the host lets us make them (root, cgroup v1 memory
# controller or a cgroup v2 tree with the memory controller). Best effort: without one, the
# per-process RLIMIT_AS and RLIMIT_NPROC are the bound, and check_backend says so.

CGROUP_NAME = "quantladder-sandbox"
_cgroup_root: list = []


def memory_cgroup_root() -> tuple[str, str] | None:
    """(version, parent dir) under which per-sandbox memory cgroups are made, or None."""
    if _cgroup_root:
        return _cgroup_root[0]
    found = None
    if os.geteuid() == 0:
        v1 = "/sys/fs/cgroup/memory"
        try:
            if os.path.exists(f"{v1}/memory.limit_in_bytes"):
                os.makedirs(f"{v1}/{CGROUP_NAME}", exist_ok=True)
                found = ("v1", f"{v1}/{CGROUP_NAME}")
        except OSError:
            found = None
        if found is None:
            v2 = "/sys/fs/cgroup"
            try:
                with open(f"{v2}/cgroup.controllers") as f:
                    if "memory" in f.read().split():
                        with open(f"{v2}/cgroup.subtree_control", "w") as f:
                            f.write("+memory")
                        os.makedirs(f"{v2}/{CGROUP_NAME}", exist_ok=True)
                        with open(f"{v2}/{CGROUP_NAME}/cgroup.subtree_control", "w") as f:
                            f.write("+memory")
                        found = ("v2", f"{v2}/{CGROUP_NAME}")
            except OSError:
                found = None
    _cgroup_root.append(found)
    return found


def _write(path: str, value) -> bool:
    try:
        with open(path, "w") as f:
            f.write(str(value))
        return True
    except OSError:
        return False


def make_cgroup(uid: int, memory_bytes: int) -> tuple[str, str] | None:
    root = memory_cgroup_root()
    if root is None:
        return None
    ver, parent = root
    d = f"{parent}/s{uid}"
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return None
    if ver == "v1":
        ok = _write(f"{d}/memory.limit_in_bytes", int(memory_bytes))
        _write(f"{d}/memory.memsw.limit_in_bytes", int(memory_bytes))  # where swap is accounted
    else:
        ok = _write(f"{d}/memory.max", int(memory_bytes))
        _write(f"{d}/memory.swap.max", 0)
    if not ok:
        remove_cgroup(d)
        return None
    return ver, d


def cgroup_oom_kills(cg: tuple[str, str]) -> int:
    ver, d = cg
    name = "memory.oom_control" if ver == "v1" else "memory.events"
    try:
        with open(f"{d}/{name}") as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
    except (OSError, ValueError):
        pass
    return 0


def kill_cgroup(cg: tuple[str, str]) -> None:
    try:
        with open(f"{cg[1]}/cgroup.procs") as f:
            pids = [int(x) for x in f.read().split()]
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def remove_cgroup(d: str) -> None:
    for _ in range(100):  # the namespace's processes may take a moment to be reaped
        try:
            os.rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# the kill

# How long the sandbox's processes may take to die after the kill before the run counts as escaped.
KILL_GRACE_S = 5.0


def kill_sandbox(proc: subprocess.Popen, info_r: int | None) -> None:
    """SIGKILL the sandbox's pid 1 (the kernel then kills every process of its pid namespace), then
    the backend's process group.

    Killing bwrap's group alone is not enough as root: ``setpriv`` changes uid, which clears the
    parent-death signal that ``--die-with-parent`` set, so a pid 1 that is the program itself
    (``as_init``) outlives bwrap, and the whole namespace with it. bwrap writes pid 1's host pid on
    ``info_r`` right after the clone and before it lets the child go on, so once that record is read
    no started sandbox is without a known pid 1.
    """
    pid = sandbox_init_pid(info_r) if info_r is not None else None
    # While bwrap has not exited it has not reaped its child either: the pid is still that process.
    if pid is not None and proc.poll() is None:
        try:
            os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=1.0)  # bwrap reaps its child and exits; killed first, it would leave a zombie
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def sandbox_init_pid(info_r: int, wait_s: float = KILL_GRACE_S) -> int | None:
    """The host pid of the sandbox's pid 1 from bwrap's --info-fd record (read to its end: bwrap
    closes the pipe after writing it); None when bwrap ended before the clone (no sandbox started)."""
    data = bytearray()
    end = time.perf_counter() + wait_s
    with selectors.DefaultSelector() as sel:
        sel.register(info_r, selectors.EVENT_READ)
        while time.perf_counter() < end:
            if not sel.select(timeout=max(0.0, end - time.perf_counter())):
                continue
            chunk = os.read(info_r, 4096)
            if not chunk:
                break
            data += chunk
    m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
    return int(m.group(1)) if m else None
