"""The degenerate-loop detector: real loops are flagged, ordinary answers are not."""

from quantladder import loops

NIAH_LOOP = "The special magic number for quiet-harbor is: 4417821. " * 20
PROSE = (
    "Quantization maps each block of weights to a few bits and a scale. Lower rungs keep fewer bits, "
    "so the reconstruction error grows, and long contexts amplify it because attention sums over "
    "thousands of slightly wrong keys. The KV cache can be quantized separately; its error enters "
    "every later token. Measuring both on the same card keeps the comparison fair, and a manifest "
    "records what was run so a changed library or driver invalidates exactly the points it touches."
)


def test_sentence_loop_is_flagged():
    assert loops.repeated_ngram_share(NIAH_LOOP) > 0.8
    assert loops.is_degenerate(NIAH_LOOP, finish_reason="length")
    assert loops.is_degenerate(NIAH_LOOP, finish_reason="stop")


def test_loop_after_a_correct_start_is_flagged():
    text = "The special magic numbers are 1234567, 7654321. " + "and and the the " * 40
    assert loops.is_degenerate(text)


def test_punctuation_variants_of_one_loop_are_one_loop():
    text = " ".join(f"value is: 42{'.' if i % 2 else ','}" for i in range(40))
    assert loops.is_degenerate(text)


def test_symbol_runs_without_spaces_are_flagged():
    assert loops.is_degenerate("}" * 300)
    assert loops.is_degenerate("ab" * 150)


def test_prose_is_not_flagged():
    assert loops.repeated_ngram_share(PROSE) < 0.1
    assert not loops.is_degenerate(PROSE, finish_reason="length")


def test_ruler_style_answers_are_not_flagged():
    cwe = " ".join(f"{i + 1}. {w}" for i, w in enumerate(
        "handler permitted alone repetition utilities capwords proposal lambda earlier failed".split()))
    vt = "YBFRQ SEVLL IJLHD LJQZS NTTQN"
    niah = "4417821, 9912233, 1200345 and 5566778."
    for text in (cwe, vt, niah, "", "42"):
        assert not loops.is_degenerate(text, finish_reason="stop"), text


def test_budget_cut_lowers_the_bar_but_not_for_clean_text():
    # About a third of the n-grams repeat: a loop setting in when the budget ran out, an unusual
    # but possible answer when the model stopped by itself.
    head = PROSE.split()[:60]
    text = " ".join(head + "the same four words".split() * 9)
    share = loops.repeated_ngram_share(text)
    assert loops.THRESHOLD_AT_LIMIT <= share < loops.THRESHOLD
    assert loops.is_degenerate(text, finish_reason="length")
    assert not loops.is_degenerate(text, finish_reason="stop")


def test_counting_loop_is_flagged():
    # SmolLM2-135M's reply to a RULER cwe item at 2048 tokens (f16 KV), cut at 120 tokens.
    text = " " + " ".join(f"{i}. building" for i in range(1, 40))
    assert loops.is_degenerate(text, finish_reason="length")
    assert loops.is_degenerate(text, finish_reason="stop")


def test_a_long_list_of_distinct_numbers_is_not_a_loop():
    text = "The special magic numbers are " + ", ".join(str(1000003 * i % 9999991) for i in range(1, 40)) + "."
    assert not loops.is_degenerate(text, finish_reason="length")
