r"""The shape of an answer: normalisation, then number, list, interval, relation, set, tuple, matrix, ...

`normalize` (both sides) drops layout, units and separators and makes one symbol of each spelling;
`canonical` gives the shape (Canon.kind). What each keeps and drops: docs/library.md#shapes"""
from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple, Optional

import sympy

from .parse import parse
from .values import GREEK, Num, ParseError, approx, neg
# Answers: normalisation, then the shape of the answer (number, list, interval, relation, ...)
MAX_ANSWER_CHARS = 400  # longer answers are rejected
MAX_ITEMS = 32          # elements in a list / tuple / matrix answer
MAX_NESTING = 4         # lists of tuples of sets...: deeper is text


def match_brace(s: str, i: int) -> int:
    """Index of the '}' closing the '{' at s[i], or -1. Escapes (\\{, \\}, \\\\) are skipped.
    Gives up past MAX_ANSWER_CHARS: longer contents are rejected anyway, so never scan further."""
    depth, stop = 0, min(len(s), i + MAX_ANSWER_CHARS + 2)
    while i < stop:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


_NOT_LETTER = r"(?![a-zA-Z])"
_REPLACEMENTS = [(re.compile(p), r) for p, r in [
    (r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])\.?", ""),
    (r"(?<!\\)\\[,!;:>]", ""),  # thin spaces (not "\\," = newline+comma): 1\,000 -> 1000
    (r"\\(?:q?quad|displaystyle|textstyle)" + _NOT_LETTER + r"|~|(?<!\\)\\ ", " "),
    (r"\\[dtc]frac" + _NOT_LETTER, r"\\frac"),
    (r"\\[dt]binom" + _NOT_LETTER, r"\\binom"),
    (r"\\(sin|cos|tan|cot|sec|csc)\s*\(?\s*(\d{1,3}(?:\.\d+)?)\s*(?:\^\s*\{?\s*\\circ\s*\}?|°)\s*\)?",
     r"\\\1(\\frac{\2\\pi}{180})"),  # sin 30° in radians, before degree marks are dropped
    (r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°", ""),
    (r"\\%", "%"),
    (r"\\\$|\$|\{,\}|(?<!\\)\\[()\[\]]", ""),  # dollars, 1{,}000, \( \) \[ \]
    (r"\\in" + _NOT_LETTER + r"|∈|:=", "="),
    (r"\\approx" + _NOT_LETTER + r"|≈", "≈"),
    (r"\\geq?(?:slant)?" + _NOT_LETTER + r"|>=|=>|≥", "≥"),
    (r"\\leq?(?:slant)?" + _NOT_LETTER + r"|<=|=<|≤", "≤"),
    (r"\\neq?" + _NOT_LETTER + r"|!=|≠", "≠"),
    (r"\\lt" + _NOT_LETTER, "<"),
    (r"\\[lr]?vert" + _NOT_LETTER, "|"),
    (r"\\gt" + _NOT_LETTER, ">"),
    (r"\\l(?:brace|\{)" + _NOT_LETTER, r"\\{"),
    (r"\\r(?:brace|\})" + _NOT_LETTER, r"\\}"),
    (r"\\langle" + _NOT_LETTER + r"|⟨", "("),
    (r"\\rangle" + _NOT_LETTER + r"|⟩", ")"),
    (r"\\(?:mathbb|Bbb|mathbf)\s*\{?\s*R\s*\}?|\\R" + _NOT_LETTER, "ℝ"),
    (r"\\(?:emptyset|varnothing)" + _NOT_LETTER + r"|\\\{\s*\\\}", "∅"),
    (r"\\cup" + _NOT_LETTER + r"|(?<=[)\]])\s*U\s*(?=[(\[])", "∪"),
]]
_NEEDS_REPLACEMENTS = re.compile(r"[\\$%<>=!~°U:{\u0080-\uffff]")
_UNICODE = str.maketrans({"−": "-", "×": r"\times ", "·": r"\cdot ", "π": r"\pi ", "∞": r"\infty ",
                          "√": r"\sqrt ", "∪": "∪", "\u00a0": " "})
_TEXT_CMD = re.compile(r"\\(?:text(?:bf|it|rm|normal|sf|tt|up)?|mbox|hbox|math(?:rm|bf|it|sf|tt)"
                       r"|operatorname|boxed|fbox)\s*\{")
