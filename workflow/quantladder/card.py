"""What hardware a point runs on. Results are keyed by a card label; comparisons stay within one card."""

from __future__ import annotations

import os
import platform
import re

from .errors import CardMismatchError


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


def identity() -> dict:
    """The card this process runs on: the first visible GPU, or the CPU."""
    gpus = nvml_cards()
    if gpus:
        g = gpus[0]
        return {"kind": "gpu", **g, "label": slug(g["name"]), "host_cpu": cpu_model()}
    model = cpu_model()
    return {"kind": "cpu", "name": model, "threads": n_cpus(), "label": "cpu-" + slug(model)}


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
