r"""Answer verifier: ``verify(completion, gold) -> bool`` is the reward for RL with verifiable rewards.

Completions are untrusted model output. Nothing from them is ever executed: no eval/exec, no
sympify/parse_expr/parse_latex; math is read by our own parser. The package, in the order an answer goes
through it:
    extract.py   the final answer(s) of a completion: boxes, answer statements
    shapes.py    normalisation, then the answer's shape: number, list, interval, relation, matrix, ...
    parse.py     the recursive-descent parser of one math expression ...
    values.py    ... into exact values whose every operation is size-bounded before it is built
    equal.py     when two shaped answers are equal (the EQUIVALENCE POLICY below) verify
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
    punctured line; a named variable must agree ("x > 2" != "t > 2"). A one-point solution set
    ("x \ge 1 and x \le 1", "1 \le x \le 1") is the equation "x = 1". Other inequalities are
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
  complex values, trees over 2000 NODES (values.py's MAX_* constants). Expressions in variables
  are built unevaluated (sympy never reasons about them: its assumption queries are unbounded);
  constants are evaluated by sympy, within those sizes. No simplify is ever called: comparisons
  use structural equality, evaluation at points (exact only for rational functions of degree <=
  MAX_EXACT_DEGREE) and one bounded-precision evalf, at most SYMPY_BUDGET of them per verify call.
"""
from __future__ import annotations

from typing import List, Optional

from .equal import SYMPY_BUDGET, equivalent, sympy_budget
from .extract import _BOX, extract_answer, extract_answers
from .shapes import MAX_ANSWER_CHARS, Canon, canonical, list_of

__all__ = ["verify", "extract_answer", "extract_answers", "canonical", "equivalent"]


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
    """True iff the completion's final answer is equivalent to the gold answer (the policy above)."""
    try:
        if isinstance(gold, (int, float)) and not isinstance(gold, bool):
            gold = str(gold)
        if not isinstance(completion, str) or not isinstance(gold, str):
            return False
        with sympy_budget(SYMPY_BUDGET):
            answers = extract_answers(completion)
            if _BOX.search(gold):
                gold = extract_answer(gold)
            if not answers or not gold or max(map(len, answers)) > MAX_ANSWER_CHARS or \
                    len(gold) > MAX_ANSWER_CHARS:
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
