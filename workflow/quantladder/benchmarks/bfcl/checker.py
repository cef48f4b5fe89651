"""BFCL's AST checker, written here from the rules BFCL publishes.

Reference: the Berkeley Function Calling Leaderboard (Patil et al., "Gorilla" / BFCL v4,
gorilla.cs.berkeley.edu/leaderboard; the rules below are those of `bfcl-eval` 2026.3.23,
eval_checker/ast_eval). The official verdicts on a curated set of outputs are kept in
tests/fixtures/bfcl/parity.json and tests/test_bfcl_parity.py holds this module to them.

A decoded call is ``{"func.name": {"param": value, ...}}``; a possible answer maps each parameter to
the list of values accepted for it, where ``""`` in that list means "may be omitted".

Rules (BFCL's):
- the function name must match exactly (dotted names included; prompt mode does no renaming);
- every required parameter present; no parameter outside both the schema and the answer;
- types: Python types compared exactly (``bool`` is not an ``int``), an ``int`` is accepted for a
  ``float``, a tuple for a ``tuple`` parameter becomes a list, arrays are type-checked one level deep;
  Java / JavaScript values arrive as source strings and are converted by type first;
- a value whose type is the possible answer's type rather than the schema's is a *variable* name and
  is compared plainly;
- strings (and the strings inside lists and dicts) are compared after standardisation: spaces and
  ``,./-_*^`` removed, lower-cased, ``'`` made ``"``;
- a parameter left out must have ``""`` among its possible values;
- parallel categories match calls in any order (each expected call takes the first unused output
  call that passes); "multiple" takes the single expected call.
Errors carry BFCL's error-type names so that per-item verdicts compare one to one.
"""

from __future__ import annotations

import re

PY_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
            "tuple": list, "dict": dict, "any": str}
JAVA_TYPES = {"byte": int, "short": int, "integer": int, "float": float, "double": float, "long": int,
              "boolean": bool, "char": str, "Array": list, "ArrayList": list, "Set": set, "HashMap": dict,
              "Hashtable": dict, "Queue": list, "Stack": list, "String": str, "any": str}
JS_TYPES = {"String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool, "dict": dict,
            "array": list, "any": str}
LANG_TYPES = {"python": PY_TYPES, "java": JAVA_TYPES, "javascript": JS_TYPES}
# Array-like types whose element type BFCL checks (one level).
PY_NESTED = ("array", "tuple")
CONVERTED_NESTED = ("Array", "ArrayList", "array")

_STD_RE = re.compile(r"[ ,./\-_*^]")


class CheckerError(Exception):
    """BFCL's checker raises on this output (an unconvertible declared type, a schema key missing);
    its run stops there, so there is no official verdict. ``kind`` is the exception's name."""

    def __init__(self, exc: BaseException):
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.kind = type(exc).__name__


def _fail(error_type: str, msg: str) -> dict:
    return {"valid": False, "error": [msg], "error_type": error_type}


def _r(value) -> str:
    """repr for messages; an int over Python's digit limit has none."""
    try:
        return repr(value)[:300]
    except ValueError:
        return f"<{type(value).__name__} too long to print>"


_OK = {"valid": True, "error": []}


def standardize(s: str) -> str:
    """BFCL's string standardisation (so 'April 1, 2024' equals 'April 1 2024')."""
    return _STD_RE.sub("", s).lower().replace("'", '"')


def _std_list(values: list) -> list:
    return [standardize(v) if type(v) is str else v for v in values]


# -- Java / JavaScript source-string conversion ---------------------------------------------
_INT = re.compile(r"^-?\d+$")
_JAVA_FLOAT = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$")
_JAVA_DOUBLE = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$")
_JAVA_LONG = re.compile(r"^-?\d+[lL]$")
_JS_FLOAT = re.compile(r"^-?\d+(\.\d+)?$")
_JS_BIGINT = re.compile(r"^-?\d+n$")


