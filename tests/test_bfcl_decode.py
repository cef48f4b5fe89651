"""BFCL answer decoding: Python values resolved as BFCL's ``eval`` resolves them (without running
anything), Java and JavaScript read by tree-sitter with BFCL's traversal, and no model text ever
executed on the host. Agreement with the official package on thousands of outputs is
tests/test_bfcl_differential.py; these are the rules one by one."""

from __future__ import annotations

import ast
import random
import sys
from pathlib import Path

import pytest

from quantladder.benchmarks.bfcl import data, multiturn, parse, pyeval, score

from test_bfcl import bfcl_record, bfcl_wheel  # noqa: F401  (session fixtures)

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "bfcl"))
import differential  # noqa: E402

# Expressions a model might write in an argument. Test-authored constants: Python's own eval of them
# is the reference the evaluator must equal (value and type).
EXPRESSIONS = [
    "[1, 2] + [3]", "2 ** 100", "2 ** -2", "1 << 4 | 1", "255 >> 3 & 7 ^ 1", "'a' + str('b')", "7 // 2 * 3 % 5",
    "-7 // 2", "7 / 2", "2.5 * 4", "1e308 * 10", "(1 + 2j) * 2j", "'ab' * 3", "[0] * 4", "(1, 2) + (3,)",
    "b'x' + bytes(2)", "{1, 2} | {3}", "{'a': 1} | {'b': 2}", "~5 + 0", "(not 0) + 0", "-(-3) + 0", "+4 - 0",
    "(1 < 2 < 3) * 1", "(1 == 1.0) + 0", "('a' in 'abc') * 2", "(0 or 5) + (3 and 4)", "(1 if 0 else 2) + 0",
    "[1, 2, 3][1] + [1, 2, 3][-1]", "'hello'[1:4] + '!'", "[*range(3), *'ab'] + []", "{**{'a': 1}, 'b': 2} | {}",
    "f'{3:05d}|{2.5:.2f}|{\"q\"!r}' + ''", "'%s=%05.1f' % ('x', 2.25)", "'{}-{:>4}'.format('a', 'b') + ''",
    "'{0.real}'.format(7) + ''", "', '.join(str(i) for i in range(4)) + ''", "[i * i for i in range(5) if i % 2] + []",
    "{k: v for k, v in zip('ab', [1, 2])} | {}", "{c for c in 'abca'} | set()", "sorted([3, 1, 2], reverse=True) + []",
    "sorted(['b', 'A', 'c'], key=str.lower) + []", "max('ab', 'c', key=len) + ''", "sum(x for x in range(10)) + 0",
    "len('hello') + abs(-3) + ord('a') + round(2.675, 2)", "divmod(17, 5) + pow(3, 4, 5).as_integer_ratio()",
    "int('0x1f', 16) + int('12') + float('1.5')", "hex(255) + bin(5) + oct(8) + chr(65)", "list(map(str, [1, 2])) + []",
    "list(filter(None, [0, 1, 2])) + []", "list(enumerate('ab')) + []", "list(reversed([1, 2])) + []",
    "(lambda x, y=2: x * y)(3) + 0", "list(map(lambda s: s.upper(), ['a'])) + []", "'A-b'.lower().replace('-', '_') + ''",
    "'x'.center(5, '*') + 'x'.zfill(3)", "(255).bit_length() + (2.5).is_integer()", "(3 + 4j).imag * 1",
    "isinstance(1, int) + isinstance(b'', bytes)", "[1, 2].index(2) + (1, 1).count(1)", "{'a': 1}.get('b', 5) + 0",
    "list({'a': 1}.items()) + []", "type(1)('5') + 0", "str.upper('x') + ''", "bytearray(b'ab') + b'c'",
    "(print('x') or 1) + 0", "next(iter([4])) + 0", "[1, 2] * True", "0x" + "f" * 40 + " + 1", "2 ** 20000 // 2 ** 19990",
]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_expression_values_equal_pythons_eval(expr):
    got = parse.decode(f"[f(a={expr})]")[0]["f"]["a"]
    want = eval(expr)  # the reference: a test-authored constant, never model output
    assert got == want and type(got) is type(want), (expr, got, want)


