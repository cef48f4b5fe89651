"""Resolve a Python expression value of a BFCL answer without executing model text.

BFCL's prompt-mode decoder (bfcl-eval 2026.3.23, model_handler/utils.py ``resolve_ast_by_type``) gives
every binary operation in an argument to Python's ``eval``: ``[1, 2] + [3]``, ``2 ** 100``,
``1 << 4 | 1``, ``"a" + str("b")`` and anything nested inside them (calls, comprehensions,
f-strings, subscripts). Calling ``eval`` on model text would run it on the scoring host, so this module
interprets the same expression tree instead, over values of Python's own immutable-or-fresh builtin
types only:

- literals, containers (with ``*``/``**`` unpacking), arithmetic, shifts, bitwise, unary, boolean,
  comparison and conditional operators, subscripts and slices, f-strings and format specs,
  comprehensions and lambdas;
- calls of pure builtins (``str``, ``int``, ``len``, ``sorted``, ``range``, ``round``, ``map``, ...) and of
  non-mutating methods of ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set`` and numbers, bound
  (``"x".upper()``) or unbound (``key=str.lower``). Other builtins are values that are never called.

The operators are Python's own, applied to the same values, so a result equals ``eval``'s, and where
eval raises this raises :class:`EvalError` with the same exception. What this evaluator will not do
raises :class:`Refused` (a subclass): calling anything else, a name that BFCL's ``eval`` finds among
its module's globals (``os`` among them), lambdas with other than plain parameters, ``:=``, identity
tests on values whose identity ``eval`` decides by constant sharing, and any value, total or work
over the bounds below. Refusals are decoder failures; ``docs/bfcl.md`` lists them as deviations, and
the differential test counts them.
"""

from __future__ import annotations

import ast
import builtins
import operator
import re

# Bounds, all deterministic (never a clock), so that a verdict does not depend on the machine. A
# value's *weight* approximates the length of its repr, shared references counted each time
# (``[s] * n`` weighs ``n`` copies of ``s``), so that anything printed or joined from it stays near
# its weight. The sum of the weights of all values made bounds the memory an expression can hold;
# the work (nodes evaluated, elements visited or handed to a builtin) bounds its time: a few
# seconds and ~100 MB at most, while the values models write weigh tens of units.
MAX_WEIGHT = 1 << 22          # one value: ~4 M characters, or ~1 M small list elements
MAX_PRODUCED = 1 << 24        # all values made by one expression together
MAX_ITEMS = 1 << 20           # elements a builtin may make out of one input (list("..."), split, range)
MAX_INT_BITS = 1 << 20        # ~315,000 decimal digits
MAX_WORK = 10_000_000         # evaluated nodes (10 each), elements visited or sized (1 each)
MAX_FORMAT_WIDTH = 100_000    # widths / precisions in format specs


class EvalError(ValueError):
    """The expression fails when Python evaluates it (its exception type and message)."""


class Refused(EvalError):
    """Outside what this evaluator computes (BFCL's ``eval`` would have tried it)."""


_PURE_BUILTINS = ("abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex",
                  "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hex", "int", "isinstance",
                  "issubclass", "iter", "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "range",
                  "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip")
BUILTINS = {name: getattr(builtins, name) for name in _PURE_BUILTINS}


def _print(*args, **kwargs):
    """``print`` returns None; what it would write is nobody's value."""
    return None


