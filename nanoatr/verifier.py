r"""Answer verifier: ``verify(completion, gold) -> bool`` is the reward for RL with verifiable rewards.

Completions are untrusted model output. Nothing from them is ever executed: no eval/exec, no
sympify/parse_expr/parse_latex; math is read by our own parser (nanoatr.latex_parse, which also
normalises answers and gives them a shape: number, list, interval, relation, matrix, ...). verify
never raises, and its time is bounded by construction, not by a timer (BOUNDS below).

EXTRACTION (the completion; the gold goes through the same normalisation, and its own box if any)
  * Boxes: the last ``\boxed{...}`` / ``\fbox{...}`` (nested braces; also ``\boxed 5``) and the
    boxes chained to it (``_chained``): within MAX_GAP characters in the same paragraph
    ("$x = \boxed{2}$ and $y = \boxed{3}$", "\boxed{2}. \boxed{3}."), or across a paragraph
    break when the text between hedges ("\boxed{5}\n\nOr maybe \boxed{6}"). A correction
    ("Wait, I miscounted. ... \boxed{8}", "that was wrong") ends the chain: the last box counts.
    An unclosed ``\boxed{`` (truncated output) and a chain of more than MAX_BOXES boxes are no
    answer.
  * Without a box, the LAST answer statement: "Answer: X" (DAPO's required last line), "the
    (final) answer is X" (also "the answer to ... is", "the answers are", "the correct option
    is"), a "Final Answer" heading with the answer on the next line(s) (``**Final Answer** \[ 42
    \]``), "#### X", "X is the answer", ``<answer>X</answer>``. Chatter ("the answer is correct")
    is skipped. From the statement the answer is its first math span ($..$, \(..\), \[..\],
    $$..$$; spans joined by "," / "and" / "or" form a list), else the text to the sentence end,
    where a leading value followed by prose ("12 apples", "12, which is even") is the value and
    "The number of ways is 120" is 120. A hedge after it ("12, or maybe 13") voids it. Earlier
    statements chain to the last one like boxes, but only across a hedge or bare repetition
    ("Answer: 5\nAnswer: 6", "The answer is 12. The answer is 13"); after a correction or any
    other prose the last one counts.
  * A line starting "Answer:" / "Final answer:" / "####" / ``<answer>`` after the last box
    replaces the box (DAPO's last line wins); mid-line remarks after a box do not.
  * There is deliberately NO "last number in the text" fallback: no marker, no answer (False).

EQUIVALENCE POLICY (symmetric in answer and gold)
  * Exact by default. Decimals are the exact rationals they write (0.5 = 1/2, 27.0 = 27,
    0.1\overline{6} = 1/6). There is NO numeric tolerance: a rounded decimal never earns the
    reward for an exact answer (1.414 != sqrt 2, 0.3333 != 1/3, 3.14 != pi), and an exact answer
    does not match a rounded gold (pi != 3.14): a problem that asks for a decimal has that
    decimal as its gold, and the answer must write the same number (trailing zeros aside).
  * How values are compared: rationals as fractions.Fraction; irrational constants by a float
    pre-check (1e-6 relative, rejects without sympy), then sympy structural equality, else their
    difference evaluated to 50 digits more than the widest rational in it must vanish to that
    precision; expressions in variables by their values at N_POINTS fixed pseudo-random float
    points (1e-9 relative) and, where the values are rational, EXACTLY at EXACT_POINTS rational
    points: an identity test that cannot hang ((x+1)^2 = x^2+2x+1, \frac{x^2-4}{x-2} = x+2,
    but x + 10^{-20} != x).
  * Percent: p% matches p (golds often write percentages bare) and p/100 (25% = 0.25 = 1/4).
  * Equations: "x = 3" is the answer 3 against a gold that is not an equation (either way, either
    side; "2 \cdot 3 = 6" is 6 but "5 = 6" is nothing: every non-name side must match). Two
    equations are equal when lhs - rhs of one is a nonzero constant times the other's, tested
    at the points ("y = -\frac12 x + \frac34" = "2x + 4y - 3 = 0"); the variables must agree,
    so "x = 3" != "y = 3".
  * Inequalities: one variable against constants is a set of intervals, so "x \ge 5" =
    "5 \le x" = "[5, \infty)" = "x \in [5, \infty)", "1 < x \le 3" = "(1, 3]", "x < -1 or
    x > 2" = "(-\infty, -1) \cup (2, \infty)", "|x| < 2" = "-2 < x < 2", "x \ne 0" = the
    punctured line; a named variable must agree ("x > 2" != "t > 2"). Other inequalities are
    equal up to a POSITIVE factor ("y > 2x + 1" = "4x + 2 < 2y"); strictness must agree.
  * Intervals: endpoints and brackets must agree (brackets at infinity are ignored); unions are
    unordered. "\mathbb{R}" = "(-\infty, \infty)" = "all real numbers".
  * Collections: tuples "(a, b)" are ordered and their brackets must agree; bare lists "a, b",
    "a or b" and sets "\{a, b\}" are unordered and repeats do not count ("2, 2" is 2); a bare
    list matches a parenthesised tuple in order ("2, 3" = "(2, 3)"); "\{5\}" is 5; "a \pm b" is
    the list {a+b, a-b} (so "\pm 2021" != 2021). Matrices (pmatrix, bmatrix, array, ...) are
    equal entry by entry; a column or row vector also matches a tuple "(1, 2)" / "\langle 1, 2
    \rangle".
  * Multiple answers: equal final boxes are one answer; DIFFERENT boxes in the final chain are a
    list, which never equals a single gold, so boxing several candidates (or "12 or 13") earns
    nothing. A list answer equals a list gold only element for element.
  * Choices: "(B)", "\text{(B)}", "B" compare by letter; "(B) 27" is the letter B and also the
    value 27. Anything that is not math is text: case-insensitive, spaces only between words.

BOUNDS (why no input can make it slow)
  Only the last MAX_TAIL characters are searched, at most MAX_BOXES boxes and MAX_STATEMENTS
  statements are examined, answers over MAX_ANSWER_CHARS are rejected, lists/tuples/matrices hold
  at most MAX_ITEMS entries. Regexes run over the tail are linear or have bounded repetitions;
  math spans are matched with str.find. The parser refuses, before building anything: nesting
  deeper than 24, literals over 200 digits, rationals over 4096 bits, powers/roots whose result
  would exceed that (exponent <= 4096 on numbers, DEGREE <= 256 on expressions in variables, root
  index <= 64), n! beyond n = 1000 or 4096 bits, binomials whose width bound exceeds 4096 bits,
  trig arguments over 1e4, radicands over 256 bits in total, complex powers and functions of
  complex values, trees over 2000 NODES (latex_parse's MAX_* constants). Expressions in variables
  are built unevaluated (sympy never reasons about them: its assumption queries are unbounded);
  constants are evaluated by sympy, within those sizes. No simplify is ever called: comparisons
  use structural equality, evaluation at points (exact only for rational functions of degree <=
  MAX_EXACT_DEGREE) and one bounded-precision evalf, at most SYMPY_BUDGET of them per verify call.
"""
from __future__ import annotations

