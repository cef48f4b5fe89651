"""llama.cpp's own tools, built from the llama.cpp source that the installed llama-cpp-python vendors.

llama-imatrix computes importance matrices; llama-quantize, llama-perplexity and llama-bench are
the reference implementations the harness is checked against (byte-identical quantization, the
perplexity and speed anchor gates). All four are compiled once per (llama-cpp-python version,
backend, CMake flags) into a cache outside ``results/`` — ``$QUANTLADDER_TOOLS_DIR``, else
``tools.cache_dir``, else ``~/.cache/quantladder/llama-tools`` (``$XDG_CACHE_HOME``) — so every
working directory and checkout on a machine shares one build. The sdist is fetched with pip (seconds; the registry checks its hash) or taken from
``$QUANTLADDER_LLAMA_CPP_SDIST`` on a machine without a registry.

The backend is the installed library's: CUDA when its lib directory ships ``libggml-cuda``
(architectures from ``$QUANTLADDER_CUDA_ARCHITECTURES``, as docs/gpu.md builds the library), else
the CPU. Every build writes ``build.json`` with each binary's sha256; a point that a tool touches
records that record (manifests), and a build whose binaries no longer match it is refused.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from .errors import ConfigError, QuantladderError
from .io import hash_obj, sha256_file, user_cache

TOOLS = ("llama-imatrix", "llama-quantize", "llama-perplexity", "llama-bench")
BUILDER_VERSION = "3"  # bump when the build recipe below changes what the binaries are

# Patches to the vendored llama.cpp, applied (in name order) to every build of this project, the
# library's wheel and the tools alike, so both run the same source. Each is inert unless asked
# for at run time: 0001 adds GGML_CPU_BATCH_INVARIANT_ROWS (docs/generation.md, "Batch
# invariance"; the engine's batch-invariant mode sets it).
PATCH_DIR = Path(__file__).parent / "patches" / "llama.cpp"

# llama.cpp's AMX kernels are left out of every CPU build, the library's and the tools': in the
# llama.cpp that llama-cpp-python 0.3.36 vendors, ggml_backend_amx_mul_mat segfaults in the first
# prompt decode of SmolLM2-135M Q4_K_M on an AMX vCPU (Intel Xeon, AMX_INT8; F16 runs; measured
# 2026-12-02, docs/parity.md; upstream ggml-org/llama.cpp#20824, open). ggml builds with
# -march=native, which turns AMX on wherever the CPU has it; an explicit -mno-amx-* wins over
# -march whatever their order (GCC, Clang). The other x86 kernels (AVX-512, VNNI, repack) stay.
NO_AMX_FLAGS = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")

# ggml backend libraries a llama-cpp-python wheel or source build ships, by backend name.
_BACKEND_LIBS = (("cuda", "libggml-cuda"), ("rocm", "libggml-hip"), ("vulkan", "libggml-vulkan"),
                 ("metal", "libggml-metal"), ("sycl", "libggml-sycl"))


class ToolsError(QuantladderError):
    pass


def library_version() -> str:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError as e:
        raise ToolsError("llama-cpp-python is not installed: its vendored llama.cpp is what the tools are built from") from e


def library_dir() -> Path | None:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "lib"


def library_backend() -> str:
    """The installed library's backend, from the files in its lib directory (no import: cheap
    enough for DAG-build time)."""
    d = library_dir()
    names = [p.name for p in d.iterdir()] if d and d.is_dir() else []
    for backend, prefix in _BACKEND_LIBS:
        if any(n.startswith(prefix) for n in names):
            return backend
    return "cpu"


def cpu_flags() -> list[str]:
    """The C/C++ flags every llama.cpp build of this project adds (NO_AMX_FLAGS on x86-64)."""
    return list(NO_AMX_FLAGS) if platform.machine().lower() in ("x86_64", "amd64") else []


@functools.lru_cache(maxsize=1)
def cpu_features() -> str:
    """What a -march=native build depends on: the CPU's feature flags (Linux), else the machine
    name. Part of every build key, so a cache shared by nodes of different CPUs (a cluster's home
    directory) never hands one node's binaries to another."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return platform.machine()


