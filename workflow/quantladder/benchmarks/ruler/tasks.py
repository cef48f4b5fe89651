"""RULER's task definitions and one generator per task kind.

Sources (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
Models?", github.com/NVIDIA/RULER):
- the 13 task configurations: ``scripts/synthetic.yaml``;
- templates, answer prefixes and tokens to generate: ``scripts/data/synthetic/constants.py``;
- the generators: ``scripts/data/synthetic/{niah,variable_tracking,common_words_extraction,
  freq_words_extraction,qa}.py``;
- the metrics: ``scripts/eval/synthetic/constants.py`` (string_match_all / string_match_part).

The template and answer-prefix strings are RULER's own (they are the benchmark's prompts, so they
stay verbatim, typo "assgined" included); the code that fills them is this project's.

A generator is ``make(spec, size, rng, env) -> Instance``: ``size`` is the haystack size in the
task's own unit (noise blocks, essay words, distractor needles, noise lines, unique words, total
words, documents) and grows the prompt monotonically, so the fitting search in ``build`` can
bisect on it. Everything random comes from ``rng``, so (seed, size) fixes the instance.
"""

from __future__ import annotations

import math
import string
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ...errors import ConfigError, DataError
from .haystack import NOISE, split_sentences

NIAH_TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
)
NIAH_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."

VT_TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above."
)
VT_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
    "assgined the value {query}, they are: "
)
CWE_TEMPLATE = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\n"
    "Question: What are the 10 most common words in the above list?"
)
CWE_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
FWE_TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most "
    "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore "
    "the dots '....'. What are the three most frequently appeared words in the above coded text?"
)
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
QA_TEMPLATE = (
    "Answer the question based on the given documents. Only give me the answer and do not output any "
    "other words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the question based on the "
    "given documents. Only give me the answer and do not output any other words.\n\nQuestion: {query}"
)
QA_PREFIX = " Answer:"

# niah.py: needles go to depths drawn from 40 evenly spaced percentages.
DEPTHS = [int(round(100 * i / 39)) for i in range(40)]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str  # niah | vt | cwe | fwe | qa
    args: dict
    tokens_to_generate: int
    metric: str  # string_match_all | string_match_part
    min_size: int = 1


def _niah(name, haystack, k_type, v_type, k=1, v=1, q=1):
    return TaskSpec(name, "niah", {"type_haystack": haystack, "type_needle_k": k_type, "type_needle_v": v_type,
                                   "num_needle_k": k, "num_needle_v": v, "num_needle_q": q}, 128, "string_match_all")


# scripts/synthetic.yaml (the 13 tasks RULER reports), with constants.py's tokens_to_generate.
TASKS: dict[str, TaskSpec] = {t.name: t for t in [
    _niah("niah_single_1", "repeat", "words", "numbers"),
    _niah("niah_single_2", "essay", "words", "numbers"),
    _niah("niah_single_3", "essay", "words", "uuids"),
    _niah("niah_multikey_1", "essay", "words", "numbers", k=4),
    _niah("niah_multikey_2", "needle", "words", "numbers"),
    _niah("niah_multikey_3", "needle", "uuids", "uuids"),
    _niah("niah_multivalue", "essay", "words", "numbers", v=4),
    _niah("niah_multiquery", "essay", "words", "numbers", q=4),
    TaskSpec("vt", "vt", {"num_chains": 1, "num_hops": 4}, 30, "string_match_all"),
    TaskSpec("cwe", "cwe", {"freq_cw": 30, "freq_ucw": 3, "num_cw": 10}, 120, "string_match_all", min_size=11),
    TaskSpec("fwe", "fwe", {"alpha": 2.0, "coded_wordlen": 6}, 50, "string_match_all", min_size=10),
    TaskSpec("qa_1", "qa", {"dataset": "squad"}, 32, "string_match_part"),
    TaskSpec("qa_2", "qa", {"dataset": "hotpotqa"}, 32, "string_match_part"),
]}
SYNTHETIC = [n for n, t in TASKS.items() if t.kind != "qa"]


def task(name: str) -> TaskSpec:
    if name not in TASKS:
        raise ConfigError(f"benchmarks.ruler.tasks: unknown task {name!r}; known: {list(TASKS)}")
    return TASKS[name]