import random
import re
import threading
from contextlib import contextmanager
from fractions import Fraction
from functools import lru_cache
from typing import List, Optional

import sympy

from .latex_parse import (MAX_ANSWER_CHARS, Canon, Interval, Num, add, approx, as_intervals, canonical, div,
                          list_of, match_brace, neg, symbolic, to_sympy)

__all__ = ["verify", "extract_answer", "extract_answers", "canonical", "equivalent"]

MAX_TAIL = 20_000   # only the end of a completion is searched (answers are at the end)
MAX_BOXES = 8       # boxes in the final chain; a longer chain is no answer
MAX_GAP = 300       # characters between two boxes of one final chain
MAX_STATEMENTS = 8  # answer statements examined, counted from the last one
SYMPY_BUDGET = 48   # sympy evaluations allowed per verify call (each on a size-bounded tree)
EXACT_POINTS = 2    # rational points for the exact identity test of expressions in variables
MAX_EXACT_DEGREE = 4096  # ... of rational functions up to this degree

_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")  # a new paragraph ends a chain of boxes (unless it hedges)
_CORRECTION = re.compile(r"(?i)\b(?:wait|actually|mistake|error|wrong|incorrect|re-?check\w*|redo\w*|recomput\w*"
                         r"|recalculat\w*|correct(?:ion|ing)|instead|oops|sorry|revis\w*|miscount\w*|overcount\w*)\b")
