r"""Answer verifier: ``verify(completion, gold) -> bool`` is the reward for RL with verifiable rewards.

Completions are untrusted model output. Nothing from them is ever executed: no eval/exec, no
sympify/parse_expr/parse_latex; math is read by our own parser (nanoatr.latex_parse), which refuses
anything that could be slow or huge before building it. Time is bounded by construction: only the
last MAX_TAIL characters are searched, answers longer than MAX_ANSWER_CHARS are rejected, and the
parser caps nesting depth, literal length, number width and power sizes. verify never raises.

EXTRACTION (the completion)
  * The last ``\boxed{...}`` / ``\fbox{...}`` (nested braces; also ``\boxed 5``), unless a line
    starting "Answer: X" (DAPO-Math-17k's required last line) comes after it; without a box, the
    last "Answer: X" anywhere, else the last "the (final) answer is X". An unclosed ``\boxed{``
    (truncated output) is False. There is deliberately NO "last number in the text" fallback: a
    completion without an answer marker is False.
  * The answer is stripped of ``$``, ``\(...\)``, ``\[...\]``, markdown ``**``, trailing period.
    The gold goes through the same normalisation (and its own ``\boxed{}`` if it has one).

NORMALISATION (both sides)
  * Dropped: ``\left``/``\right``, spacing (``\, \! \; ~ \quad``), ``\displaystyle``, degree
    marks (``^\circ``), percent signs, ``\$``, thousands separators (``1,000`` / ``1 000`` only as
    a whole answer; ``1{,}000``, ``1\,000``), a trailing one- or two-word unit (``5\text{ cm}``,
    ``5 cm``; not "or"/"and"/"not"). ``\text{}``/``\mbox{}``/``\mathrm{}`` keep their content;
    ``\dfrac``/``\tfrac`` are ``\frac``; "x = 5" is 5 (one "=", simple left side; ``\approx``
    and ``\in`` count as "=").
  * Shapes: multiple-choice letters ``(B)``/``\text{(B)}``/``B`` compare by letter; ``\{..\}`` and
    top-level lists ``1, 2`` (also "or"/"and"/``\cup``) are unordered; ``(1,2]``/``(1,2)`` are
    ordered and the brackets must match; ``a \pm b`` is the list {a+b, a-b} (so ``\pm 2021`` is not
    2021); anything that does not parse as math is text (case-insensitive; whitespace only counts
    between words).
  * Numbers: integers (leading zeros "025", leading +), decimals, ``\frac``/``a/b``/``\frac12``,
    mixed numbers (``1\frac{1}{4}``, ``1 1/4`` = 5/4), ``\sqrt{}``/``\sqrt[n]{}``, ``\pi``, powers,
    ``1.5e3``/``1.5\times10^{3}``, implicit products (``2\sqrt{3}``), single-letter variables.

EQUIVALENCE POLICY
  1. Exact by default. Decimal literals are read as exact rationals (0.5 is 1/2, 27.0 is 27).
     Rational values compare as fractions.Fraction. Values with radicals/pi: a float pre-check
     rejects clearly different values (> 1e-6 relative) without sympy; then sympy compares them
     structurally, else their difference evaluated to 50 digits must vanish (<= 1e-40 relative):
     a bounded-input stand-in for a symbolic proof, which has no time bound. Expressions with
     variables (single letters; "e" and "i" are variables too) compare by evaluation at three
     fixed pseudo-random points (1e-9 relative): an identity test that cannot hang.
  2. Tolerance only where exact comparison failed, one whole side is a lone decimal literal d
     ("0.3333", "1.5e3") and the other side x has no finite decimal expansion (1/3, sqrt 2, pi:
     values d could not have written exactly): True iff d has >= 4 significant digits AND
     |d - x| < one unit in d's last place (rounding and truncation both pass). So 0.3333 and
     0.6667 match 1/3 and 2/3 and 3.1416 matches pi, but 0.33 never matches 1/3, 3.14 never
     matches pi, 0.5001 never matches 1/2, and decimal vs decimal is always exact. The implied
     relative tolerance is < 1e-3 at 4 digits and 10x tighter per extra digit. Integer-valued
     decimals ("27.0", how float golds are written) are integers, never approximations.
  3. Percent: ``50\%`` is read as 50 (the sign is dropped, as golds write percent answers bare);
     it is NOT 0.5. So 50\% == 50, 50\% != 0.5, 5 != 50\%.
  4. Degrees: ``30^\circ`` == 30. Units: ``5\text{ cm}`` == 5. ``1/2`` != 2, ``\pm 2021`` != 2021.
"""
from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

