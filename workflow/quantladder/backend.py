"""Which llama.cpp backend ran a point, and how many layers it put on the GPU (manifest fields).

The CPU build of llama-cpp-python is the default; a CUDA build (docs/gpu.md) reports itself in
llama.cpp's system info ("CUDA : ARCHS = 900 | ..."). A point's manifest records, under
``engine_resolved``: ``backend``, ``gpu_offload_supported``, ``n_gpu_layers`` (as requested) and
``n_layers_offloaded`` (what that request means for this model on this build).
"""

from __future__ import annotations

# system-info prefixes of ggml's GPU backends, in the order they are checked
_GPU_BACKENDS = (("CUDA", "cuda"), ("ROCm", "rocm"), ("HIP", "rocm"), ("Metal", "metal"), ("MTL", "metal"),
                 ("Vulkan", "vulkan"), ("SYCL", "sycl"), ("OpenCL", "opencl"), ("CANN", "cann"), ("MUSA", "musa"))


def backend_name(system_info: str | None, gpu_offload_supported: bool | None = None) -> str:
    """'cuda', 'rocm', 'metal', 'vulkan', ... or 'cpu', from llama_print_system_info()."""
    info = system_info or ""
    parts = [p.strip() for p in info.replace("|", "\n").splitlines()]
    for key, name in _GPU_BACKENDS:
        if any(p.upper().startswith(key.upper() + " ") or p.upper().startswith(key.upper() + ":") for p in parts):
            return name
    if gpu_offload_supported:
        return "gpu-unknown"
    return "cpu"


def engine_backend(library: dict, engine_resolved: dict, n_layer: int | None = None) -> dict:
    """The manifest's backend fields: merge into the ``engine=`` dict of ``Point.manifest``.

    ``library`` is ``engine.library_info()``; ``engine_resolved`` an ``EngineSettings.resolved()``;
    ``n_layer`` the model's block count (GGUFInfo.n_layer). llama.cpp offloads the repeating layers
    and then the output layer, so a request of n_layer + 1 or more (or −1) puts everything on the GPU.
    """
    name = backend_name(library.get("system_info"), library.get("gpu_offload_supported"))
    requested = int(engine_resolved.get("n_gpu_layers", 0) or 0)
    if name == "cpu" or requested == 0:
        offloaded = 0
    elif n_layer is None:
        offloaded = None
    else:
        offloaded = n_layer + 1 if requested < 0 else min(requested, n_layer + 1)
    return {"backend": name, "gpu_offload_supported": library.get("gpu_offload_supported"),
            "n_gpu_layers": requested, "n_layers_offloaded": offloaded}