def cmake_args(backend: str, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Static Release binaries of the four tools, nothing else (no curl, server, tests, examples),
    with the library's CPU flags (cpu_flags)."""
    args = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]
    flags = " ".join(cpu_flags())
    if flags:
        args += [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
    if backend == "cuda":
        archs = os.environ.get("QUANTLADDER_CUDA_ARCHITECTURES", "native")
        args += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]
    elif backend == "rocm":
        args += ["-DGGML_HIP=ON"]
    elif backend == "vulkan":
        args += ["-DGGML_VULKAN=ON"]
    elif backend == "metal":
        args += ["-DGGML_METAL=ON"]
    elif backend != "cpu":
        raise ToolsError(f"no build recipe for the {backend} backend (tools.cmake_args can add the flags)")
    return args + list(extra)


def cache_root(configured: str | None = None) -> Path:
    env = os.environ.get("QUANTLADDER_TOOLS_DIR")
    if env:
        return Path(env).expanduser()
    if configured:
        return Path(configured).expanduser()
    return user_cache("llama-tools")


def patches() -> list[Path]:
    return sorted(PATCH_DIR.glob("*.patch"))


def patches_key() -> dict[str, str]:
    """name -> sha256 of every patch: part of every build key (an edited patch rebuilds)."""
    return {p.name: sha256_file(p) for p in patches()}


def apply_patches(src: Path, log=None) -> None:
    """Apply the project's patches to an unpacked vendored llama.cpp (``src``: its top directory).
    A patch that does not apply (a new llama-cpp-python whose source moved) fails the build, naming it."""
    if not shutil.which("patch"):
        raise ToolsError("`patch` is not installed (.ci/system-packages.txt lists it; bash .ci/install-system-packages.sh)")
    for p in patches():
        _run(["patch", "-p1", "--forward", "--batch", "-d", str(src), "-i", str(p)], log,
             what=f"applying {p.relative_to(PATCH_DIR.parent.parent)} to {src}")


def build_key(version: str, backend: str, args: list[str]) -> str:
    return (f"{version}-{backend}-"
            + hash_obj({"args": args, "builder": BUILDER_VERSION, "cpu": cpu_features(), "patches": patches_key()})[:8])


def _log(log, msg: str) -> None:
    (log or sys.stderr).write(msg.rstrip("\n") + "\n")
    (log or sys.stderr).flush()


def _run(cmd: list[str], log, cwd=None, env=None, what: str = "building llama.cpp's tools") -> None:
    _log(log, "$ " + " ".join(cmd))
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _log(log, r.stdout[-20000:])
    if r.returncode != 0:
        raise ToolsError(f"{what} failed at `{' '.join(cmd[:3])} ...` (exit {r.returncode}):\n"
                         f"{r.stdout[-3000:]}")


def fetch_sdist(version: str, dest: Path, log=None) -> Path:
    """The llama-cpp-python sdist of ``version`` (it vendors llama.cpp), fetched once."""
    name = f"llama_cpp_python-{version}.tar.gz"
    given = os.environ.get("QUANTLADDER_LLAMA_CPP_SDIST")
    if given:
        p = Path(given).expanduser()
        if p.name != name or not p.is_file():
            raise ToolsError(f"QUANTLADDER_LLAMA_CPP_SDIST={given}: expected an existing {name}")
        return p
    dest.mkdir(parents=True, exist_ok=True)
    p = dest / name
    if not p.is_file():
        # pip prepares the sdist's metadata in an isolated env (scikit-build-core): seconds
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
              f"llama-cpp-python=={version}", "-d", str(dest)], log)
    if not p.is_file():
        raise ToolsError(f"pip did not leave {name} in {dest}")
    return p


def pinned_version(pyproject: str | os.PathLike) -> str:
    """The llama-cpp-python version pyproject.toml pins (``llama-cpp-python==X``)."""
    p = Path(pyproject)
    m = re.search(r"[\"']llama[-_]cpp[-_]python==([0-9A-Za-z.+-]+)[\"']", p.read_text())
    if not m:
        raise ConfigError(f"{p}: no llama-cpp-python==<version> pin in its dependencies")
    return m.group(1)


