"""The llama.cpp build every measure runs on: the project compiles llama-cpp-python itself, with
llama.cpp's AMX kernels left out (they segfault in llama_decode on AMX CPUs: ggml-org/llama.cpp#20824,
measured on this project's machines), and the tools and the conda/CUDA environments get the same
flags. These run against the library `make setup` installed, not a stand-in."""

import hashlib
import platform
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from quantladder import llama_tools
from quantladder.errors import ConfigError
from quantladder.io import sha256_file

ROOT = Path(__file__).resolve().parents[1]
X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_the_installed_library_has_no_amx_kernels():
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AMX_INT8 = 1" not in info, info
    assert llama_tools.library_refusal(info) is None


def test_an_amx_build_is_refused_with_the_way_out(monkeypatch):
    amx = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | REPACK = 1 |"
    amx_cpu = "sse2 pni avx avx2 avx512f amx_tile amx_int8 amx_bf16"  # a CPU that has them all
    monkeypatch.delenv("QUANTLADDER_ALLOW_AMX", raising=False)
    why = llama_tools.library_refusal(amx, cpu=amx_cpu)
    assert why and "make setup" in why and "20824" in why
    assert llama_tools.library_refusal(amx.replace("AMX_INT8 = 1 | ", ""), cpu=amx_cpu) is None
    monkeypatch.setenv("QUANTLADDER_ALLOW_AMX", "1")
    assert llama_tools.library_refusal(amx, cpu=amx_cpu) is None


def test_a_build_for_another_cpu_is_refused_before_it_dies_of_sigill():
    """A -march=native library built on one node of a cluster, loaded on a node without its
    instructions: the engine says so instead of crashing mid-run (the CPUs are strings here, since
    this machine cannot be another one)."""
    built = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | AVX512_VNNI = 1 | REPACK = 1 |"
    avx512_node = "sse2 pni ssse3 avx avx2 f16c fma bmi2 avx512f avx512_vnni"
    avx2_node = "sse2 pni ssse3 avx avx2 f16c fma bmi2"
    assert llama_tools.library_refusal(built, cpu=avx512_node) is None
    why = llama_tools.library_refusal(built, cpu=avx2_node)
    assert why and "AVX512, AVX512_VNNI" in why and "SSE3" not in why and "make setup" in why
    # a CPU whose flags are unknown (not Linux, not x86) is not second-guessed
    assert llama_tools.library_refusal(built, cpu="aarch64") is None


@pytest.mark.skipif(not X86, reason="AMX is an x86-64 extension: no flags elsewhere")
def test_every_build_recipe_carries_the_same_cpu_flags():
    flags = " ".join(llama_tools.NO_AMX_FLAGS)
    assert llama_tools.cpu_flags() == list(llama_tools.NO_AMX_FLAGS)
    for backend in ("cpu", "cuda"):
        args = llama_tools.cmake_args(backend)
        assert f"-DCMAKE_C_FLAGS={flags}" in args and f"-DCMAKE_CXX_FLAGS={flags}" in args
    pin = llama_tools.pinned_version(ROOT / "pyproject.toml")
    for script in ("envs/quantladder.post-deploy.sh", "envs/cuda.post-deploy.sh"):
        text = (ROOT / script).read_text()
        assert f'CFLAGS="${{CFLAGS:-}} {flags}"' in text and f'CXXFLAGS="${{CXXFLAGS:-}} {flags}"' in text, script
        assert f'"llama-cpp-python=={pin}"' in text and "--no-cache-dir" in text, script


def test_the_compiler_honours_the_flags_after_march_native(tmp_path):
    """-march=native turns AMX on where the CPU has it; the explicit -mno-amx-* must win in either order."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not X86 or cc is None:
        pytest.skip("needs an x86-64 C compiler")
    for order in (["-march=native", *llama_tools.NO_AMX_FLAGS], [*llama_tools.NO_AMX_FLAGS, "-march=native"]):
        r = subprocess.run([cc, *order, "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True, text=True, check=True)
        assert "__AMX_INT8__" not in r.stdout and "__AMX_TILE__" not in r.stdout, order


def test_pinned_version_reads_pyproject_and_names_a_bad_file(tmp_path):
    assert re.fullmatch(r"\d+\.\d+\.\d+", llama_tools.pinned_version(ROOT / "pyproject.toml"))
    assert llama_tools.pinned_version(ROOT / "pyproject.toml") == llama_tools.library_version()
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\ndependencies = ["llama-cpp-python>=0.3"]\n')
    with pytest.raises(ConfigError, match=str(bad)):
        llama_tools.pinned_version(bad)


def test_build_keys_depend_on_the_cpu(monkeypatch):
    args = llama_tools.cmake_args("cpu")
    here = llama_tools.build_key("0.3.36", "cpu", args)
    assert here == llama_tools.build_key("0.3.36", "cpu", args)
    monkeypatch.setattr(llama_tools, "cpu_features", lambda: "sse2 avx2")  # another node's CPU
    assert llama_tools.build_key("0.3.36", "cpu", args) != here


@pytest.mark.slow
def test_make_setup_installed_the_projects_own_wheel():
    """The cached wheel (a cache hit after `make setup`; built here otherwise) holds the very
    libllama this interpreter loads."""
    import llama_cpp

    wheel = llama_tools.library_wheel(llama_tools.pinned_version(ROOT / "pyproject.toml"))
    assert wheel.is_file() and wheel.parent.parent == llama_tools.cache_root() / "wheels"
    lib = Path(llama_cpp.__file__).parent / "lib"
    installed = {p.name: sha256_file(p) for p in lib.glob("libggml-cpu*")}
    assert installed
    with zipfile.ZipFile(wheel) as z:
        for name, digest in installed.items():
            assert hashlib.sha256(z.read(f"llama_cpp/lib/{name}")).hexdigest() == digest, name