@pytest.mark.parametrize("expr,error", [
    ("1 / 0", "ZeroDivisionError"), ("'a' - 'b'", "TypeError"), ("x * 3", "NameError"), ("[1][5] + 0", "IndexError"),
    ("int('x') + 0", "ValueError"), ("open + 1", "TypeError"), ("None + 1", "TypeError"),
    ("str(10 ** 5000) + ''", "ValueError"), ("0x" + "f" * 4000 + " + 1", "ValueError"),  # digit limit (unparse)
    ("((yield) or 1) + 1", "SyntaxError"), ("2.0 ** 10000", "OverflowError"),
])
def test_expressions_that_fail_in_eval_fail_here(expr, error):
    with pytest.raises(parse.DecodeError, match=error) as info:
        parse.decode(f"[f(a={expr})]")
    assert not isinstance(info.value, parse.Refused)  # a failure BFCL's eval has too, not a deviation


@pytest.mark.parametrize("expr", [
    "os.sep + 'x'", "json.dumps([1]) + ''", "VERSION_PREFIX + ''", "value * 2",  # BFCL's module globals
    "__import__('os').sep + ''", "eval('1') + 0", "hash('a') * 0", "(1000 is 1000) + 0",  # not pure / compiler detail
    "2 ** 10 ** 10", "1 << 10 ** 10", "'a' * 10 ** 10", "[0] * 10 ** 10", "'x'.center(10 ** 10) + ''",  # bounds
    "('ab' * 10).replace('a', 'a' * 10 ** 7) + ''", "bytes(10 ** 10) + b''", "list(range(10 ** 12)) + []",
    "sum(range(10 ** 12)) + 0", "[i for i in range(10 ** 9)] + []", "list(map(bytes, [10 ** 10])) + []",
    "(lambda f: f(f))(lambda f: f(f)) + 1", "'{:{}}'.format('a', 10 ** 9) + ''", "f'{1:{10 ** 9}}' + ''",
    "'{0.__class__.__base__}'.format(1) + ''", "(1).__class__ + 1", "str.maketrans('a', 'b') | {}",
    # memory and time: each value, all values together, and the work are bounded
    "['a' * 4_000_000 for _ in range(100)] + []", "[('a' * 10 ** 6) * 3 for _ in range(10)] + []",
    "[[0] * 10 ** 5 == [0] * 10 ** 5 for _ in range(10 ** 6)] + []", "list('x' * 3_000_000) + []",
    "('a ' * 2_000_000).split() + []", "[(3 ** 300000) * 3 for _ in range(10 ** 6)] + []",
])
def test_out_of_bounds_and_outside_names_are_refused(expr):
    with pytest.raises(parse.Refused):
        parse.decode(f"[f(a={expr})]")


def test_value_rules_of_bfcls_resolver():
    d = parse.decode
    # the unary rule negates the literal whatever the operator; a non-literal operand fails
    assert d("[f(a=+5, b=~5, c=not 0, d=-2.5, e=-True)]") == [{"f": {"a": -5, "b": -5, "c": 0, "d": -2.5, "e": -1}}]
    for bad in ("[f(a=-(-5))]", "[f(a=-x)]", "[f(a=-'s')]", "[f(a=lambda: 1)]", "[f(a={1, 2})]", "[f(a={**d})]",
                "[f(a=x.y)]", "[f(a=f'{x}')]", "[f(a=[*x])]", "[f(a=1 if x else 2)]", "[f(a=x == 1)]"):
        with pytest.raises(parse.DecodeError):
            d(bad)
    assert d("[f(a=g(1), b=g(x=h(y=2)), c=a[0], d=a['k'][1:2], e=x, f=...)]") == [{"f": {
        "a": "g(1)", "b": {"g": {"x": {"h": {"y": 2}}}}, "c": "a[0]", "d": "a['k'][1:2]", "e": "x", "f": "..."}}]
    assert d("[f(a=(1, [2]), **kw)]") == [{"f": {"a": (1, [2]), None: "kw"}}]
    assert d("['f(a=1)']".replace("'", "")) == [{"f": {"a": 1}}]
    assert d("g(b=2)(a=1)") == [{"": {"a": 1}}]  # the callee is not a name: BFCL's empty name
    assert d("[a.b.c(x=1), f(a=1).g(b=2)]") == [{"a.b.c": {"x": 1}}, {"g": {"b": 2}}]
    # quotes are stripped only after the brackets were added: a quoted answer is a string in a list
    assert d("f(a=1, a=2)") == [{"f": {"a": 2}}]  # parsed, not compiled: the last one wins
    for bad in ("[f(a=1), 2]", "I think the answer is 4.", "[f(a=1)] and more", "'[f(a=1)]'"):
        with pytest.raises(parse.DecodeError):
            d(bad)