_BOX_HEDGE = re.compile(r"(?i)\b(?:maybe|perhaps|possibly|alternatively|either|another (?:possible )?answer)\b"
                        r"|(?:^|\n)[\s*$]*or\b")
# Statement markers (case-insensitive). Bounded repetitions only: they run over 20k characters.
_ANSWER_COLON = re.compile(r"(?i)\banswer\b[*_ \t]{0,4}:")
_ANSWER_IS = re.compile(r"(?i)\b(?:answer|option|choice)s?\b(?:\s+(?:to|for|of)\b[^.\n:$]{0,60}?)?"
                        r"\s+(?:is|are|would be|should be|will be|must be)\b"
                        r"(?:\s+(?:therefore|thus|hence|then|simply|clearly|indeed|just|exactly|now))?\s*:?")
_FINAL_HEADING = re.compile(r"(?im)^[ \t#*_>]*final\s+answer[ \t*_#.]*$")
_HASHES = re.compile(r"(?m)^[ \t]*####[ \t]*")
_ANSWER_TAG = re.compile(r"(?i)<answer>")  # R1-style <think>...</think><answer>...</answer>
_IS_THE_ANSWER = re.compile(r"(?i)\s+is\s+(?:the|my|our)\s+(?:final\s+|correct\s+)?answer\b")
_BEFORE_IS = re.compile(r"(\$[^$\n]{1,200}\$|\\\([^\n]{1,200}?\\\)|[-+\w./{}\\]{1,40})\Z")  # on <= 210 chars
_LINE_PREFIX = re.compile(r"[\W_]*(?:final\s*)?[\W_]*", re.IGNORECASE)
_CHATTER = re.compile(r"(?i)(?:correct|right|wrong|incorrect|above|below|as follows|the following|"
                      r"given|boxed|clear|obvious|consistent|confirmed|verified|not\b.*)\W*")
_SPAN_OPEN = re.compile(r"\$\$|\$|\\\(|\\\[")
_SPAN_CLOSE = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
_CONNECTOR = re.compile(r"(?i)\s*(?:,|;|,?\s*and|,?\s*or|\\text\{\s*(?:,|and|or)\s*\})?\s*")
_PROSE_IS = re.compile(r"(?i)(?:the|a|an|our|my|this|that|it|there)\b[^=$\d]{0,80}?\s(?:is|are|equals|was)\s+(.+)")
_HEDGE = re.compile(r"(?i)\b(?:or|maybe|perhaps|possibly|probably|either|alternatively)\b")
_DISPLAY_OPEN = re.compile(r"\s*(\$\$|\\\[)")


# ---------------------------------------------------------------------------------------------
# boxes
def _box_content(s: str, m: re.Match):
    """(content or None, end index) of the box whose command ends at m."""
    i = j = m.end()
    while j < len(s) and s[j] in " \t":
        j += 1
    if j < len(s) and s[j] == "{":
        end = match_brace(s, j)
        return (None, j) if end < 0 else (s[j + 1:end], end + 1)  # unclosed: truncated output
    if j > i:  # "\boxed 5": the next whitespace-delimited token
        tok = re.match(r"[^\s$]+", s[j:j + MAX_ANSWER_CHARS])
        return (tok.group(0), j + tok.end()) if tok else (None, j)
    return None, j


def _final_boxes(tail: str, matches: list) -> Optional[List[str]]:
    """Contents of the last box and the boxes chained to it by short connecting text."""
    contents, after = [], None
    for m in reversed(matches[-MAX_BOXES - 1:]):
        content, end = _box_content(tail, m)
        if after is not None:
            gap = tail[end:after]
            if content is None or not _chained(gap):
                break
        elif content is None:
            return None  # the last box is unclosed: the output was cut off
        contents.append(content)
        after = m.start()
    if len(contents) > MAX_BOXES:
        return None  # a chain of more than MAX_BOXES boxes is box spam, not an answer
    return contents[::-1]


