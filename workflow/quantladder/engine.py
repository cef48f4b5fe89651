"""The one llama.cpp engine every benchmark generates with.

Load a GGUF with a given context, KV-cache types and GPU layers; render the GGUF's own chat
template; greedy-generate with stop strings and a token budget. Batching, if it comes, comes here.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

from .errors import ConfigError

# llama.cpp ggml_type values accepted for the KV cache (ggml/include/ggml.h).
KV_GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
                 "iq4_nl": 20, "bf16": 30}


def parse_kv(kv: str) -> tuple[str, str]:
    """'f16' -> (f16, f16); 'q8_0-q4_0' -> (q8_0, q4_0)."""
    parts = kv.split("-")
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or any(p not in KV_GGML_TYPES for p in parts):
        raise ConfigError(f"KV-cache type {kv!r}: use one of {sorted(KV_GGML_TYPES)} or 'K-V' (e.g. q8_0-q4_0)")
    return parts[0], parts[1]


@dataclass
class EngineSettings:
    n_ctx: int = 4096
    kv: str = "f16"
    n_gpu_layers: int = 0
    n_threads: int = 0  # 0: all usable cores
    n_batch: int = 512
    flash_attn: bool | None = None  # None: on exactly when V is quantized (llama.cpp requires it)
    seed: int = 0

    def resolved(self) -> dict:
        k, v = parse_kv(self.kv)
        fa = self.flash_attn if self.flash_attn is not None else (v not in ("f16", "f32", "bf16"))
        if v not in ("f16", "f32", "bf16") and not fa:
            raise ConfigError(f"KV type {self.kv!r}: a quantized V cache requires flash attention")
        threads = self.n_threads or len(os.sched_getaffinity(0))
        return {**asdict(self), "type_k": k, "type_v": v, "flash_attn": fa, "n_threads": threads}


@dataclass
class Generation:
    text: str
    n_prompt_tokens: int
    n_gen_tokens: int
    finish_reason: str  # "stop" (EOS or stop string) or "length"
    seconds: float
    extra: dict = field(default_factory=dict)


@contextlib.contextmanager
def _quiet_stderr(enabled: bool):
    """llama.cpp prints its load log on fd 2; keep it out of rule logs unless asked."""
    if not enabled:
        yield
        return
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class Engine:
    def __init__(self, model_path: str, settings: EngineSettings | None = None, *, verbose: bool = False):
        import llama_cpp

        self.model_path = str(model_path)
        self.settings = settings or EngineSettings()
        r = self.settings.resolved()
        self.resolved = r
        kwargs = dict(
            model_path=self.model_path,
            n_ctx=r["n_ctx"],
            n_batch=min(r["n_batch"], r["n_ctx"]),
            n_gpu_layers=r["n_gpu_layers"],
            n_threads=r["n_threads"],
            n_threads_batch=r["n_threads"],
            seed=r["seed"],
            type_k=KV_GGML_TYPES[r["type_k"]],
            type_v=KV_GGML_TYPES[r["type_v"]],
            flash_attn=r["flash_attn"],
            verbose=verbose,
        )
        with _quiet_stderr(not verbose):
            self.llm = llama_cpp.Llama(**kwargs)
        self._template = None

    # -- tokens ---------------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.llm.n_ctx()

    @property
    def n_ctx_train(self) -> int:
        return self.llm.n_ctx_train()

    def tokenize(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

    # -- chat template --------------------------------------------------------------------
    @property
    def chat_template(self) -> str | None:
        return self.llm.metadata.get("tokenizer.chat_template")

    def chat_prompt(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render ``messages`` with the GGUF's own chat template (the raw completion path)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        tmpl = self.chat_template
        if not tmpl:
            raise ConfigError(f"{self.model_path}: the GGUF has no chat template (tokenizer.chat_template)")
        if self._template is None:
            vocab = self.llm._model
            bos = self.llm.detokenize([self.llm.token_bos()]).decode(errors="replace") if self.llm.token_bos() >= 0 else ""
            eos = self.llm.detokenize([self.llm.token_eos()]).decode(errors="replace") if self.llm.token_eos() >= 0 else ""
            del vocab
            self._template = Jinja2ChatFormatter(template=tmpl, bos_token=bos, eos_token=eos,
                                                 add_generation_prompt=add_generation_prompt)
        return self._template(messages=messages).prompt

    # -- generation -----------------------------------------------------------------------
    def generate(self, prompt: str | list[int], max_tokens: int, stop: Sequence[str] = ()) -> Generation:
        """Greedy completion. The prompt is text already rendered (special tokens parsed) or tokens."""
        tokens = prompt if isinstance(prompt, list) else self.tokenize(prompt, add_bos=not self._starts_with_bos(prompt))
        room = self.n_ctx - len(tokens)
        if room <= 0:
            raise ValueError(f"prompt of {len(tokens)} tokens does not fit n_ctx {self.n_ctx}")
        max_tokens = min(max_tokens, room)
        t0 = time.perf_counter()
        out = self.llm.create_completion(
            prompt=tokens, max_tokens=max_tokens, temperature=0.0, top_k=1, top_p=1.0, min_p=0.0,
            repeat_penalty=1.0, stop=list(stop) or None, seed=self.resolved["seed"],
        )
        dt = time.perf_counter() - t0
        choice = out["choices"][0]
        usage = out.get("usage", {})
        return Generation(
            text=choice["text"],
            n_prompt_tokens=int(usage.get("prompt_tokens", len(tokens))),
            n_gen_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=choice.get("finish_reason") or "stop",
            seconds=dt,
        )

    def _starts_with_bos(self, text: str) -> bool:
        bos_id = self.llm.token_bos()
        if bos_id < 0:
            return False
        bos = self.llm.detokenize([bos_id], special=True).decode(errors="replace")
        return bool(bos) and text.startswith(bos)

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            llm.close()
            self.llm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def library_info() -> dict:
    """llama-cpp-python's version and the sha256 of the libllama it loaded (part of every manifest)."""
    import llama_cpp

    from .io import sha256_file

    lib_path = None
    for name in ("_lib", "_lib_base"):
        lib = getattr(llama_cpp.llama_cpp, name, None)
        if lib is not None and getattr(lib, "_name", None):
            lib_path = lib._name
            break
    if lib_path is None:
        base = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
        for cand in ("libllama.so", "libllama.dylib", "llama.dll"):
            if os.path.exists(os.path.join(base, cand)):
                lib_path = os.path.join(base, cand)
                break
    info = {"llama_cpp_python": llama_cpp.__version__, "libllama_path": lib_path,
            "libllama_sha256": sha256_file(lib_path) if lib_path and os.path.exists(lib_path) else None}
    try:
        info["system_info"] = llama_cpp.llama_print_system_info().decode()
        info["gpu_offload_supported"] = bool(llama_cpp.llama_supports_gpu_offload())
    except Exception:
        pass
    return info