import sympy

from .latex_parse import Num, ParseError, approx, parse, to_sympy

__all__ = ["verify", "extract_answer", "canonical", "equivalent"]

MAX_TAIL = 20_000        # only the end of a completion is searched (answers are at the end)
MAX_ANSWER_CHARS = 400   # longer extracted answers are rejected
MAX_ITEMS = 32           # elements in a list / tuple answer
MIN_SIG_DIGITS = 4       # tolerance rule (2): decimals shorter than this are compared exactly

# "Answer: X" (DAPO's own regex is (?i)Answer\s*:\s*([^\n]+)) and "the (final) answer is X".
_ANSWER_COLON = re.compile(r"(?i)\banswer\s*:\s*([^\n]*)")
_ANSWER_IS = re.compile(r"(?i)\banswer\s+is\b\s*:?\s*([^\n]*)")
_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_LINE_PREFIX = re.compile(r"[\W_]*(?:final\s*)?[\W_]*", re.IGNORECASE)


def _match_brace(s: str, i: int) -> int:
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


def _box_content(s: str, m: re.Match):
    i = m.end()
    j = i
    while j < len(s) and s[j] in " \t":
        j += 1
    if j < len(s) and s[j] == "{":
        end = _match_brace(s, j)
        return None if end < 0 else s[j + 1:end]  # unclosed: truncated output, no answer
    if j > i:  # "\boxed 5": the next whitespace-delimited token
        tok = re.match(r"[^\s$]+", s[j:])
        return tok.group(0) if tok else None
    return None


def _line_answer(s: str) -> str:
    """The answer inside an "Answer: ..." line: its first $...$ span, else up to a sentence end."""
    s = s[:2 * MAX_ANSWER_CHARS].strip().strip("*").strip()  # bounded: the searches below are not linear
    m = re.search(r"\$\$?([^$]+)\$", s) or re.search(r"\\\((.+?)\\\)", s)
    if m:
        return m.group(1)
    return re.split(r"\.(?:\s|$)", s, maxsplit=1)[0]


def extract_answer(completion: str):
    """The final answer string of a completion, or None if it has no (complete) answer marker."""
    tail = completion[-MAX_TAIL:]
    box = _last(_BOX, tail)
    line = _last(_ANSWER_COLON, tail)
    if box is not None:
        # A later "Answer: X" replaces the box only when it starts a line (DAPO's required last
        # line); "to double-check the answer: 2+3=5" or "the answer is correct" after it is chatter.
        if line is None or line.start() < box.start() or not _starts_line(tail, line.start()):
            return _box_content(tail, box)
    line = line or _last(_ANSWER_IS, tail)
    if line is not None:
        return _line_answer(line.group(1)) or None
    return None  # no marker: never guess the last number (that rewards hacking)


def _starts_line(s: str, i: int) -> bool:
    """Only markup / "Final" before position i on its line ("**Final Answer:**", "## Answer:")."""
    start = s.rfind("\n", 0, i) + 1
    return i - start <= 32 and bool(_LINE_PREFIX.fullmatch(s, start, i))  # short: no backtracking


def _last(pattern: re.Pattern, s: str):
    m = None
    for m in pattern.finditer(s):
        pass
    return m