@dataclass
class Instance:
    """One task instance before the model's prompt format is applied."""
    text: str  # the user message
    answer_prefix: str  # appended after the assistant tag
    answers: list[str]
    needles: list[dict] = field(default_factory=list)  # {"text", "offset" (into text), "depth_percent"}
    meta: dict = field(default_factory=dict)


@dataclass
class Env:
    """What the generators draw from: words, essay text, QA data, the target length, a raw token counter."""
    words: object  # haystack.WordLists
    essay: list[str] | None  # essay words
    length: int
    qa: dict | None = None  # dataset name -> QAData
    count_tokens: Callable[[str], int] | None = None  # raw text -> tokens (VT's one-shot example)


# -- random values (niah.py: 7-digit numbers, adjective-noun words, uuid4) --------------------------
def _random_value(kind: str, rng, env: Env) -> str:
    if kind == "numbers":
        return str(rng.randint(10 ** 6, 10 ** 7 - 1))
    if kind == "words":
        return env.words.key_word(rng)
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise ConfigError(f"ruler: unknown needle type {kind!r} (numbers, words, uuids)")


def _split_template(template: str, **fields) -> tuple[str, str]:
    """The template's text before and after {context}, other fields filled: needle offsets then
    follow from the head's length."""
    head, tail = template.split("{context}")
    return head.format(**fields), tail.format(**fields)


def _join_tracked(pieces: list[tuple[str, bool]], sep: str) -> tuple[str, list[int]]:
    """Join pieces with sep; return the text and the offsets of the pieces flagged as needles."""
    out, offsets, pos = [], [], 0
    for i, (piece, is_needle) in enumerate(pieces):
        if i:
            out.append(sep)
            pos += len(sep)
        if is_needle:
            offsets.append(pos)
        out.append(piece)
        pos += len(piece)
    return "".join(out), offsets


def make_niah(spec: TaskSpec, size: int, rng, env: Env) -> Instance:
    a = spec.args
    n_k = max(a["num_needle_k"], a["num_needle_q"])
    keys, values, needles = [], [], []
    for _ in range(n_k):
        keys.append(_random_value(a["type_needle_k"], rng, env))
        vals = [_random_value(a["type_needle_v"], rng, env) for _ in range(a["num_needle_v"])]
        values.append(vals)
        needles += [NEEDLE.format(type_needle_v=a["type_needle_v"], key=keys[-1], value=v) for v in vals]
    rng.shuffle(needles)

    if a["type_haystack"] == "essay":
        if not env.essay:
            raise DataError(f"ruler task {spec.name}: the essay haystack is empty")
        # A source shorter than the target length is cycled (RULER's essays are long enough not to).
        words = [env.essay[i % len(env.essay)] for i in range(size)]
        sents = split_sentences(" ".join(words))
        cuts = sorted(int(len(sents) * d / 100) for d in rng.sample(DEPTHS, len(needles)))
        bounds = [0] + cuts + [len(sents)]
        pieces: list[tuple[str, bool]] = []
        for i in range(1, len(bounds)):
            chunk = " ".join(sents[bounds[i - 1]:bounds[i]])
            if chunk:
                pieces.append((chunk, False))
            if i - 1 < len(needles):
                pieces.append((needles[i - 1], True))
        context, offs = _join_tracked(pieces, " ")
    else:
        if a["type_haystack"] == "repeat":
            lines = [NOISE] * size
        elif a["type_haystack"] == "needle":
            lines = [NEEDLE.format(type_needle_v=a["type_needle_v"], key=_random_value(a["type_needle_k"], rng, env),
                                   value=_random_value(a["type_needle_v"], rng, env)) for _ in range(size)]
        else:
            raise ConfigError(f"ruler task {spec.name}: unknown haystack {a['type_haystack']!r}")
        pieces = [(ln, False) for ln in lines]
        for idx, nd in zip(sorted(rng.sample(range(size), len(needles)), reverse=True), needles):
            pieces.insert(idx, (nd, True))
        context, offs = _join_tracked(pieces, "\n")
    needle_order = [p for p, is_n in pieces if is_n]

    picked = rng.sample(range(n_k), a["num_needle_q"])
    queries = [keys[i] for i in picked]
    answers = [v for i in picked for v in values[i]]
    query = queries[0] if len(queries) == 1 else ", ".join(queries[:-1]) + ", and " + queries[-1]

    template, prefix, type_v = NIAH_TEMPLATE, NIAH_PREFIX, a["type_needle_v"]
    if a["num_needle_q"] * a["num_needle_v"] == 1:
        # niah.py switches the wording to the singular when one value is asked for; it edits the
        # template with the answer prefix already appended, so both get the same replacements.
        def singular(s: str) -> str:
            return s.replace("Some", "A").replace("are all", "is").replace("are", "is").replace("answers", "answer")

        template, prefix, type_v = singular(template), singular(prefix), type_v[:-1]
    head, tail = _split_template(template, type_needle_v=type_v, query=query)
    text = head + context + tail
    return Instance(
        text=text, answer_prefix=prefix.format(type_needle_v=type_v, query=query), answers=answers,
        needles=[{"text": nd, "offset": len(head) + o, "depth_percent": round(100 * o / max(1, len(context)), 2)}
                 for nd, o in zip(needle_order, offs)],
        meta={"queries": queries, "size": size},
    )