# ---------------------------------------------------------------------------------------------
# statements
def _starts_line(s: str, i: int) -> bool:
    """Only markup / "Final" before position i on its line ("**Final Answer:**", "## Answer:")."""
    start = s.rfind("\n", 0, i) + 1
    return i - start <= 32 and bool(_LINE_PREFIX.fullmatch(s, start, i))  # short: no backtracking


def _after_marker(s: str) -> str:
    """The answer text after a marker: the rest of its line, or, when that is only markup, the
    next non-empty line or display block ("**Final Answer**\\n\\[ 42 \\]")."""
    s = s[:2 * MAX_ANSWER_CHARS]
    line, _, rest = s.partition("\n")
    if line.strip(" \t*_#:>") and not re.fullmatch(r"\s*(?:\$\$|\\\[)\s*", line):
        return line
    rest = line + "\n" + rest if re.search(r"\$\$|\\\[", line) else rest
    m = _DISPLAY_OPEN.match(rest)
    if m:
        end = rest.find("$$" if m.group(1) == "$$" else "\\]", m.end())
        return "$" + rest[m.end():end] + "$" if end > 0 else ""
    for nxt in rest.split("\n")[:3]:
        if nxt.strip(" \t*_#:>"):
            return nxt
    return ""


def _math_spans(s: str):
    """(start, end, content) of each $..$, $$..$$, \\(..\\), \\[..\\] in s, left to right. Linear:
    each span's closer is found with str.find from its opener, and scanning resumes after it."""
    i = 0
    while True:
        m = _SPAN_OPEN.search(s, i)
        if not m:
            return
        j = s.find(_SPAN_CLOSE[m.group(0)], m.end())
        if j < 0:
            return
        yield m.start(), j + len(_SPAN_CLOSE[m.group(0)]), s[m.end():j]
        i = j + len(_SPAN_CLOSE[m.group(0)])


def _line_answer(s: str) -> Optional[str]:
    """The answer in a statement's text: math spans joined by connectors, else prose-trimmed text."""
    s = s[:MAX_ANSWER_CHARS + 100].strip().strip("*").strip()
    spans = list(_math_spans(s))
    if spans and not re.search(r"\d", s[:spans[0][0]]):
        taken, end = [spans[0][2]], spans[0][1]
        for start, stop, content in spans[1:]:
            if not _CONNECTOR.fullmatch(s, end, start):
                break
            taken.append(content)
            end = stop
        trailing = s[end:]
        if _HEDGE.search(trailing) and re.search(r"\d|\$|\\\(", trailing):
            return None  # "$12$, or maybe $13$": a hedge is no answer
        return ", ".join(taken)
    text = re.split(r"\.(?:\s|$)|\s+(?:because|since|as|so)\s", s, maxsplit=1)[0].strip(" *")
    m = _PROSE_IS.match(text)
    if m:  # "Answer: The number of ways is 120."
        text = m.group(1)
    return _trim_prose(text)


def _trim_prose(text: str) -> str:
    """"12 apples" -> "12", "12, which is even" -> "12"; lists, units and hedges are left alone."""
    first, _, rest = text.partition(" ")
    first = first.rstrip(",;:")
    if (rest and re.search(r"\d", first) and re.search(r"(?<![\\a-zA-Z])[a-zA-Z]{4,}", rest)
            and not _HEDGE.search(rest) and not re.search(r"\d", rest)):
        return first
    return text


def _statement_text(tail: str, kind: str, m: re.Match) -> str:
    if kind == "is the answer":  # the answer is written before the marker
        before = _BEFORE_IS.search(tail[max(0, m.start() - 210):m.start()])
        return before.group(1) if before else ""
    if kind == "tag":
        inner = tail[m.end():m.end() + 2 * MAX_ANSWER_CHARS]
        end = inner.lower().find("</answer>")
        return inner[:end].strip() if end >= 0 else ""  # unclosed: cut off, no answer
    return _after_marker(tail[m.end():])