def test_java_first_call_anywhere_with_bfcls_value_text():
    j = lambda text: parse.decode(text, "java")  # noqa: E731
    call = {"Foo.bar": {"a": "1"}}
    for text in ("Foo.bar(a=1)", "Foo.bar(a=1);", "int r = Foo.bar(a=1);", "return Foo.bar(a=1);", "x = 1; Foo.bar(a=1);",
                 "/* c */ Foo.bar(a=1);", "// c\nFoo.bar(a=1)", "Foo.bar(a=1); Baz.q(b=2);", "if (ok) { Foo.bar(a=1); }",
                 "```Foo.bar(a=1)```"):
        assert j(text) == [call], text
    assert j("System.out.println(Foo.bar(a=1));") == [{"System.out.println": {}}]  # the outer call comes first
    # literals: quotes dropped at the top level only (a multi-character 'x' too), the rest re-spelled
    got = j("[T.m(s=\"a b\", c='abc', k=X.class, n=5L, p=new Path('/x'), xs=new int[] {1, 2}, "
            "ys=new ArrayList<>(Arrays.asList(\"a\", \"b\")), e=1 + 2, g=obj.get(), v)]")
    assert got == [{"T.m": {"s": "a b", "c": "abc", "k": "X.class", "n": "5L", "p": "new Path('/x')",
                            "xs": "new int[]{1,2}", "ys": 'new ArrayList<>(Arrays.asList("a", "b"))', "e": "1+2",
                            "g": "obj.get()", None: "v"}}]
    # no method invocation: {} (then "wrong output format"); an ERROR node: a parse failure
    assert j("int x = 1;") == {}
    for bad in ("java\nFoo.bar(a=1)", "Foo.bar(a=[1, 2])", "Foo.bar(a=1, a=2)",
                "Foo.bar(a=1", "I cannot do that."):
        with pytest.raises(parse.DecodeError):
            j(bad)


def test_java_two_unnamed_values_are_a_duplicate():
    with pytest.raises(parse.DecodeError, match="more than once"):
        parse.decode("T.m(v, String.class)", "java")


def test_javascript_top_level_call_statement_only():
    js = lambda text: parse.decode(text, "javascript")  # noqa: E731
    assert js("[go(a='x', b=\"y\", c=[1, 2], d=true, e={k: 1}, f=`t`, g=\"'q'\")]") == [{"go": {
        "a": "x", "b": "y", "c": "[1, 2]", "d": "true", "e": "{k: 1}", "f": "`t`", "g": "'q'"}}]
    # unnamed: identifiers and true are read, everything else dropped
    assert js("go(x, undefined, this, 5, 'str', false)") == [{"go": {None: "x"}}]
    assert js("go(true)") == [{"go": {None: "true"}}]
    assert js("// note\ngo(a=1); stop(b=2);") == [{"go": {"a": "1"}}]
    assert js("javascript\ngo(a=1)") == [{"go": {"a": "1"}}]  # a fence's tag is a statement of its own
    assert js("a.b.go(a=1).then(done)") == [{"a.b.go(a=1).then": {None: "done"}}]
    for no_call in ("let r = go(a=1);", "await go(a=1);", "(go(a=1))", "x = 1", "hello"):
        assert js(no_call) is None, no_call
    for bad in ("go(a=1, a=2)", "go(x, y)", "go(a=", "I cannot do that."):
        with pytest.raises(parse.DecodeError):
            js(bad)


def test_answers_spelled_as_the_possible_answers_pass(bfcl_record):  # noqa: F811
    """Three simple_java possible answers hold multi-character single-quoted literals
    (``new Path('/backup/data.txt')``): written as the answer spells them, they decode and pass."""
    items = {it["id"]: it for it in data.load_category(bfcl_record["root"], "simple_java")}
    for item_id in ("simple_java_7", "simple_java_59", "simple_java_70"):
        item = items[item_id]
        calls = differential.answer_calls(item, random.Random(0), first=True)
        text = differential.render_call(calls[0], "java", random.Random(0))
        assert "('" in text
        v = score.verdict(item, text)
        assert v["correct"], (text, v)


