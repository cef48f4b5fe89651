"""How a point's replies are generated, decided once: :class:`GenerationPolicy`.

The config's ``generation:`` section (n_parallel, the KV budget of the automatic choice, the wave
factor, the prefix cache, the noise-floor series) with a benchmark's own ``n_parallel`` over it, and
its defaults, resolved in one place (:meth:`GenerationPolicy.of`) and handed down: the manifest keys
the generation on :attr:`~GenerationPolicy.section`, the generate job's memory
(:func:`quantladder.resources.generate_mem_mb`) and the generate script both take the number of
sequences from :meth:`~GenerationPolicy.n_parallel_for`, the script the waves and the cache, and
the noise series (:func:`quantladder.config.noise_config`) its batch setting from
:attr:`~GenerationPolicy.noise_n_parallel`.

A declaration on the ground floor: it reads the config and the GGUF's metadata, never llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import schemas
from .kv_policy import default_n_parallel


@dataclass(frozen=True)
class GenerationPolicy:
    # the config's generation section with the benchmark's own n_parallel over it, as given: what
    # the generation key hashes (the noise_floor settings included)
    section: dict = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: dict, benchmark: str | None = None) -> GenerationPolicy:
        """The policy a benchmark's points generate with (``benchmark`` None: the global section)."""
        g = dict(cfg.get("generation") or {})
        if benchmark:
            own = ((cfg.get("benchmarks") or {}).get(benchmark) or {}).get("n_parallel")
            if own is not None:
                g["n_parallel"] = own
        return cls(g)

    @property
    def record(self) -> dict:
        """The batching settings with their defaults (the generate job's meta keeps them as ``policy``)."""
        defaults = schemas.defaults(schemas.SCHEMA_PATH, "generation")  # the one place they are written
        return {**{k: v for k, v in defaults.items() if k != "noise_floor"},
                **{k: v for k, v in self.section.items() if v is not None and k != "noise_floor"}}

    @property
    def wave_factor(self) -> int:
        return int(self.record["wave_factor"])

    @property
    def prefix_cache(self) -> bool:
        return bool(self.record["prefix_cache"])

    @property
    def batch_invariant(self) -> bool:
        return bool(self.record["batch_invariant"])

    def n_parallel_for(self, info, n_ctx: int, kv: str = "f16") -> int:
        """The sequences decoded together. ``auto``: :func:`quantladder.kv_policy.default_n_parallel`,
        the most of 16, 8, 4, 2, 1 whose KV cache (as the engine allocates it: padded per-sequence
        context, predicted from the GGUF's metadata ``info``) fits ``kv_budget_mb`` at the longest
        context ``n_ctx``. It depends only on the architecture, the context and the budget, so every
        rung of a family gets the same value."""
        g = self.record
        n = g["n_parallel"]
        if n != "auto":
            return max(1, int(n))
        if info is None or not n_ctx:
            return 1
        return default_n_parallel(info, int(n_ctx), int(g["kv_budget_mb"]) << 20, kv)

    @property
    def noise_n_parallel(self) -> int:
        """The noise-floor series' batch setting: its own, else 2 where the points decode one
        sequence at a time, else 1 (read from the global section: ``GenerationPolicy.of(cfg)``)."""
        own = (self.section.get("noise_floor") or {}).get("n_parallel")
        if own:
            return int(own)
        return 2 if self.record["n_parallel"] == 1 else 1