def _vt_chains(rng, num_chains: int, num_hops: int, name_len: int):
    names: list[str] = []
    while len(names) < num_chains * (num_hops + 1):
        n = "".join(rng.choices(string.ascii_uppercase, k=name_len))
        if n not in names:
            names.append(n)
    chains, groups = [], []
    for c in range(num_chains):
        vs = names[c * (num_hops + 1):(c + 1) * (num_hops + 1)]
        groups.append(vs)
        # variable_tracking.py: a 5-digit value, then each hop binds the next name to the previous.
        chain = [f"VAR {vs[0]} = {rng.randint(10000, 99999)}"]
        chain += [f"VAR {vs[j + 1]} = VAR {vs[j]} " for j in range(num_hops)]
        chains.append(chain)
    return groups, chains


def _vt_text(rng, size: int, num_chains: int, num_hops: int, name_len: int):
    groups, chains = _vt_chains(rng, num_chains, num_hops, name_len)
    pieces: list[tuple[str, bool]] = [(NOISE + "\n", False)] * max(size, 1)
    for chain in chains:
        if len(pieces) >= len(chain):
            positions = sorted(rng.sample(range(len(pieces)), len(chain)))
        else:  # fewer noise lines than statements (the short one-shot example): positions may repeat
            positions = sorted(rng.choices(range(len(pieces) + 1), k=len(chain)))
        for j, (pos, stmt) in enumerate(zip(positions, chain)):
            pieces.insert(pos + j, (stmt, True))
    context, offs = _join_tracked(pieces, " ")
    value = chains[0][0].split("=")[-1].strip()
    head, tail = _split_template(VT_TEMPLATE, query=value)
    return head, context, tail, offs, pieces, groups[0], value


def make_vt(spec: TaskSpec, size: int, rng, env: Env) -> Instance:
    hops, n_chains = spec.args["num_hops"], spec.args["num_chains"]
    # RULER prepends a one-shot example (3-letter names, at most 10 hops) fitted to 500 tokens.
    icl_rng = type(rng)(rng.random())
    icl_state = icl_rng.getstate()

    def icl(n: int) -> str:
        icl_rng.setstate(icl_state)
        h, c, t, _, _, names, value = _vt_text(icl_rng, n, n_chains, min(10, hops), 3)
        shot = " ".join((h + c + t).split()) + VT_PREFIX.format(num_v=min(10, hops) + 1, query=value)
        return shot + " " + " ".join(names) + "\n\n"

    example = icl(1)
    if env.count_tokens is not None:
        n = 1
        while env.count_tokens(icl(n + 5)) <= 500:
            n += 5
        example = icl(n)
    head, context, tail, offs, pieces, names, value = _vt_text(rng, size, n_chains, hops, 5)
    lead = example + "\n\n"
    stmts = [p for p, is_n in pieces if is_n]
    text = lead + head + context + tail
    return Instance(
        text=text, answer_prefix=VT_PREFIX.format(num_v=hops + 1, query=value), answers=names,
        needles=[{"text": s, "offset": len(lead) + len(head) + o, "depth_percent": round(100 * o / len(context), 2)}
                 for s, o in zip(stmts, offs)],
        meta={"size": size, "value": value},
    )