def _last_statement(tail: str, after: int = -1, line_start_only: bool = False) -> Optional[List[str]]:
    """The answer of the last statement after position `after` (chatter statements skipped), with
    the answers of statements hedged with it (see _chained)."""
    found = []  # (position, kind, match, starts a line): positions only, cheap to collect
    for kind, pattern in (("colon", _ANSWER_COLON), ("is", _ANSWER_IS), ("heading", _FINAL_HEADING),
                          ("hashes", _HASHES), ("is the answer", _IS_THE_ANSWER), ("tag", _ANSWER_TAG)):
        for m in pattern.finditer(tail, max(after, 0)):
            starts = kind in ("heading", "hashes", "tag") or kind == "colon" and _starts_line(tail, m.start())
            if m.start() > after and (starts or not line_start_only):
                found.append((m.start(), kind, m))
    answers, start = [], None  # the last statement's answer, then those hedged with it
    for pos, kind, m in sorted(found, key=lambda f: f[0], reverse=True)[:MAX_STATEMENTS]:
        answer = _line_answer(_statement_text(tail, kind, m))
        if not answer or _CHATTER.fullmatch(answer):
            continue
        if answers:
            gap = tail[m.end():start].replace(answer, "", 1)
            if not _chained(gap, statement=True):
                break
        answers.append(answer)
        start = pos
    return answers[::-1] or None


def _chained(gap: str, statement: bool = False) -> bool:
    """Do two answers separated by `gap` belong to one final answer (a hedge or a list)? Yes if
    the gap hedges ("or maybe"); no if it corrects ("Wait, I miscounted"); else boxes chain
    within a paragraph, statements only when nothing but short words lies between them
    ("Answer: 5\nAnswer: 6", "The answer is 12. The answer is 13")."""
    if len(gap) > MAX_GAP:
        return False
    if _BOX_HEDGE.search(gap):
        return True
    if _CORRECTION.search(gap):
        return False
    if statement:
        return not re.search(r"[a-zA-Z]{4,}", gap)
    return not _BLANK_LINE.search(gap)


def extract_answers(completion: str) -> List[str]:
    """The final answer(s) of a completion: [] when it has no (complete) answer marker."""
    tail = completion[-MAX_TAIL:]
    boxes = list(_BOX.finditer(tail))
    if boxes:
        # A later "Answer: X" replaces the box only when it starts a line (DAPO's required last
        # line); "to double-check the answer: 2+3=5" or "the answer is correct" after it is chatter.
        later = _last_statement(tail, boxes[-1].start(), line_start_only=True)
        if later is not None:
            return later
        return [b for b in _final_boxes(tail, boxes) or [] if b.strip()]
    return _last_statement(tail) or []


def extract_answer(completion: str) -> Optional[str]:
    """The final answer as one string (several final boxes joined by ", "), or None."""
    answers = extract_answers(completion)
    return ", ".join(answers) if answers else None


# ---------------------------------------------------------------------------------------------
# equivalence
class _Budget(threading.local):
    left = None  # sympy evaluations left in this thread's verify call (None: unlimited)


_BUDGET = _Budget()


class OutOfBudget(Exception):
    """More sympy work than SYMPY_BUDGET in one call: the answer is not verified."""


@contextmanager
def sympy_budget(n: int):
    saved, _BUDGET.left = _BUDGET.left, n
    try:
        yield
    finally:
        _BUDGET.left = saved


def _spend():
    if _BUDGET.left is not None:
        _BUDGET.left -= 1
        if _BUDGET.left < 0:
            raise OutOfBudget()


_COLLECTIONS = ("list", "set", "union", "tuple")