def _number_or_text(text: str):
    """An int, else a float, else the text unchanged (Java and JavaScript literals alike)."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _java_scalar(text: str):
    """An untyped Java literal: true/false, "string", 12L, 1.5f, numbers, else the text itself."""
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if _JAVA_LONG.match(text):
        return int(text[:-1])
    if _JAVA_FLOAT.match(text):
        return float(text[:-1])
    return _number_or_text(text)


def java_value(text: str, jtype: str, item_type: str | None = None):
    """Convert a Java source string to a Python value by its declared type.

    A string that does not spell a value of that type stays a string (and then fails the type
    check), as in BFCL. Set/Hashtable/Queue/Stack are not convertible there either.
    """
    if jtype not in JAVA_TYPES:
        raise ValueError(f"unsupported Java type {jtype!r}")
    if jtype in ("byte", "short", "integer"):
        return int(text) if _INT.match(text) else text
    if jtype == "float":
        return float(text[:-1]) if _JAVA_FLOAT.match(text) else text
    if jtype == "double":
        return float(text) if _JAVA_DOUBLE.match(text) else text
    if jtype == "long":
        return int(text[:-1]) if _JAVA_LONG.match(text) else text
    if jtype == "boolean":
        return text == "true" if text in ("true", "false") else text
    if jtype == "char":
        # BFCL's char pattern can never match (its anchors are misplaced), so a char stays as written.
        return text
    if jtype == "ArrayList":
        return _java_arraylist(text, item_type)
    if jtype == "Array":
        return _java_array(text, item_type)
    if jtype == "HashMap":
        return _java_hashmap(text)
    if jtype in ("Set", "Hashtable", "Queue", "Stack"):
        raise NotImplementedError(f"Java {jtype} values are not converted (as in BFCL)")
    return str(text)  # String, any


def _java_element(s: str, item_type: str | None):
    if item_type in ("char", "String"):
        return s[1:-1]  # quotes dropped, whatever they were
    return java_value(s, item_type) if item_type else _java_scalar(s)


def _java_arraylist(text: str, item_type):
    m = re.search(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)", text)
    if m:
        return [_java_element(p.strip(), item_type) for p in m.group(1).split(",")]
    m = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
    if m:
        return [_java_element(a.strip(), item_type) for a in re.findall(r"add\((.+?)\)", m.group(1))]
    if re.search(r"new\s+ArrayList<\w*>\(\)", text):
        return []
    return text


def _java_array(text: str, item_type):
    m = re.search(r"new\s+\w+\[\]\s*\{(.*?)\}", text)
    if not m:
        return text
    parts = [p.strip() for p in m.group(1).split(",") if p.strip()]
    return [java_value(p, item_type) if item_type else _java_scalar(p) for p in parts]


def _java_hashmap(text: str):
    m = re.search(r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL)
    if m:
        out = {}
        if m.group(1).strip():
            for k, v in re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", m.group(1)):
                out[k] = _java_scalar(v.strip())
        return out
    if re.search(r"new\s+HashMap<.*?>\s*\(\)", text):
        return {}
    return text


def _js_scalar(text: str):
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return _number_or_text(text)


def js_value(text: str, jstype: str, item_type: str | None = None):
    """Convert a JavaScript source string to a Python value by its declared type (BFCL's rules)."""
    if jstype not in JS_TYPES:
        raise ValueError(f"unsupported JavaScript type {jstype!r}")
    if jstype == "String":
        quoted = (text.startswith('"') and text.endswith('"')) or (text.startswith("'") and text.endswith("'"))
        return text[1:-1] if quoted else str(text)
    if jstype == "integer":
        return int(text) if _INT.match(text) else text
    if jstype == "float":
        return float(text) if _JS_FLOAT.match(text) else text
    if jstype == "Bigint":
        return int(text[:-1]) if _JS_BIGINT.match(text) else text
    if jstype == "Boolean":
        return text == "true" if text in ("true", "false") else text
    if jstype == "dict":
        return _js_dict(text.strip())
    if jstype == "array":
        return _js_array(text.strip(), item_type)
    return str(text)  # any


_JS_2D = re.compile(r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)")
_JS_1D = re.compile(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)")


def _js_array(code: str, item_type):
    try:
        m2 = _JS_2D.match(code)
        if m2:
            rows = []
            for i, inner in enumerate(re.findall(r"\[(.*?)\]", m2.group(0))):
                inner = inner.strip()
                if i == 0 and inner.startswith("["):
                    inner = inner[1:]
                rows.append([_js_scalar(e.strip()) for e in inner.split(",")])
            return rows
        m = _JS_1D.match(code)
        if not m:
            return code
        body = m.group(1) if m.group(1) is not None else m.group(2)
        body = (body or "").strip()
        parts = body.split(",") if body else []
        if item_type:
            # A quoted element is read as a string element of the declared type.
            return [js_value(p.strip(), item_type, "String") if p.strip()[:1] in ("'", '"')
                    else js_value(p.strip(), item_type) for p in parts]
        return [_js_scalar(p.strip()) for p in parts]
    except Exception:  # BFCL falls back to the source text on any conversion error
        return code


def _js_dict(code: str):
    if code == "{}":
        return {}
    m = re.match(r"\{(.*?)\}", code)
    if not m:
        return code
    try:
        out = {}
        for key, val in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", m.group(1)):
            key = key.strip().strip("'\"")
            val = val.strip()
            if val.startswith("[") and val.endswith("]"):
                out[key] = _js_array(val, None)
            elif val.startswith("{") and val.endswith("}"):
                out[key] = _js_dict(val)
            else:
                out[key] = _js_scalar(val.strip("'\""))
        return out
    except Exception:
        return code


# -- type and value checks -------------------------------------------------------------------
def _answer_type(possible: list):
    for a in possible:
        if a != "":
            return type(a)
    return None


def _type_check(param: str, value, possible: list, type_name: str, expected: type, nested: type | None) -> dict:
    res = {"valid": True, "error": [], "is_variable": False, "error_type": "type_error:simple"}
    ans_type = _answer_type(possible)
    # The answer holding another type than the schema's means it names a variable.
    is_variable = ans_type is not None and ans_type is not expected
    if type(value) is expected:
        if nested is None:
            res["is_variable"] = is_variable
            return res
        for alt in possible:
            ok = True
            if type(alt) is list:
                for item in value:
                    if not _type_check(param, item, alt, str(nested), nested, None)["valid"]:
                        ok = False
                        break
            if ok:
                return {"valid": True, "error": [], "is_variable": is_variable}
        res = {"valid": False, "is_variable": False, "error_type": "type_error:nested",
               "error": [f"nested type check failed for {param!r}: {type_name} of {nested.__name__}, got {_r(value)}"]}
    if ans_type is not None and type(value) is ans_type:
        res["is_variable"] = True
        return res
    res["valid"] = False
    res["error"].append(f"wrong type for {param!r}: expected {type_name}, got {type(value).__name__} ({_r(value)})")
    res["error_type"] = "type_error:simple"
    return res


def _string_check(param: str, value: str, possible: list) -> dict:
    if standardize(value) not in [standardize(a) for a in possible if type(a) is str]:
        return _fail("value_error:string", f"{param!r}: {_r(value)} not among {possible} (standardised)")
    return _OK


def _list_check(param: str, value: list, possible: list) -> dict:
    if _std_list(list(value)) not in [_std_list(a) for a in possible if a != ""] + \
            ([[]] if False else []) and _std_list(list(value)) not in _std_alts(possible):
        return _fail("value_error:list/tuple", f"{param!r}: {_r(value)} not among {possible}")
    return _OK


def _std_alts(possible: list) -> list:
    # Every alternative is standardised element-wise; "" (omittable) stays an empty list of chars.
    return [_std_list(list(a)) for a in possible]


def _dict_check(param: str, value: dict, possible: list) -> dict:
    res = {"valid": False, "error": [], "error_type": "dict_checker:unclear"}
    for alt in possible:
        if alt == "":
            continue
        res = {"valid": False, "error": [], "error_type": "dict_checker:unclear"}
        ok = True
        for k, v in value.items():
            if k not in alt:
                res = _fail("value_error:dict_key", f"{param!r}: unexpected key {_r(k)}")
                ok = False
                break
            sv = standardize(v) if type(v) is str else v
            if sv not in _std_list(alt[k]):
                res = _fail("value_error:dict_value", f"{param!r}[{_r(k)}]: {_r(v)} not among {alt[k]}")
                ok = False
                break
        for k, vals in alt.items():
            if k not in value and "" not in vals:
                res = _fail("value_error:dict_key", f"{param!r}: missing key {_r(k)}")
                ok = False
                break
        if ok:
            return _OK
    return res


def _list_of_dicts_check(param: str, value: list, possible: list) -> dict:
    res = {"valid": False, "error": [], "error_type": "list_dict_checker:unclear"}
    for alt in possible:
        if len(value) != len(alt):
            res = _fail("value_error:list_dict_count", f"{param!r}: {len(value)} dicts, expected {len(alt)}")
            continue
        ok = True
        for i, d in enumerate(value):
            res = _dict_check(param, d, [alt[i]])
            if not res["valid"]:
                ok = False
                break
        if ok:
            return _OK
    return res


def check_call(func: dict, call: dict, answer: dict, language: str = "python") -> dict:
    """One output call against one expected call (BFCL's simple-function rules)."""
    expected_params = next(iter(answer.values()))
    name = func["name"]
    props = func["parameters"]["properties"]
    required = func["parameters"]["required"]  # a schema without it raises in BFCL too
    if name not in call:
        return _fail("simple_function_checker:wrong_func_name", f"function {name!r} not in the output")
    args = call[name]
    for p in required:
        if p not in args:
            return _fail("simple_function_checker:missing_required", f"missing required parameter {p!r}")
    types = LANG_TYPES[language]
    for p, value in args.items():
        if p not in props or p not in expected_params:
            return _fail("simple_function_checker:unexpected_param", f"unexpected parameter {p!r}")
        type_name = props[p]["type"]
        nested = None
        expected = types[type_name]
        if language in ("java", "javascript"):
            # Values of these languages arrive as source text, converted by the declared type.
            if type(value) is not str:
                return _fail(f"type_error:{'java' if language == 'java' else 'js'}",
                             f"{p!r}: expected a source string, got {type(value).__name__}")
            conv = java_value if language == "java" else js_value
            if type_name in CONVERTED_NESTED:
                item_type = props[p]["items"]["type"]
                nested = types[item_type]
                value = conv(value, type_name, item_type)
            else:
                value = conv(value, type_name)
        elif type_name in PY_NESTED:
            nested = types[props[p]["items"]["type"]]
        if type_name == "tuple" and type(value) is tuple:
            value = list(value)
        if language == "python" and type_name == "float" and type(value) is int:
            value = float(value)
        tc = _type_check(p, value, expected_params[p], type_name, expected, nested)
        if not tc["valid"]:
            return {k: tc[k] for k in ("valid", "error", "error_type")}
        if not tc["is_variable"]:
            sub = None
            if expected is dict:
                sub = _dict_check(p, value, expected_params[p])
            elif expected is list and nested is dict:
                sub = _list_of_dicts_check(p, value, expected_params[p])
            elif expected is str:
                sub = _string_check(p, value, expected_params[p])
            elif expected is list:
                sub = _list_check(p, value, expected_params[p])
            if sub is not None:
                if not sub["valid"]:
                    return sub
                continue
        if value not in expected_params[p]:
            return _fail("value_error:others", f"{p!r}: {_r(value)} not among {expected_params[p]}")
    for p, vals in expected_params.items():
        if p not in args and "" not in vals:
            return _fail("simple_function_checker:missing_optional", f"parameter {p!r} omitted but not optional")
    return {"valid": True, "error": [], "error_type": None}


def _find_func(funcs: list[dict], name: str) -> dict | None:
    for f in funcs:
        if f["name"] == name:
            return f
    return None


def check_calls(funcs: list[dict], calls: list[dict], answers: list[dict], category: str, language: str) -> dict:
    """A whole decoded output against an item's possible answer, by category (BFCL's dispatch).

    Raises CheckerError where BFCL's checker raises (then BFCL has no verdict for the output)."""
    try:
        return _check_calls(funcs, calls, answers, category, language)
    except (NotImplementedError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise CheckerError(e) from e


def _check_calls(funcs: list[dict], calls: list[dict], answers: list[dict], category: str, language: str) -> dict:
    if "parallel" in category:
        if len(calls) != len(answers):
            return _fail("parallel_function_checker_no_order:wrong_count",
                         f"{len(calls)} calls, expected {len(answers)}")
        used: set[int] = set()
        for ans in answers:
            func = _find_func(funcs, next(iter(ans)))
            matched = False
            for i, call in enumerate(calls):
                if i in used:
                    continue
                if check_call(func, call, ans, language)["valid"]:
                    used.add(i)
                    matched = True
                    break
            if not matched:
                return _fail("parallel_function_checker_no_order:cannot_find_match",
                             f"no output call matches expected {next(iter(ans))!r}")
        return {"valid": True, "error": [], "error_type": None}
    if "multiple" in category:
        if len(calls) != len(answers):
            return _fail("multiple_function_checker:wrong_count", f"{len(calls)} calls, expected {len(answers)}")
        return check_call(_find_func(funcs, next(iter(answers[0]))), calls[0], answers[0], language)
    if len(calls) != 1:
        return _fail("simple_function_checker:wrong_count", f"{len(calls)} calls, expected 1")
    return check_call(funcs[0], calls[0], answers[0], language)


def is_call_list(decoded) -> bool:
    """``[{name: {args}}, ...]`` (an empty list counts)."""
    if type(decoded) is not list:
        return False
    return all(type(c) is dict and len(c) == 1 and type(next(iter(c.values()))) is dict for c in decoded)


def has_no_call(decoded) -> bool:
    """BFCL's 'empty output' for (ir)relevance: not a call list, [], or [{}]."""
    return not is_call_list(decoded) or len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)