def test_a_checker_exception_is_a_verdict_not_a_crash():
    func = {"name": "T.f", "parameters": {"type": "dict", "required": ["s"], "properties": {"s": {"type": "Set"}}}}
    item = {"id": "simple_java_x", "category": "simple_java", "function": [func], "ground_truth": [{"T.f": {"s": ["x"]}}]}
    v = score.verdict(item, "T.f(s=mySet)")
    assert v == {**v, "correct": False, "error_type": "checker_error:NotImplementedError", "checker_error": True}
    # a value with no repr (over the int digit limit) gets a verdict too (BFCL's run stops there)
    num = {"name": "g", "parameters": {"type": "dict", "required": ["n"], "properties": {"n": {"type": "integer"}}}}
    item = {"id": "simple_python_x", "category": "simple_python", "function": [num], "ground_truth": [{"g": {"n": [1]}}]}
    assert score.verdict(item, "[g(n=2 ** 20000)]")["error_type"] == "value_error:others"


def test_irrelevance_counts_a_refused_value_as_a_call():
    item = {"id": "irrelevance_x", "category": "irrelevance", "function": []}
    v = score.verdict(item, "[f(a=os.sep + 'x')]")
    assert v["refused"] and not v["correct"] and v["error_type"] == "irrelevance_error:decoder_success"
    assert score.verdict(item, "[f(a=x * 3)]")["correct"]  # a NameError in BFCL too: no call


def test_execution_strings_as_bfcl_renders_them():
    calls = parse.decode("[cd(folder='a b'), f(n=1, x=[1, 'q'], d={'k': 2}, c=g(y=h(z=1)), t=(1,))]")
    assert parse.to_execution_strings(calls) == ["cd(folder='a b')",
                                                 "f(n=1, x=[1, 'q'], d={'k': 2}, c=g(y=h(z=1)), t=(1,))"]
    for bad in ("[f(d={})]", "[f(n=2 ** 20000)]"):  # no first key to call / no repr: the step is dropped
        assert multiturn.decode_step(bad) is None


def test_hostile_values_never_run_on_the_host(tmp_path, bfcl_record):  # noqa: F811
    marker = tmp_path / "pwned"
    cmd = f"touch {marker}"
    values = [f"__import__('os').system({cmd!r})", f"'' + __import__('os').system({cmd!r})",
              f"1 + os.system({cmd!r})", f"[__import__('os').system({cmd!r})] + []",
              f"(lambda: __import__('os').system({cmd!r}))() + 1", f"eval(\"__import__('os').system({cmd!r})\") + 1",
              f"[x for x in [open({str(marker)!r}, 'w')]] + []", f"getattr(__import__('os'), 'system')({cmd!r}) + 1",
              f"().__class__.__base__.__subclasses__() + [{cmd!r}]", f"exec(\"open({str(marker)!r}, 'w')\") or 1"]
    root = bfcl_record["root"]
    items = [data.load_category(root, c)[0] for c in ("simple_python", "irrelevance", "live_relevance", "parallel",
                                                      "simple_java", "simple_javascript")]
    for v in values:
        for item in items:
            name = item["function"][0]["name"]
            score.verdict(item, f"[{name}(x={v})]")
        multiturn.decode_step(f"[cd(folder={v})]")
        pyeval_refused = pytest.raises(pyeval.EvalError)
        with pyeval_refused:
            pyeval.evaluate(ast.parse(v, mode="eval").body)
    assert not marker.exists()


def test_hostile_multi_turn_calls_run_only_in_the_sandbox(tmp_path, bfcl_record):  # noqa: F811
    from quantladder.sandbox import SandboxUnavailable

    marker = tmp_path / "pwned"
    item = {it["id"]: it for it in data.load_category(bfcl_record["root"], "multi_turn_base")}["multi_turn_base_1"]
    try:
        ex = multiturn.SandboxExecutor(bfcl_record["root"], wall_s=60)
        ex.describe()
    except SandboxUnavailable as e:
        pytest.fail(f"the sandbox is a requirement (.ci/system-packages.txt): {e}")
    steps = [f"[open(file={str(marker)!r}, mode='w')]", f"[cd(folder='a' + __import__('os').system('touch {marker}'))]",
             f"[ls(a=__import__(name='os'))]"]
    decoded = [multiturn.decode_step(s) for s in steps]
    assert decoded[0] == [f"open(file={str(marker)!r}, mode='w')"] and decoded[1] is None
    out = ex.run(item, [[d for d in decoded if d]])
    assert "error" not in out, out
    assert not marker.exists()