BUILTINS["print"] = _print
# Other builtins are values (``open + 1`` is a TypeError, as in eval) that are never called.
_OTHER_BUILTINS = {name: getattr(builtins, name) for name in dir(builtins) if name not in BUILTINS}
# The names BFCL's ``eval`` resolves besides the builtins: the globals of bfcl-eval 2026.3.23's
# model_handler/utils.py (its imports and star-imports) and the one local of the function that calls
# eval. A name outside these and the builtins is a NameError there, and here.
BFCL_EVAL_NAMES = frozenset("""
ADDITIONAL_SYSTEM_PROMPT_FOR_AGENTIC_RESPONSE_FORMAT AGENTIC_CATEGORY ALL_AVAILABLE_MEMORY_BACKENDS
ALL_CATEGORIES ALL_SCORING_CATEGORIES Callable DEFAULT_SYSTEM_PROMPT_FORMAT
DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING
DOTENV_PATH FORMAT_SENSITIVITY_IDS_PATH FileLock GORILLA_TO_OPENAPI H100_X8_PRICE_PER_HOUR
LIVE_CATEGORY LOCAL_SERVER_MAX_CONCURRENT_REQUEST LOCAL_SERVER_PORT LOCK_DIR List Lock
MAXIMUM_STEP_LIMIT MEMORY_AGENT_SETTINGS MEMORY_BACKEND_INSTRUCTION_CORE_ARCHIVAL
MEMORY_BACKEND_INSTRUCTION_UNIFIED MEMORY_CATEGORY MEMORY_PREREQ_CONVERSATION_PATH
MEMORY_SCENARIO_NAME MULTI_TURN_CATEGORY MULTI_TURN_FUNC_DOC_FILE_MAPPING MULTI_TURN_FUNC_DOC_PATH
ModelStyle NON_LIVE_CATEGORY NON_SCORING_CATEGORY OUTPUT_FORMAT_MAPPING Optional PACKAGE_ROOT
PARAM_TYPE_MAPPING POSSIBLE_ANSWER_PATH PROJECT_ROOT PROMPT_PATH PROMPT_STYLE_TEMPLATES
PROMPT_TEMPLATE_MAPPING Path RED_FONT RESET RESULT_FILE_PATTERN RESULT_PATH ReturnFormat SCORE_PATH
SINGLE_TURN_CATEGORY TEST_COLLECTION_MAPPING TEST_IDS_TO_GENERATE_PATH TYPE_CHECKING Type UTILS_PATH
Union VERSION_PREFIX WEB_SEARCH_CATEGORY __builtins__ __cached__ __doc__ __file__ __loader__
__name__ __package__ __spec__ _cast_to_openai_type _generate_function_doc_python
_generate_function_doc_xml add_language_specific_hint_to_function_doc
add_memory_instruction_system_prompt ast ast_parse builtins clean_up_memory_prereq_entries
combine_consecutive_user_prompts contain_multi_turn_interaction contain_multi_turn_irrelevance
convert_system_prompt_into_user_prompt convert_to_function_call convert_to_tool convert_value copy
decoded_output_to_execution_list deepcopy default_decode_ast_prompting
default_decode_execute_prompting extract_last_user_message extract_memory_backend_type
extract_prompt_format_from_id extract_system_prompt extract_test_category
extract_test_category_from_id filter_entries_by_id find_file_by_category
format_execution_results_prompting format_function_doc formulate_system_prompt
get_all_format_sensitivity_configs get_directory_structure_by_category get_directory_structure_by_id
get_file_name_by_category get_general_grouping get_sub_grouping hashlib is_agentic is_chatable
is_empty_output is_executable is_executable_format_output is_first_memory_prereq_entry
is_format_sensitivity is_function_calling_format_output is_java is_js is_live is_memory
is_memory_prereq is_multi_turn is_non_live is_relevance_or_irrelevance is_rest is_sql is_web_search
json load_dataset_entry load_file load_format_sensitivity_ground_truth_entry
load_format_sensitivity_test_cases load_ground_truth_entry load_test_entries_from_id_file
make_json_serializable operator os parse_concise_xml_function_call parse_java_function_call
parse_javascript_function_call parse_json_function_call parse_nested_value
parse_prompt_variation_params parse_test_category_argument parse_verbose_xml_function_call
populate_initial_settings_for_memory_test_cases populate_initial_settings_for_web_search_test_cases
populate_test_cases_with_predefined_functions process_agentic_test_case process_memory_test_case
process_web_search_test_case re reduce resolve_ast_by_type resolve_ast_call retry
retry_if_exception_message retry_if_exception_type retry_with_backoff sort_file_content_by_id
sort_key system_prompt_pre_processing_chat_model wait_random_exponential write_list_of_dicts_to_file
value
""".split())