def library_wheel(version: str, log=None) -> Path:
    """llama-cpp-python ``version`` compiled from its sdist, with the project's patches applied to
    the vendored llama.cpp and cpu_flags() added to the compiler flags (so with AMX off), cached in
    ``<tools cache>/wheels`` per (version, flags, CMAKE_ARGS, CPU features, Python, patches): pip's
    own wheel cache is keyed by the sdist alone and would hand back a wheel built with other flags,
    or on another node's CPU. Minutes once, then nothing."""
    flags = cpu_flags()
    root = cache_root() / "wheels"
    key = f"{version}-" + hash_obj({"flags": flags, "cmake_args": os.environ.get("CMAKE_ARGS", ""),
                                    "cpu": cpu_features(), "python": list(sys.version_info[:2]),
                                    "builder": BUILDER_VERSION, "patches": patches_key()})[:8]
    out = root / key
    with _locked(root / f"{key}.lock"):
        found = sorted(out.glob("llama_cpp_python-*.whl")) if out.is_dir() else []
        if found:
            return found[0]
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        try:
            env = dict(os.environ)
            for var in ("CFLAGS", "CXXFLAGS"):
                env[var] = " ".join(x for x in [env.get(var, "").strip(), *flags] if x)
            sdist = fetch_sdist(version, cache_root() / "sdist", log)
            with tarfile.open(sdist) as tar:
                tar.extractall(work / "src", filter="data")
            pkg = next((work / "src").glob("llama_cpp_python-*/"))
            apply_patches(pkg / "vendor" / "llama.cpp", log)
            _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir", str(pkg),
                  "-w", str(work)], log, env=env, what="building the llama-cpp-python wheel")
            built = sorted(work.glob("llama_cpp_python-*.whl"))
            if not built:
                raise ToolsError(f"pip wheel left no llama_cpp_python wheel in {work}")
            out.mkdir(parents=True, exist_ok=True)
            os.replace(built[0], out / built[0].name)  # whole or absent: a killed build leaves none
            return out / built[0].name
        finally:
            shutil.rmtree(work, ignore_errors=True)


# llama_print_system_info's x86 entries (compiled in: ggml-cpu's ggml_cpu_has_*) -> /proc/cpuinfo flag
_X86_FEATURES = {"SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX_VNNI": "avx_vnni", "AVX2": "avx2",
                 "F16C": "f16c", "FMA": "fma", "BMI2": "bmi2", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
                 "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8"}


_REBUILD = "`make setup`, or `python -m quantladder.llama_tools library` in this environment"


def library_refusal(system_info: str, cpu: str | None = None) -> str | None:
    """Why a loaded libllama must not run here, from its ``llama_print_system_info`` and this
    CPU's feature flags (``cpu``, default cpu_features()); None when it may. Refused: a build with
    llama.cpp's AMX kernels, and a build compiled for instructions this CPU lacks (a -march=native
    library built on another node of a cluster), which would die of SIGILL mid-run."""
    built = [k for k in _X86_FEATURES if re.search(rf"(?<![A-Z0-9_]){k} = 1", system_info)]
    have = set((cpu_features() if cpu is None else cpu).split())
    if "avx2" in have or "sse2" in have:  # an x86 CPU whose flags are known
        missing = [k for k in built if k != "AMX_INT8" and _X86_FEATURES[k] not in have]
        if missing:
            return (f"this llama-cpp-python build was compiled for {', '.join(missing)}, which this CPU "
                    f"lacks (built with -march=native on another machine?); build it here: {_REBUILD} "
                    "(the wheel is cached per CPU)")
    if "AMX_INT8" in built and not os.environ.get("QUANTLADDER_ALLOW_AMX"):
        return ("this llama-cpp-python build uses llama.cpp's AMX kernels, which crash in llama_decode "
                "(ggml-org/llama.cpp#20824; quantladder.llama_tools.NO_AMX_FLAGS). Install the project's "
                f"build: {_REBUILD} (QUANTLADDER_ALLOW_AMX=1 runs it anyway)")
    return None


