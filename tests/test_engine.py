"""The engine's generation side on the real SmolLM2-135M rungs: continuous batching, a fixed
schedule, no implicit prompt cache, stop strings and budgets, the chat template, the KV-cache size.

Budgets are small (a few dozen tokens) so every test takes seconds on two cores.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from quantladder.engine import Engine, EngineSettings, Generation, RawContext, Request, padded_ctx
from quantladder.errors import ConfigError, ModelFileError, QuantladderError
from quantladder.kv_policy import default_n_parallel, kv_cache_bytes
from quantladder.gguf_meta import read_info

from pipeline_util import kill_after_first_record

QUESTIONS = [
    "Write a haiku about rivers.", "What is 2+2?", "Name three colors.", "Tell me a joke.",
    "Explain gravity briefly.", "Say hi.", "List two fruits.", "Why is the sky blue?",
]


def _settings(**kw) -> EngineSettings:
    return EngineSettings(**{"n_ctx": 256, "n_threads": 1, **kw})


def _prompt(eng: Engine, question: str) -> tuple[int, ...]:
    p = eng.chat_prompt([{"role": "user", "content": question}])
    return tuple(eng.tokenize(p, add_bos=not eng.starts_with_bos(p)))


def _one(req: Request):
    return (yield req)


def _wave(eng: Engine, requests: list[Request], steps: list | None = None) -> list[Generation]:
    out: dict[int, Generation] = {}
    on_step = (lambda a, b: steps.append((a, b))) if steps is not None else None
    eng.run([_one(r) for r in requests], out.__setitem__, on_step)
    assert sorted(out) == list(range(len(requests)))
    return [out[i] for i in range(len(requests))]


def _same(a: Generation, b: Generation) -> bool:
    return (a.text, a.tokens, a.finish_reason, a.n_prompt_tokens) == (b.text, b.tokens, b.finish_reason, b.n_prompt_tokens)


def _memory_empty(eng: Engine) -> bool:
    mem = eng.lc.llama_get_memory(eng.ctx)
    return all(eng.lc.llama_memory_seq_pos_max(mem, s) == -1 for s in range(eng.n_parallel))


@pytest.fixture(scope="module")
def requests_q4(smollm_q4km):
    with Engine(str(smollm_q4km), _settings()) as eng:
        # budgets differ so that sequences end at different steps and slots free mid-wave
        return [Request(_prompt(eng, q), 12 + 5 * (i % 4)) for i, q in enumerate(QUESTIONS)]


# -- no implicit prompt cache; the n_parallel = 1 reply is the item's own ----------------------

def test_a_reply_does_not_depend_on_what_ran_before(smollm_q4km, requests_q4):
    """create_completion reused the KV prefix the previous call left (the chat template's system
    turn is shared by every prompt); now the state is empty after each call and the reply of an
    item is the same first in a fresh engine, after other items, and in a larger or smaller list."""
    target = requests_q4[3]
    with Engine(str(smollm_q4km), _settings()) as eng:
        first = _wave(eng, [target])[0]
        assert _memory_empty(eng)
    with Engine(str(smollm_q4km), _settings()) as eng:
        for r in requests_q4[:3]:  # other items first, sharing the system-prompt prefix
            eng.generate(list(r.prompt), r.max_tokens)
        after = eng.generate(list(target.prompt), target.max_tokens)
        assert _memory_empty(eng)
        larger = _wave(eng, requests_q4[:6])[3]
        smaller = _wave(eng, requests_q4[3:5])[0]
    assert first.n_gen_tokens > 0
    assert _same(first, after) and _same(first, larger) and _same(first, smaller)


def test_generate_takes_text_or_tokens_and_reports_the_prompt(smollm_q4km):
    with Engine(str(smollm_q4km), _settings()) as eng:
        text = eng.chat_prompt([{"role": "user", "content": "Say hi."}])
        toks = eng.tokenize(text, add_bos=not eng.starts_with_bos(text))
        a = eng.generate(text, 8)
        b = eng.generate(toks, 8)
    assert _same(a, b) and a.n_prompt_tokens == len(toks)
    assert a.text == eng.detokenize(a.tokens) or a.finish_reason == "stop"


# -- the schedule is a pure function of the drivers and the tokens ------------------------------

def test_same_wave_twice_is_byte_identical_and_memory_is_left_empty(smollm_q4km, requests_q4):
    steps1: list = []
    with Engine(str(smollm_q4km), _settings(n_parallel=4)) as eng:
        a = _wave(eng, requests_q4, steps1)
        assert _memory_empty(eng)
        b = _wave(eng, requests_q4)
    with Engine(str(smollm_q4km), _settings(n_parallel=4)) as eng:  # a new process's engine
        c = _wave(eng, requests_q4)
    assert all(_same(x, y) and _same(x, z) for x, y, z in zip(a, b, c))
    # every decode reported: prompt tokens and generated tokens add up to the replies
    assert sum(p for p, _ in steps1) == sum(g.n_prompt_tokens for g in a)
    assert sum(n for _, n in steps1) == sum(g.n_gen_tokens for g in a)
    assert all(g.n_gen_tokens == len(g.tokens) <= r.max_tokens for g, r in zip(a, requests_q4))


def _logged_logits(eng: Engine) -> list[bytes]:
    """Every logits row the engine reads from here on, as bytes."""
    seen: list[bytes] = []
    read = eng._logits

    def logged(n):
        rows = read(n)
        seen.extend(np.asarray(rows[i]).tobytes() for i in range(n))
        return rows

    eng._logits = logged
    return seen


def test_a_sequence_alone_in_a_batched_context_matches_n_parallel_1(smollm_q4km, requests_q4):
    """Split KV streams: a sequence's cells start at cell 0 of its own stream whatever slot it holds,
    its prompt goes in the same chunks, and every step decodes its one row: with no batch mates it is
    the n_parallel = 1 computation, every logits row bit for bit (what lets the noise series leave
    such an item out, quantladder.generation.alone_at_both). The prompt spans three chunks."""
    r = requests_q4[0]
    prompt = ([t for q in requests_q4[1:] for t in q.prompt] * 8)[:1100] + list(r.prompt)
    runs = []
    for n_par in (1, 3, 8):
        with Engine(str(smollm_q4km), _settings(n_ctx=1280, n_batch=512, n_parallel=n_par)) as eng:
            rows = _logged_logits(eng)
            runs.append((eng.generate(prompt, 24), rows))
    (single, rows1), *others = runs
    assert single.n_prompt_tokens > 1024 and len(rows1) >= 2
    for alone, rows in others:
        assert _same(single, alone)
        assert rows == rows1


def _argmax_margins(model: Path, gens: list[Generation], requests: list[Request]) -> list[float]:
    """Teacher-force each reply through a single-stream RawContext: how far below the row's maximum
    the chosen token's logit lies, for every generated token."""
    out = []
    with RawContext(str(model), n_ctx=512, n_batch=512, n_threads=1) as ctx:
        for g, r in zip(gens, requests):
            seq = np.array(list(r.prompt) + list(g.tokens), dtype=np.int32)
            n, p = len(seq), len(r.prompt)
            ctx.clear()
            mask = np.zeros(n, dtype=np.int8)
            mask[p - 1:p - 1 + len(g.tokens)] = 1  # the rows that chose each generated token
            rows = ctx.decode(seq, np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.int32), mask)
            logits = ctx.logits(rows)
            for j, t in enumerate(g.tokens):
                out.append(float(logits[j].max() - logits[j][t]))
    return out