def equivalent(a: Canon, b: Canon) -> bool:
    """Are two canonical answers the same answer? (the EQUIVALENCE POLICY; symmetric)"""
    if a.text == b.text:
        return True
    ivs = _intervals_equal(a, b)
    if ivs is not None:
        return ivs
    if "rel" in (a.kind, b.kind):
        return _relations_equal(a, b)
    if a.kind == b.kind == "num":
        return _numbers_equal(a, b)
    if "matrix" in (a.kind, b.kind):
        return _matrices_equal(a, b)
    if "choice" in (a.kind, b.kind):  # letters; "(B) 27" also matches the value 27
        if a.kind == b.kind:
            return a.value == b.value
        c, o = (a, b) if a.kind == "choice" else (b, a)
        return c.extra is not None and equivalent(c.extra, o)
    return _collections_equal(a, b)


def _ordered(xs, ys) -> bool:
    return len(xs) == len(ys) and all(equivalent(x, y) for x, y in zip(xs, ys))


def _unordered(xs, ys) -> bool:
    """Every element matched by a distinct equivalent element (a multiset comparison)."""
    if len(xs) != len(ys):
        return False
    unused = list(ys)
    for x in xs:
        hit = next((k for k, y in enumerate(unused) if equivalent(x, y)), None)
        if hit is None:
            return False
        unused.pop(hit)
    return True


def _distinct(c: Canon) -> list:
    """A list's elements with repeats dropped ("x = 2, 2" for a double root is the answer 2)."""
    out = []
    for x in c.value:
        if not any(equivalent(x, y) for y in out):
            out.append(x)
    return out


def _collections_equal(a: Canon, b: Canon) -> bool:
    ka, kb = a.kind, b.kind
    if ka == kb == "tuple":
        return a.extra == b.extra and _ordered(a.value, b.value)
    if {ka, kb} == {"tuple", "list"}:  # "2, 3" is the pair (2, 3), in that order
        return "()" in (a.extra, b.extra) and _ordered(a.value, b.value)
    if ka in ("list", "set") and kb in ("list", "set") or ka == kb == "union":
        return _unordered(_distinct(a), _distinct(b))
    for one, other in ((a, b), (b, a)):  # {5} is 5, and so is "5, 5"
        if one.kind in ("set", "list") and other.kind not in _COLLECTIONS:
            items = _distinct(one)
            return len(items) == 1 and equivalent(items[0], other)
    return False


def _matrices_equal(a: Canon, b: Canon) -> bool:
    if a.kind == b.kind == "matrix":
        return len(a.value) == len(b.value) and all(_ordered(x, y) for x, y in zip(a.value, b.value))
    m, o = (a, b) if a.kind == "matrix" else (b, a)
    if o.kind != "tuple" or o.extra != "()" or (len(m.value) > 1 and len(m.value[0]) > 1):
        return False
    return _ordered([c for row in m.value for c in row], o.value)  # a vector written as a tuple


# -- numbers ---------------------------------------------------------------------------------
def _close(xs, ys, rel: float) -> bool:
    return all(abs(x - y) <= rel * max(1.0, abs(x), abs(y)) for x, y in zip(xs, ys))


def _numbers_equal(a: Canon, b: Canon) -> bool:
    if values_equal(a.value, b.value):
        return True
    for p, o in ((a, b), (b, a)):  # 50% is 50 (golds write percentages bare) and also 0.5
        if p.extra == "%" and o.extra != "%" and values_equal(div(p.value, Num(Fraction(100))), o.value):
            return True
    return False


def values_equal(a: Num, b: Num) -> bool:
    """Exact equality (decimals are the rationals they write); see the policy for the method."""
    if isinstance(a.exact, Fraction) and isinstance(b.exact, Fraction):
        return a.exact == b.exact
    xa, xb = approx(a), approx(b)
    if xa is not None and xb is not None and not _close(xa, xb, 1e-6):
        return False  # cheap rejection without sympy
    _spend()
    sa, sb = to_sympy(a.exact), to_sympy(b.exact)
    if sa == sb:
        return True
    if xa is None or xb is None:  # infinities / overflowed values: only structural equality
        return False
    if symbolic(sa) or symbolic(sb):  # identity test at the fixed random points
        if not _close(xa, xb, 1e-9):
            return False
        exact = _exact_values(to_sympy(add(a, neg(b)).exact))  # and exactly at rational points
        return exact is None or all(v == 0 for v in exact)
    # Constants: the difference must vanish to working precision, which exceeds the width of every
    # rational in the expressions (so sqrt(10^200 + 1) - 10^100, about 5e-101, is not 0).
    digits = max([r.p.bit_length() + r.q.bit_length() for r in (sa - sb).atoms(sympy.Rational)] + [0]) * 0.302
    prec = 50 + int(digits)
    diff = sympy.N(sa - sb, prec)
    scale = max(1.0, abs(xa[0]), abs(xb[0]))
    return bool(abs(diff) <= sympy.Float(10) ** (10 - prec) * scale)