def install_library(pyproject: str | os.PathLike = "pyproject.toml", log=None) -> Path:
    """Build (or find) the project's llama-cpp-python wheel and install it into this Python, then
    check that the installed library is that build."""
    wheel = library_wheel(pinned_version(pyproject), log)
    # this wheel replaces whatever llama-cpp-python is there; then its own dependencies go in
    for extra in (["--no-deps", "--force-reinstall"], []):
        _run([sys.executable, "-m", "pip", "install", "-q", *extra, str(wheel)], log,
             what="installing the llama-cpp-python wheel")
    r = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolsError(f"{wheel}: the installed llama_cpp does not import:\n{r.stderr[-2000:]}")
    why = library_refusal(r.stdout)
    if why:
        raise ToolsError(f"{wheel}: {why}")
    return wheel


def _record_path(root: Path, key: str) -> Path:
    return root / key / "build.json"


def _tree(root: Path, key: str) -> Path:
    """Where a build's vendored source and CMake tree stay after its tools are copied out: llama.cpp's
    other programs (EXTRA_TOOLS) build there, their own targets on the objects the tools already compiled,
    instead of compiling ggml and libllama once more each (on 2 cores, minutes each). A CMake tree cannot
    be moved, so the build runs where it is kept; ``done.json`` marks a tree whose build finished."""
    return root / f"{key}.tree"


def verify(record: dict) -> dict:
    """The record with its binaries checked against their recorded sha256 (a rebuilt or edited
    binary is refused: the manifests that name it would lie)."""
    for name in TOOLS:
        entry = record.get("tools", {}).get(name)
        if not entry:
            raise ToolsError(f"{record.get('record')}: no {name} in this build")
        p = Path(entry["path"])
        if not p.is_file():
            raise ToolsError(f"{p}: missing (the llama.cpp tools cache was removed: run the llama_tools rule again, "
                             "e.g. `snakemake -R llama_tools`)")
        if sha256_file(p) != entry["sha256"]:
            raise ToolsError(f"{p}: sha256 differs from {record.get('record')} (rebuilt by hand?); delete "
                             f"{p.parent.parent} to build it again")
    return record