def test_batched_tokens_are_the_greedy_choice_of_their_own_sequence(smollm_q4km, requests_q4):
    """Batching (8 drivers over 3 slots: admissions mid-wave, the tail moved into low slots) keeps
    every sequence its own: teacher-forced through a single-stream pass, its tokens are that pass's
    argmax up to the kernels' rounding (a whole-prompt pass rounds differently from token-by-token
    decoding), while the same tokens scored under another item's prompt miss half the time."""
    with Engine(str(smollm_q4km), _settings(n_parallel=3)) as eng:
        gens = _wave(eng, requests_q4)
        assert eng.last_run["moves"] >= 1 and eng.last_run["gen_steps"] > 0
    own = np.array(_argmax_margins(smollm_q4km, gens, requests_q4))
    other = np.array(_argmax_margins(smollm_q4km, gens, requests_q4[1:] + requests_q4[:1]))
    assert own.size == sum(g.n_gen_tokens for g in gens) > 50
    assert (own == 0).mean() >= 0.9 and own.max() < 1.0, sorted(own)[-5:]
    assert (other == 0).mean() < 0.8 and other.max() > 5.0


def test_n_parallel_1_equals_create_completion_on_a_fresh_llama(smollm_q8):
    """The engine's single-stream path gives what llama-cpp-python's create_completion gives on a
    fresh Llama (greedy, same context, threads and batch): the same tokens, the same text."""
    import llama_cpp

    with Engine(str(smollm_q8), _settings()) as eng:
        prompts = [list(_prompt(eng, q)) for q in QUESTIONS[:3]]
        ours = [eng.generate(p, 24) for p in prompts]
    for p, g in zip(prompts, ours):
        llm = llama_cpp.Llama(model_path=str(smollm_q8), n_ctx=256, n_batch=256, n_threads=1, n_threads_batch=1,
                              flash_attn=False, verbose=False)
        try:
            out = llm.create_completion(prompt=p, max_tokens=24, temperature=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                        repeat_penalty=1.0, seed=0)
        finally:
            llm.close()
        assert g.text == out["choices"][0]["text"]
        assert g.n_gen_tokens == out["usage"]["completion_tokens"]
        assert g.finish_reason == out["choices"][0]["finish_reason"]