_STOP_WORDS = (r"(?:or|and|not|no|nor|to|from|than|if|is|are|was|but|with|of|for|by|at|plus|minus|times"
               r"|over|divided|pi|sin|cos|tan|cot|sec|csc|log|ln|exp|sqrt|mod|either|neither|also|else"
               r"|except)\b")
# A unit is one or two words ("cm", "square units"); "34\text{ or 35}" / "\text{ not}" are not.
_UNIT_WORD = re.compile(r"\s*(?!" + _STOP_WORDS + r")[a-zA-Z]+\.?"
                        r"(?:\s+(?!" + _STOP_WORDS + r")[a-zA-Z]+\.?)?\s*")
_UNIT_POWER = re.compile(r"\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*")
# ... and a plain-text unit after a number: "5 cm", "12 square units", "5 m", "7 apples".
_PLAIN_UNIT = re.compile(r"(.*?[\d})])(?:\s+(?!" + _STOP_WORDS + r")(?:[a-zA-Z]{2,}|[mg])\.?){1,3}"
                         r"(?:\s*\^\s*\{?[23]\}?)?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}([, ])\d{3}(?:\1\d{3})*(?:\.\d+)?")  # 1,000 / 1 000
_ALL_REALS = re.compile(r"(?i)all\s+real(?:\s+numbers?)?|all\s+reals|\(-\\infty,\s*\\infty\)")


def _unwrap_text(s: str) -> str:
    """Replace \\text{X} by X, but drop a trailing \\text{unit} that follows some math (5\\text{ cm})."""
    out, i = [], 0
    for _ in range(MAX_ANSWER_CHARS):  # each pass consumes one command: bounded
        m = _TEXT_CMD.search(s, i)
        if not m:
            break
        end = match_brace(s, m.end() - 1)
        if end < 0:
            break
        inner = s[m.end():end]
        out.append(s[i:m.start()])
        if "".join(out).strip() and _UNIT_WORD.fullmatch(inner) and _UNIT_POWER.fullmatch(s[end + 1:]):
            return "".join(out)
        out.append(inner)
        i = end + 1
    return "".join(out) + s[i:]


def normalize(s: str) -> str:
    """Presentation-only differences removed (docs/library.md#shapes lists them)."""
    s = s.translate(_UNICODE)
    if _NEEDS_REPLACEMENTS.search(s):  # most answers ("42", "3/4") need none of the substitutions
        for pattern, repl in _REPLACEMENTS:
            s = pattern.sub(repl, s)
    if "≈" in s:  # "\sqrt2 \approx 1.414" is the exact \sqrt2; "x \approx 3.14" gives x the value 3.14
        head, _, tail = s.partition("≈")
        s = head + "=" + tail.split("≈")[0] if _NAME.fullmatch(head.strip()) else head
    s = _unwrap_text(s)
    s = " ".join(s.split()).strip("*").strip().rstrip(".,;:").strip()
    m = _PLAIN_UNIT.fullmatch(s)
    if m:
        s = m.group(1)
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "").replace(" ", "")
    return "ℝ" if _ALL_REALS.fullmatch(s) else s


class Canon(NamedTuple):
    """A normalised answer. kind: "num" | "text" | "choice" | "tuple" | "list" | "set" | "union" |
    "interval" | "rel" | "matrix". Equal texts are equal answers (the cheap first check)."""
    kind: str
    text: str
    value: object        # Num | tuple of Canon | tuple of Interval | tuple of rows | letter | None
    extra: object = None  # tuple: its brackets; num: "%" for a percentage; interval: the variable;
    #                      rel: (operators, which sides are names)


class Interval(NamedTuple):
    lo: Num
    hi: Num
    lo_closed: bool
    hi_closed: bool


_INF_NUM = Num(sympy.oo, None)
_NEG_INF_NUM = Num(-sympy.oo, None)
_CHOICE = re.compile(r"\(?([A-E])\)?|\(([A-E])\)\s*(.+)")  # "(B)", "B", "(B) 27" (a letter and its value)
_SPACE_AROUND_SYMBOL = re.compile(r"\s*([^\w\s])\s*")
_MATRIX = re.compile(r"[(\[]?\s*\\begin\{(?:[pbBvV]?matrix|smallmatrix|array)\}(?:\{[^{}]*\})?(.*?)"
                     r"\\end\{(?:[pbBvV]?matrix|smallmatrix|array)\}\s*[)\]]?", re.DOTALL)