_METHODS = {
    str: {"capitalize", "casefold", "center", "count", "encode", "endswith", "find", "format", "index",
          "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
          "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
          "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
          "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill"},
    bytes: {"count", "decode", "endswith", "find", "hex", "index", "join", "lower", "replace", "split",
            "startswith", "strip", "upper"},
    list: {"copy", "count", "index"},
    tuple: {"count", "index"},
    dict: {"copy", "get", "items", "keys", "values"},
    set: {"copy", "difference", "intersection", "isdisjoint", "issubset", "issuperset", "symmetric_difference",
          "union"},
    int: {"as_integer_ratio", "bit_count", "bit_length", "conjugate", "to_bytes"},
    float: {"as_integer_ratio", "conjugate", "hex", "is_integer"},
    complex: {"conjugate"},
}
_METHODS[frozenset] = _METHODS[set]
_METHODS[bool] = _METHODS[int]
_ATTRS = {int: {"real", "imag", "numerator", "denominator"}, float: {"real", "imag"},
          complex: {"real", "imag"}, range: {"start", "stop", "step"}, slice: {"start", "stop", "step"}}
_ATTRS[bool] = _ATTRS[int]
# Builtins and unbound methods (``str.lower``) a builtin may call on its own (map, filter, sorted and
# min/max keys), out of reach of the size checks below: only those whose result is not much larger
# than their input.
_EXPANDING = {"bytearray", "bytes", "format", "pow", "range", "center", "ljust", "rjust", "zfill", "replace",
              "join", "to_bytes", "print"}
_CALLABLE = {id(v): name for name, v in BUILTINS.items()}
_DESCRIPTORS = {}
for _t, _names in _METHODS.items():
    for _n in _names:
        _DESCRIPTORS[id(getattr(_t, _n))] = (_t, _n)
_CALLS_ITS_ARGUMENTS = (map, filter, sorted, min, max)
_FUNCTIONAL = ({i for i, name in _CALLABLE.items() if name not in _EXPANDING}
               | {i for i, (_, name) in _DESCRIPTORS.items() if name not in _EXPANDING})

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor, ast.BitAnd: operator.and_, ast.MatMult: operator.matmul}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
        ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_SIZED = (list, tuple, set, frozenset, dict, str, bytes, bytearray)
_SPEC_NUMBER = re.compile(r"\d+")
_PERCENT_SPEC = re.compile(r"%[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")


_FIXED_WEIGHT = {float: 24, complex: 24, type(None): 24, type(Ellipsis): 24, range: 24}
_CONTAINERS = (list, tuple, set, frozenset, dict)


def weight(value, _memo=None, _visits=None) -> int:
    """About the length of ``repr(value)``, counting a shared object at each place it occurs."""
    t = type(value)
    if t is str:
        return len(value) + 2
    if t is bytes or t is bytearray:
        return len(value) + 14
    if t is int or t is bool:
        return value.bit_length() // 3 + 2
    if t in _FIXED_WEIGHT:
        return _FIXED_WEIGHT[t]
    if t not in _CONTAINERS:
        return 64  # iterators, views, builtin callables: their repr is short
    memo = {} if _memo is None else _memo
    key = id(value)
    if key in memo:
        if memo[key] is None:  # a cycle cannot be built from these types, but never loop
            raise Refused("self-referencing value")
        return memo[key]
    memo[key] = None
    total, n = 2, 0
    for v in (value if t is not dict else (x for pair in value.items() for x in pair)):
        n += 1
        tv = type(v)  # scalars inline: a million-element list is measured in a fraction of a second
        if tv is str:
            total += len(v) + 4
        elif tv is int or tv is bool:
            total += v.bit_length() // 3 + 4
        elif tv in _FIXED_WEIGHT:
            total += _FIXED_WEIGHT[tv] + 2
        else:
            total += weight(v, memo, _visits) + 2
        if total > MAX_WEIGHT:
            break
    if _visits is not None:
        _visits[0] += n
    memo[key] = total
    return total