def test_multi_turn_driver_gets_a_fresh_sequence_per_request(smollm_q4km, requests_q4):
    """A driver's second request starts from an empty sequence (no prefix of its first turn is
    reused), and drivers finish in the order the schedule ends them."""
    with Engine(str(smollm_q4km), _settings()) as eng:
        follow = tuple(eng.tokenize(eng.chat_prompt([{"role": "user", "content": "And then?"}]), add_bos=False))

        def two_turns(req):
            g1 = yield req
            g2 = yield Request(req.prompt + tuple(g1.tokens) + follow, 10)
            return {"first": g1, "second": g2}

        recs: dict[int, dict] = {}
        order: list[int] = []
        eng.run([two_turns(r) for r in requests_q4[:3]], lambda i, rec: (order.append(i), recs.__setitem__(i, rec)))
        assert _memory_empty(eng)
        for i, r in enumerate(requests_q4[:3]):
            second = recs[i]["second"]
            alone = eng.generate(list(r.prompt) + list(recs[i]["first"].tokens) + list(follow), 10)
            assert _same(second, alone)
    assert order == [0, 1, 2]  # at n_parallel = 1 each driver runs to its end before the next


def test_a_continued_request_keeps_its_own_cells_and_decodes_only_the_rest(smollm_q4km, requests_q4):
    """Request.continues (a multi-turn item's next step): the sequence keeps the cells of the
    previous prompt and reply that the new prompt starts with, and only the rest is decoded. Exact
    check: a previous request of budget 1 leaves its prompt's cells decoded as one chunk, so the
    continued request decodes the same chunks as a fresh one whose prefix is that prompt, and the
    replies are byte-identical; a prompt that shares nothing keeps nothing; at n_parallel = 1 a
    continued driver's replies do not depend on the driver before it; batched runs repeat exactly."""
    with Engine(str(smollm_q4km), _settings()) as eng:
        follow = tuple(eng.tokenize(eng.chat_prompt([{"role": "user", "content": "And then?"}]), add_bos=False))

        def stepwise(req, budget1=1):
            g1 = yield Request(req.prompt, budget1)
            g2 = yield Request(req.prompt + tuple(g1.tokens) + follow, 10, continues=True)
            g3 = yield Request(requests_q4[-1].prompt, 6, continues=True)  # another question
            return (g1, g2, g3)

        recs: dict[int, tuple] = {}
        eng.run([stepwise(r) for r in requests_q4[:3]], recs.__setitem__)
        assert _memory_empty(eng)
        kept = eng.last_run["kept_tokens"]
        sys_turn = next(i for i, (a, b) in enumerate(zip(requests_q4[0].prompt, requests_q4[-1].prompt)) if a != b)
        for i, r in enumerate(requests_q4[:3]):
            g1, g2, g3 = recs[i]
            assert len(g1.tokens) == 1 and g1.finish_reason == "length"
            second = r.prompt + tuple(g1.tokens) + follow
            # the same chunks decoded fresh: an engine whose n_batch is that first prompt's length
            with Engine(str(smollm_q4km), _settings(n_batch=len(r.prompt))) as chunked:
                assert _same(g2, chunked.generate(list(second), 10))
            assert g2.n_prompt_tokens == len(second) and g2.n_kept_tokens == len(r.prompt)
            assert g1.n_kept_tokens == 0 and g3.n_kept_tokens == sys_turn
        # kept per driver: its first prompt (the reply's one token was never decoded), then the
        # system turn shared with the other question (the rest of the conversation is dropped)
        assert kept == sum(len(r.prompt) + sys_turn for r in requests_q4[:3])

        def fresh_then(req):
            yield Request(requests_q4[4].prompt, 7)
            return None

        alone: dict[int, tuple] = {}
        eng.run([stepwise(requests_q4[1], 9)], alone.__setitem__)
        after: dict[int, tuple] = {}
        eng.run([fresh_then(None), stepwise(requests_q4[1], 9)], after.__setitem__)
        assert all(_same(a, b) for a, b in zip(alone[0], after[1]))
    runs = []
    for _ in range(2):
        with Engine(str(smollm_q4km), _settings(n_parallel=3)) as eng:
            out: dict[int, tuple] = {}
            eng.run([stepwise(r, 5 + i) for i, r in enumerate(requests_q4[:5])], out.__setitem__)
            assert _memory_empty(eng) and eng.last_run["kept_tokens"] > 0
            runs.append([out[i] for i in range(5)])
    assert all(_same(a, b) for x, y in zip(*runs) for a, b in zip(x, y))


