"""Corpora by domain and language: names, the Debian Reference aligned across languages, the chat
corpus through the model's real template, and disjoint evaluation / calibration texts (by
construction and by measurement with the real tokenizer)."""

import re

import numpy as np
import pytest

from quantladder import config as qconfig
from quantladder import corpora as C
from quantladder.engine import RawContext
from quantladder.errors import ConfigError, DataError
from quantladder.measures import perplexity as P

# The whole embedded ladder (config/full.yaml over the default): every corpus and calibration text.
CFG = qconfig.load_config([str(qconfig.REPO_ROOT / "config" / "full.yaml")])


def test_the_exams_read_offline_text_below_the_corpora():
    """The corpora read the code benchmark (the HumanEval corpus), so no exam may import them back,
    not even inside a function: RULER's essay and word list come from quantladder.textsources, and
    the same source gives the same text either way."""
    import ast

    pkg = qconfig.REPO_ROOT / "workflow" / "quantladder" / "benchmarks"
    back = []
    for path in sorted(pkg.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module or ''}.{a.name}" for a in node.names] + [node.module or ""]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n.split(".")[-1] == "corpora" for n in names):
                back.append(f"{path.relative_to(pkg)}:{node.lineno}")
    assert back == []
    from quantladder.benchmarks.ruler import haystack

    assert haystack.load_text_source({"builtin": "pydoc-topics"}) == C.materialize({"builtin": "pydoc-topics"})
    with pytest.raises(ConfigError, match="the one builtin essay text is pydoc-topics"):
        haystack.load_text_source({"builtin": "python-stdlib"})

def test_a_corpus_name_says_its_domain_and_language():
    assert C.parse_name("prose-en") == {"domain": "prose", "language": "en", "part": None}
    assert C.parse_name("manual-zh-cn") == {"domain": "manual", "language": "zh-cn", "part": None}
    assert C.parse_name("manual-es.calib") == {"domain": "manual", "language": "es", "part": "calib"}
    assert C.parse_name("code-python") == {"domain": "code", "language": "python", "part": None}
    for bad in ("wikitext", "Prose-EN", "prose_en", "-en"):
        with pytest.raises(ConfigError, match=f"corpora.{re.escape(bad)}: a corpus is named"):
            C.parse_name(bad)
    # every corpus the default config measures on is named so (it is the rows' subset)
    for corpus, _ in P.passes(CFG):
        C.parse_name(corpus)


def test_select_splits_documents_into_disjoint_parts():
    docs = list(range(10))
    assert C._select(docs, {"every": 2, "offset": 0}) == [0, 2, 4, 6, 8]
    assert C._select(docs, {"every": 2, "offset": 1}) == [1, 3, 5, 7, 9]
    with pytest.raises(ConfigError, match="select"):
        C._select(docs, {"every": 2, "offset": 2}, "corpora.x")
    a = C.build(CFG["corpora"]["code-python"]).record["files"]
    b = C.build(CFG["corpora"]["stdlib-docstrings"]).record["files"]
    assert a and b and not set(a) & set(b)  # the code corpus and the calibration text share no module


@pytest.fixture(scope="module")
def manuals():
    return {lang: C.build({"debian_reference": {"lang": lang, "part": "eval"}}) for lang in C.DEBIAN_LANGUAGES}


def _paragraphs(corpus):
    return corpus.text.rstrip("\n").split("\n\n")