def _check_spec(spec: str) -> None:
    for m in _SPEC_NUMBER.finditer(spec):
        if int(m.group()) > MAX_FORMAT_WIDTH:
            raise Refused(f"a format width/precision over {MAX_FORMAT_WIDTH}")


def _check_format_string(fmt: str) -> None:
    import string

    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error
    for _, field, spec, _ in fields:
        if spec and "{" in spec:
            raise Refused("a nested format spec")
        if spec:
            _check_spec(spec)
        if field and "__" in field:
            # attribute lookups inside a format field bypass the attribute rules (never a call,
            # but a way to the evaluator's own objects)
            raise Refused("a dunder attribute in a format field is not evaluated")


def _seq_repeat_weight(a, b):
    """The weight ``a * b`` would have, when one side is a sequence and the other an int."""
    if type(a) in (int, bool):
        a, b = b, a
    if type(b) not in (int, bool):
        return None
    n = max(int(b), 0)
    if type(a) in (str, bytes, bytearray):
        return len(a) * n + 2
    if type(a) in (list, tuple):
        return (weight(a) - 2) * n + 2
    return None


def _precheck_binop(op, a, b):
    if op is ast.Pow and type(a) in (int, bool) and type(b) in (int, bool) and b > 0 and abs(a) > 1:
        if abs(a).bit_length() * b > MAX_INT_BITS:
            raise Refused(f"{a!r:.20} ** {b} has more than {MAX_INT_BITS} bits")
    elif op is ast.LShift and type(a) in (int, bool) and type(b) in (int, bool) and b > 0 and a:
        if abs(a).bit_length() + b > MAX_INT_BITS:
            raise Refused(f"<< {b} gives more than {MAX_INT_BITS} bits")
    elif op is ast.Mult:
        w = _seq_repeat_weight(a, b)
        if w is not None and w > MAX_WEIGHT:
            raise Refused(f"a repetition larger than {MAX_WEIGHT}")
    elif op is ast.Mod and type(a) in (str, bytes):
        fmt = a if type(a) is str else a.decode("latin-1")
        for m in _PERCENT_SPEC.finditer(fmt):
            for g in m.groups():
                if g and g != "*" and int(g) > MAX_FORMAT_WIDTH:
                    raise Refused(f"a %-format width over {MAX_FORMAT_WIDTH}")
            if "*" in m.group():
                raise Refused("a %-format width taken from the arguments")


class _Lambda:
    """A lambda of the expression: its body is evaluated by the evaluator when called."""

    def __init__(self, ev, node, scope, defaults):
        self.ev, self.node, self.scope, self.defaults = ev, node, scope, defaults

    def __call__(self, *args, **kwargs):
        params = [a.arg for a in self.node.args.args]
        if len(args) > len(params):
            raise TypeError(f"<lambda>() takes {len(params)} positional arguments but {len(args)} were given")
        bound = dict(zip(params, args))
        for k, v in kwargs.items():
            if k not in params:
                raise TypeError(f"<lambda>() got an unexpected keyword argument {k!r}")
            if k in bound:
                raise TypeError(f"<lambda>() got multiple values for argument {k!r}")
            bound[k] = v
        first_default = len(params) - len(self.defaults)
        for i, p in enumerate(params):
            if p not in bound:
                if i < first_default:
                    raise TypeError(f"<lambda>() missing required positional argument: {p!r}")
                bound[p] = self.defaults[i - first_default]
        return self.ev.ev(self.node.body, {**self.scope, **bound})

    def __repr__(self):
        return "<function <lambda>>"


