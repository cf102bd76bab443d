"""Where a top-level function sits in Python source text, found with ast, and the edits the classroom
tools make with that: blank a body (scripts/make_assignment.py), paste a definition back, drop definitions
(scripts/grade.py). The grader bundle carries this file beside those two."""
import ast


def function_node(tree: ast.Module, name: str, path: str = "") -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise LookupError(f"{path}: no top-level function {name}()")


def _trailing(lines: list, end: int, indent: int) -> int:
    """Extend a function's last line over the comment lines indented into its body that follow it."""
    while end < len(lines) and lines[end].strip().startswith("#") and \
            len(lines[end]) - len(lines[end].lstrip()) > indent:
        end += 1
    return end


def function_span(source: str, name: str, path: str = "") -> tuple:
    """(first, end) line indices (0-based, end exclusive) of the whole def: decorators to its last line."""
    node = function_node(ast.parse(source), name, path)
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    return first, _trailing(source.splitlines(keepends=True), node.end_lineno, node.col_offset)


def body_span(source: str, name: str, path: str = "") -> tuple:
    """(first, end, indent) of the function's body after its docstring (with the comments in it)."""
    node = function_node(ast.parse(source), name, path)
    lines = source.splitlines(keepends=True)
    body = node.body
    has_doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
        isinstance(body[0].value.value, str)
    indent = body[0].col_offset
    if has_doc:
        first = body[0].end_lineno
    else:  # the body's first statement, and the comment lines just above it
        first = body[0].lineno - 1
        while first > node.lineno and lines[first - 1].strip().startswith("#"):
            first -= 1
    return first, _trailing(lines, node.end_lineno, node.col_offset), indent


def paste_function(source: str, reference: str, name: str, path: str = "") -> str:
    """`source` with function `name` replaced by its definition in `reference` (appended if `source`
    lacks it)."""
    ref_first, ref_end = function_span(reference, name, path)
    definition = "".join(reference.splitlines(keepends=True)[ref_first:ref_end])
    lines = source.splitlines(keepends=True)
    try:
        first, end = function_span(source, name, path)
    except LookupError:
        return source.rstrip("\n") + "\n\n\n" + definition
    return "".join(lines[:first]) + definition + "".join(lines[end:])


def without_functions(source: str, names: list, path: str = "") -> str:
    """`source` minus the listed functions (to compare a file outside an exercise's functions)."""
    for name in names:
        try:
            first, end = function_span(source, name, path)
        except (LookupError, SyntaxError):
            continue
        lines = source.splitlines(keepends=True)
        source = "".join(lines[:first]) + f"# <{name}>\n" + "".join(lines[end:])
    return source