def test_a_wave_restarted_in_a_new_process_after_sigkill_reproduces_it(smollm_q4km, requests_q4, tmp_path):
    """Resume at the engine level: a process generating a wave is killed (SIGKILL) after its first
    reply was written; a new process generating the same wave again gives every reply of an
    uninterrupted run, byte for byte (what the generation loop relies on to redo a cut wave)."""
    reqs = [{"prompt": list(r.prompt), "max_tokens": r.max_tokens} for r in requests_q4[:6]]
    (tmp_path / "wave.json").write_text(json.dumps(reqs))
    script = textwrap.dedent(f"""
        import json, os, sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "workflow")!r})
        from quantladder.engine import Engine, EngineSettings, Request
        reqs = json.load(open(sys.argv[1]))
        out = open(sys.argv[2], "a")
        def one(r):
            return (yield Request(tuple(r["prompt"]), r["max_tokens"]))
        def done(i, g):
            out.write(json.dumps({{"i": i, "text": g.text, "tokens": list(g.tokens)}}) + "\\n")
            out.flush(); os.fsync(out.fileno())
            if sys.argv[3] == "slow":
                time.sleep(30)  # long enough to be killed with the rest of the wave in flight
        with Engine({str(smollm_q4km)!r}, EngineSettings(n_ctx=256, n_threads=1, n_parallel=3)) as eng:
            eng.run([one(r) for r in reqs], done)
    """)
    (tmp_path / "gen.py").write_text(script)

    def records(path):
        return {r["i"]: r for r in map(json.loads, path.read_text().splitlines())} if path.exists() else {}

    full = tmp_path / "full.jsonl"
    subprocess.run([sys.executable, str(tmp_path / "gen.py"), str(tmp_path / "wave.json"), str(full), "fast"],
                   check=True, timeout=300)
    cut = tmp_path / "cut.jsonl"
    kill_after_first_record([sys.executable, str(tmp_path / "gen.py"), str(tmp_path / "wave.json"), str(cut), "slow"],
                            lambda: records(cut), wait_s=240)
    before = records(cut)
    assert 1 <= len(before) < len(reqs)
    redo = tmp_path / "redo.jsonl"
    subprocess.run([sys.executable, str(tmp_path / "gen.py"), str(tmp_path / "wave.json"), str(redo), "fast"],
                   check=True, timeout=300)
    want, got = records(full), records(redo)
    assert sorted(want) == sorted(got) == list(range(len(reqs)))
    assert all(want[i] == got[i] for i in want)
    assert all(before[i] == want[i] for i in before)  # what the killed run saved was already right