class _Evaluator:
    def __init__(self):
        self.work = 0
        self.produced = 0

    def charge(self, n: int):
        self.work += n
        if self.work > MAX_WORK:
            raise Refused(f"more than {MAX_WORK} units of evaluation work (evaluation steps)")

    def step(self):
        self.charge(10)

    def measure(self, value) -> int:
        """``value``'s weight, within the bound for one value; measuring it is work."""
        if type(value) is int and value.bit_length() > MAX_INT_BITS:
            raise Refused(f"an integer of {value.bit_length()} bits (bound {MAX_INT_BITS})")
        visits = [0]
        w = weight(value, None, visits)
        self.charge(visits[0] + (len(value) >> 6 if isinstance(value, (str, bytes, bytearray)) else 0))
        if w > MAX_WEIGHT:
            raise Refused(f"a value larger than {MAX_WEIGHT} characters/elements")
        return w

    def check(self, value):
        """A value just made: within the bounds, and counted into what the expression holds."""
        self.produced += self.measure(value)
        if self.produced > MAX_PRODUCED:
            raise Refused(f"values larger than {MAX_PRODUCED} characters/elements in all")
        return value

    def grow(self, total: list, value) -> None:
        """A container being filled: its running weight stays within the bound for one value."""
        total[0] += self.measure(value) + 2
        if total[0] > MAX_WEIGHT:
            raise Refused(f"a value larger than {MAX_WEIGHT} characters/elements")

    def charge_inputs(self, *values):
        """The work of a builtin operation, as the sizes of its inputs."""
        self.charge(sum(len(v) if isinstance(v, _SIZED) else v.bit_length() >> 6 if type(v) is int else 0
                        for v in values))

    # -- dispatch ----------------------------------------------------------------------------
    def ev(self, node, scope: dict):
        self.step()
        meth = getattr(self, "ev_" + type(node).__name__, None)
        if meth is None:
            if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
                # eval() rejects these at compile time
                raise EvalError(f"SyntaxError: {type(node).__name__.lower()} outside function")
            raise Refused(f"{type(node).__name__} expressions are not evaluated")
        return meth(node, scope)

    def ev_Constant(self, node, scope):
        if type(node.value) is int and node.value.bit_length() > 4000:
            # BFCL evaluates ``ast.unparse(node)``: an int literal (hex, say) whose decimal repr is
            # over Python's digit limit cannot be unparsed, so the whole value fails there.
            try:
                repr(node.value)
            except ValueError as e:
                raise EvalError(f"ValueError: {e}") from e
        return node.value

    def ev_Name(self, node, scope):
        name = node.id
        if name in scope:
            return scope[name]
        if name in BFCL_EVAL_NAMES:  # BFCL's module globals come before the builtins there
            raise Refused(f"name {name!r} is one of BFCL's own module globals, not evaluated here")
        if name in BUILTINS:
            return BUILTINS[name]
        if name in _OTHER_BUILTINS:
            return _OTHER_BUILTINS[name]  # a value; calling it is refused
        raise EvalError(f"NameError: name {name!r} is not defined")

    def ev_Lambda(self, node, scope):
        a = node.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg:
            raise Refused("lambdas with other than plain parameters are not evaluated")
        defaults = [self.ev(d, scope) for d in a.defaults]
        return _Lambda(self, node, scope, defaults)

    def _elements(self, elts, scope):
        out, total = [], [2]
        for e in elts:
            if isinstance(e, ast.Starred):
                items = self._iterate(self.ev(e.value, scope))
            else:
                items = [self.ev(e, scope)]
            for v in items:
                self.grow(total, v)
                out.append(v)
        return out

    def ev_List(self, node, scope):
        return self.check(self._elements(node.elts, scope))

    def ev_Tuple(self, node, scope):
        return self.check(tuple(self._elements(node.elts, scope)))

    def ev_Set(self, node, scope):
        return self.check(set(self._elements(node.elts, scope)))

    def ev_Dict(self, node, scope):
        out, total = {}, [2]
        for k, v in zip(node.keys, node.values):
            if k is None:
                sub = self.ev(v, scope)
                if type(sub) is not dict:
                    raise EvalError(f"TypeError: {type(sub).__name__!r} object is not a mapping")
                self.grow(total, sub)
                out.update(sub)
            else:
                key = self.ev(k, scope)
                value = self.ev(v, scope)
                self.grow(total, (key, value))
                out[key] = value
        return self.check(out)

    def ev_BinOp(self, node, scope):
        a = self.ev(node.left, scope)
        b = self.ev(node.right, scope)
        _precheck_binop(type(node.op), a, b)
        self.charge_inputs(a, b)
        return self.check(_BINOPS[type(node.op)](a, b))

    def ev_UnaryOp(self, node, scope):
        return self.check(_UNARY[type(node.op)](self.ev(node.operand, scope)))

    def ev_BoolOp(self, node, scope):
        is_and = isinstance(node.op, ast.And)
        value = None
        for v in node.values:
            value = self.ev(v, scope)
            if bool(value) != is_and:
                return value
        return value

    def ev_Compare(self, node, scope):
        left = self.ev(node.left, scope)
        for op, comp in zip(node.ops, node.comparators):
            right = self.ev(comp, scope)
            self.charge_inputs(left, right)
            if isinstance(op, (ast.Is, ast.IsNot)) and not all(
                    x is None or type(x) is bool or x is Ellipsis for x in (left, right)):
                # eval() shares equal constants of one code object, so `is` there is a compiler detail
                raise Refused("an identity test on values other than None/True/False")
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True

    def ev_IfExp(self, node, scope):
        return self.ev(node.body if self.ev(node.test, scope) else node.orelse, scope)

    def ev_Subscript(self, node, scope):
        return self.check(self.ev(node.value, scope)[self.ev(node.slice, scope)])

    def ev_Slice(self, node, scope):
        part = [None if n is None else self.ev(n, scope) for n in (node.lower, node.upper, node.step)]
        return slice(*part)

    def ev_JoinedStr(self, node, scope):
        parts, total = [], [2]
        for v in node.values:
            part = v.value if isinstance(v, ast.Constant) else self.ev_FormattedValue(v, scope)
            self.grow(total, part)
            parts.append(part)
        return self.check("".join(parts))

    def ev_FormattedValue(self, node, scope):
        value = self.ev(node.value, scope)
        conv = {-1: None, 115: str, 114: repr, 97: ascii}[node.conversion]
        if conv is not None:
            value = conv(value)
        spec = self.ev_JoinedStr(node.format_spec, scope) if node.format_spec is not None else ""
        _check_spec(spec)
        return format(value, spec)

    def ev_Attribute(self, node, scope):
        return self._attribute(self.ev(node.value, scope), node.attr)

    @staticmethod
    def _attribute(obj, attr):
        if attr in _ATTRS.get(type(obj), ()):
            return getattr(obj, attr)
        if isinstance(obj, type) and obj in _METHODS and attr in _METHODS[obj]:
            return getattr(obj, attr)  # an unbound method, ``str.lower``
        raise Refused(f"attribute {attr!r} of {type(obj).__name__} is not evaluated")

    # -- calls -------------------------------------------------------------------------------
    def _args(self, node, scope):
        args = self._elements(node.args, scope)
        kwargs, total = {}, [2]
        for kw in node.keywords:
            if kw.arg is None:
                sub = self.ev(kw.value, scope)
                if type(sub) is not dict:
                    raise EvalError("TypeError: argument after ** must be a mapping")
                kwargs.update(sub)
            else:
                kwargs[kw.arg] = self.ev(kw.value, scope)
            self.grow(total, kwargs)
        return args, kwargs

    def ev_Call(self, node, scope):
        if isinstance(node.func, ast.Attribute):
            obj = self.ev(node.func.value, scope)
            name = node.func.attr
            if not isinstance(obj, type):
                if name not in _METHODS.get(type(obj), ()):
                    raise Refused(f"method {name!r} of {type(obj).__name__} is not evaluated")
                args, kwargs = self._args(node, scope)
                return self._call_method(obj, name, args, kwargs)
            func = self._attribute(obj, name)
        else:
            func = self.ev(node.func, scope)
        args, kwargs = self._args(node, scope)
        return self.call(func, args, kwargs)

    def call(self, func, args: list, kwargs: dict):
        if func in _CALLS_ITS_ARGUMENTS:
            for v in list(args) + list(kwargs.values()):
                if callable(v) and not isinstance(v, _Lambda) and id(v) not in _FUNCTIONAL:
                    raise Refused("a function argument that may grow its result unchecked")
        if isinstance(func, _Lambda):
            return func(*args, **kwargs)
        if id(func) in _DESCRIPTORS:
            name = _DESCRIPTORS[id(func)][1]
            if not args or name not in _METHODS.get(type(args[0]), ()):
                raise EvalError(f"TypeError: descriptor {name!r} needs a matching object")
            return self._call_method(args[0], name, list(args[1:]), kwargs)
        if id(func) not in _CALLABLE:
            raise Refused(f"calling {getattr(func, '__name__', type(func).__name__)!r} is not evaluated")
        if func is type and len(args) != 1:
            raise Refused("type() with other than one argument")
        if func is iter and len(args) != 1:
            raise Refused("iter() with a sentinel")
        _precheck_builtin(func, args, kwargs)
        self.charge_inputs(*args, *kwargs.values())
        return self.check(func(*args, **kwargs))

    def _call_method(self, obj, name, args, kwargs):
        if name == "join" and args and not isinstance(args[0], _SIZED):
            args[0] = self._iterate(args[0])  # join consumes its iterable anyway
        _precheck_method(obj, name, args, kwargs)
        self.charge_inputs(obj, *args, *kwargs.values())
        return self.check(getattr(obj, name)(*args, **kwargs))

    # -- comprehensions ------------------------------------------------------------------------
    def _iterate(self, it):
        if _too_many_items(it):
            raise Refused(f"iterating over more than {MAX_ITEMS} items")
        out = []
        for x in it:
            self.charge(1)
            out.append(x)
        return out

    def _comprehend(self, generators, scope, emit):
        def loop(i, env):
            if i == len(generators):
                emit(env)
                return
            gen = generators[i]
            if gen.is_async:
                raise EvalError("SyntaxError: asynchronous comprehension outside of an asynchronous function")
            for x in self._iterate(self.ev(gen.iter, env)):
                inner = dict(env)
                self._bind(gen.target, x, inner)
                if all(self.ev(cond, inner) for cond in gen.ifs):
                    loop(i + 1, inner)

        loop(0, dict(scope))

    def _bind(self, target, value, env):
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value)
            if any(isinstance(t, ast.Starred) for t in target.elts):
                raise Refused("starred assignment targets are not evaluated")
            if len(values) != len(target.elts):
                raise EvalError(f"ValueError: cannot unpack {len(values)} values into {len(target.elts)}")
            for t, v in zip(target.elts, values):
                self._bind(t, v, env)
        else:
            raise Refused(f"assignment to {type(target).__name__} is not evaluated")

    def _collect(self, node, scope) -> list:
        out, total = [], [2]

        def emit(env):
            v = self.ev(node.elt, env)
            self.grow(total, v)
            out.append(v)

        self._comprehend(node.generators, scope, emit)
        return out

    def ev_ListComp(self, node, scope):
        return self.check(self._collect(node, scope))

    def ev_SetComp(self, node, scope):
        return self.check(set(self._collect(node, scope)))

    def ev_GeneratorExp(self, node, scope):
        # evaluated eagerly: a list iterator stands in for the generator (same items, same order)
        return iter(self.check(self._collect(node, scope)))

    def ev_DictComp(self, node, scope):
        out, total = {}, [2]

        def emit(env):
            key, value = self.ev(node.key, env), self.ev(node.value, env)
            self.grow(total, (key, value))
            out[key] = value

        self._comprehend(node.generators, scope, emit)
        return self.check(out)


