"""Backend and GPU-layer manifest fields, read from the real loaded libllama and from known strings."""

from __future__ import annotations

from quantladder import backend
from quantladder.engine import EngineSettings, library_info

CUDA_INFO = ("CUDA : ARCHS = 900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | "
             "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |")


def test_the_installed_cpu_build_is_the_cpu_backend():
    lib = library_info()
    f = backend.engine_backend(lib, EngineSettings(n_gpu_layers=99).resolved(), n_layer=30)
    assert f["backend"] == "cpu" and f["n_layers_offloaded"] == 0 and f["n_gpu_layers"] == 99


def test_a_cuda_build_and_its_offloaded_layers():
    lib = {"system_info": CUDA_INFO, "gpu_offload_supported": True}
    assert backend.backend_name(CUDA_INFO) == "cuda"
    assert backend.engine_backend(lib, {"n_gpu_layers": 99}, n_layer=32)["n_layers_offloaded"] == 33
    assert backend.engine_backend(lib, {"n_gpu_layers": 10}, n_layer=32)["n_layers_offloaded"] == 10
    assert backend.engine_backend(lib, {"n_gpu_layers": -1}, n_layer=32)["n_layers_offloaded"] == 33
    assert backend.engine_backend(lib, {"n_gpu_layers": 0}, n_layer=32)["n_layers_offloaded"] == 0
    assert backend.engine_backend(lib, {"n_gpu_layers": 5})["n_layers_offloaded"] is None