def test_the_debian_reference_compares_languages_like_for_like(manuals):
    """The same paragraphs in every language: as many, each in its own language, none left in English,
    and the language-neutral parts of each paragraph (numbers, paths, URLs) the same."""
    import py3langid

    en = _paragraphs(manuals["en"])
    assert len(en) > 500
    neutral = re.compile(r"https?://\S+|/[a-z][\w./-]+|\d+")
    for lang, corpus in manuals.items():
        paras = _paragraphs(corpus)
        assert len(paras) == len(en), lang
        assert corpus.record["package_version"] and corpus.record["package"] == f"debian-reference-{lang}"
        want = C.LANGID_CODES.get(lang, lang)
        assert all(py3langid.classify(t)[0] == want for t in paras), lang
        if lang == "en":
            continue
        assert not set(paras) & set(en), lang  # no untranslated paragraph
        with_neutral = [(set(neutral.findall(a)), set(neutral.findall(b))) for a, b in zip(en, paras)]
        with_neutral = [(a, b) for a, b in with_neutral if a]
        same = sum(a <= b for a, b in with_neutral) / len(with_neutral)
        assert same > 0.8, (lang, same)  # aligned paragraph by paragraph (a shift would drop this to ~0)
    for lang in ("ja", "zh-cn"):  # the non-Latin scripts really are
        assert all(re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", t) for t in _paragraphs(manuals[lang]))


def _page(paras):
    return "<html><body>" + "".join(f"<p>{p}</p>" for p in paras) + "</body></html>"


def test_an_untranslated_paragraph_is_dropped_from_every_language(tmp_path):
    en = ["The shell interprets the commands you type at the prompt.",
          "Debian keeps its packages in a central archive that every mirror copies.",
          "Backups should be tested by restoring them on another machine."]
    es = ["El intérprete de órdenes interpreta las órdenes que escribe en el indicador.",
          en[1],  # po4a's fallback: the English paragraph, untranslated
          "Las copias de seguridad se comprueban restaurándolas en otra máquina."]
    for lang, paras in (("en", en), ("es", es)):
        (tmp_path / f"pr01.{lang}.html").write_text(_page(paras), encoding="utf-8")
    spec = {"lang": "es", "pages": ["pr01"], "aligned": ["en", "es"], "root": str(tmp_path)}
    got_es = C.build({"debian_reference": spec}).text.strip().split("\n\n")
    got_en = C.build({"debian_reference": {**spec, "lang": "en"}}).text.strip().split("\n\n")
    assert got_es == [es[0], es[2]] and got_en == [en[0], en[2]]
    (tmp_path / "pr01.es.html").write_text(_page(es[:2]), encoding="utf-8")
    C._aligned_mask.cache_clear()
    C.debian_reference_paragraphs.cache_clear()
    with pytest.raises(DataError, match="do not line up"):
        C.build({"debian_reference": spec})
    with pytest.raises(DataError, match=r"debian-reference-de \(\.ci/system-packages\.txt"):
        C.build({"debian_reference": {**spec, "lang": "de", "aligned": ["en", "de"]}})


def test_cjk_line_breaks_vanish_and_latin_ones_become_spaces():
    # CSS Text 3's segment-break rule: removed only between two wide characters
    assert C._normalize_ws("日本語の\n  文章です。\n  Debian の\n  system") == "日本語の文章です。 Debian の system"


@pytest.fixture(scope="module")
def tokenizer(smollm_f16):
    with RawContext(str(smollm_f16), n_ctx=512, n_batch=512, n_threads=2) as ctx:
        yield ctx


def test_the_chat_corpus_renders_through_the_models_own_template(tokenizer, smollm_f16, tmp_path):
    corpus = C.build(CFG["corpora"]["chat-en"])
    assert corpus.kind == "chat" and corpus.record["documents"] == 164
    path = tmp_path / "chat-en.txt"
    path.write_text(corpus.text, encoding="utf-8")
    text, parse_special = C.text_for_model(path, "chat", smollm_f16)
    assert parse_special and text.count("<|im_start|>user") == 164 and text.count("<|im_start|>assistant") == 164
    assert "def has_close_elements" in text and "```python" in text
    im_start = tokenizer.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(im_start) == 1  # one special token ...
    toks = tokenizer.tokenize(text, add_special=True, parse_special=True)
    assert (toks == im_start[0]).sum() >= 2 * 164  # ... that the corpus really holds (system turns too)
    plain = tokenizer.tokenize(text, add_special=True, parse_special=False)
    assert not (plain == im_start[0]).any() and len(plain) > len(toks)
    with pytest.raises(DataError, match="no chat template"):
        C.render_chat(corpus.text, None, "", "", where="chat-en")


def test_the_whole_guide_is_one_document_long_enough_for_a_trained_context_pass(tokenizer):
    text = C.build(CFG["corpora"]["manual-en.full"]).text
    n = len(tokenizer.tokenize(text, add_special=True))
    assert n >= 2 * 32768  # llama-perplexity's protocol needs 2 x n_ctx tokens, Gemma-3-270M: 32K


def test_ngram_overlap_counts_every_position():
    ev = np.array([1, 2, 3, 4, 5, 6], dtype=np.int32)
    assert C.ngram_overlap(ev, np.array([9, 2, 3, 4, 9]), 3) == (0.25, 4, 1)  # (2,3,4) of 4 trigrams
    assert C.ngram_overlap(ev, ev, 3) == (1.0, 4, 4)
    assert C.ngram_overlap(ev, np.array([1, 2]), 3) == (0.0, 4, 0)


def _pass_tokens(tok, gguf, name):
    s = P.pass_settings(CFG, name, f"n{CFG['measures']['perplexity']['n_ctx']}")
    corpus = C.build(CFG["corpora"][name])
    text = corpus.text
    special = False
    if corpus.kind == "chat":
        from quantladder.corpora import chat_template_of, render_chat

        text, special = render_chat(text, *chat_template_of(gguf)), True
    t = tok.tokenize(text, add_special=True, parse_special=special)
    return t[: s["max_chunks"] * s["n_ctx"]]


def test_the_default_evaluation_and_calibration_texts_are_disjoint_by_measurement(tokenizer, smollm_f16):
    """Every default evaluation pass against every calibration corpus the default ladders (and the
    calibration x language matrix) name: the overlap figure stays under the flag; a text against
    itself is flagged."""
    from quantladder import ladder

    settings = ladder.imatrix_settings(CFG)
    calib = {"manual-en.calib", "manual-es.calib"}
    for fam in CFG["families"]:
        for rung in qconfig.rungs(CFG, fam):
            if qconfig.rung_kind(CFG, fam, rung) == "quantized":
                im = qconfig.rung_options(CFG, fam, rung).get("imatrix") or {}
                if im.get("corpus"):
                    calib.add(im["corpus"])
    flag = CFG["measures"]["perplexity"]["overlap"]["flag_pct"]
    cal_tokens = {c: P.calibration_tokens(tokenizer, C.build(CFG["corpora"][c]).text, settings) for c in sorted(calib)}
    for name, _ in P.passes(CFG):
        ev = _pass_tokens(tokenizer, smollm_f16, name)
        for c, ct in cal_tokens.items():
            rows, rec = P.overlap_rows(ev, [{"corpus": c, "tokens": ct}], corpus=name, n_ctx=512, ngram=13,
                                       flag_pct=flag)
            by = {r["metric"]: r["value"] for r in rows}
            assert by["calibration_overlap"] < flag and by["calibration_overlap_flag"] == 0, (name, c, rec)
    ev = _pass_tokens(tokenizer, smollm_f16, "manual-en")
    rows, _ = P.overlap_rows(ev, [{"corpus": "manual-en", "tokens": ev}], corpus="manual-en", n_ctx=512, ngram=13,
                             flag_pct=flag)
    assert {r["metric"]: r["value"] for r in rows} == {"calibration_overlap": 100.0, "calibration_overlap_flag": 1.0}