_VAR = re.compile(r"(?:[A-Za-z]|\\(?:" + "|".join(sorted(GREEK)) + r"))(?:_\{?\w{1,8}\}?)?")
# The name side of "x = 5", "f(2) = 7", "a_1 = 4", "AB = 6", "m\angle ABC = 30": not part of the value.
_NAME = re.compile(r"(?:m\s*)?(?:\\(?:angle|overline|widehat|triangle)\s*)?"
                   r"\{?\s*(?:[A-Za-z]{1,3}|\\[a-zA-Z]+)\s*\}?"
                   r"(?:_\{?\w{1,8}\}?|'|\^\{?-1\}?)*(?:\s*\([^()=]{0,20}\))?")
_NAMES = re.compile(r"\(\s*[A-Za-z](?:_\{?\w{1,8}\}?)?(?:\s*,\s*[A-Za-z](?:_\{?\w{1,8}\}?)?)+\s*\)")  # (x, y)
_SET_BUILDER = re.compile(r"\\\{\s*[A-Za-z](?:_\{?\w{1,8}\}?)?\s*(?:\\mid|\||:)(.*)\\\}")  # \{x | x > 2\}
_ABS_VAR = re.compile(r"\|\s*(" + _VAR.pattern + r")\s*\|")  # |x|
_RELATIONS = "=<>≤≥≠"


@lru_cache(maxsize=16384)
def canonical(answer: str) -> Canon:
    """Normalise and parse one answer string (pure, cached: golds and common answers repeat)."""
    return _canon(normalize(answer), 0)


def list_of(items) -> Canon:
    return Canon("list", ", ".join(c.text for c in items), tuple(items))


def _text(s: str) -> Canon:
    """Plain-text answer: case-insensitive, and spaces only count between words (a \\ b == a\\b)."""
    s = re.sub(r"_\{(\w+)\}", r"_\1", s.lower())
    return Canon("text", _SPACE_AROUND_SYMBOL.sub(r"\1", s), None)


def _split_top(s: str, seps) -> tuple:
    """Split at top-level separators (outside brackets); returns (parts, separators used)."""
    if not any(sep in s for sep in seps):
        return [s.strip()], []
    parts, used, depth, start, i = [], [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            sep = next((x for x in seps if s.startswith(x, i)), None)
            if sep:
                parts.append(s[start:i])
                used.append(sep.strip())
                start = i = i + len(sep)
                continue
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts], used


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return False
    return depth == 0


def _canon(s: str, depth: int) -> Canon:
    if depth > MAX_NESTING or not s or len(s) > MAX_ANSWER_CHARS:
        return _text(s)
    m = _MATRIX.fullmatch(s)
    if m:
        return _matrix(s, m.group(1), depth)
    items, seps = _split_top(s, (",", ";", " or ", " and "))
    if len(items) > 1:
        return _list(s, items, seps, depth)
    sides, ops = _split_top(s, tuple(_RELATIONS))
    if ops:
        return _relation(s, sides, ops, depth)
    return _single(s, depth)


def _single(s: str, depth: int) -> Canon:
    """An answer with no top-level list separator or relation."""
    if s == "ℝ":
        return Canon("interval", s, (Interval(_NEG_INF_NUM, _INF_NUM, False, False),))
    if s == "∅":
        return Canon("set", s, ())
    m = _SET_BUILDER.fullmatch(s)
    if m:  # {x | x > 2} is the condition's solution set
        return _canon(m.group(1).strip(), depth + 1)
    parts, _ = _split_top(s, ("∪",))
    if len(parts) > 1:
        return _items("union", s, parts, depth)
    if s.endswith("%"):
        inner = _canon(s[:-1].strip(), depth + 1)
        return inner._replace(text=s, extra="%") if inner.kind == "num" else _text(s)
    m = _CHOICE.fullmatch(s)
    if m:
        value = _canon(m.group(3).strip(), depth + 1) if m.group(3) else None
        return Canon("choice", m.group(1) or m.group(2), m.group(1) or m.group(2), value)
    if s.startswith("\\{") and s.endswith("\\}"):
        return _items("set", s, _split_top(s[2:-2], (",", ";"))[0], depth)
    if len(s) > 2 and s[0] in "([" and s[-1] in ")]" and _balanced(s[1:-1]):
        items = _split_top(s[1:-1], (",", ";"))[0]
        if len(items) > 1:
            return _items("tuple", s, items, depth, s[0] + s[-1])
    if s.count("\\pm") == 1:  # a \pm b -> {a+b, a-b}
        return _items("list", s, [s.replace("\\pm", "+"), s.replace("\\pm", "-")], depth)
    if re.fullmatch(r"[A-Za-z][A-Za-z .'-]*", s) and re.search("[A-Za-z]{2}", s):  # words; "a - b" is not
        return _text(s)
    try:
        return Canon("num", s, parse(s))
    except ParseError:
        return _text(s)