def find(configured_dir: str | None = None, extra_args: tuple[str, ...] = ()) -> dict | None:
    """The finished, verified build for the installed library, or None."""
    version, backend = library_version(), library_backend()
    root = cache_root(configured_dir)
    rec = _record_path(root, build_key(version, backend, cmake_args(backend, extra_args)))
    if not rec.is_file():
        return None
    try:
        return verify(json.loads(rec.read_text()))
    except (ToolsError, ValueError):
        return None


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # a second builder (another job, another test run) waits here
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure(configured_dir: str | None = None, extra_args: tuple[str, ...] = (), jobs: int = 0, log=None) -> dict:
    """Build the tools unless a verified build exists; return its record. Minutes on 2 cores, once."""
    version, backend = library_version(), library_backend()
    args = cmake_args(backend, extra_args)
    root = cache_root(configured_dir)
    key = build_key(version, backend, args)
    rec_path = _record_path(root, key)
    with _locked(root / f"{key}.lock"):
        if rec_path.is_file():
            try:
                return verify(json.loads(rec_path.read_text()))
            except (ToolsError, ValueError) as e:
                _log(log, f"rebuilding: {e}")
        if not shutil.which("cmake"):
            raise ToolsError("cmake is not installed (.ci/system-packages.txt lists it; "
                             "bash .ci/install-system-packages.sh)")
        sdist = fetch_sdist(version, root / "sdist", log)
        out = root / key
        shutil.rmtree(out, ignore_errors=True)
        work = _tree(root, key)  # kept for the extra tools once the build is done
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        done = False
        try:
            _build_fresh(sdist, work, args, TOOLS, str(jobs or os.cpu_count() or 1), log)
            (out / "bin").mkdir(parents=True)
            tools = {}
            for name in TOOLS:
                built = work / "build" / "bin" / name
                if not built.is_file():
                    raise ToolsError(f"the build finished without {built}")
                dst = out / "bin" / name
                shutil.copy2(built, dst)
                tools[name] = {"path": str(dst), "sha256": sha256_file(dst)}
            record = {
                "record": str(rec_path), "llama_cpp_python": version, "backend": backend, "cmake_args": args,
                "sdist": {"file": sdist.name, "sha256": sha256_file(sdist)},
                "source": "vendor/llama.cpp of the llama-cpp-python sdist", "builder_version": BUILDER_VERSION,
                "patches": patches_key(),
                "tools": tools, "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
            tmp = rec_path.with_suffix(".json.partial")
            tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
            os.replace(tmp, rec_path)
            (work / "done.json").write_text(json.dumps({"record": str(rec_path), "cmake_args": args}))
            done = True
            return record
        finally:
            if not done:
                shutil.rmtree(work, ignore_errors=True)


# llama.cpp's other programs the benchmarks compare the engine with (benchmarks/gen_throughput.py),
# built on demand only, never by `make setup` or the workflow: extra CMake flags each needs beyond
# cmake_args(). llama-server pulls in the multimodal library and the HTTP stack (a 2-core build
# takes minutes); its web UI stays out (no npm, no download of prebuilt assets: the build machine
# may have no network) and so does HTTPS.
EXTRA_TOOLS = {
    "llama-batched-bench": (),
    "llama-server": ("-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                     "-DLLAMA_OPENSSL=OFF"),
}


def extra_tool(name: str, configured_dir: str | None = None, jobs: int = 0, log=None) -> Path:
    """One of EXTRA_TOOLS, built once from the same sdist, patches, backend and flags as the four
    workflow tools (its own CMake flags added: a server build does not disturb their key), cached
    beside them as ``<build key>-<short name>/bin/<name>`` with its ``build.json`` (the binary's
    sha256, the build's wall seconds and where it was built); a binary that no longer matches its
    record is rebuilt. It builds in the tools' kept tree (:func:`_tree`) where their build finished
    there, else in a tree of its own (a cache made before trees were kept)."""
    if name not in EXTRA_TOOLS:
        raise ToolsError(f"unknown extra tool {name!r}; known: {', '.join(EXTRA_TOOLS)}")
    version, backend = library_version(), library_backend()
    args = cmake_args(backend)
    extra = list(EXTRA_TOOLS[name])
    if extra:  # an extra flag replaces the default's own setting of the same variable
        names = {x.split("=", 1)[0] for x in extra}
        args = [x for x in args if x.split("=", 1)[0] not in names] + extra
    root = cache_root(configured_dir)
    key = build_key(version, backend, args)
    out = root / f"{key}-{name.removeprefix('llama-')}"
    exe = out / "bin" / name
    rec_path = out / "build.json"
    with _locked(root / f"{key}-{name}.lock"):
        if exe.is_file() and rec_path.is_file():
            try:
                if json.loads(rec_path.read_text()).get(name) == sha256_file(exe):
                    return exe
            except ValueError:
                pass
            _log(log, f"rebuilding {name}: {exe} does not match {rec_path}")
        if not shutil.which("cmake"):
            raise ToolsError("cmake is not installed (.ci/system-packages.txt lists it; "
                             "bash .ci/install-system-packages.sh)")
        sdist = fetch_sdist(version, root / "sdist", log)
        n_jobs = str(jobs or os.cpu_count() or 1)
        t0 = _dt.datetime.now(_dt.timezone.utc)
        tools_key = build_key(version, backend, cmake_args(backend))
        built_in = None
        with _locked(root / f"{tools_key}.lock"):  # the tools' own build is not running in their tree
            tree = _tree(root, tools_key)
            if (tree / "done.json").is_file() and next(tree.glob("llama_cpp_python-*/vendor/llama.cpp"), None):
                src = next(tree.glob("llama_cpp_python-*/vendor/llama.cpp"))
                try:  # the tree's generator kept (no -G); this tool's flags over the tools' own
                    _run(["cmake", "-S", str(src), "-B", str(tree / "build"), *args], log, what=f"building {name}")
                    _run(["cmake", "--build", str(tree / "build"), "-j", n_jobs, "--target", name], log,
                         what=f"building {name}")
                    _install_extra(tree / "build" / "bin" / name, out, exe)
                    built_in = f"the tools' kept tree {tree.name} (their compiled objects reused)"
                except ToolsError as e:
                    _log(log, f"building {name} in {tree} failed, building it in a tree of its own: {e}")
        if built_in is None:
            work = Path(tempfile.mkdtemp(prefix=f".{key}-{name}.", dir=root))
            try:
                _build_fresh(sdist, work, args, (name,), n_jobs, log, what=f"building {name}")
                _install_extra(work / "build" / "bin" / name, out, exe)
                built_in = "a tree of its own"
            finally:
                shutil.rmtree(work, ignore_errors=True)
        seconds = (_dt.datetime.now(_dt.timezone.utc) - t0).total_seconds()
        rec = {"llama_cpp_python": version, "backend": backend, "cmake_args": args, "patches": patches_key(),
               "sdist_sha256": sha256_file(sdist), name: sha256_file(exe), "built_in": built_in,
               "built_at": t0.isoformat(timespec="seconds"), "build_seconds": round(seconds, 1), "jobs": int(n_jobs)}
        rec_path.write_text(json.dumps(rec, indent=1, sort_keys=True))
    return exe


def _build_fresh(sdist: Path, work: Path, args: list[str], targets, n_jobs: str, log,
                 what: str = "building llama.cpp's tools") -> None:
    """The sdist's vendored llama.cpp extracted into ``work``, the project's patches applied (as the
    library and the tools carry them), configured with ``args`` and ``targets`` built in ``work/build``."""
    with tarfile.open(sdist) as tar:
        tar.extractall(work, members=[m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name], filter="data")
    src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    apply_patches(src, log)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", str(src), "-B", str(work / "build"), *gen, *args], log, what=what)
    _run(["cmake", "--build", str(work / "build"), "-j", n_jobs, "--target", *targets], log, what=what)


def _install_extra(built: Path, out: Path, exe: Path) -> None:
    if not built.is_file():
        raise ToolsError(f"the build finished without {built}")
    shutil.rmtree(out, ignore_errors=True)
    (out / "bin").mkdir(parents=True)
    shutil.copy2(built, exe)


def load(record_path: str | os.PathLike) -> dict:
    """Read a tools record (the llama_tools rule's output) and verify its binaries."""
    p = Path(record_path)
    try:
        record = json.loads(p.read_text())
    except FileNotFoundError as e:
        raise ToolsError(f"{p}: no llama.cpp tools record (the llama_tools rule writes it)") from e
    except ValueError as e:
        raise ConfigError(f"{p}: not a tools record: {e}") from e
    return verify(record)


def tool(record: dict, name: str) -> str:
    if name not in TOOLS:
        raise ToolsError(f"unknown tool {name!r}; built: {', '.join(TOOLS)}")
    return record["tools"][name]["path"]


def identity(record: dict, *names: str) -> dict:
    """What a manifest records of the tools a point used: version, backend, flags, binaries' sha256."""
    names = names or TOOLS
    return {"llama_cpp_python": record["llama_cpp_python"], "backend": record["backend"],
            "cmake_args": record["cmake_args"], "sdist_sha256": record["sdist"]["sha256"],
            "patches": record.get("patches", {}),
            "binaries": {n: record["tools"][n]["sha256"] for n in names}}


if __name__ == "__main__":
    # `python -m quantladder.llama_tools`: build (or find) the tools and print their bin dir;
    # `... library [pyproject.toml]`: build (or find) and install the llama-cpp-python wheel
    # (`make setup` runs it before the package's other dependencies)
    if sys.argv[1:2] == ["library"]:
        print(install_library(sys.argv[2] if len(sys.argv) > 2 else "pyproject.toml"))
    else:
        r = ensure()
        print(Path(tool(r, "llama-bench")).parent)