# ---------------------------------------------------------------------------------------------
# normalisation
_REPLACEMENTS = [
    (re.compile(r"\\(?:left|right)(?![a-zA-Z])\.?"), ""),
    (re.compile(r"(?<!\\)\\[,!;:>]"), ""),  # thin spaces (not "\\," = newline+comma): 1\,000 -> 1000
    (re.compile(r"\\(?:q?quad|displaystyle|textstyle)(?![a-zA-Z])|~|(?<!\\)\\ "), " "),
    (re.compile(r"\\[dtc]frac(?![a-zA-Z])"), r"\\frac"),
    (re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°"), ""),
    (re.compile(r"\\?%|\\\$|\$|\{,\}|(?<!\\)\\[()\[\]]"), ""),  # %, dollars, 1{,}000, \( \) \[ \]
    (re.compile(r"\\approx(?![a-zA-Z])|\\in(?![a-zA-Z])"), "="),
    (re.compile(r"\\lbrace(?![a-zA-Z])"), r"\\{"),
    (re.compile(r"\\rbrace(?![a-zA-Z])"), r"\\}"),
]
_UNICODE = str.maketrans({"−": "-", "×": r"\times ", "·": r"\cdot ", "π": r"\pi ", "∞": r"\infty "})
_TEXT_CMD = re.compile(r"\\(?:text(?:bf|it|rm|normal|sf|tt)?|mbox|hbox|math(?:rm|bf|it|sf|tt)"
                       r"|operatorname|boxed|fbox)\s*\{")
# A unit is one or two words ("cm", "square units"); "34\text{ or 35}" / "\text{ not}" are not.
_UNIT_WORD = re.compile(r"\s*(?!(?:or|and|not|no)\b)[a-zA-Z]+\.?(?:\s+(?!(?:or|and|not|no)\b)[a-zA-Z]+\.?)?\s*")
_UNIT_POWER = re.compile(r"\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*")
_PLAIN_UNIT = re.compile(
    r"(.*?[\d})])\s+(?:(?:square|sq\.?|cubic)\s+)?(?:units?|cm|mm|m|km|in|inches|inch|ft|feet|foot"
    r"|yards?|miles?|meters?|metres?|centimeters?|kilometers?|degrees?|dollars?|cents?|seconds?"
    r"|minutes?|hours?|days?|weeks?|years?|kg|g|grams?|pounds?|lbs?|mph|liters?|ml)"
    r"(?:\s*\^\s*\{?[23]\}?)?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}([, ])\d{3}(?:\1\d{3})*(?:\.\d+)?")  # 1,000 / 1 000
_CHOICE = re.compile(r"\(?([A-E])\)?|\(([A-E])\)\s+.*")
_SPACE_AROUND_SYMBOL = re.compile(r"\s*([^\w\s])\s*")
_EQ_LHS = re.compile(r"\s*(?:[a-zA-Z]|\\[a-zA-Z]+)[\w{}(),' ]{0,22}")


def _unwrap_text(s: str) -> str:
    """Replace \\text{X} by X, but drop a trailing \\text{unit} that follows some math (5\\text{ cm})."""
    out, i = [], 0
    for _ in range(MAX_ANSWER_CHARS):  # each pass consumes one command: bounded
        m = _TEXT_CMD.search(s, i)
        if not m:
            break
        end = _match_brace(s, m.end() - 1)
        if end < 0:
            break
        inner = s[m.end():end]
        out.append(s[i:m.start()])
        if "".join(out).strip() and _UNIT_WORD.fullmatch(inner) and _UNIT_POWER.fullmatch(s[end + 1:]):
            return "".join(out)
        out.append(inner)
        i = end + 1
    return "".join(out) + s[i:]


def _clean(s: str) -> str:
    s = s.translate(_UNICODE)
    for pattern, repl in _REPLACEMENTS:
        s = pattern.sub(repl, s)
    s = _unwrap_text(s)
    s = " ".join(s.split()).strip("*").strip().rstrip(".,;:").strip()
    m = _PLAIN_UNIT.fullmatch(s)
    if m:
        s = m.group(1)
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "").replace(" ", "")
    return s


