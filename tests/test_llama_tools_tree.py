"""llama.cpp's other programs (llama-batched-bench, llama-server: ``llama_tools.extra_tool``) build in the
tree the four workflow tools were built in, on the objects those already compiled, instead of compiling
ggml and libllama once more each (on two cores that was 16 and 24 minutes under load, most of the
device check's and the server parity tests' first run).

Real CMake and Ninja run the real ``ensure`` and ``extra_tool``; what stands in for the vendored
llama.cpp is a small C project with the same target names and the same options, packed as an sdist
(building llama.cpp itself takes minutes, and its other paths are tested through the real tools), so
the project's patches are not applied to it.
"""

from __future__ import annotations

import json
import subprocess
import tarfile

import pytest

from quantladder import llama_tools

VERSION = "0.0.1"
CMAKE = """cmake_minimum_required(VERSION 3.14)
project(standin C)
option(LLAMA_BUILD_SERVER "server" OFF)
add_library(ggml STATIC ggml.c)
foreach(t llama-imatrix llama-quantize llama-perplexity llama-bench llama-batched-bench)
  add_executable(${t} main.c)
  target_link_libraries(${t} ggml)
  set_target_properties(${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endforeach()
if (LLAMA_BUILD_SERVER)
  add_executable(llama-server main.c)
  target_compile_definitions(llama-server PRIVATE SERVER=1)
  target_link_libraries(llama-server ggml)
  set_target_properties(llama-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endif()
"""
MAIN = """#include <stdio.h>
int ggml(void);
int main(void) {
#ifdef SERVER
  printf("server %d\\n", ggml());
#else
  printf("tool %d\\n", ggml());
#endif
  return 0;
}
"""


@pytest.fixture
def standin(tmp_path, monkeypatch):
    src = tmp_path / "src" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "ggml.c").write_text("int ggml(void) { return 42; }\n")
    (src / "main.c").write_text(MAIN)
    sdist = tmp_path / f"llama_cpp_python-{VERSION}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tmp_path / "src" / f"llama_cpp_python-{VERSION}", arcname=f"llama_cpp_python-{VERSION}")
    monkeypatch.setenv("QUANTLADDER_LLAMA_CPP_SDIST", str(sdist))
    monkeypatch.setenv("QUANTLADDER_TOOLS_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(llama_tools, "library_version", lambda: VERSION)
    monkeypatch.setattr(llama_tools, "library_backend", lambda: "cpu")
    monkeypatch.setattr(llama_tools, "apply_patches", lambda src, log=None: None)  # they patch llama.cpp
    return tmp_path / "cache"


def _ran(exe) -> str:
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()


def test_extra_tools_build_in_the_tools_kept_tree_on_their_objects(standin):
    record = llama_tools.ensure()
    key = llama_tools.build_key(VERSION, "cpu", llama_tools.cmake_args("cpu"))
    tree = standin / f"{key}.tree"
    assert (tree / "done.json").is_file() and _ran(llama_tools.tool(record, "llama-bench")) == "tool 42"
    lib = next((tree / "build").rglob("ggml.c.o"))
    compiled = lib.stat().st_mtime_ns

    bench = llama_tools.extra_tool("llama-batched-bench")
    server = llama_tools.extra_tool("llama-server")  # its own flags: the tree reconfigured, no rebuild of ggml
    assert _ran(bench) == "tool 42" and _ran(server) == "server 42"
    assert lib.stat().st_mtime_ns == compiled, "ggml was compiled again for an extra tool"
    for exe in (bench, server):
        rec = json.loads((exe.parent.parent / "build.json").read_text())
        assert rec["built_in"].startswith(f"the tools' kept tree {tree.name}"), rec
        assert rec[exe.name] == llama_tools.sha256_file(exe)
    assert "-DLLAMA_BUILD_SERVER=ON" in json.loads((server.parent.parent / "build.json").read_text())["cmake_args"]
    # cached: asked again, nothing is built
    assert llama_tools.extra_tool("llama-server") == server
    assert lib.stat().st_mtime_ns == compiled


def test_without_a_kept_tree_an_extra_tool_builds_in_a_tree_of_its_own(standin):
    """A cache whose tools were built before trees were kept (or whose tree was removed)."""
    llama_tools.ensure()
    key = llama_tools.build_key(VERSION, "cpu", llama_tools.cmake_args("cpu"))
    (standin / f"{key}.tree" / "done.json").unlink()
    exe = llama_tools.extra_tool("llama-batched-bench")
    assert _ran(exe) == "tool 42"
    assert json.loads((exe.parent.parent / "build.json").read_text())["built_in"] == "a tree of its own"
    assert not list(standin.glob(f".{key}-llama-batched-bench.*"))  # its own tree removed after the copy


def test_a_failed_tools_build_leaves_no_tree_to_build_in(standin, tmp_path, monkeypatch):
    bad = tmp_path / "bad" / f"llama_cpp_python-{VERSION}"
    (bad / "vendor" / "llama.cpp").mkdir(parents=True)
    (bad / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text(CMAKE)
    (bad / "vendor" / "llama.cpp" / "ggml.c").write_text("this is not C\n")
    (bad / "vendor" / "llama.cpp" / "main.c").write_text(MAIN)
    sdist = tmp_path / "bad" / f"llama_cpp_python-{VERSION}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(bad, arcname=bad.name)
    monkeypatch.setenv("QUANTLADDER_LLAMA_CPP_SDIST", str(sdist))
    with pytest.raises(llama_tools.ToolsError, match="building llama.cpp's tools failed"):
        llama_tools.ensure()
    assert not list(standin.glob("*.tree"))
