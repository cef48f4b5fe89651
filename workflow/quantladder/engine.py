"""The one llama.cpp engine every benchmark generates with.

Load a GGUF with a given per-sequence context, KV-cache types and GPU layers; render the GGUF's own
chat template; greedy-generate many items at once by continuous batching over ``n_parallel``
sequences of one llama.cpp context (:meth:`Engine.run`), through the C API directly.

What makes a reply reproducible (DESIGN rule 6; llama.cpp is not batch-invariant, PR #6950, #7052,
#11684, and a prompt cache alone changes greedy text, #2838):

- **No implicit prompt cache.** Every request is decoded as if its sequence were empty; a sequence's
  reply cells are removed (``llama_memory_seq_rm``) the moment its request ends. (llama-cpp-python's
  ``create_completion`` silently reuses the KV prefix the previous call left, so a reply depended on
  which item ran before it.) Two reuses exist, both part of the settings or the schedule:
  a request that ``continues`` its driver's previous one (a multi-turn item's next step) keeps that
  item's own cells (declared by the driver, the reply depends on it); and with
  ``EngineSettings.prefix_cache`` a prompt takes the cells of its leading **whole prompt chunks**
  from a stream that decoded the same tokens as the same chunks (``n_batch`` tokens from position 0,
  the chunks a fresh decode makes): those cells are the ones a fresh decode computes, bit for bit
  (the same tokens, positions, chunk shape and attention width), so replies are byte-identical with
  the cache on or off (tests/test_engine.py), and only the work shrinks (RULER's essay haystacks,
  shared system prompts).
- **A fixed schedule.** Drivers are admitted in list order into the lowest free slot; each step first
  decodes the prompts of newly started requests, each alone and in ``n_batch`` chunks (exactly as at
  ``n_parallel = 1``), then one token of every generating sequence in one ``llama_decode``, in slot
  order. Nothing depends on wall-clock time, so the same drivers give byte-identical generations.
- **Split KV streams** (``kv_unified = false``, ``n_seq_max = n_parallel``): each sequence owns a
  stream of ``n_ctx`` cells, so its cells always start at cell 0 of its own buffer whatever its
  neighbours hold, and attention only spans its own stream (a unified buffer would interleave the
  sequences' cells and make each token attend over all of them). The attention's width is still
  the longest stream's in a micro-batch (llama.cpp's ``n_kv`` is the maximum over the streams), so a
  short sequence batched with a long one pays the long one's width: measured in docs/parity.md.
- **Greedy** is the argmax of the logits row, ties to the lowest token id (llama.cpp's greedy
  sampler, ``llama_sampler_greedy_apply``), whichever side selects it (``EngineSettings.selection``:
  numpy over the rows llama.cpp copies to the host, or llama.cpp's backend sampler handing back each
  row's best candidates only; the same token either way, docs/generation.md "Selection"); a request
  ends at an end-of-generation token (``llama_vocab_is_eog``, not part of the reply), at a stop
  string (the reply's bytes are cut before it), at its token budget, or at the end of its
  sequence's context.

What batching still changes is which rows share a matrix product: a reply at ``n_parallel > 1`` can
differ from the same item at ``n_parallel = 1``, because ggml's CPU kernels differ with the number of
rows (llamafile's sgemm takes two rows or more, repacked weights take rows in fours through a GEMM
kernel and the rest through a GEMV one; measured in docs/generation.md, "Batch invariance"). That
difference is a measured noise floor, never hidden; the same wave reproduces byte for byte. With
``EngineSettings.batch_invariant`` (CPU; the project's llama.cpp patch, repacking off) every row
takes kernels whose result does not depend on the row count, and a reply is the same at any
n_parallel and with any batch mates (docs/generation.md).
"""

from __future__ import annotations

import collections
import ctypes
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Generator, Sequence

from .errors import ConfigError
from .gguf_meta import padded_ctx
from .kv_policy import MAX_UBATCH, batch_sizes, check_batch_invariant, check_sequences, flash_attn_for, parse_kv
from .llama_handle import LlamaHandle, library_info  # noqa: F401  (library_info: points and the tests read it here)


