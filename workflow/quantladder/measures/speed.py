"""Prompt-processing and generation speed with llama-bench's protocol.

llama-bench (llama.cpp tools/llama-bench): each test gets a context of n_prompt + n_gen + n_depth
tokens; one warm-up run (a prompt of n_prompt tokens, one generated token), then per repetition the
memory is cleared, n_depth random tokens are decoded untimed (``-d``: the cache a user at that context
has; llama-bench restores its state after the first, the same cells), and the timed part runs after
them: pp = n_prompt random tokens decoded in n_batch pieces (the first is BOS when the vocab adds
one); tg = n_gen single-token decodes. Reported: tokens/s = n_tokens / t per repetition, mean ± sd
over repetitions, as ``pp512`` / ``tg128`` and, at a depth, ``pp512@d4096`` / ``tg128@d4096``
(llama-bench prints "tg128 @ d4096").

At B sequences together (``parallel``: B users sharing the card) the tg test is llama-batched-bench's
(tools/batched-bench: ``-npl B -npp D -ntg N``, split KV streams): B sequences each hold D tokens
(decoded untimed), then N steps each decode one token of every sequence; its S_TG = B·N / t. The row is
what one of the B users gets, N / t tokens/s (``tg_tokens_per_s_parallel``, subset ``tgN@dDxB``, its
``n_parallel`` B).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..metrics import Metric, row
from ..metrics import declare as declare_figures
from . import GPU, Measure, RuleCost, declare


# -- What the workflow reads of this measure (quantladder.measures.Measure) and its figures.
NAME = "speed"
MEASURE = declare(Measure(
    NAME, "prompt processing and generation tokens/s with llama-bench's protocol",
    rules={NAME: RuleCost(GPU, runtime=(15, 1), guess_s=30)},
    key_engine=("threads",),  # threads change speed, nothing a quality figure reads
    anchor="speed is a property of the card, not a score: no anchor; parity with llama-bench is checked by "
           "benchmarks/speed_parity.py",
    tool_gate="llama-bench", cost=("generation speed", False), cost_rank=2, alone=True))

declare_figures(
    Metric("pp_tokens_per_s", "tokens/s", "prompt processing (llama-bench's ppN test: N random tokens)", (NAME,),
           higher_is_better=True, stderr="sd", whole="only", headline_for=(NAME,), clocked=True),
    Metric("tg_tokens_per_s", "tokens/s", "generation (llama-bench's tgN test: N single-token decodes)", (NAME,),
           higher_is_better=True, stderr="sd", whole="only", headline_for=(NAME,), pareto_cost=1, clocked=True),
    # at a context (measures.speed.depths): what a user with that many tokens in the cache gets
    Metric("pp_tokens_per_s_at_depth", "tokens/s", "prompt processing after D tokens already in the cache "
           "(llama-bench -d D; subset ppN@dD, n_ctx D + N)", (NAME,), higher_is_better=True, stderr="sd",
           whole="none", clocked=True),
    Metric("tg_tokens_per_s_at_depth", "tokens/s", "generation after D tokens already in the cache (llama-bench "
           "-d D; subset tgN@dD, n_ctx D + N): the speed a user at that context gets", (NAME,),
           higher_is_better=True, stderr="sd", whole="none", clocked=True),
    Metric("tg_tokens_per_s_parallel", "tokens/s", "generation of one of B sequences decoded together, each after "
           "D tokens (llama-batched-bench -npl B -npp D: its S_TG / B; subset tgN@dDxB, n_ctx D + N, n_parallel B): "
           "the speed each of B concurrent users gets", (NAME,), higher_is_better=True, stderr="sd", whole="none", clocked=True),
)


def bench_prompt(ctx, n_tokens: int, n_batch: int, rng, start_pos: int = 0, seq: int = 0) -> None:
    """llama-bench's test_prompt: ``n_tokens`` random tokens decoded in ``n_batch`` pieces, from position
    ``start_pos`` (after a depth's tokens) of sequence ``seq``; the first is BOS when the vocab adds one,
    as each call's is."""
    done = 0
    while done < n_tokens:
        n = min(n_batch, n_tokens - done)
        toks = rng.integers(0, ctx.n_vocab, size=n, dtype=np.int32)
        if done == 0 and ctx.add_bos:
            toks[0] = ctx.bos
        pos = np.arange(start_pos + done, start_pos + done + n, dtype=np.int32)
        mask = np.zeros(n, dtype=np.int8)
        mask[-1] = 1
        ctx.decode(toks, pos, np.full(n, seq, dtype=np.int32), mask)
        done += n
    ctx.synchronize()


def bench_gen(ctx, n_tokens: int, start_pos: int, rng) -> None:
    """llama-bench's test_gen: ``n_tokens`` single-token decodes from position ``start_pos``."""
    tok = np.array([ctx.bos if ctx.add_bos else int(rng.integers(0, ctx.n_vocab))], dtype=np.int32)
    one = np.ones(1, dtype=np.int8)
    zero = np.zeros(1, dtype=np.int32)
    for i in range(n_tokens):
        ctx.decode(tok, np.array([start_pos + i], dtype=np.int32), zero, one)
        ctx.synchronize()
        tok[0] = rng.integers(0, ctx.n_vocab)


def run_test(model_path: str, *, n_prompt: int, n_gen: int, repetitions: int, n_batch: int = 2048,
             n_ubatch: int = 512, n_threads: int = 0, kv: str = "f16", n_gpu_layers: int = 0,
             flash_attn: bool | None = None, seed: int = 0, n_depth: int = 0) -> dict:
    """One llama-bench test (pp when n_gen == 0, tg when n_prompt == 0), after ``n_depth`` tokens in the
    cache (decoded again, untimed, before each repetition); returns per-rep tokens/s."""
    from ..engine import RawContext

    rng = np.random.default_rng(seed)
    with RawContext(model_path, n_ctx=n_prompt + n_gen + n_depth, n_batch=n_batch, n_ubatch=n_ubatch, kv=kv,
                    n_threads=n_threads, n_gpu_layers=n_gpu_layers, flash_attn=flash_attn) as ctx:
        if n_prompt:
            bench_prompt(ctx, n_prompt, n_batch, rng)
        if n_gen:
            bench_gen(ctx, 1, 0, rng)
        samples = []
        for _ in range(repetitions):
            ctx.clear()
            if n_depth:
                bench_prompt(ctx, n_depth, n_batch, rng)
            t0 = time.perf_counter_ns()
            if n_prompt:
                bench_prompt(ctx, n_prompt, n_batch, rng, start_pos=n_depth)
            if n_gen:
                bench_gen(ctx, n_gen, n_depth + n_prompt, rng)
            samples.append(time.perf_counter_ns() - t0)
        resolved = ctx.resolved
    n_tok = n_prompt + n_gen
    ts = [n_tok * 1e9 / s for s in samples]
    mean = sum(ts) / len(ts)
    sd = math.sqrt(sum((x - mean) ** 2 for x in ts) / (len(ts) - 1)) if len(ts) > 1 else float("nan")
    return {"n_prompt": n_prompt, "n_gen": n_gen, "n_depth": n_depth, "n_parallel": 1, "repetitions": repetitions,
            "tokens_per_s": ts,
            "mean_tokens_per_s": mean, "sd_tokens_per_s": sd, "samples_ns": samples,
            "engine": {k: resolved[k] for k in ("n_threads", "type_k", "type_v", "flash_attn", "n_batch", "n_ubatch", "n_gpu_layers")}}


def run_parallel(model_path: str, *, n_gen: int, n_parallel: int, repetitions: int, n_depth: int = 0,
                 n_batch: int = 2048, n_ubatch: int = 512, n_threads: int = 0, kv: str = "f16", n_gpu_layers: int = 0,
                 flash_attn: bool | None = None, seed: int = 0) -> dict:
    """llama-batched-bench's tg at ``n_parallel`` sequences (``-npl B -npp n_depth -ntg n_gen``, split KV
    streams of ``n_depth + n_gen`` cells each): per repetition the cache is cleared, each sequence's
    ``n_depth`` random tokens are decoded untimed (the first BOS where the vocab adds one), then
    ``n_gen`` timed steps decode one random token of every sequence. Returns per-rep tokens/s of the
    whole batch (S_TG) and of one sequence (S_TG / B)."""
    from ..engine import RawContext

    rng = np.random.default_rng(seed)
    per_seq = n_depth + n_gen
    seqs = np.arange(n_parallel, dtype=np.int32)
    all_out = np.ones(n_parallel, dtype=np.int8)
    with RawContext(model_path, n_ctx=n_parallel * per_seq, n_batch=max(n_batch, n_parallel), n_ubatch=n_ubatch,
                    n_seq_max=n_parallel, kv=kv, n_threads=n_threads, n_gpu_layers=n_gpu_layers,
                    flash_attn=flash_attn) as ctx:

        def prefill():  # each sequence's depth, as llama-batched-bench's prompts (untimed here)
            for s in range(n_parallel):
                bench_prompt(ctx, n_depth, n_batch, rng, seq=s)

        def steps(n_steps: int) -> None:
            for i in range(n_steps):
                toks = rng.integers(0, ctx.n_vocab, size=n_parallel, dtype=np.int32)
                ctx.decode(toks, np.full(n_parallel, n_depth + i, dtype=np.int32), seqs, all_out)
                ctx.synchronize()

        ctx.clear()  # warm-up: one step of every sequence
        steps(1)
        samples = []
        for _ in range(repetitions):
            ctx.clear()
            prefill()
            t0 = time.perf_counter_ns()
            steps(n_gen)
            samples.append(time.perf_counter_ns() - t0)
        resolved = ctx.resolved
    total = [n_parallel * n_gen * 1e9 / s for s in samples]
    ts = [x / n_parallel for x in total]
    mean = sum(ts) / len(ts)
    sd = math.sqrt(sum((x - mean) ** 2 for x in ts) / (len(ts) - 1)) if len(ts) > 1 else float("nan")
    return {"n_prompt": 0, "n_gen": n_gen, "n_depth": n_depth, "n_parallel": n_parallel, "repetitions": repetitions,
            "tokens_per_s": ts, "batch_tokens_per_s": total, "mean_tokens_per_s": mean, "sd_tokens_per_s": sd,
            "samples_ns": samples,
            "engine": {k: resolved[k] for k in ("n_threads", "type_k", "type_v", "flash_attn", "n_batch", "n_ubatch",
                                                "n_gpu_layers", "n_seq_max")}}


def test_key(kind: str, depth: int = 0, parallel: int = 1) -> str:
    """A test's key in :func:`measure`'s result: ``pp``/``tg``, ``pp@d4096``/``tg@d4096`` at a depth, and
    ``tg@d4096x8`` at 8 sequences together."""
    return kind + (f"@d{depth}" if depth or parallel > 1 else "") + (f"x{parallel}" if parallel > 1 else "")


def measure(model_path: str, *, n_prompt: int = 512, n_gen: int = 128, repetitions: int = 5,
            depths: tuple[int, ...] | list[int] = (), parallel: tuple[int, ...] | list[int] = (), **kw) -> dict:
    """pp and tg from an empty cache, then at each of ``depths`` (llama-bench ``-d``), then tg at each of
    ``parallel`` sequences together at every one of those depths (llama-batched-bench), in that order."""
    out = {}
    levels = (0, *[int(d) for d in depths if int(d) > 0])
    for depth in levels:
        if n_prompt:
            out[test_key("pp", depth)] = run_test(model_path, n_prompt=n_prompt, n_gen=0, repetitions=repetitions,
                                                  n_depth=depth, **kw)
        if n_gen:
            out[test_key("tg", depth)] = run_test(model_path, n_prompt=0, n_gen=n_gen, repetitions=repetitions,
                                                  n_depth=depth, **kw)
    for b in (int(x) for x in parallel if int(x) > 1):
        for depth in levels:
            if n_gen:
                out[test_key("tg", depth, b)] = run_parallel(model_path, n_gen=n_gen, n_parallel=b,
                                                             repetitions=repetitions, n_depth=depth, **kw)
    return out


def metric_rows(result: dict) -> list[dict]:
    """Rows: pp{N}/tg{N} tokens/s, mean with the sd over repetitions in `stderr` (as llama-bench prints),
    n_ctx the tokens the test's context held at its end; at a depth D, ``..._at_depth`` with subset
    ``ppN@dD`` / ``tgN@dD``."""
    rows = []
    for key, r in result.items():
        kind = key.split("@")[0]
        n = r["n_prompt"] or r["n_gen"]
        depth, par = int(r["n_depth"]), int(r["n_parallel"])
        metric = f"{kind}_tokens_per_s" + ("_parallel" if par > 1 else "_at_depth" if depth else "")
        rows.append(row(metric, r["mean_tokens_per_s"], unit="tokens/s", stderr=r["sd_tokens_per_s"],
                        n=r["repetitions"], subset=f"{kind}{n}" + key[len(kind):],
                        n_ctx=depth + r["n_prompt"] + r["n_gen"], n_parallel=par if par > 1 else None))
    return rows
