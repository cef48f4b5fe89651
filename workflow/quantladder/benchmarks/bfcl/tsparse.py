"""Java and JavaScript answers read with tree-sitter, by the rules of BFCL's prompt-mode readers.

BFCL (bfcl-eval 2026.3.23, model_handler/parser/java_parser.py and js_parser.py) parses the text
inside the outer brackets with the tree-sitter grammars it pins (tree_sitter 0.21.3,
tree-sitter-java 0.21.0, tree-sitter-javascript 0.21.4, the versions this project depends on):

- a parse tree holding an ERROR node is a syntax error (MISSING nodes are not);
- Java: the first ``method_invocation`` in a depth-first walk of the whole program is the call
  (after other statements, inside a declaration, a ``return`` or an expression); its name is
  ``object.name`` as written. Arguments are ``name=value`` assignments, plus unnamed identifiers,
  class literals and set-like nodes under the key ``None``; a repeated name is an error. A value is
  rendered back to text: a string or character literal without its quotes at the top level (so
  ``'abc'`` gives ``abc``), identifiers, class literals and method invocations as written,
  ``new T[]{..}`` / ``new T(..)`` re-spelled, any other node as the concatenation of its leaves
  (the spaces between tokens are lost). A program without a call gives ``{}``.
- JavaScript: only an expression statement of the program whose child is a ``call_expression``
  counts; its callee's text is the name. ``name=value`` assignments keep the value's source text,
  one pair of enclosing quotes removed; unnamed identifiers and ``true`` go under ``None`` (other
  unnamed values — numbers, strings, ``false``, ``undefined``, ``this``, ``super`` — are dropped).
  A program without such a statement gives ``None``.
"""

from __future__ import annotations

from functools import lru_cache


class SyntaxFailure(SyntaxError):
    """The tree-sitter parse holds an ERROR node (BFCL raises SyntaxError there too)."""


class DuplicateArgument(ValueError):
    """The same argument name (or two unnamed ones) given twice."""


@lru_cache(maxsize=None)
def _parser(language: str):
    from tree_sitter import Language, Parser

    if language == "java":
        import tree_sitter_java as grammar
    else:
        import tree_sitter_javascript as grammar
    parser = Parser()
    parser.set_language(Language(grammar.language(), language))
    return parser


def _parse(source: str, language: str):
    data = source.encode("utf8")
    tree = _parser(language).parse(data)
    root = tree.root_node
    if "ERROR" in root.sexp():
        raise SyntaxFailure(f"tree-sitter finds a {language} syntax error")
    return root, data


def _put(args: dict, key, value) -> None:
    if key in args:
        raise DuplicateArgument(f"argument {key!r} given more than once")
    args[key] = value


# -- Java ---------------------------------------------------------------------------------------
_JAVA_AS_WRITTEN = {"identifier", "class_literal", "type_identifier", "method_invocation"}
_JAVA_UNNAMED = {"identifier", "class_literal", "set"}


def java_calls(source: str):
    """``[{name: {param: text}}]`` for the first Java method invocation, ``{}`` when there is none."""
    root, data = _parse(source, "java")

    def text(node) -> str:
        # Slices of the str by byte offsets, as BFCL takes them (equal to the bytes for ASCII text).
        return source[node.start_byte:node.end_byte]

    def render(node, nested: bool) -> str:
        kind = node.type
        if kind in ("string_literal", "character_literal"):
            return text(node) if nested else text(node)[1:-1]
        if kind in _JAVA_AS_WRITTEN:
            return text(node)
        if kind == "array_creation_expression":
            typ = render(node.child_by_field_name("type"), True)
            value = render(node.child_by_field_name("value"), True)
            return f"new {typ}[]{value}"
        if kind == "object_creation_expression":
            typ = render(node.child_by_field_name("type"), True)
            arguments = node.child_by_field_name("arguments")
            if arguments is None:
                return f"new {typ}()"
            parts = [render(c, True) for c in arguments.children if c.type not in (",", "(", ")")]
            return f"new {typ}(" + ", ".join(parts) + ")"
        if kind == "set":
            return "{" + ", ".join(render(c, True) for c in node.children if c.type not in (",", "set")) + "}"
        if node.child_count:
            return "".join(render(c, True) for c in node.children)
        return text(node)

    def arguments_of(node) -> dict:
        args: dict = {}
        for child in node.children:
            if child.type == "assignment_expression":
                _put(args, text(child.children[0]), render(child.children[2], False))
            elif child.type in _JAVA_UNNAMED:
                _put(args, None, render(child, False))
        return args

    def first_call(node):
        if node.type == "method_invocation":
            name = text(node.child_by_field_name("name"))
            obj = node.child_by_field_name("object")
            if obj is not None:
                name = f"{text(obj)}.{name}"
            arguments = node.child_by_field_name("arguments")
            if arguments is not None:
                return [{name: arguments_of(arguments)}]
            return None
        for child in node.children:
            found = first_call(child)
            if found:
                return found
        return None

    return first_call(root) or {}


# -- JavaScript ---------------------------------------------------------------------------------
def js_calls(source: str):
    """``[{name: {param: text}}]`` for the first top-level call statement, ``None`` when there is none."""
    root, _ = _parse(source, "javascript")
    if root.type != "program":
        return None
    for stmt in root.children:
        if stmt.type != "expression_statement":
            continue
        for expr in stmt.children:
            if expr.type != "call_expression":
                continue
            name = expr.children[0].text.decode("utf-8")
            args: dict = {}
            for child in expr.children[1].children:
                if child.type == "assignment_expression":
                    value = child.children[2].text.decode("utf-8")
                    if len(value) >= 1 and value[0] == value[-1] and value[0] in "\"'":
                        value = value[1:-1]
                    _put(args, child.children[0].text.decode("utf-8"), value)
                elif child.type in ("identifier", "true"):
                    _put(args, None, child.text.decode("utf-8"))
            return [{name: args}]
    return None
