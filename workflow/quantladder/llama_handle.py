"""The one way a GGUF is loaded: a model, one llama.cpp context and one batch with numpy views of it.

llama.cpp's own tools all start from one ``common_init_from_params``; here the engine's generation
(:class:`quantladder.engine.Engine`) and the measures' raw decoding
(:class:`quantladder.engine.RawContext`) are two uses of :class:`LlamaHandle`, which refuses a
libllama that would crash, loads the model (a file llama.cpp cannot read is a one-line
:class:`~quantladder.errors.ModelFileError` naming it and llama.cpp's reason), makes the context
from the KV policy's sizes (:mod:`quantladder.kv_policy`) and frees all of it on close.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

from .errors import ConfigError, ModelFileError
from .gguf_meta import KV_GGML_TYPES
from .kv_policy import BATCH_INVARIANT_ROWS
from .io import sha256_file

# ggml_log_level's ERROR (ggml/include/ggml.h); llama-cpp-python's own table predates its renumbering
GGML_LOG_LEVEL_ERROR = 4

# Batch-invariant generation (docs/generation.md, "Batch invariance"): the project's patch to the
# vendored llama.cpp (quantladder/patches/llama.cpp/0001-batch-invariant-rows.patch) sends every
# matrix product of fewer than BATCH_INVARIANT_ROWS activation rows through ggml's per-row kernels
# (vec_dot), whose result for a row does not depend on the other rows; with weight repacking off
# that makes a generation step's logits, row by row, those of the sequence decoded alone. ggml
# reads the variable once per process, at its first matrix product, so the mode is the process's:
# set before the first model is loaded and never changed after (check_batch_mode).
BATCH_INVARIANT_VAR = "GGML_CPU_BATCH_INVARIANT_ROWS"
_UNSET = object()
_process_mode = _UNSET  # the variable's value ("" when unset) at this process's first model load


def check_batch_mode(batch_invariant: bool) -> None:
    """Set (or check) this process's batch mode before a model is loaded: the first load fixes it
    (setting the variable when batch invariance is asked for), a later load of the other mode is
    refused, and so is the variable set by hand for an engine that did not ask for it."""
    global _process_mode
    want = str(BATCH_INVARIANT_ROWS) if batch_invariant else ""
    if _process_mode is _UNSET:
        if batch_invariant:
            os.environ[BATCH_INVARIANT_VAR] = want
        have = os.environ.get(BATCH_INVARIANT_VAR, "")
        if have != want:
            raise ConfigError(f"{BATCH_INVARIANT_VAR}={have} is set in the environment but this engine was not asked "
                              "for batch-invariant generation (generation.batch_invariant): unset it, or ask for it")
        if batch_invariant:
            check_invariant_library()
        _process_mode = want
    elif _process_mode != want:
        raise ConfigError(f"this process loaded llama.cpp {'with' if _process_mode else 'without'} batch-invariant "
                          f"generation and ggml reads {BATCH_INVARIANT_VAR} once per process: an engine "
                          f"{'with' if want else 'without'} it must run in a process of its own")


def check_invariant_library() -> None:
    """The loaded ggml CPU backend must carry the project's patch (its variable's name is in the library)."""
    import llama_cpp

    lib = library_info().get("libllama_path")
    cands = sorted(Path(lib).parent.glob("libggml-cpu*")) if lib else []
    cands = [c for c in cands if c.is_file() and not c.is_symlink()] or cands
    if not cands:
        raise ConfigError(f"batch-invariant generation: no libggml-cpu beside {lib or 'libllama'}")
    if not any(BATCH_INVARIANT_VAR.encode() in c.read_bytes() for c in cands):
        raise ConfigError(f"{cands[0]}: this llama-cpp-python {llama_cpp.__version__} lacks the project's batch-invariant "
                          "patch (quantladder/patches/llama.cpp); install the project's build: `make setup`, or "
                          "`python -m quantladder.llama_tools library` in this environment")


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


@contextlib.contextmanager
def _errors_logged(lc, errors: list[str]):
    """Collect llama.cpp's error lines (its reason for refusing a file is only logged) while passing
    every line on to the log callback installed before (llama-cpp-python's, or a measure's)."""
    prev, prev_data = lc.llama_log_callback(), ctypes.c_void_p()
    lc.llama_log_get(ctypes.byref(prev), ctypes.byref(prev_data))

    @lc.llama_log_callback
    def _cb(level, text, user_data):
        if level == GGML_LOG_LEVEL_ERROR:
            errors.append(text.decode(errors="replace").strip())
        if prev:
            prev(level, text, prev_data)

    lc.llama_log_set(_cb, ctypes.c_void_p(0))
    try:
        yield
    finally:
        lc.llama_log_set(prev, prev_data)


def check_library() -> None:
    """Refuse a libllama that would crash rather than measure (llama_tools.library_refusal: a build
    with llama.cpp's AMX kernels), before any model is loaded."""
    import llama_cpp

    from .llama_tools import library_refusal

    why = library_refusal(llama_cpp.llama_print_system_info().decode())
    if why:
        raise ConfigError(f"{library_info().get('libllama_path') or 'libllama'}: {why}")


def library_info() -> dict:
    """llama-cpp-python's version and the sha256 of the libllama it loaded (part of every manifest)."""
    import llama_cpp


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


class LlamaHandle:
    """A model, one context of ``n_ctx`` cells for ``n_seq_max`` sequences, and a batch of ``n_batch``
    tokens whose arrays are numpy views made once (per-call views cost ~10 % of a single-token decode
    of a small model, measured against llama-bench's tg128). ``context`` names the context's shape
    in the error when llama.cpp cannot make it."""

    def __init__(self, model_path: str, *, n_ctx: int, n_batch: int, n_ubatch: int, n_seq_max: int,
                 type_k: str, type_v: str, flash_attn: bool, n_threads: int, n_gpu_layers: int,
                 extra_bufts: bool = True, kv_unified: bool = False, batch_invariant: bool = False,
                 context: str = "", verbose: bool = False):
        import llama_cpp
        import numpy as np
        # llama-cpp-python's log callback prints every level (debug lines of graph reserves and
        # stream copies included) until its logger is set, as Llama() does on construction
        from llama_cpp import _logger

        self.lc = llama_cpp
        self.model_path = str(model_path)
        self.model = self.ctx = self._batch = None
        _logger.set_verbose(verbose)
        check_library()
        check_batch_mode(batch_invariant)
        errors: list[str] = []
        with _quiet_stderr(not verbose):
            llama_cpp.llama_backend_init()
            mp = llama_cpp.llama_model_default_params()
            mp.n_gpu_layers = n_gpu_layers
            # llama.cpp's "extra buffer types": the CPU backend repacks some weight types into
            # interleaved blocks whose GEMM (rows in fours) and GEMV (the rest) kernels differ
            # (docs/generation.md, batch invariance); off: every row takes the plain dot product
            mp.use_extra_bufts = bool(extra_bufts)
            with _errors_logged(llama_cpp, errors):
                self.model = llama_cpp.llama_model_load_from_file(self.model_path.encode(), mp)
            if not self.model:
                raise ModelFileError(f"{self.model_path}: llama.cpp could not load the model"
                                     + (f": {errors[0]}" if errors else ""))
            cp = llama_cpp.llama_context_default_params()
            cp.n_ctx = n_ctx
            cp.n_batch = n_batch
            cp.n_ubatch = n_ubatch
            cp.n_seq_max = n_seq_max
            # one KV stream per sequence (llama.cpp's default, stated: the engine's schedule relies on
            # it); unified only for the batch-invariance probe (benchmarks/batch_invariance.py)
            cp.kv_unified = bool(kv_unified)
            cp.swa_full = True  # full sliding-window streams: the KV size stays exact (llama-perplexity: --swa-full)
            cp.n_threads = n_threads
            cp.n_threads_batch = n_threads
            cp.type_k = KV_GGML_TYPES[type_k]
            cp.type_v = KV_GGML_TYPES[type_v]
            cp.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                  else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
            cp.no_perf = True
            self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
            if not self.ctx:
                self.close()
                raise RuntimeError(f"{self.model_path}: llama.cpp could not create a context ({context or f'n_ctx={n_ctx}'})")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.n_seq_max = n_seq_max
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self._nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n_batch,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(n_batch,))
        self._nseq[:] = 1
        self._seq_ids = np.zeros(n_batch, dtype=np.int32)  # what each token's seq_id[0] holds now
        for i in range(n_batch):
            b.seq_id[i][0] = 0
        self._logits_addr = None
        self._logits_view = None

    # -- vocabulary -------------------------------------------------------------------------
    @property
    def bos(self) -> int:
        return int(self.lc.llama_vocab_bos(self.vocab))

    @property
    def eos(self) -> int:
        return int(self.lc.llama_vocab_eos(self.vocab))

    @property
    def add_bos(self) -> bool:
        return bool(self.lc.llama_vocab_get_add_bos(self.vocab))

    def _tokens(self, text: str, add_special: bool, parse_special: bool):
        """``text``'s token ids (llama_tokenize), as an int32 array of its own."""
        import numpy as np

        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (self.lc.llama_token * n_max)()
        n = self.lc.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            buf = (self.lc.llama_token * -n)()
            n = self.lc.llama_tokenize(self.vocab, data, len(data), buf, -n, add_special, parse_special)
            if n < 0:
                raise RuntimeError(f"llama_tokenize failed ({n}) on a text of {len(data)} bytes")
        return np.ctypeslib.as_array(buf)[:n].astype(np.int32).copy()

    # -- decoding ---------------------------------------------------------------------------
    def _set_seq(self, n: int, ids) -> None:
        """The batch's first ``n`` tokens go to sequences ``ids`` (an int32 array)."""
        import numpy as np

        b = self._batch
        for i in np.flatnonzero(self._seq_ids[:n] != ids).tolist():  # only the ids that change
            b.seq_id[i][0] = int(ids[i])
        self._seq_ids[:n] = ids

    def _decode(self, n: int) -> None:
        """Decode the batch's first ``n`` tokens (filled through the views)."""
        self._batch.n_tokens = n
        rc = self.lc.llama_decode(self.ctx, self._batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with {rc} ({self.model_path})")

    def _logits(self, n_rows: int):
        """The first ``n_rows`` output rows of the last decode, as a (n_rows, n_vocab) float32 view
        (no copy; remade only when llama.cpp moves its buffer, which always holds at least
        n_seq_max rows, or more rows than the view's are asked for)."""
        import numpy as np

        ptr = self.lc.llama_get_logits(self.ctx)
        addr = ctypes.cast(ptr, ctypes.c_void_p).value
        if addr != self._logits_addr or n_rows > len(self._logits_view):
            rows = max(n_rows, self.n_seq_max)
            self._logits_view = np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))
            self._logits_addr = addr
        return self._logits_view[:n_rows]

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

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()