def usable_cores() -> int:
    """The CPUs this process may really use: its affinity (a Slurm allocation, taskset), cut to its
    cgroup's CPU quota where one is set (a container or a systemd slice given 1.5 CPUs gets 1): more
    threads than that are descheduled in turn, and ggml's threads wait for each other."""
    n = len(os.sched_getaffinity(0))
    for path, parse in (("/sys/fs/cgroup/cpu.max", lambda t: t.split()),
                        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", None)):
        try:
            text = open(path).read().strip()
            if parse:
                quota, period = parse(text)
            else:
                quota, period = text, open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read().strip()
            if quota not in ("max", "-1") and int(period) > 0:
                n = min(n, max(1, int(quota) // int(period)))
            break
        except (OSError, ValueError):
            continue
    return n


@dataclass
class EngineSettings:
    n_ctx: int = 4096  # per sequence: what one prompt + its reply may use
    kv: str = "f16"
    n_gpu_layers: int = 0
    n_threads: int = 0  # 0: all usable cores
    n_batch: int = 512
    flash_attn: bool | None = None  # None: on exactly when V is quantized (llama.cpp requires it)
    seed: int = 0
    n_parallel: int = 1  # sequences decoded together (continuous batching)
    # reuse the cells of whole prompt chunks another prompt decoded from the same tokens (exact:
    # replies are byte-identical either way; see the module's docstring); no extra memory
    prefix_cache: bool = False
    # llama.cpp's weight repacking on the CPU (its "extra buffer types"); see LlamaHandle
    extra_bufts: bool = True
    # every reply byte-identical at any n_parallel and any batch mates (CPU; the project's llama.cpp
    # patch, repacking off; llama_handle.check_batch_mode, docs/generation.md "Batch invariance")
    batch_invariant: bool = False
    # where the greedy token is picked (the same token either way, ties to the lowest id: not part
    # of any key; docs/generation.md, "Selection"): "host", numpy's argmax over the B × vocab logits
    # rows llama.cpp copies out of the backend every step; "backend", llama.cpp's backend sampler
    # (a top-k sampler chain per sequence) computes each row's SELECT_TOP_K best candidates where
    # the output layer ran and only those cross to the host; "auto": backend where layers are
    # offloaded (the copy is a device-to-host transfer there), host on the CPU (measured faster)
    selection: str = "auto"
    # benchmarks only (it changes replies; no config key sets it): an end-of-generation token is
    # never selected (its logit taken as -inf, as llama-server's ignore_eos does), so every request
    # runs its whole budget, as llama-batched-bench's sequences do
    ignore_eog: bool = False

    def resolved(self) -> dict:
        k, v = parse_kv(self.kv)
        fa = flash_attn_for(self.kv, self.flash_attn)
        check_sequences(self.n_parallel, self.n_ctx)
        threads = self.n_threads or usable_cores()
        out = {**asdict(self), "type_k": k, "type_v": v, "flash_attn": fa, "n_threads": threads,
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
        if self.batch_invariant:
            check_batch_invariant(self.n_parallel, fa, self.n_gpu_layers, self.kv)
            out["extra_bufts"] = False  # repacked weights take a step's rows in fours (GEMM) and the rest alone (GEMV)
        if self.selection not in SELECTIONS:
            raise ConfigError(f"engine selection {self.selection!r}: one of {', '.join(SELECTIONS)}")
        if self.selection == "auto":
            out["selection"] = "backend" if self.n_gpu_layers else "host"
        return out


# EngineSettings.selection's values, and the candidates per row the backend hands back: the token is
# the lowest id among the candidates of the highest logit, which is the row's first maximum unless
# every candidate ties (then more tokens than that may tie and the lowest id may be left out, and
# the step is refused rather than guessed)
SELECTIONS = ("auto", "host", "backend")
SELECT_TOP_K = 8


@dataclass(frozen=True)
class Request:
    """One decode job: a prompt, its budget, its stop strings (see :meth:`Engine.run`)."""

    prompt: tuple[int, ...]  # prompt tokens, BOS already included as the caller wants
    max_tokens: int  # the budget; clipped to the room left in the sequence's context
    stop: tuple[str, ...] = ()  # stop strings: the reply is cut before the first one that appears
    # The request continues its driver's previous one (the next step of a multi-turn item): the
    # sequence keeps the cells of the previous prompt and reply that this prompt starts with (their
    # longest common token prefix, at least the last prompt token decoded again for its logits) and
    # only the rest is decoded. A part of the schedule, declared by the driver: the reply depends on
    # the kept cells (as the previous reply did on its batch mates), never on another item's
    continues: bool = False
    # A thinking family's reply (quantladder.reasoning.ReplyPlan; None: decoded as always): the
    # thinking's budget is honoured (its end forced at the budget, as llama.cpp's reasoning-budget
    # sampler does), ``max_tokens`` counts the answer's tokens alone, stop strings apply to the
    # answer, and the Generation carries the split (``Generation.reasoning``)
    reasoning: Any = None


@dataclass
class Generation:
    text: str
    n_prompt_tokens: int
    n_gen_tokens: int
    # "stop": an end-of-generation token or a stop string; "length": the budget or the context's
    # room ran out; "prompt_too_long": the prompt does not fit the per-sequence context (nothing
    # decoded, text "")
    finish_reason: str
    seconds: float
    extra: dict = field(default_factory=dict)
    tokens: tuple[int, ...] = ()  # the generated ids (an end-of-generation token is not one of them)
    n_kept_tokens: int = 0  # prompt tokens whose cells the previous request left (Request.continues)
    n_cached_tokens: int = 0  # prompt tokens whose cells came from the prefix cache (whole chunks)
    # the split of a thinking family's reply (quantladder.reasoning.ReplyPlan.fields: reasoning,
    # answer, thinking/answer tokens, how the thinking ended); None where the request had no plan
    reasoning: dict | None = None

    @property
    def answer(self) -> str:
        """What an exam reads of the reply: the answer part of a split reply ("" when its thinking
        never closed), else the whole text."""
        return self.text if self.reasoning is None else self.reasoning["answer"]

    def record(self, **after_text) -> dict:
        """The reply as every benchmark stores it in generations.jsonl (``after_text``: the benchmark's
        own fields, placed after the text; a split reply's fields last, docs/thinking.md)."""
        return {"text": self.text, **after_text, "n_prompt_tokens": self.n_prompt_tokens,
                "n_gen_tokens": self.n_gen_tokens, "finish_reason": self.finish_reason,
                "seconds": round(self.seconds, 4), **(self.reasoning or {})}


Driver = Generator[Request, Generation, Any]


_PROMPT, _GEN = 0, 1


class _Seq:
    """One request in one slot: where it stands and what it produced."""

    __slots__ = ("index", "driver", "prompt", "budget", "stops", "max_stop", "phase", "pos", "tokens",
                 "buf", "last", "t0", "cut", "kept", "cached", "plan", "machine", "room", "n_think", "n_answer",
                 "forced", "answer_at")

    def __init__(self, index, driver, prompt, budget, stops, t0):
        self.index, self.driver, self.prompt, self.budget, self.t0 = index, driver, prompt, budget, t0
        self.stops = stops
        self.max_stop = max((len(s) for s in stops), default=0)
        self.phase = _PROMPT
        self.pos = 0  # the position the next decoded token takes
        self.tokens: list[int] = []
        self.buf = bytearray()  # the reply's bytes, pieces appended as produced
        self.last = -1  # the last generated token, to be decoded next
        self.cut = -1  # where a stop string begins in buf
        self.cached = 0  # leading prompt tokens whose cells came from the prefix cache
        self.kept = 0  # leading prompt tokens whose cells the previous request left (Request.continues)
        # a thinking family's reply (Request.reasoning): its budget machine, the room in its context,
        # the tokens of each part, whether the end was forced, where the answer's bytes begin
        self.plan = self.machine = None
        self.room = budget
        self.n_think = self.n_answer = 0
        self.forced = False
        self.answer_at = 0


class Engine(LlamaHandle):
    """A model and one context of ``n_parallel`` sequences, each with ``n_ctx`` cells of its own."""

    def __init__(self, model_path: str, settings: EngineSettings | None = None, *, verbose: bool = False):
        import numpy as np

        self.settings = settings or EngineSettings()
        r = self.settings.resolved()
        n_par = int(r["n_parallel"])
        n_batch, n_ubatch = batch_sizes(r["n_batch"], r["n_ctx"], n_par)
        super().__init__(model_path, n_ctx=n_par * padded_ctx(r["n_ctx"]), n_batch=n_batch, n_ubatch=n_ubatch,
                         n_seq_max=n_par, type_k=r["type_k"], type_v=r["type_v"], flash_attn=r["flash_attn"],
                         n_threads=r["n_threads"], n_gpu_layers=r["n_gpu_layers"], extra_bufts=r["extra_bufts"],
                         batch_invariant=r["batch_invariant"], context=f"{n_par} sequences × n_ctx {r['n_ctx']}",
                         verbose=verbose)
        self._mem = self.lc.llama_get_memory(self.ctx)
        self.n_parallel = n_par
        n_ctx_seq = int(self.lc.llama_n_ctx_seq(self.ctx))
        if n_ctx_seq < r["n_ctx"]:  # llama.cpp gave less than asked: refuse rather than overflow
            raise RuntimeError(f"{self.model_path}: llama.cpp gave {n_ctx_seq} cells per sequence, "
                               f"fewer than n_ctx {r['n_ctx']}")
        # per stream: the tokens of the whole prompt chunks whose cells it holds as a fresh decode
        # makes them (what the prefix cache may copy); empty without the cache
        self._cache = bool(r["prefix_cache"])
        self._exact: list = [np.zeros(0, dtype=np.int32) for _ in range(n_par)]
        self.resolved = {**r, "n_batch": n_batch, "n_ubatch": n_ubatch, "n_seq_max": n_par,
                         "kv_unified": False, "n_ctx_seq": n_ctx_seq}
        self._template: dict[tuple, Any] = {}  # (add_generation_prompt, server) -> formatter
        # a thinking family's setup (quantladder.reasoning.Setup; set by the generate job): chat_prompt
        # renders with its kwargs, and a request's ReplyPlan comes from the rendered reply's turn
        self.reasoning = None
        self._turns: dict[str, int] = {}  # recent renderings -> where the reply's own turn begins
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._piece_buf = ctypes.create_string_buffer(256)
        self._selection = r["selection"]
        self._samplers: list = []  # the backend sampler chains, one per sequence (freed after the context)
        self._eog_ids = None
        if r["ignore_eog"]:
            self._eog_ids = np.flatnonzero([self.lc.llama_vocab_is_eog(self.vocab, t) for t in range(self.n_vocab)])
        if self._selection == "backend":
            self._attach_samplers()
        # what the last run() did (for a job's record): decodes of prompt chunks, generation steps
        # and their sequences, stream moves of the compaction, requests served, prompt tokens
        # kept (Request.continues) or taken from the prefix cache, the cache's stream copies
        self.last_run: dict = {}

    # -- selection ------------------------------------------------------------------------
    def _attach_samplers(self) -> None:
        """One backend sampler chain per sequence (EOG ids biased to -inf first with ignore_eog, then
        top-k of SELECT_TOP_K): llama.cpp runs it on the device of the output layer, and a decode
        whose outputs all belong to such sequences copies no logits row to the host."""
        lc = self.lc
        bias = None
        if self._eog_ids is not None and len(self._eog_ids):
            bias = (lc.llama_logit_bias * len(self._eog_ids))(*[lc.llama_logit_bias(int(t), float("-inf"))
                                                                 for t in self._eog_ids])
        for seq in range(self.n_parallel):
            chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
            self._samplers.append(chain)
            if bias is not None:
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(self.n_vocab, len(bias), bias))
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(SELECT_TOP_K))
            if not lc.llama_set_sampler(self.ctx, seq, chain):
                self.close()
                raise RuntimeError(f"{self.model_path}: llama.cpp cannot run the selection's sampler on this backend "
                                   "(EngineSettings.selection='host' selects on the host)")

    def _select(self, rows: Sequence[int]) -> list[int]:
        """The greedy token of each output row of the last decode (``rows``: the batch indices of
        the tokens whose output is asked for, in batch order): the row's first maximum, i.e. ties
        to the lowest id, on either side (EngineSettings.selection)."""
        import numpy as np

        if self._selection == "host":
            logits = self._logits(len(rows))
            if self._eog_ids is not None:
                logits[:, self._eog_ids] = -np.inf  # llama.cpp's output buffer: rewritten by the next decode
            return np.argmax(logits, axis=1).tolist()  # first maximum: ties go to the lowest id
        lc, ctx, out = self.lc, self.ctx, []
        for i in rows:
            n = int(lc.llama_get_sampled_logits_count_ith(ctx, i))
            ids, vals = lc.llama_get_sampled_candidates_ith(ctx, i), lc.llama_get_sampled_logits_ith(ctx, i)
            if n <= 0 or not ids or not vals:
                raise RuntimeError(f"{self.model_path}: llama.cpp's backend sampler gave no candidates for output {i}")
            vals, ids = vals[:n], ids[:n]
            top = max(vals)
            best = [t for t, v in zip(ids, vals) if v == top]
            if len(best) == n < self.n_vocab:
                raise RuntimeError(f"{self.model_path}: all {n} candidates of output {i} tie at the highest logit "
                                   f"({top}): more tokens may tie, and which has the lowest id is unknown on the "
                                   "backend; use EngineSettings.selection='host'")
            out.append(min(best))
        return out

    def close(self) -> None:
        super().close()  # the context first: it holds the chains
        for chain in getattr(self, "_samplers", ()):
            self.lc.llama_sampler_free(chain)
        self._samplers = []

    # -- model facts ------------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        """The per-sequence context: what one prompt and its reply may use."""
        return int(self.resolved["n_ctx"])

    @property
    def n_ctx_train(self) -> int:
        return int(self.lc.llama_model_n_ctx_train(self.model))

    def token_bos(self) -> int:
        return self.bos

    def token_eos(self) -> int:
        return self.eos

    def metadata(self, key: str) -> str | None:
        """One GGUF metadata value as text (None when the file lacks the key)."""
        size = 1024
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self.lc.llama_model_meta_val_str(self.model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8")
            size = n + 1

    # -- tokens -----------------------------------------------------------------------------
    def tokenize(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        return self._tokens(text, add_bos, special).tolist()

    def _cached_piece(self, token: int) -> bytes:
        """:meth:`_piece` of a generated token, remembered per engine (the decode loop asks per token)."""
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._piece(token)
        return piece

    def _is_eog(self, token: int) -> bool:
        """Whether ``token`` ends a generation (llama_vocab_is_eog), remembered per engine."""
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(self.lc.llama_vocab_is_eog(self.vocab, token))
        return eog

    def _piece(self, token: int, special: bool = False) -> bytes:
        """A token's bytes (llama_token_to_piece; pieces may split a UTF-8 character)."""
        buf = self._piece_buf
        n = self.lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize_bytes(self, tokens: Sequence[int], special: bool = False) -> bytes:
        """The tokens' bytes, as llama-cpp-python's ``Llama.detokenize`` gives them (with its rule
        that a leading space after BOS is dropped)."""
        out = b"".join(self._piece(int(t), special) for t in tokens)
        if len(tokens) > 0 and int(tokens[0]) == self.token_bos() and out[:1] == b" ":
            out = out[1:]
        return out

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.detokenize_bytes(tokens).decode("utf-8", errors="replace")

    def starts_with_bos(self, text: str) -> bool:
        """Whether a rendered prompt already begins with the BOS token's text (then none is added)."""
        bos_id = self.token_bos()
        if bos_id < 0:
            return False
        bos = self.detokenize_bytes([bos_id], special=True).decode(errors="replace")
        return bool(bos) and text.startswith(bos)

    _starts_with_bos = starts_with_bos

    def prompt_tokens(self, text: str) -> tuple[int, ...]:
        """A rendered prompt's tokens, BOS added unless the chat template already wrote it."""
        return tuple(self.tokenize(text, add_bos=not self.starts_with_bos(text)))

    # -- chat template ----------------------------------------------------------------------
    @property
    def chat_template(self) -> str | None:
        return self.metadata("tokenizer.chat_template")

    def chat_prompt(self, messages: list[dict], add_generation_prompt: bool = True,
                    template_kwargs: dict | None = None) -> str:
        """Render ``messages`` with the GGUF's own chat template as llama-server renders it
        (quantladder.reasoning.render: its source patches, message rewrites and context, the special
        tokens' BOS/EOS texts; tool calls refused), for every family: one renderer, checked against
        the server's ``/apply-template`` (docs/thinking.md, "Rendering parity with llama-server").

        The template's context holds the family's reasoning kwargs (``self.reasoning``; without a
        setup, what the server passes when nothing is set: ``reasoning.default_kwargs``) under the
        caller's own ``template_kwargs``. A template the server renders otherwise (it reads the date
        the server writes) is refused with the reason (a ConfigError naming the model)."""
        from . import reasoning

        tmpl = self.chat_template
        if not tmpl:
            raise ConfigError(f"{self.model_path}: the GGUF has no chat template (tokenizer.chat_template)")
        base = self.reasoning.kwargs if self.reasoning is not None else reasoning.default_kwargs(tmpl)
        kwargs = {**base, **(template_kwargs or {})}  # the family's kwargs under the caller's own
        # variables the renderer passes itself: a kwarg of the same name would collide in its context
        own = ("messages", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "strftime_now",
               "functions", "function_call", "tool_choice")
        clash = sorted(k for k in (template_kwargs or {}) if k in own)
        if clash:
            raise ConfigError(f"{self.model_path}: template_kwargs {', '.join(clash)}: set by the renderer itself")
        why = reasoning.server_refusal(tmpl)
        if why:
            raise ConfigError(f"{self.model_path}: {why}; it is refused for generation")

        def render(msgs, agp: bool) -> str:
            fmt = self._template.get((agp, True))
            if fmt is None:
                # the BOS/EOS texts are the server's: the special token's own text
                # (common_token_to_piece with special=true)
                bos_id, eos_id = self.token_bos(), self.token_eos()
                bos = self.detokenize_bytes([bos_id], special=True).decode(errors="replace") if bos_id >= 0 else ""
                eos = self.detokenize_bytes([eos_id], special=True).decode(errors="replace") if eos_id >= 0 else ""
                fmt = reasoning.formatter(tmpl, bos, eos, agp)
                self._template[(agp, True)] = fmt
            return reasoning.render(fmt, tmpl, msgs, kwargs, add_bos=bool(self.lc.llama_vocab_get_add_bos(self.vocab)),
                                    add_eos=bool(self.lc.llama_vocab_get_add_eos(self.vocab)))

        text = render(messages, bool(add_generation_prompt))
        if self.reasoning is not None and self.reasoning.splits:
            # where the reply's own turn begins: the generation prompt is the rendering past its
            # common prefix with the rendering without it (common/chat.cpp); a prompt that ends in a
            # prefilled assistant turn (the code exams') begins it where the rendering of the turns
            # before it, with the generation prompt, stops agreeing
            from .reasoning import generation_prompt

            if add_generation_prompt:
                other = render(messages, False)
            elif messages and messages[-1].get("role") == "assistant":
                other = render(messages[:-1], True)
            else:
                other = text
            at = len(text) - len(generation_prompt(text, other))
            self._turns.pop(text, None)
            self._turns[text] = at
            while len(self._turns) > 64:
                self._turns.pop(next(iter(self._turns)))
        return text

    def reply_plan(self, prompt: str, generation_prompt: str | None = None):
        """The ReplyPlan of a request for the rendered ``prompt`` (quantladder.reasoning.reply_plan),
        None where the family's replies are not split. The reply's turn is read from the rendering
        the prompt was made from (the latest of this engine's that the prompt extends or cuts short:
        a driver renders, then asks), or given (``generation_prompt``: a prompt rendered elsewhere,
        RULER's items); a prompt no template wrote starts outside any thinking."""
        from . import reasoning

        if self.reasoning is None or not self.reasoning.splits:
            return None
        if generation_prompt is None:
            generation_prompt = ""
            for text, at in reversed(self._turns.items()):
                if len(prompt) >= at and (prompt.startswith(text) or text.startswith(prompt)):
                    generation_prompt = prompt[at:]
                    break
        return reasoning.reply_plan(self.reasoning, generation_prompt,
                                    lambda t: self.tokenize(t, add_bos=False, special=True))

    # -- generation -------------------------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], max_tokens: int, stop: Sequence[str] = ()) -> Generation:
        """Greedy completion of one item alone, decoded as on an empty KV state (an earlier call
        changes nothing; the prefix cache only takes whole chunks that decode the same):
        :meth:`run` with one driver. The prompt is text already rendered (special tokens parsed) or
        tokens."""
        if isinstance(prompt, str):
            tokens = self.tokenize(prompt, add_bos=not self.starts_with_bos(prompt))
        else:
            tokens = [int(t) for t in prompt]
        out: list[Generation] = []

        def one():
            g = yield Request(tuple(tokens), int(max_tokens), tuple(stop))
            return g

        self.run([one()], lambda i, g: out.append(g))
        return out[0]

    def run(self, drivers: Sequence[Driver], on_finish: Callable[[int, Any], None],
            on_step: Callable[[int, int], None] | None = None) -> None:
        """Generate one wave.

        A driver is a generator: ``next(d)`` yields its first :class:`Request`; ``d.send(generation)``
        yields its next one (a multi-turn item) or returns, and then ``on_finish(index_in_drivers,
        returned_value)`` is called. Drivers are admitted in list order into the lowest free of
        ``n_parallel`` slots; a slot freed at a step boundary takes the next driver. A new request
        is decoded as from an empty sequence; a request's reply cells are removed when it ends.
        ``on_step(prompt tokens decoded, tokens generated)`` follows every ``llama_decode``. A request
        that ``continues`` its driver's previous one keeps the cells it starts with
        (Request.continues); with the prefix cache a prompt's leading whole chunks may come from any
        stream that holds them (exact: see the module's docstring).
        """
        n_par = self.n_parallel
        pending = collections.deque(enumerate(drivers))
        slots: list[_Seq | None] = [None] * n_par
        step = on_step or (lambda n_prompt, n_gen: None)
        self.last_run = {"prefill_decodes": 0, "gen_steps": 0, "gen_rows": 0, "moves": 0, "requests": 0,
                         "kept_tokens": 0, "cached_tokens": 0, "cache_copies": 0}
        self._clear_slots()
        ok = False
        try:
            while True:
                self._admit(slots, pending, on_finish)
                # prompts of new requests, each alone and in slot order; a request that ends here
                # (an EOG first token, a budget of one) hands its slot on at once
                while True:
                    todo = [k for k in range(n_par) if slots[k] is not None and slots[k].phase == _PROMPT]
                    if not todo:
                        break
                    for k in todo:
                        self._prefill(k, slots, step, on_finish)
                    self._admit(slots, pending, on_finish)
                live = [k for k in range(n_par) if slots[k] is not None]
                if not live:
                    if not pending:
                        break
                    continue
                if not pending and live[-1] != len(live) - 1:
                    live = self._compact(slots)
                self._generate_step(live, slots, step, on_finish)
            ok = True
        finally:
            self._clear_slots(keep=ok)  # after a failed decode nothing held is trusted
            if not ok:
                for s in slots:
                    if s is not None:
                        s.driver.close()

    def _clear_slots(self, keep: bool = True) -> None:
        """Empty every sequence's stream (metadata only: cells beyond a sequence's own are masked),
        but for the whole prompt chunks the prefix cache may reuse (``keep``)."""
        if self._cache and keep:
            for k in range(self.n_parallel):
                self._trim(k, len(self._exact[k]))
        else:
            self.lc.llama_memory_clear(self._mem, False)
            self._exact = [e[:0] for e in self._exact]

    def _trim(self, k: int, m: int) -> None:
        """Keep stream ``k``'s first ``m`` cells (whole cached chunks), remove the rest."""
        if m and not self.lc.llama_memory_seq_rm(self._mem, k, m, -1):
            # a memory that cannot drop a tail (a recurrent model's state): no cache for it
            self._cache = False
            m = 0
        if not m:
            self.lc.llama_memory_seq_rm(self._mem, k, -1, -1)
        self._exact[k] = self._exact[k][:m]

    # -- the schedule -----------------------------------------------------------------------
    def _admit(self, slots, pending, on_finish) -> None:
        for k in range(len(slots)):
            while slots[k] is None and pending:
                i, d = pending.popleft()
                try:
                    req = next(d)
                except StopIteration as e:
                    on_finish(i, e.value)
                    continue
                self._place(k, i, d, req, slots, on_finish)

    def _place(self, k, i, d, req, slots, on_finish, held: list[int] | None = None) -> None:
        """Start ``req`` of driver ``i`` in slot ``k``; requests that need no decoding (a prompt that
        does not fit, no budget) are answered at once, and the driver's next request takes the slot.
        ``held``: the tokens whose cells slot ``k``'s sequence still holds from the driver's previous
        request (kept where ``req.continues``, else removed)."""
        import numpy as np

        while True:
            t0 = time.perf_counter()
            prompt = np.asarray(req.prompt, dtype=np.int64)
            if prompt.ndim != 1 or prompt.size == 0:
                raise ValueError(f"request of driver {i}: the prompt must be a non-empty sequence of token ids")
            if int(prompt.min()) < 0 or int(prompt.max()) >= self.n_vocab:
                raise ValueError(f"request of driver {i}: token ids must be in [0, {self.n_vocab})")
            n = int(prompt.size)
            room = self.n_ctx - n
            budget = min(int(req.max_tokens), room)
            kept = 0
            if held and req.continues and room > 0 and budget > 0:
                m = min(len(held), n - 1)
                same = np.flatnonzero(np.asarray(held[:m], dtype=np.int64) != prompt[:m])
                kept = int(same[0]) if same.size else m
            if held is not None:
                # a memory that cannot drop a tail (a recurrent model's state) starts over empty
                if kept and not self.lc.llama_memory_seq_rm(self._mem, k, kept, -1):
                    kept = 0
                if kept:  # the cached chunks are those the kept cells still hold
                    e = self._exact[k]
                    self._exact[k] = e[:min(len(e), kept // self.n_batch * self.n_batch)]
                else:
                    self._trim(k, len(self._exact[k]))
                held = None
            if room > 0 and budget > 0:
                stops = tuple(s.encode("utf-8") for s in req.stop if s)
                slots[k] = _Seq(i, d, prompt.astype(np.int32), budget, stops, t0)
                slots[k].kept = kept
                if req.reasoning is not None:
                    self._arm(slots[k], req.reasoning, room)
                self.last_run["kept_tokens"] += kept
                return
            reason = "prompt_too_long" if room <= 0 else "length"
            self.last_run["requests"] += 1
            g = Generation(text="", n_prompt_tokens=n, n_gen_tokens=0, finish_reason=reason,
                           seconds=time.perf_counter() - t0)
            try:
                req = d.send(g)
            except StopIteration as e:
                slots[k] = None
                on_finish(i, e.value)
                return

    def _finish(self, k, slots, reason: str, on_finish) -> None:
        s = slots[k]
        self.last_run["requests"] += 1
        # the cells the sequence holds: its prompt and the reply tokens decoded so far (the last
        # token taken is decoded only when the reply goes on)
        held = s.prompt.tolist() + s.tokens[:s.pos - int(s.prompt.size)]
        data = bytes(s.buf[:s.cut]) if s.cut >= 0 else bytes(s.buf)
        # an incomplete trailing UTF-8 character (cut by the budget) is dropped, as llama-cpp-python does
        text = data.decode("utf-8", errors="ignore")
        g = Generation(text=text, n_prompt_tokens=int(s.prompt.size),
                       n_gen_tokens=len(s.tokens), finish_reason=reason, seconds=time.perf_counter() - s.t0,
                       tokens=tuple(s.tokens), n_kept_tokens=s.kept, n_cached_tokens=s.cached)
        if s.plan is not None:
            g.reasoning = s.plan.fields(text, thinking_tokens=s.n_think, answer_tokens=s.n_answer, forced=s.forced,
                                        finish_reason=reason)
        try:
            req = s.driver.send(g)
        except StopIteration as e:
            self._trim(k, len(self._exact[k]))
            slots[k] = None
            on_finish(s.index, e.value)
            return
        self._place(k, s.index, s.driver, req, slots, on_finish, held=held)

    def _arm(self, s: _Seq, plan, room: int) -> None:
        """A thinking family's request: its budget machine, prefilled with the generation prompt's
        tokens; the answer's budget stays ``s.budget``, the thinking's is the plan's, and the
        sequence's context (``room``) bounds both: with an unlimited budget the thinking runs until
        the model closes it or the context is full (docs/thinking.md, "The hard cap")."""
        from .reasoning import utf8_is_complete

        def complete(token: int) -> bool:
            return utf8_is_complete(self._cached_piece(token))

        s.plan = plan
        s.machine = plan.machine(complete)
        s.room = room

    def _choose(self, s: _Seq, token: int) -> int:
        """The token a sequence takes: the one its budget forces, else the sampled one."""
        if s.machine is not None:
            forced = s.machine.forced()
            if forced is not None:
                s.forced = True
                return int(forced)
        return token

    def _accept_thinking(self, k, slots, token: int, on_finish) -> int:
        """``_accept`` for a thinking family's request: the token fed to its budget machine and counted
        as thinking (the start tag that opened a block, everything up to and with its end tag, the
        forced tokens) or answer; stop strings apply to the answer's bytes; the answer's budget
        counts answer tokens, the context every token."""
        from .reasoning import COUNTING, DONE, FORCING, IDLE, WAITING_UTF8

        s = slots[k]
        if self._is_eog(token):
            self._finish(k, slots, "stop", on_finish)
            return 0
        inside = (COUNTING, WAITING_UTF8, FORCING)
        m = s.machine
        before = m.state
        m.accept(token)
        s.tokens.append(token)
        if before in inside or m.state in inside:
            s.n_think += 1
            if before in (IDLE, DONE):  # a block opened: its start tag's earlier tokens were thinking too
                back = min(len(s.plan.start) - 1, s.n_answer)
                s.n_answer -= back
                s.n_think += back
        else:
            s.n_answer += 1
        piece = self._cached_piece(token)
        start = len(s.buf)
        s.buf += piece
        answering = m.state not in inside and not (before in inside)
        if before in inside and m.state == DONE:
            s.answer_at = len(s.buf)  # the answer begins after the end tag
        if s.stops and answering:
            lo = max(s.answer_at, start - s.max_stop + 1)
            hits = [j for j in (s.buf.find(st, lo) for st in s.stops) if j >= 0]
            if hits:
                s.cut = min(hits)
                self._finish(k, slots, "stop", on_finish)
                return 1
        if s.n_answer >= s.budget or len(s.tokens) >= s.room:
            self._finish(k, slots, "length", on_finish)
            return 1
        s.last = token
        s.phase = _GEN
        return 1

    def _accept(self, k, slots, token: int, on_finish) -> int:
        """Take the sampled ``token`` for slot ``k``; end the request where it ends. Returns the tokens
        added to the reply (0 or 1)."""
        s = slots[k]
        if s.machine is not None:
            return self._accept_thinking(k, slots, self._choose(s, token), on_finish)
        if self._is_eog(token):
            self._finish(k, slots, "stop", on_finish)
            return 0
        s.tokens.append(token)
        piece = self._cached_piece(token)
        start = len(s.buf)
        s.buf += piece
        if s.stops:
            # only where a stop string could newly end: the new bytes and the ones before them
            lo = max(0, start - s.max_stop + 1)
            hits = [j for j in (s.buf.find(st, lo) for st in s.stops) if j >= 0]
            if hits:
                s.cut = min(hits)
                self._finish(k, slots, "stop", on_finish)
                return 1
        if len(s.tokens) >= s.budget:
            self._finish(k, slots, "length", on_finish)
            return 1
        s.last = token
        s.phase = _GEN
        return 1

    # -- decoding ---------------------------------------------------------------------------
    def _decode_span(self, seq: int, prompt, lo: int, hi: int, last_row: bool, step) -> int:
        """Decode ``prompt[lo:hi]`` into sequence ``seq`` alone, in n_batch chunks; with ``last_row``
        the last token's logits are kept (row 0). Returns the last chunk's size."""
        import numpy as np

        nb = self.n_batch
        n = 0
        for a in range(lo, hi, nb):
            n = min(nb, hi - a)
            self._tok[:n] = prompt[a:a + n]
            self._pos[:n] = np.arange(a, a + n, dtype=np.int32)
            self._set_seq(n, np.full(n, seq, dtype=np.int32))
            self._out[:n] = 0
            final = last_row and a + n == hi
            if final:
                self._out[n - 1] = 1
            self._decode(n)
            self.last_run["prefill_decodes"] += 1
            if not final:
                step(n, 0)
        return n

    def _prefill(self, k, slots, step, on_finish) -> None:
        """Decode slot ``k``'s prompt alone in n_batch chunks from position 0 (the same chunks at any
        n_parallel), but for the cells it already has: a continued request's kept cells, or the
        whole chunks the prefix cache finds; the last row gives the first token."""
        import numpy as np

        s = slots[k]
        prompt, n_all = s.prompt, int(s.prompt.size)
        if s.kept:  # a continued request: its cells up to ``kept`` are there already
            start = s.kept
        elif self._cache:
            start = s.cached = self._from_cache(k, prompt)
        else:
            start = 0
        n = self._decode_span(k, prompt, start, n_all, True, step)
        if self._cache and not s.kept:
            self._exact[k] = prompt[:n_all // self.n_batch * self.n_batch].copy()
        s.pos = n_all
        token = self._select((n - 1,))[0]  # the last chunk's last token
        step(n, self._accept(k, slots, token, on_finish))

    def _from_cache(self, k: int, prompt) -> int:
        """Give stream ``k`` the longest run of whole chunks any stream holds for ``prompt``'s first
        tokens (its own first, then the lowest; the last prompt token is always decoded, for its
        logits); the rest of the stream is emptied. Returns the prompt tokens it now holds."""
        import numpy as np

        nb = self.n_batch
        limit = (int(prompt.size) - 1) // nb * nb
        best, src = 0, k
        for j in [k] + [j for j in range(self.n_parallel) if j != k]:
            e = self._exact[j]
            m = min(int(e.size), limit)
            if m <= best:
                continue
            diff = np.flatnonzero(e[:m] != prompt[:m])
            m = (int(diff[0]) if diff.size else m) // nb * nb
            if m > best:
                best, src = m, j
        if src != k:
            # a whole-stream copy, applied by llama.cpp before the next decode (this prompt's rest)
            self.lc.llama_memory_seq_cp(self._mem, src, k, -1, -1)
            self._exact[k] = self._exact[src]
            self.last_run["cache_copies"] += 1
        self._trim(k, best)
        if best and not self._cache:  # the tail could not be dropped: nothing was kept
            best = 0
        self.last_run["cached_tokens"] += best
        return best

    def _generate_step(self, live, slots, step, on_finish) -> None:
        """One token of every generating sequence, in one llama_decode, in slot order."""
        import numpy as np

        n = len(live)
        ids = np.asarray(live, dtype=np.int32)
        self._tok[:n] = [slots[k].last for k in live]
        self._pos[:n] = [slots[k].pos for k in live]
        self._set_seq(n, ids)
        self._out[:n] = 1
        self._decode(n)
        self.last_run["gen_steps"] += 1
        self.last_run["gen_rows"] += n
        nxt = self._select(range(n))
        made = 0
        for j, k in enumerate(live):
            slots[k].pos += 1
            made += self._accept(k, slots, int(nxt[j]), on_finish)
        step(0, made)

    def _compact(self, slots) -> list[int]:
        """Move the highest sequences into the free slots below them, so the live sequences hold
        slots 0..m-1: llama.cpp puts only consecutive sequence ids of split streams into one
        micro-batch, and a gap would split every generation step into several graph runs. A move
        copies the stream (``llama_memory_seq_cp``, applied before the next decode) and empties the
        source; it happens only when no driver waits for a slot (a wave's tail), at fixed points
        of the schedule."""
        lc = self.lc
        while True:
            free = [k for k, s in enumerate(slots) if s is None]
            live = [k for k, s in enumerate(slots) if s is not None]
            if not free or not live or free[0] > live[-1]:
                return live
            src, dst = live[-1], free[0]
            lc.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
            lc.llama_memory_seq_rm(self._mem, src, -1, -1)
            self._exact[dst], self._exact[src] = self._exact[src], self._exact[src][:0]
            slots[dst], slots[src] = slots[src], None
            self.last_run["moves"] += 1


class RawContext(LlamaHandle):
    """llama.cpp's C API directly, for the measures that need llama-perplexity / llama-bench parity:
    several sequences per decode call, chosen output rows, timed decodes.

    Filling a batch from numpy keeps Python out of the per-token loop.
    """

    def __init__(self, model_path: str, *, n_ctx: int, n_batch: int, n_ubatch: int | None = None,
                 n_seq_max: int = 1, kv: str = "f16", n_threads: int = 0, n_gpu_layers: int = 0,
                 flash_attn: bool | None = None, verbose: bool = False):
        s = EngineSettings(n_ctx=n_ctx, kv=kv, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                           n_batch=n_batch, flash_attn=flash_attn)
        r = s.resolved()
        r.pop("n_parallel")  # one context per measure: its record stays what it was
        self.resolved = {**r, "n_ubatch": n_ubatch or min(n_batch, MAX_UBATCH), "n_seq_max": n_seq_max}
        super().__init__(model_path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=self.resolved["n_ubatch"],
                         n_seq_max=n_seq_max, type_k=r["type_k"], type_v=r["type_v"], flash_attn=r["flash_attn"],
                         n_threads=r["n_threads"], n_gpu_layers=n_gpu_layers, verbose=verbose)
        self.n_threads = r["n_threads"]

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False):
        return self._tokens(text, add_special, parse_special)

    def clear(self) -> None:
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)

    def decode(self, tokens, pos, seq_ids, logits_mask) -> int:
        """Decode one batch given as numpy arrays; returns the number of output rows."""
        import numpy as np

        n = len(tokens)
        if n > self.n_batch:
            raise ValueError(f"batch of {n} tokens exceeds n_batch {self.n_batch}")
        self._tok[:n] = tokens
        self._pos[:n] = pos
        self._out[:n] = logits_mask
        self._set_seq(n, np.asarray(seq_ids, dtype=np.int32))
        self._decode(n)
        return int(np.count_nonzero(logits_mask))

    def logits(self, n_rows: int):
        """The output rows of the last decode, as a (n_rows, n_vocab) float32 view (no copy)."""
        return self._logits(n_rows)