class RawContext:
    """llama.cpp's C API directly, for the measures that need llama-perplexity / llama-bench parity:
    several sequences per decode call, chosen output rows, timed decodes.

    Filling a batch from numpy keeps Python out of the per-token loop.
    """

    def __init__(self, model_path: str, *, n_ctx: int, n_batch: int, n_ubatch: int | None = None,
                 n_seq_max: int = 1, kv: str = "f16", n_threads: int = 0, n_gpu_layers: int = 0,
                 flash_attn: bool | None = None, verbose: bool = False):
        import llama_cpp

        self.lc = llama_cpp
        s = EngineSettings(n_ctx=n_ctx, kv=kv, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                           n_batch=n_batch, flash_attn=flash_attn)
        r = s.resolved()
        self.resolved = {**r, "n_ubatch": n_ubatch or min(n_batch, 512), "n_seq_max": n_seq_max}
        with _quiet_stderr(not verbose):
            llama_cpp.llama_backend_init()
            mp = llama_cpp.llama_model_default_params()
            mp.n_gpu_layers = n_gpu_layers
            self.model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mp)
            if not self.model:
                raise RuntimeError(f"{model_path}: llama.cpp could not load the model")
            cp = llama_cpp.llama_context_default_params()
            cp.n_ctx = n_ctx
            cp.n_batch = n_batch
            cp.n_ubatch = self.resolved["n_ubatch"]
            cp.n_seq_max = n_seq_max
            cp.n_threads = r["n_threads"]
            cp.n_threads_batch = r["n_threads"]
            cp.type_k = KV_GGML_TYPES[r["type_k"]]
            cp.type_v = KV_GGML_TYPES[r["type_v"]]
            cp.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if r["flash_attn"]
                                  else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
            cp.no_perf = True
            self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
            if not self.ctx:
                llama_cpp.llama_model_free(self.model)
                raise RuntimeError(f"{model_path}: llama.cpp could not create a context (n_ctx={n_ctx})")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.n_threads = r["n_threads"]
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        import numpy as np

        # numpy views of the batch's arrays, made once: per-call views cost ~10 % of a
        # single-token decode of a small model (measured against llama-bench's tg128)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self._nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n_batch,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(n_batch,))
        self._nseq[:] = 1
        self._seq = np.zeros(n_batch, dtype=np.int32)  # what each token's seq_id[0] holds now
        for i in range(n_batch):
            b.seq_id[i][0] = 0

    # -- vocabulary -----------------------------------------------------------------------
    @property
    def bos(self) -> int:
        return self.lc.llama_vocab_bos(self.vocab)

    @property
    def add_bos(self) -> bool:
        return bool(self.lc.llama_vocab_get_add_bos(self.vocab))

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False):
        import numpy as np

        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (self.lc.llama_token * n_max)()
        n = self.lc.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            buf = (self.lc.llama_token * -n)()
            n = self.lc.llama_tokenize(self.vocab, data, len(data), buf, -n, add_special, parse_special)
        return np.ctypeslib.as_array(buf)[:n].astype(np.int32).copy()

    # -- decoding -------------------------------------------------------------------------
    def clear(self) -> None:
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)

    def decode(self, tokens, pos, seq_ids, logits_mask) -> int:
        """Decode one batch given as numpy arrays; returns the number of output rows."""
        import numpy as np

        n = len(tokens)
        if n > self.n_batch:
            raise ValueError(f"batch of {n} tokens exceeds n_batch {self.n_batch}")
        b = self._batch
        self._tok[:n] = tokens
        self._pos[:n] = pos
        self._out[:n] = logits_mask
        seq_ids = np.asarray(seq_ids, dtype=np.int32)
        for i in np.flatnonzero(self._seq[:n] != seq_ids).tolist():  # only the ids that change
            b.seq_id[i][0] = int(seq_ids[i])
        self._seq[:n] = seq_ids
        b.n_tokens = n
        rc = self.lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with {rc}")
        return int(np.count_nonzero(logits_mask))

    def logits(self, n_rows: int):
        """The output rows of the last decode, as a (n_rows, n_vocab) float32 view (no copy)."""
        import numpy as np

        ptr = self.lc.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))

    def synchronize(self) -> None:
        self.lc.llama_synchronize(self.ctx)

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            self.lc.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "ctx", None):
            self.lc.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            self.lc.llama_model_free(self.model)
            self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