@lru_cache(maxsize=None)  # one entry per variable name and point
def _rational_point(name: str, k: int) -> sympy.Rational:
    rng = random.Random(f"nanoatr:exact:{name}:{k}")  # deterministic, independent of global seed
    q = rng.choice([7, 11, 13])
    return sympy.Rational(rng.choice([p for p in range(3, 20) if p % q]), q)  # never an integer


def _degree(expr) -> int:
    """An upper bound on the degree of the rational function this (unevaluated) tree builds:
    exponents multiply down a path, products and sums add. It bounds the size of its values at
    the rational points: about degree x 5 bits."""
    if expr.is_Pow:
        return _degree(expr.base) * abs(int(expr.exp))
    if not expr.args:
        return 1 if expr.is_Symbol else 0
    return sum(_degree(x) for x in expr.args)


def _exact_values(expr) -> Optional[list]:
    """expr at EXACT_POINTS rational points, exactly; None unless expr is a rational function of
    its variables (radicals or functions of them: then the float points alone decide). Sizes stay
    bounded: the parser bounds every exponent (MAX_DEGREE), and the points are small rationals."""
    if (any(not p.exp.is_Integer for p in expr.atoms(sympy.Pow)) or expr.atoms(sympy.Function)
            or _degree(expr) > MAX_EXACT_DEGREE):
        return None  # only rational functions of bounded degree are evaluated exactly
    out = []
    for k in range(EXACT_POINTS):
        _spend()
        value = expr.xreplace({v: _rational_point(v.name, k) for v in expr.free_symbols})
        if not value.is_Rational:
            return None
        out.append(value)
    return out


# -- intervals and relations -----------------------------------------------------------------
def _intervals_equal(a: Canon, b: Canon) -> Optional[bool]:
    """None unless one side is an interval (or a union): then the verdict."""
    if "interval" not in (a.kind, b.kind) and "union" not in (a.kind, b.kind):
        return None
    ia, ib = as_intervals(a), as_intervals(b)
    if ia is None or ib is None:
        return None if "interval" not in (a.kind, b.kind) else False
    if a.kind == b.kind == "interval" and a.extra and b.extra and a.extra != b.extra:
        return False  # x > 2 is not t > 2
    if len(ia) != len(ib):
        return False
    unused = list(ib)
    for x in ia:
        hit = next((k for k, y in enumerate(unused) if _same_interval(x, y)), None)
        if hit is None:
            return False
        unused.pop(hit)
    return True


def _same_interval(x: Interval, y: Interval) -> bool:
    def finite(n: Num) -> bool:
        return not (n.exact is sympy.oo or n.exact is -sympy.oo)
    return (values_equal(x.lo, y.lo) and values_equal(x.hi, y.hi)
            and (x.lo_closed == y.lo_closed or not finite(x.lo))
            and (x.hi_closed == y.hi_closed or not finite(x.hi)))


_FLIP = {"<": ">", "≤": "≥"}


def _relations_equal(a: Canon, b: Canon) -> bool:
    if a.kind == b.kind:
        return _same_relation(a, b)
    r, o = (a, b) if a.kind == "rel" else (b, a)
    ops, names = r.extra
    if set(ops) != {"="}:
        return False
    # "x = 5" is the answer 5 and "2+3 = 5" is 5; "5 = 6" is nothing: every value side must match.
    values = r.value[1:] if names[0] else r.value[:-1] if names[-1] else r.value
    return bool(values) and all(equivalent(v, o) for v in values)