# -- stop strings, budgets, the context's room ------------------------------------------------

def test_stop_string_cuts_the_reply_before_it(smollm_q8):
    with Engine(str(smollm_q8), _settings()) as eng:
        prompt = _prompt(eng, "Explain gravity briefly.")
        free = eng.generate(list(prompt), 40)
        assert free.finish_reason == "length" and len(free.text) > 40
        pieces = [eng._piece(t) for t in free.tokens]
        # a stop string that spans two pieces, so the search must look back across the boundary
        j = next(i for i in range(3, len(pieces) - 1) if len(pieces[i]) >= 2 and len(pieces[i + 1]) >= 2)
        stop = (pieces[j][-2:] + pieces[j + 1][:2]).decode()
        cut = free.text.index(stop)
        m = next(m for m in range(1, len(pieces) + 1) if stop.encode() in b"".join(pieces[:m]))
        g = eng.generate(list(prompt), 40, stop=("never-appears", stop))
    assert g.finish_reason == "stop" and g.text == free.text[:cut]
    assert g.tokens == free.tokens[:m]  # the token completing the stop string is counted


def test_utf8_split_across_pieces(smollm_q8):
    """Japanese comes out of SmolLM2 as byte pieces: the reply is decoded from the joined bytes, a
    stop string made of multi-byte characters matches across pieces, and a budget that ends inside
    a character drops the incomplete character (never a replacement character)."""
    with Engine(str(smollm_q8), _settings()) as eng:
        prompt = _prompt(eng, "Write the Japanese word for thank you.")
        free = eng.generate(list(prompt), 24)
        pieces = [eng._piece(t) for t in free.tokens]
        partial = []
        for i, p in enumerate(pieces):
            try:
                p.decode("utf-8")
            except UnicodeDecodeError:
                partial.append(i)
        assert partial, f"the reply has no split characters to test: {free.text!r}"
        assert free.text == b"".join(pieces).decode("utf-8", errors="ignore") and "\ufffd" not in free.text
        assert any(ord(c) > 0x3000 for c in free.text)
        # a budget that ends inside a character
        k = next(k for k in range(1, len(pieces)) if _incomplete(b"".join(pieces[:k])))
        short = eng.generate(list(prompt), k)
        assert short.finish_reason == "length" and short.n_gen_tokens == k
        assert short.text == b"".join(pieces[:k]).decode("utf-8", errors="ignore") and "\ufffd" not in short.text
        assert free.text.startswith(short.text)
        # a stop string of two multi-byte characters from the middle of the reply
        chars = [i for i, c in enumerate(free.text) if ord(c) > 0x3000]
        at = chars[len(chars) // 2]
        stop = free.text[at:at + 2]
        g = eng.generate(list(prompt), 24, stop=(stop,))
    assert g.finish_reason == "stop" and g.text == free.text[:free.text.index(stop)]


def _incomplete(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError as e:
        return e.start >= len(b) - 3 and e.reason == "unexpected end of data"


def test_budget_room_and_prompts_that_do_not_fit(smollm_q4km, requests_q4):
    with Engine(str(smollm_q4km), _settings(n_ctx=64, n_parallel=2)) as eng:
        fits = Request(requests_q4[0].prompt[:40], 5)
        tight = Request((requests_q4[1].prompt * 2)[:60], 50)  # 4 tokens of room left
        too_long = Request(tuple(requests_q4[2].prompt) * 3, 10)  # 3 × > 30 tokens > 64
        at_limit = Request(requests_q4[3].prompt[:1] * 64, 10)  # exactly n_ctx: no room
        nothing = Request(requests_q4[4].prompt[:10], 0)
        gens = _wave(eng, [fits, too_long, tight, at_limit, nothing])
        assert _memory_empty(eng)
    g_fit, g_long, g_tight, g_limit, g_none = gens
    assert g_fit.n_gen_tokens <= 5 and (g_fit.n_gen_tokens == 5) == (g_fit.finish_reason == "length")
    assert g_tight.n_gen_tokens <= 4 and g_tight.finish_reason in ("length", "stop")
    for g, n in ((g_long, len(too_long.prompt)), (g_limit, 64)):
        assert (g.finish_reason, g.text, g.n_gen_tokens, g.tokens, g.n_prompt_tokens) == ("prompt_too_long", "", 0, (), n)
    assert (g_none.finish_reason, g_none.n_gen_tokens) == ("length", 0)


def test_bad_requests_and_settings_are_named(smollm_q4km):
    with Engine(str(smollm_q4km), _settings()) as eng:
        with pytest.raises(ValueError, match="non-empty"):
            eng.generate([], 4)
        with pytest.raises(ValueError, match=r"token ids must be in \[0, 49152\)"):
            eng.generate([1, 10 ** 7], 4)
        assert _memory_empty(eng)
        assert eng.generate("Hello", 3).n_gen_tokens <= 3  # the engine still works
    with pytest.raises(ConfigError, match="n_parallel"):
        EngineSettings(n_parallel=0).resolved()


@pytest.mark.parametrize("kind", ["not_gguf", "cut"])
def test_a_model_llama_cpp_cannot_load_is_one_line_naming_the_file_and_the_reason(smollm_q8, tmp_path, kind):
    """A rule script reports a QuantladderError as one line (scriptutil.main), not a traceback: the
    file, and the reason llama.cpp gave (it only logs it), for both of the engine's entry points."""
    if kind == "not_gguf":
        bad = tmp_path / "model.gguf"
        bad.write_bytes(b"<html>404 Not Found</html>\n" * 100)  # what a failed download leaves
        reason = r"invalid magic characters: .*expected 'GGUF'"
    else:
        bad = tmp_path / "cut.gguf"
        bad.write_bytes(Path(smollm_q8).read_bytes()[:3_000_000])  # a copy cut short
        reason = r"data is not within the file bounds, model is corrupted or incomplete"
    for open_model in (lambda: Engine(str(bad), _settings()),
                       lambda: RawContext(str(bad), n_ctx=256, n_batch=256, n_threads=1)):
        with pytest.raises(ModelFileError, match=rf"^{re.escape(str(bad))}: llama.cpp could not load the model: .*{reason}") as e:
            open_model()
        assert isinstance(e.value, QuantladderError) and "\n" not in str(e.value)
    with Engine(str(smollm_q8), _settings()) as eng:  # llama.cpp's log is handed back: a good file still loads
        assert eng.generate("Hello", 2).n_gen_tokens <= 2


# -- tokens and the chat template, as llama-cpp-python renders them --------------------------

def test_tokens_and_chat_prompt_match_llama_cpp_python(smollm_q8):
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    llm = llama_cpp.Llama(model_path=str(smollm_q8), vocab_only=True, verbose=False)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|> there, café"}]
    try:
        with Engine(str(smollm_q8), _settings()) as eng:
            for text in ("Hello world", "<|im_start|>user\nx<|im_end|>", " leading space ☃"):
                for add_bos in (True, False):
                    for special in (True, False):
                        assert eng.tokenize(text, add_bos, special) == llm.tokenize(text.encode(), add_bos, special)
                toks = llm.tokenize(text.encode(), True, True)
                assert eng.detokenize(toks) == llm.detokenize(toks).decode("utf-8", errors="replace")
            bos = llm.detokenize([llm.token_bos()]).decode(errors="replace")
            eos = llm.detokenize([llm.token_eos()]).decode(errors="replace")
            tmpl = llm.metadata["tokenizer.chat_template"]
            assert eng.chat_template == tmpl
            for agp in (True, False):  # both forms, in either order (each is its own formatter)
                want = Jinja2ChatFormatter(template=tmpl, bos_token=bos, eos_token=eos,
                                           add_generation_prompt=agp)(messages=msgs).prompt
                assert eng.chat_prompt(msgs, add_generation_prompt=agp) == want
            assert eng.chat_prompt(msgs).endswith("<|im_start|>assistant\n")
            assert not eng.chat_prompt(msgs, add_generation_prompt=False).endswith("assistant\n")
            assert eng.n_ctx_train == read_info(smollm_q8).n_ctx_train > 0
    finally:
        llm.close()


# -- memory: the KV cache predicted exactly, n_parallel chosen from it -------------------------

_KV_SIZE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\)")


@pytest.mark.parametrize("n_ctx,n_parallel,kv,cache", [(300, 1, "f16", False), (300, 3, "f16", False),
                                                         (1024, 2, "q8_0", True), (512, 4, "q8_0-q4_0", False)])
def test_kv_cache_bytes_is_what_llama_cpp_allocates(smollm_q8, n_ctx, n_parallel, kv, cache):
    from quantladder.measures.memory import LlamaLog

    info = read_info(smollm_q8)
    with LlamaLog() as lg:
        eng = Engine(str(smollm_q8), EngineSettings(n_ctx=n_ctx, n_parallel=n_parallel, kv=kv, n_threads=1,
                                                    prefix_cache=cache), verbose=True)
    try:
        assert eng.resolved["n_ctx_seq"] == padded_ctx(n_ctx) >= n_ctx
        assert eng.n_ctx == n_ctx and eng.n_parallel == n_parallel
    finally:
        eng.close()
    m = _KV_SIZE.search("".join(lg.lines))
    assert m, "llama.cpp did not log its KV-cache size"
    mib, cells, layers, seqs = float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(5))
    assert (cells, layers, seqs) == (padded_ctx(n_ctx), info.n_layer, n_parallel)  # the cache costs no stream
    assert abs(kv_cache_bytes(info, n_ctx, n_parallel, kv) / 2 ** 20 - mib) <= 0.005  # printed to 2 decimals