def _split_top(s: str, word_seps: bool = True) -> list:
    """Split at top-level ',', ';', '\\cup' and ' or '/' and ' (outside any brackets)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            sep = 1 if c in ",;" else 0
            if s.startswith("\\cup", i):
                sep = 4
            elif word_seps and (s.startswith(" or ", i) or s.startswith(" and ", i)):
                sep = 4 if s[i + 1] == "o" else 5
            if sep:
                parts.append(s[start:i])
                start = i = i + sep
                continue
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


class Canon(NamedTuple):
    kind: str      # "num" | "seq" | "set" | "choice" | "text"
    text: str      # normalised string: equal texts are equal answers (the cheap first check)
    value: object  # Num | tuple of Canon | letter | None
    brackets: str = ""


def _canon_items(items, kind, text, depth, brackets=""):
    if len(items) > MAX_ITEMS or not all(items):
        return _text(text)
    return Canon(kind, text, tuple(_canon(x, depth + 1) for x in items), brackets)


@lru_cache(maxsize=16384)
def canonical(answer: str) -> Canon:
    """Normalise and parse one answer string (pure, cached: golds and common answers repeat)."""
    return _canon(_clean(answer), 0)


def _canon(s: str, depth: int) -> Canon:
    if depth > 4:  # lists of tuples of lists...: not an answer shape worth parsing
        return _text(s)
    if s.count("\\pm") == 1:  # a \pm b -> {a+b, a-b}
        return _canon_items([s.replace("\\pm", "+"), s.replace("\\pm", "-")], "set", s, depth)
    if s.count("=") == 1 and _EQ_LHS.fullmatch(s.split("=")[0]):
        s = s.split("=")[1].strip()  # "x = 5" -> "5"
    m = _CHOICE.fullmatch(s)
    if m:
        return Canon("choice", m.group(1) or m.group(2), None)
    if s.startswith("\\{") and s.endswith("\\}"):
        return _canon_items(_split_top(s[2:-2]), "set", s, depth)
    if len(s) > 2 and s[0] in "([" and s[-1] in ")]":
        items = _split_top(s[1:-1], word_seps=False)
        if len(items) > 1 and _balanced(s[1:-1]):
            return _canon_items(items, "seq", s, depth, s[0] + s[-1])
    items = _split_top(s)
    if len(items) > 1:
        return _canon_items(items, "set", s, depth)
    try:
        return Canon("num", s, parse(s))
    except ParseError:
        return _text(s)


def _text(s: str) -> Canon:
    """Plain-text answer: case-insensitive, and spaces only count between words (a \\ b == a\\b)."""
    return Canon("text", _SPACE_AROUND_SYMBOL.sub(r"\1", s.lower()), None)


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return False
    return depth == 0


# ---------------------------------------------------------------------------------------------
# equivalence
def equivalent(a: Canon, b: Canon) -> bool:
    if a.text == b.text:
        return True
    if a.kind != b.kind:
        return False
    if a.kind == "num":
        return _numbers_equal(a.value, b.value)
    if a.kind == "seq":
        return (a.brackets == b.brackets and len(a.value) == len(b.value)
                and all(equivalent(x, y) for x, y in zip(a.value, b.value)))
    if a.kind == "set":  # unordered: every element matched by a distinct element
        if len(a.value) != len(b.value):
            return False
        unused = list(b.value)
        for x in a.value:
            hit = next((k for k, y in enumerate(unused) if equivalent(x, y)), None)
            if hit is None:
                return False
            unused.pop(hit)
        return True
    return a.value is not None and a.value == b.value  # choice letters; text compared by .text


def _close(xs, ys, rel: float) -> bool:
    return all(abs(x - y) <= rel * max(1.0, abs(x), abs(y)) for x, y in zip(xs, ys))


def _numbers_equal(a: Num, b: Num) -> bool:
    return _exactly_equal(a, b) or _decimal_match(a, b)


def _exactly_equal(a: Num, b: Num) -> bool:
    if isinstance(a.exact, Fraction) and isinstance(b.exact, Fraction):
        return a.exact == b.exact
    xa, xb = approx(a), approx(b)
    if xa is not None and xb is not None and not _close(xa, xb, 1e-6):
        return False  # cheap rejection without sympy
    sa, sb = to_sympy(a.exact), to_sympy(b.exact)
    if sa == sb:
        return True
    if xa is None or xb is None:  # infinities / overflowed values: only structural equality
        return False
    if sa.free_symbols or sb.free_symbols:
        return _close(xa, xb, 1e-9)  # identity test at the fixed random points (policy 1)
    diff = sympy.N(sa - sb, 50)
    scale = max(1.0, abs(xa[0]), abs(xb[0]))
    return bool(abs(diff) <= 1e-40 * scale)


def _decimal_match(a: Num, b: Num) -> bool:
    """Policy 2: a lone decimal (>= 4 significant digits) standing for a value it cannot write exactly."""
    for d, x in ((a, b), (b, a)):
        if d.dec is None or d.dec[0] < MIN_SIG_DIGITS:
            continue
        ulp = d.dec[1]
        if isinstance(x.exact, Fraction):
            den = x.exact.denominator
            while den % 2 == 0:
                den //= 2
            while den % 5 == 0:
                den //= 5
            if den != 1 and abs(d.exact - x.exact) < ulp:  # den != 1: no finite decimal expansion
                return True
        elif approx(x) is not None and not x.exact.free_symbols:
            diff = sympy.N(to_sympy(d.exact) - x.exact, 30)
            if diff.is_real and abs(diff) < to_sympy(ulp):
                return True
    return False


def verify(completion: str, gold: str) -> bool:
    """True iff the completion's final answer is equivalent to the gold answer (see module doc)."""
    try:
        if isinstance(gold, (int, float)):
            gold = str(gold)
        if not isinstance(completion, str) or not isinstance(gold, str):
            return False
        answer = extract_answer(completion)
        if "\\boxed" in gold or "\\fbox" in gold:
            gold = extract_answer(gold)
        if not answer or not gold or len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
            return False
        return equivalent(canonical(answer), canonical(gold))
    # A reward function must never crash the trainer on hostile input: any internal error
    # (a sympy corner case, a parse edge we did not foresee) means "not verified". Exception,
    # not BaseException, so KeyboardInterrupt/SystemExit still stop the run.
    except Exception:
        return False