def _precheck_method(obj, name, args, kwargs):
    if type(obj) in (str, bytes):
        if name in ("split", "rsplit", "splitlines") and len(obj) > MAX_ITEMS:
            sep = args[0] if args else kwargs.get("sep")
            parts = obj.count(sep) + 1 if type(sep) is type(obj) and sep else len(obj) // 2 + 1
            if name == "splitlines" or parts > MAX_ITEMS:
                raise Refused(f"splitting into over {MAX_ITEMS} parts")
        if name in ("center", "ljust", "rjust", "zfill"):
            width = args[0] if args else kwargs.get("width", 0)
            if type(width) in (int, bool) and width > MAX_WEIGHT:
                raise Refused(f"{name} to a width over {MAX_WEIGHT}")
        elif name == "replace" and len(args) >= 2 and type(args[0]) is type(obj) and type(args[1]) is type(obj):
            n = obj.count(args[0])
            if len(args) > 2 and type(args[2]) is int and args[2] >= 0:
                n = min(n, args[2])
            if len(obj) + n * len(args[1]) > MAX_WEIGHT:
                raise Refused(f"a replace giving over {MAX_WEIGHT} characters")
        elif name == "join" and args:
            items = args[0]
            if isinstance(items, _SIZED) and len(obj) * len(items) + weight(items) > MAX_WEIGHT:
                raise Refused(f"a join giving over {MAX_WEIGHT} characters")
        elif name == "format":
            _check_format_string(obj)
    elif type(obj) in (int, bool) and name == "to_bytes":
        length = args[0] if args else kwargs.get("length", 1)
        if type(length) in (int, bool) and length > MAX_WEIGHT:
            raise Refused(f"to_bytes of over {MAX_WEIGHT} bytes")