def test_default_n_parallel_reads_only_the_architecture(smollm_q8, smollm_q4km):
    a, b = read_info(smollm_q8), read_info(smollm_q4km)
    assert a.file_bytes != b.file_bytes
    per_seq = kv_cache_bytes(a, 4096)
    for budget in (0, per_seq - 1, per_seq, 3 * per_seq, 8 * per_seq, 100 * per_seq):
        n = default_n_parallel(a, 4096, budget)
        assert n == default_n_parallel(b, 4096, budget)  # every rung of the family alike
        assert n == 1 or kv_cache_bytes(a, 4096, n) <= budget
        nxt = {1: 2, 2: 4, 4: 8, 8: 16}.get(n)
        assert nxt is None or kv_cache_bytes(a, 4096, nxt) > budget or budget < per_seq
    assert [default_n_parallel(a, 4096, k * per_seq) for k in (1, 3, 8, 100)] == [1, 2, 8, 16]
    # a longer context gets fewer sequences for the same budget
    assert default_n_parallel(a, 32768, 8 * per_seq) == 1 < default_n_parallel(a, 4096, 8 * per_seq)


# -- the prefix cache: whole prompt chunks, exact -----------------------------------------------

def _haystack_prompts(eng: Engine) -> list[tuple[int, ...]]:
    """RULER-like prompts: one long text with a short needle at different depths (so they share
    prefixes that end inside a chunk, across chunks, or not at all), one prompt twice, one other."""
    words = ("The quick brown fox jumps over the lazy dog while the river runs past the old mill "
             "and the miller counts his sacks of grain one by one before the evening bell rings. ").split()
    text = [f"{w}{i % 7}" if i % 11 == 0 else w for i, w in enumerate(words * 8)]
    out = []
    for depth in (0.9, 0.35, 0.6, 0.9, 0.05):
        cut = int(len(text) * depth)
        body = " ".join(text[:cut] + ["The special magic number is 4817."] + text[cut:])
        out.append(_prompt(eng, body + "\nWhat is the special magic number?"))
    return out + [_prompt(eng, QUESTIONS[0])]