def _items(kind: str, s: str, items, depth: int, extra=None) -> Canon:
    if len(items) > MAX_ITEMS or not all(items):
        return _text(s)
    return Canon(kind, s, tuple(_canon(x, depth + 1) for x in items), extra)


def _list(s: str, items, seps, depth: int) -> Canon:
    """"1, 2" / "x=1 or x=2" / "x < -1 or x > 2" (a union of intervals of one variable)."""
    c = _items("list", s, items, depth)
    if c.kind == "list" and all(x.kind == "interval" for x in c.value) and \
            len({x.extra for x in c.value}) == 1:
        if "and" not in seps:  # "x < -1 or x > 2": the union
            return Canon("interval", s, tuple(iv for x in c.value for iv in x.value), c.value[0].extra)
        if seps == ["and"] and all(len(x.value) == 1 for x in c.value):  # "x > 1 and x < 3": 1 < x < 3
            meet = _intersect(c.value[0].value[0], c.value[1].value[0])
            if meet is not None:
                return Canon("interval", s, (meet,), c.value[0].extra)
    return c


def _real(n: Num) -> Optional[float]:
    """A constant's real value as a float (infinities included), else None."""
    if not isinstance(n.exact, Fraction):
        if n.exact in (sympy.oo, -sympy.oo):
            return math.inf if n.exact == sympy.oo else -math.inf
        if n.exact.free_symbols:
            return None
    ap = approx(n)
    return None if ap is None or ap[0].imag else ap[0].real


def _intersect(a: Interval, b: Interval) -> Optional[Interval]:
    """Two intervals' intersection, when their endpoints compare as plain numbers and it is not empty (else
    None); a single point is [c, c] ("x \\ge 1 and x \\le 1": the equation x = 1, equal.py)."""
    los = [(_real(a.lo), a.lo, a.lo_closed), (_real(b.lo), b.lo, b.lo_closed)]
    his = [(_real(a.hi), a.hi, a.hi_closed), (_real(b.hi), b.hi, b.hi_closed)]
    if any(t[0] is None for t in los + his):
        return None
    lo = max(los, key=lambda t: (t[0], not t[2]))   # the larger lower end; open beats closed on a tie
    hi = min(his, key=lambda t: (t[0], t[2]))       # the smaller upper end; open beats closed on a tie
    point = lo[0] == hi[0] and lo[2] and hi[2]
    return Interval(lo[1], hi[1], lo[2], hi[2]) if lo[0] < hi[0] or point else None


def _matrix(s: str, body: str, depth: int) -> Canon:
    rows = [r for r in re.split(r"\\\\(?:\[[^\]]{0,10}\])?", body)]
    while rows and not rows[-1].strip():
        rows.pop()  # a trailing \\ before \end
    cells = [r.split("&") for r in rows]
    if not cells or len({len(r) for r in cells}) != 1 or sum(map(len, cells)) > MAX_ITEMS:
        return _text(s)
    return Canon("matrix", s, tuple(tuple(_canon(x.strip(), depth + 1) for x in r) for r in cells))


def _constant(side: str) -> Optional[Num]:
    """The value of a side with no variable (infinity allowed), else None."""
    try:
        v = parse(side)
    except ParseError:
        return None
    return v if isinstance(v.exact, Fraction) or not v.exact.free_symbols else None


_FLIP = {"<": ">", ">": "<", "≤": "≥", "≥": "≤", "=": "=", "≠": "≠"}