# Builtins that make (or yield) an item per element of their input; min/max/sum/all/any only loop.
_ITEM_MAKERS = (list, tuple, set, frozenset, dict, sorted, reversed, enumerate, zip, map, filter, iter, bytes, bytearray)


def _too_many_items(value) -> bool:
    try:
        return len(value) > MAX_ITEMS
    except OverflowError:  # a range longer than sys.maxsize
        return True
    except TypeError:  # unsized: an iterator, itself made from a bounded input
        return False


def _precheck_builtin(func, args, kwargs):
    if func is range:
        try:
            r = range(*args)
        except (TypeError, ValueError):
            return  # range() itself raises the same error
        if _too_many_items(r):
            raise Refused(f"a range of over {MAX_ITEMS} items")
    elif func in (bytes, bytearray) and args and type(args[0]) in (int, bool) and args[0] > MAX_WEIGHT:
        raise Refused(f"bytes({args[0]})")
    elif func is pow and len(args) == 2:
        _precheck_binop(ast.Pow, args[0], args[1])
    elif func is format and len(args) >= 2 and type(args[1]) is str:
        _check_spec(args[1])
    if func is sum and len(args) >= 2 and type(args[1]) in (list, tuple, str, bytes):
        if isinstance(args[0], (list, tuple)) and len(args[0]) > 1000:
            raise Refused("summing over 1000 sequences")
    if func in _ITEM_MAKERS:
        for a in args:
            if type(a) not in (int, bool) and _too_many_items(a):
                raise Refused(f"making over {MAX_ITEMS} items out of one value")


def evaluate(node: ast.AST):
    """The value Python's ``eval`` gives the expression ``node``; EvalError when it raises or is refused."""
    ev = _Evaluator()
    try:
        return ev.ev(node, {})
    except EvalError:
        raise
    except RecursionError as e:
        raise Refused(f"expression nested too deeply: {e}") from e
    except MemoryError as e:
        raise Refused("out of memory") from e
    except Exception as e:  # the exception Python's eval raises on the same values
        raise EvalError(f"{type(e).__name__}: {e}") from e
