"""What hardware a point runs on. Results are keyed by a card label; comparisons stay within one card.

A card key means one machine kind: the same GGUF gives other outputs where ggml picks other kernels,
and ggml picks them by instruction set (a CPU) or compute capability and backend (a GPU); the wheel is
compiled for the machine it was installed on. So the label is derived from what changes outputs:
  CPU: the model name, the instruction-set level ggml uses and a short hash of every ggml CPU feature
       (``llama_print_system_info``), e.g. ``cpu-amd-epyc-avx512-1f3a``;
  GPU: the name, the compute capability and the backend, e.g. ``nvidia-h200-sm90-cuda``.
The full fingerprint goes into every manifest, and the aggregate refuses to merge points under one key
whose fingerprints differ. A site that knows better sets ``card:`` (per partition on a cluster).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re

from .errors import CardMismatchError
from .io import user_cache

# ggml's CPU feature names from the most to the least capable level a label names.
ISA_LEVELS = ("AMX_INT8", "AVX512", "AVX2", "AVX", "SSE3", "NEON", "SVE")


def slug(text: str) -> str:
    s = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*$", "", text.lower())
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def n_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def nvml_cards() -> list[dict]:
    """The GPUs NVML sees (honouring CUDA_VISIBLE_DEVICES by index); [] when NVML is absent."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        cards = []
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        indices = range(pynvml.nvmlDeviceGetCount())
        if visible not in (None, ""):
            try:
                indices = [int(i) for i in visible.split(",")]
            except ValueError:
                pass
        driver = pynvml.nvmlSystemGetDriverVersion()
        for i in indices:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            card = {
                "index": i,
                "name": _s(pynvml.nvmlDeviceGetName(h)),
                "uuid": _s(pynvml.nvmlDeviceGetUUID(h)),
                "driver": _s(driver),
                "memory_total_bytes": int(mem.total),
            }
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                card["compute_capability"] = f"{major}.{minor}"
            except Exception:  # noqa: BLE001
                card["compute_capability"] = None
            for key, fn in (
                ("power_limit_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
                ("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                ("mem_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            ):
                try:
                    card[key] = fn()
                except Exception:
                    card[key] = None
            cards.append(card)
        return cards
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def parse_system_info(text: str) -> dict[str, dict[str, str]]:
    """llama.cpp's system info ('CPU : SSE3 = 1 | AVX2 = 1 | ... | CUDA : ARCHS = 900 | ...') as
    {backend: {feature: value}}."""
    out: dict[str, dict[str, str]] = {}
    current = None
    for part in text.split("|"):
        part = part.strip()
        if not part:
            continue
        if " : " in part:
            current, part = (x.strip() for x in part.split(" : ", 1))
            out.setdefault(current, {})
        if current is None or "=" not in part:
            continue
        k, _, v = part.partition("=")
        out[current][k.strip()] = v.strip()
    return out


def _library_stamp() -> str | None:
    """Where the installed libllama is and when it was built, without loading it (cheap)."""
    import importlib.util
    import socket

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        lib = os.path.join(root, "lib", "libllama.so")
        if os.path.exists(lib):
            st = os.stat(lib)
            return json.dumps([socket.gethostname(), cpu_model(), lib, st.st_size, st.st_mtime_ns])
    return None


@functools.lru_cache(maxsize=1)
def ggml_system_info() -> str:
    """What the installed llama.cpp build says it uses here ('' when it cannot be loaded).

    Loading the library costs ~0.5 s, and the card is detected at every DAG build (every Slurm job
    re-parses the Snakefile): the answer is cached per host, library file and CPU model."""
    stamp = _library_stamp()
    cache = None
    if stamp:
        cache = str(user_cache(f"ggml-system-info-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.txt"))
        try:
            with open(cache) as f:
                return f.read()
        except OSError:
            pass
    try:
        import llama_cpp

        text = llama_cpp.llama_print_system_info().decode()
    except Exception:  # noqa: BLE001 -- no library: the fingerprint says so
        return ""
    if cache:
        try:
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            tmp = f"{cache}.{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, cache)
        except OSError:
            pass
    return text


def cpu_features(info: str | None = None) -> list[str]:
    feats = parse_system_info(ggml_system_info() if info is None else info).get("CPU", {})
    return sorted(k for k, v in feats.items() if v == "1")


def isa_level(features: list[str]) -> str:
    for level in ISA_LEVELS:
        if level in features:
            return level.lower().replace("_", "")
    return "generic"


def fingerprint(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cpu_identity(model: str | None = None, info: str | None = None) -> dict:
    model = model or cpu_model()
    feats = cpu_features(info)
    parts = {"kind": "cpu", "model": model, "ggml_cpu_features": feats}
    fp = fingerprint(parts)
    return {"kind": "cpu", "name": model, "threads": n_cpus(), "features": feats, "isa": isa_level(feats),
            "fingerprint": fp, "fingerprint_of": parts,
            "label": f"cpu-{slug(model)}-{isa_level(feats)}-{fp[:4]}"}


def gpu_identity(g: dict, info: str | None = None) -> dict:
    sysinfo = parse_system_info(ggml_system_info() if info is None else info)
    backend = next((b for b in ("CUDA", "ROCm", "HIP", "Vulkan", "Metal", "SYCL") if b in sysinfo), "none")
    cc = g.get("compute_capability")
    parts = {"kind": "gpu", "name": g["name"], "compute_capability": cc, "backend": backend,
             "backend_features": sysinfo.get(backend, {})}
    sm = f"-sm{str(cc).replace('.', '')}" if cc else ""
    return {"kind": "gpu", **g, "backend": backend, "fingerprint": fingerprint(parts), "fingerprint_of": parts,
            "label": f"{slug(g['name'])}{sm}-{backend.lower()}", "host_cpu": cpu_model()}


def identity() -> dict:
    """The card this process runs on: the first visible GPU, or the CPU."""
    gpus = nvml_cards()
    if gpus:
        return gpu_identity(gpus[0])
    return cpu_identity()


def label(configured: str | None = None) -> str:
    """The results key: the configured label, or the detected one ('auto' or empty)."""
    if configured and configured != "auto":
        return configured
    return identity()["label"]


def check_same_card(expected_label: str, configured: str | None) -> dict:
    """Refuse to measure under another card's label (rule 3: same card only).

    A configured label that is not 'auto' is the user's word for the card and is trusted
    (a cluster sets it per partition); an auto label must match what this process sees.
    """
    ident = identity()
    if (not configured or configured == "auto") and ident["label"] != expected_label:
        raise CardMismatchError(
            f"this job runs on {ident['label']!r} but its outputs are keyed {expected_label!r}: "
            "points of different cards are never mixed (set `card:` in the config to label a card)"
        )
    return ident