def _relation(s: str, sides, ops, depth: int) -> Canon:
    """"x = 5", "y = 2x+1", "x \\ge 5", "1 < x \\le 3", "x^2 + y^2 > 1". Inequalities of one
    variable against constants become intervals, so that they meet interval notation."""
    if len(ops) > 3:
        return _text(s)
    if ops == ["="] and not sides[0]:  # "= 5"
        return _canon(sides[1], depth)
    if not all(sides):
        return _text(s)
    if set(ops) != {"="}:
        iv = _inequality(s, sides, ops)
        if iv is not None:
            return iv
    canons = tuple(_canon(x, depth + 1) for x in sides)
    if ops == ["="] and _VAR.fullmatch(sides[0]) and canons[1].kind != "set":  # "x \\in (1, 2]"
        ivs = as_intervals(canons[1])
        if ivs is not None:
            return Canon("interval", s, ivs, re.sub(r"[{}\s]", "", sides[0]))
    names = tuple(bool(_NAME.fullmatch(x) or _NAMES.fullmatch(x)) and _constant(x) is None for x in sides)
    return Canon("rel", s, canons, (tuple(ops), names))


def as_intervals(c: Canon):
    """The intervals an answer denotes, or None: "x > 2", "(2, \\infty)", "(-1, 2] ∪ (3, 4)",
    "\\mathbb{R}"."""
    if c.kind == "interval":
        return c.value
    if c.kind == "tuple" and len(c.value) == 2 and all(x.kind == "num" for x in c.value):
        return (Interval(c.value[0].value, c.value[1].value, c.extra[0] == "[", c.extra[1] == "]"),)
    if c.kind == "set" and len(c.value) == 1 and c.value[0].kind == "num":  # {3} in a union
        return (Interval(c.value[0].value, c.value[0].value, True, True),)
    if c.kind == "union":
        parts = [as_intervals(x) for x in c.value]
        return None if None in parts else tuple(iv for p in parts for iv in p)
    return None


def _inequality(s: str, sides, ops) -> Optional[Canon]:
    if len(ops) == 1 and ops[0] in "<>≤≥":  # |x| < 3 is -3 < x < 3; |x| >= 3 is x <= -3 or x >= 3
        flipped = _ABS_VAR.fullmatch(sides[1]) is not None
        m = _ABS_VAR.fullmatch(sides[1] if flipped else sides[0])
        c = _constant(sides[0] if flipped else sides[1]) if m else None
        if c is not None and (approx(c) or (0,))[0].real > 0:
            op = _FLIP[ops[0]] if flipped else ops[0]
            closed = op in "≤≥"
            ivs = ((Interval(neg(c), c, closed, closed),) if op in "<≤" else
                   _ray("≤" if closed else "<", neg(c)) + _ray(op, c))
            return Canon("interval", s, ivs, re.sub(r"[{}\s]", "", m.group(1)))
    if len(ops) == 1:
        for var, const, op in ((sides[0], sides[1], ops[0]), (sides[1], sides[0], _FLIP[ops[0]])):
            c = _constant(const) if _VAR.fullmatch(var) else None
            if c is not None:
                return Canon("interval", s, _ray(op, c), re.sub(r"[{}\s]", "", var))
        return None
    if len(ops) == 2 and _VAR.fullmatch(sides[1]):
        if ops[0] in ">≥" and ops[1] in ">≥":  # 3 > x >= 1 is 1 <= x < 3
            sides, ops = sides[::-1], [_FLIP[ops[1]], _FLIP[ops[0]]]
        lo, hi = _constant(sides[0]), _constant(sides[2])
        if ops[0] in "<≤" and ops[1] in "<≤" and lo is not None and hi is not None:
            return Canon("interval", s, (Interval(lo, hi, ops[0] == "≤", ops[1] == "≤"),),
                         re.sub(r"[{}\s]", "", sides[1]))
    return None


def _ray(op: str, c: Num) -> tuple:
    """The solution set of "x op c" as intervals."""
    if op == "≠":
        return (Interval(_NEG_INF_NUM, c, False, False), Interval(c, _INF_NUM, False, False))
    if op in "<≤":
        return (Interval(_NEG_INF_NUM, c, False, op == "≤"),)
    return (Interval(c, _INF_NUM, op == "≥", False),)