def _difference(c: Canon):
    """(op, lhs - rhs) with op in "=", "≠", ">", "≥" for a one-operator relation, else None."""
    (op,), (lhs, rhs) = c.extra[0], c.value
    if lhs.kind != "num" or rhs.kind != "num":
        return None
    if op in _FLIP:
        op, lhs, rhs = _FLIP[op], rhs, lhs
    return op, add(lhs.value, neg(rhs.value))


def _same_relation(a: Canon, b: Canon) -> bool:
    """Equations: the same up to a nonzero factor (2x+4y-3=0 is y = -x/2 + 3/4); inequalities: up
    to a positive factor (5 < x is x > 5); chains: side by side."""
    if len(a.extra[0]) == len(b.extra[0]) == 1:
        da, db = _difference(a), _difference(b)
        if da is not None and db is not None:
            return da[0] == db[0] and _proportional(da[1], db[1], positive=da[0] in ">≥")
    if a.extra[0] == b.extra[0] and _ordered(a.value, b.value):
        return True
    flipped = tuple(_FLIP.get(op, op) for op in reversed(b.extra[0]))
    return a.extra[0] == flipped and _ordered(a.value, b.value[::-1])


def _proportional(f: Num, g: Num, positive: bool) -> bool:
    """f = k g for one constant k (k > 0 if positive), tested at the fixed random points."""
    sf = to_sympy(f.exact).free_symbols if not isinstance(f.exact, Fraction) else set()
    sg = to_sympy(g.exact).free_symbols if not isinstance(g.exact, Fraction) else set()
    fa, ga = approx(f), approx(g)
    if not sf or sf != sg or fa is None or ga is None:
        return False  # statements without variables ("2 = 2") only match by text
    ratios = []
    for x, y in zip(fa, ga):
        if abs(y) < 1e-12:
            if abs(x) > 1e-9:
                return False
            continue
        ratios.append(x / y)
    if not ratios or abs(ratios[0]) < 1e-12 or not _close(ratios, [ratios[0]] * len(ratios), 1e-9):
        return False
    k = ratios[0]
    if positive and (abs(k.imag) > 1e-9 * abs(k) or k.real <= 0):
        return False
    ef, eg = _exact_values(to_sympy(f.exact)), _exact_values(to_sympy(g.exact))
    if ef is None or eg is None:
        return True
    # exactly: the same ratio at every rational point (cross-multiplied: no division by zero)
    return all(ef[0] * y == x * eg[0] for x, y in zip(ef[1:], eg[1:])) and (ef[0] != 0 or eg[0] == 0)


def _answer_canon(answers: List[str]) -> Optional[Canon]:
    """One Canon for the final answer(s): equal boxes merge, different ones form a list."""
    canons = []
    for a in answers:
        c = canonical(a)
        if not any(equivalent(c, d) for d in canons):
            canons.append(c)
    if not canons:
        return None
    return canons[0] if len(canons) == 1 else list_of(canons)


def verify(completion: str, gold: str) -> bool:
    """True iff the completion's final answer is equivalent to the gold answer (see latex_parse)."""
    try:
        if isinstance(gold, (int, float)) and not isinstance(gold, bool):
            gold = str(gold)
        if not isinstance(completion, str) or not isinstance(gold, str):
            return False
        with sympy_budget(SYMPY_BUDGET):
            answers = extract_answers(completion)
            if _BOX.search(gold):
                gold = extract_answer(gold)
            if not answers or not gold or max(map(len, answers)) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
                return False
            answer = _answer_canon(answers)
            return answer is not None and equivalent(answer, canonical(gold))
    # A reward function must never crash the trainer on hostile input: any internal error
    # (a sympy corner case, a parse edge we did not foresee, the sympy budget running out) means
    # "not verified". Exception, not BaseException, so KeyboardInterrupt/SystemExit still stop the run.
    except Exception:
        return False


def _warm_up():
    """sympy fills internal caches on first use (tens of ms): pay that at import, not in a reward."""
    for answer in ("x + \\sqrt{2}\\pi", "y = 2x + 1", "\\sin x + e", "x \\ge \\sqrt{3}"):
        verify(f"\\boxed{{{answer}}}", answer + "+1")
    canonical.cache_clear()


_warm_up()