def _cwe_list(rng, pool, n_words: int, rep_common: int, rep_rare: int, n_common: int):
    chosen = rng.sample(pool, n_words)
    common, rare = chosen[:n_common], chosen[n_common:]
    seq = common * rep_common + rare * rep_rare
    rng.shuffle(seq)
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(seq)), common


def make_cwe(spec: TaskSpec, size: int, rng, env: Env) -> Instance:
    a = spec.args
    pool = list(env.words.common)
    if size > len(pool):
        raise DataError(f"ruler task cwe: {size} distinct words asked, the word list has {len(pool)}")
    # common_words_extraction.py: below 4096 tokens the frequencies drop to 6/1 and the one-shot
    # example to 20 words at 3/1; from 4096 on, 30/3 with a 40-word example at 10/3.
    short = env.length < 4096
    ex_ctx, ex_ans = _cwe_list(rng, pool, 20 if short else 40, 3 if short else 10, 1 if short else 3, a["num_cw"])
    ctx, answers = _cwe_list(rng, pool, size, 6 if short else a["freq_cw"], 1 if short else a["freq_ucw"], a["num_cw"])
    ex_head, ex_tail = _split_template(CWE_TEMPLATE)
    example = ex_head + ex_ctx + ex_tail + CWE_PREFIX + " " + " ".join(f"{i + 1}. {w}" for i, w in enumerate(ex_ans))
    head, tail = _split_template(CWE_TEMPLATE)
    return Instance(text=example + "\n" + head + ctx + tail, answer_prefix=CWE_PREFIX, answers=answers,
                    meta={"size": size})


def zeta(alpha: float, terms: int = 10000) -> float:
    """Riemann zeta for alpha > 1: a partial sum with the Euler-Maclaurin tail (|error| < 1e-12 at
    alpha=2), so scipy is not needed for RULER's zeta-distributed word counts."""
    if alpha <= 1:
        raise ConfigError(f"ruler fwe: alpha must be > 1, got {alpha}")
    s = math.fsum(k ** -alpha for k in range(1, terms))
    n = float(terms)
    return s + n ** (1 - alpha) / (alpha - 1) + 0.5 * n ** -alpha + alpha * n ** (-alpha - 1) / 12


def make_fwe(spec: TaskSpec, size: int, rng, env: Env) -> Instance:
    a = spec.args
    vocab_size = max(4, env.length // 50)  # freq_words_extraction.py: vocab_size = max_seq_length // 50
    vocab: list[str] = []
    seen = set()
    while len(vocab) < vocab_size:
        w = "".join(rng.choices(string.ascii_lowercase, k=a["coded_wordlen"]))
        if w not in seen:
            seen.add(w)
            vocab.append(w)
    vocab.sort()
    rng.shuffle(vocab)
    vocab[0] = "..."  # the top-ranked "word" is noise, as in RULER
    z = zeta(a["alpha"])
    seq = [w for k, w in enumerate(vocab, start=1) for _ in range(int(size * k ** -a["alpha"] / z))]
    rng.shuffle(seq)
    head, tail = _split_template(FWE_TEMPLATE)
    return Instance(text=head + " ".join(seq) + tail, answer_prefix=FWE_PREFIX, answers=vocab[1:4],
                    meta={"size": size, "vocab_size": vocab_size})


def make_qa(spec: TaskSpec, size: int, rng, env: Env, index: int = 0) -> Instance:
    name = spec.args["dataset"]
    data = (env.qa or {}).get(name)
    if data is None:
        raise DataError(f"ruler task {spec.name}: no {name} data (benchmarks.ruler.qa.{name} names its source)")
    return data.instance(index, size, rng)


GENERATORS = {"niah": make_niah, "vt": make_vt, "cwe": make_cwe, "fwe": make_fwe}


def max_size(spec: TaskSpec, env: Env) -> int | None:
    """The largest meaningful haystack size, or None when it is unbounded."""
    if spec.kind == "cwe":
        return len(env.words.common)
    if spec.kind == "qa" and env.qa and spec.args["dataset"] in env.qa:
        return len(env.qa[spec.args["dataset"]].docs)
    return None