def _lcp(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_the_prefix_cache_takes_whole_chunks_and_changes_no_reply(smollm_q4km):
    """With prefix_cache a prompt takes the cells of its leading whole n_batch chunks from any stream
    that decoded the same tokens: the replies, and the last prompt token's logits bit for bit, are
    those of the cache off, at n_parallel 1 and 3, within a run and across runs (the cells outlive a
    run), in any order; the counters say how many prompt tokens were not decoded."""
    import numpy as np

    nb = 64
    kw = {"n_ctx": 448, "n_batch": nb}
    with Engine(str(smollm_q4km), _settings(**kw)) as eng:
        prompts = _haystack_prompts(eng)
        assert min(map(len, prompts[:5])) > 4 * nb  # several chunks each
        reqs = [Request(p, 8) for p in prompts]
        ref = _wave(eng, reqs)  # cache off: every prompt decoded from an empty sequence
        ref_logits = []
        for p in prompts:  # the last prompt token's logits of a fresh decode
            eng.generate(list(p), 1)
            ref_logits.append(np.array(eng._logits(1)[0]))
        assert eng.last_run["cached_tokens"] == 0 and _memory_empty(eng)

    # what the cache can take at n_parallel = 1, item after item: the whole chunks each prompt
    # shares with the one before it (the same prompt twice: all but its last, partial chunk)
    def expected(order):
        held, total = (), 0
        for i in order:
            p = prompts[i]
            total += min(_lcp(held, p), len(p) - 1) // nb * nb
            held = p[:len(p) // nb * nb]
        return total

    for n_par in (1, 3):
        with Engine(str(smollm_q4km), _settings(prefix_cache=True, n_parallel=n_par, **kw)) as eng:
            got = _wave(eng, reqs)
            assert all(_same(a, b) for a, b in zip(got, ref))
            stats = dict(eng.last_run)
            assert stats["cached_tokens"] == sum(g.n_cached_tokens for g in got) > 0
            assert all(g.n_cached_tokens % nb == 0 and g.n_cached_tokens < g.n_prompt_tokens for g in got)
            if n_par == 1:
                assert stats["cached_tokens"] == expected(range(len(prompts))) and stats["cache_copies"] == 0
            else:  # batch mates' streams are sources too: copied whole, then cut to the chunks
                assert stats["cache_copies"] > 0
            # only whole chunks of prompts stay behind: every stream holds a multiple of n_batch cells
            mem = eng.lc.llama_get_memory(eng.ctx)
            assert all((eng.lc.llama_memory_seq_pos_max(mem, k) + 1) % nb == 0 for k in range(n_par))
            # across runs, one item at a time, in another order: the cells a run left are used
            across = 0
            for i in (3, 0, 4, 1, 5, 2):
                g = _wave(eng, [Request(prompts[i], 1)])[0]
                assert g.tokens == ref[i].tokens[:1]
                assert np.array_equal(np.array(eng._logits(1)[0]), ref_logits[i])  # bit for bit
                assert eng.last_run["cached_tokens"] == g.n_cached_tokens
                across += g.n_cached_tokens
            assert across > 0

    # a continued request (kept cells) and the cache together: still the replies of the cache off
    def stepwise(p):
        g1 = yield Request(p, 3)
        g2 = yield Request(p + tuple(g1.tokens), 5, continues=True)
        g3 = yield Request(prompts[0], 4, continues=True)
        return (g1, g2, g3)

    runs = []
    for cache in (False, True):
        with Engine(str(smollm_q4km), _settings(prefix_cache=cache, n_parallel=2, **kw)) as eng:
            out: dict[int, tuple] = {}
            eng.run([stepwise(p) for p in prompts[:4]], out.__setitem__)
            runs.append([out[i] for i in range(4)])
            assert (eng.last_run["cached_tokens"] > 0) == cache
    assert all(_same(a, b) for x, y in zip(*runs) for a, b in zip(x, y))
