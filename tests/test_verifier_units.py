r"""Unit tests of the verifier's modules one by one: shapes.py (normalise, then shape), equal.py (when
two shaped answers are equal) and extract.py (the final answer of a completion), each against what
its docstrings promise.

tests/test_verifier.py and test_verifier_cases.py judge `verify` end to end, where one module can
make up for another; here each public function answers alone. Pinned among them, because a
regression there passed every end-to-end test: a lettered choice with a value matches only that
value (else "\boxed{(A) 0}" earns the reward of any number: reward hacking), repeats in a list do
not count ("1, 1, 2" = "1, 2"), and the identity test of expressions in variables is 1e-9 relative
(at 1e-3, "\sqrt{x} + 10^{-7}" would equal "\sqrt{x}").
"""
import itertools
from fractions import Fraction

import pytest
import sympy

from nanoatr.verifier import verify
from nanoatr.verifier.equal import OutOfBudget, equivalent, sympy_budget, values_equal
from nanoatr.verifier.extract import MAX_BOXES, MAX_GAP, MAX_STATEMENTS, MAX_TAIL, extract_answer, extract_answers
from nanoatr.verifier.parse import parse
from nanoatr.verifier.values import symbol
from nanoatr.verifier.shapes import (MAX_ANSWER_CHARS, MAX_ITEMS, Interval, as_intervals, canonical, list_of,
                                     match_brace, normalize)


def eq(a: str, b: str) -> bool:
    """equivalent() of two answer strings, both ways (the policy is symmetric: a one-sided verdict fails)."""
    with sympy_budget(1000):
        ab, ba = equivalent(canonical(a), canonical(b)), equivalent(canonical(b), canonical(a))
    assert ab == ba, (a, b, ab, ba)
    return ab


# ============================================================================
# shapes.py

def test_match_brace_finds_the_closing_brace():
    r"""The '}' that closes the '{' at i: nested braces count, escaped ones (\{ \}) and \\ do not,
    and an unclosed brace is -1 (a truncated box is no answer)."""
    assert match_brace("{a{b}c}d", 0) == 6
    assert match_brace("x{a{b}c}", 3) == 5
    assert match_brace(r"{a\}b}", 0) == 5
    assert match_brace(r"{a\{b}", 0) == 5
    assert match_brace("{\\\\}", 0) == 3  # "\\" is an escaped backslash: the brace after it closes
    assert match_brace("{a{b}", 0) == -1
    # it never scans past MAX_ANSWER_CHARS of content (longer answers are rejected anyway): the bound that
    # keeps a box search linear on hostile input
    assert match_brace("{" + "a" * MAX_ANSWER_CHARS + "}", 0) == MAX_ANSWER_CHARS + 1
    assert match_brace("{" + "a" * (MAX_ANSWER_CHARS + 1) + "}", 0) == -1


# (raw, normalised): what the module docstring's NORMALISATION says is dropped or unified
NORMALIZED = [
    (r"\left( 1, 2 \right)", "( 1, 2 )"), (r"\displaystyle\frac{1}{2}", r"\frac{1}{2}"),
    (r"\dfrac{1}{2}", r"\frac{1}{2}"), (r"\tfrac12", r"\frac12"), ("30^{\\circ}", "30"), ("30^\\circ", "30"),
    ("45°", "45"), (r"\sin 30^\circ", r"\sin(\frac{30\pi}{180})"), (r"\$5", "5"), ("$5$", "5"),
    ("1,000", "1000"), ("1 000", "1000"), ("1{,}000", "1000"), (r"1\,000", "1000"), ("-2,000", "-2000"),
    ("1,000,000", "1000000"), (r"5\text{ cm}", "5"), (r"5 \text{cm}^2", "5"), ("12 square units", "12"),
    ("7 apples", "7"), ("5 m", "5"), (r"\text{yes}", "yes"), (r"\mbox{no}", "no"), (r"\textbf{(B)}", "(B)"),
    (r"x \ge 5", "x ≥ 5"), (r"x \geq 5", "x ≥ 5"), ("x >= 5", "x ≥ 5"), (r"x \geqslant 5", "x ≥ 5"),
    (r"x \le 5", "x ≤ 5"), (r"x \ne 5", "x ≠ 5"), ("x != 5", "x ≠ 5"), (r"x \in (1,2]", "x = (1,2]"),
    (r"\sqrt2 \approx 1.414", r"\sqrt2"), (r"x \approx 3.14", "x = 3.14"), (r"\mathbb{R}", "ℝ"),
    ("all real numbers", "ℝ"), (r"\emptyset", "∅"), (r"\varnothing", "∅"), (r"\{\}", "∅"),
    (r"\langle 1, 2 \rangle", "( 1, 2 )"), ("5.", "5"), ("**5**", "5"), ("−5", "-5"), (r"5\%", "5%"),
]


@pytest.mark.parametrize("raw, normalized", NORMALIZED)
def test_normalize_removes_presentation(raw, normalized):
    r"""normalize() removes what only presents an answer (spacing, \left, units, $, thousands
    separators, degree marks) and writes each symbol one way, as the NORMALISATION list says."""
    assert normalize(raw) == normalized


@pytest.mark.parametrize("raw, normalized", [
    (r"34\text{ or 35}", "34 or 35"), (r"5 \text{ not}", "5 not"), (r"5 \text{ or more}", "5 or more"),
    ("7 or more", "7 or more"), ("5 or 6", "5 or 6"), ("2 and 3", "2 and 3"), ("1,2", "1,2"),
    ("12,34", "12,34"), (r"\neg p", r"\neg p"), (r"\nexists x", r"\nexists x"), (r"\emptysetx", r"\emptysetx")])
def test_normalize_keeps_what_changes_the_answer(raw, normalized):
    r"""What is not a unit stays: words like "or" / "not" after a number ("7 or more" is not 7 of a
    unit "or more"), commas that are not thousands separators (a list), and commands that only begin
    like a symbol's (\neg is not \ne)."""
    assert normalize(raw) == normalized


SHAPES = [  # (answer, Canon.kind): the module docstring's SHAPES, one or more of each
    ("42", "num"), (r"\frac{1}{2}", "num"), (r"x^2 + 1", "num"), ("1, 2", "list"), ("1; 2", "list"),
    ("1 or 2", "list"), ("1 and 2", "list"), ("x = 5", "rel"), ("y = 2x + 1", "rel"), (r"x^2 + y^2 > 1", "rel"),
    (r"x \ge 5", "interval"), ("1 < x < 3", "interval"), (r"\{x \mid x > 2\}", "interval"),
    (r"x \in (1, 2]", "interval"), ("|x| < 3", "interval"), (r"\mathbb{R}", "interval"),
    (r"x < -1 \text{ or } x > 2", "interval"), (r"(1, 2) \cup (3, 4)", "union"), (r"\{1, 2\}", "set"),
    (r"\emptyset", "set"), ("(1, 2)", "tuple"), ("[1, 2)", "tuple"), ("(1, 2, 3)", "tuple"),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", "matrix"), ("(B)", "choice"), ("B", "choice"),
    ("(B) 27", "choice"), (r"5\%", "num"), ("Monday", "text"), ("no solution", "text"), ("a - b", "num"),
]


@pytest.mark.parametrize("answer, kind", SHAPES)
def test_canonical_shapes(answer, kind):
    """canonical() gives each answer the shape equal.py compares it as."""
    assert canonical(answer).kind == kind


def test_canonical_details_of_choices_percent_tuples_and_lists():
    """A choice keeps its letter and, with "(B) 27", the value 27 (extra); a percentage is its number
    marked "%"; a tuple keeps its brackets; a letter past E is not a choice; list_of's text joins its
    answers' texts."""
    b27 = canonical("(B) 27")
    assert (b27.value, b27.extra.kind, b27.extra.value.exact) == ("B", "num", Fraction(27))
    assert canonical("(B)").extra is None and canonical("B").value == "B"
    assert canonical("F").kind != "choice"
    pct = canonical(r"12.5\%")
    assert (pct.kind, pct.value.exact, pct.extra) == ("num", Fraction(25, 2), "%")
    assert canonical("[1, 2)").extra == "[)"
    rel = canonical("x = 5")
    assert rel.extra == (("=",), (True, False))  # the operators, and which sides are names
    assert canonical("3/4 + x") is canonical("3/4 + x")  # pure and cached: golds and answers repeat in a run
    items = [canonical("1"), canonical("x")]  # list_of: several answers (different final boxes) as one Canon
    assert (list_of(items).kind, list_of(items).text, list_of(items).value) == ("list", "1, x", tuple(items))


def test_canonical_bounds_make_text():
    """Over the bounds an answer is text (compared as a string), never parsed: more than MAX_ITEMS
    entries, more than MAX_ANSWER_CHARS characters, an entry inside more than MAX_NESTING (4) tuples."""
    for k, kind in ((4, "num"), (5, "text")):  # "1" inside k tuples: ((1, 2), 2) for k = 2
        c = canonical("(" * k + "1" + ", 2)" * k)
        for _ in range(k):
            c = c.value[0]
        assert c.kind == kind
    assert canonical(", ".join(map(str, range(MAX_ITEMS)))).kind == "list"
    assert canonical(", ".join(map(str, range(MAX_ITEMS + 1)))).kind == "text"
    assert canonical("1" * (MAX_ANSWER_CHARS + 1)).kind == "text"


def _iv(lo, hi, lo_closed, hi_closed):
    return (lo, hi, lo_closed, hi_closed)


def intervals(answer):
    """as_intervals of an answer as plain tuples (lo, hi, lo_closed, hi_closed), or None."""
    ivs = as_intervals(canonical(answer))
    return None if ivs is None else [(iv.lo.exact, iv.hi.exact, iv.lo_closed, iv.hi_closed) for iv in ivs]


def test_as_intervals():
    r"""The intervals an answer denotes, or None: inequalities of one variable, a pair in brackets,
    a union, \mathbb{R}, a one-number set (a point in a union); anything else is None."""
    oo = sympy.oo
    assert intervals("x > 2") == [_iv(2, oo, False, False)]
    assert intervals(r"(2, \infty)") == [_iv(2, oo, False, False)]
    assert intervals("[1, 2]") == [_iv(1, 2, True, True)]
    assert intervals(r"(-1, 2] \cup (3, 4)") == [_iv(-1, 2, False, True), _iv(3, 4, False, False)]
    assert intervals(r"\mathbb{R}") == [_iv(-oo, oo, False, False)]
    assert intervals(r"\{3\} \cup (4, 5)") == [_iv(3, 3, True, True), _iv(4, 5, False, False)]
    assert intervals(r"x \ne 0") == [_iv(-oo, 0, False, False), _iv(0, oo, False, False)]
    assert intervals(r"|x| \ge 2") == [_iv(-oo, -2, False, True), _iv(2, oo, True, False)]
    assert intervals("5") is None and intervals("(1, 2, 3)") is None and intervals("1, 2") is None
    assert isinstance(as_intervals(canonical("x > 2"))[0], Interval)


# ============================================================================
# equal.py

def test_a_lettered_choice_with_a_value_matches_only_that_value():
    """"(A) 0" is the letter A and the value 0, nothing else. If the value stopped being compared,
    a boxed "(A) 0" would earn the reward of every numeric gold: reward hacking."""
    assert not eq("(A) 0", "5") and not verify(r"\boxed{(A) 0}", "5")
    assert not eq("(A) 0", "1, 2") and not eq(r"(A) x", "5") and not eq(r"(A) \infty", "5")
    assert eq("(A) 5", "5") and verify(r"\boxed{(A) 5}", "5")
    assert eq("(A) 5", "A") and eq("(A) 5", "(A)") and eq(r"\text{(A) } 5", "A")
    assert not eq("(A) 5", "B") and not eq("(A) 5", "(B) 5")  # the letter decides between choices
    assert not eq("A", "5") and not eq("(A)", "0")  # a bare letter has no value


def test_repeats_do_not_count_in_lists_and_sets():
    """Bare lists and sets are unordered and repeats do not count: "1, 1, 2" = "1, 2" (a double root
    written twice). Tuples are ordered and keep every entry."""
    assert eq("1, 1, 2", "1, 2") and eq("1, 2", "2, 1, 1") and eq(r"\{1, 1, 2\}", r"\{1, 2\}")
    assert eq("1, 1, 2", r"\{2, 1\}") and eq("2, 2", "2") and eq("x = 2, 2", "2")
    assert not eq("1, 1, 2", "1, 2, 3") and not eq("1, 1", "1, 2")
    assert not eq("(1, 1, 2)", "(1, 2)")  # a tuple is not a set


def test_identities_in_variables_are_tested_to_1e_minus_9():
    r"""Expressions in variables that are not rational functions (radicals, functions) are equal when
    their values at the fixed points, spread over [0.3, 1.7], agree to 1e-9 relative: float rounding passes,
    a constant of 1e-7, 1e-8 or 1.2e-9 does not (a tolerance of 1e-3 would accept "\sqrt{x} + 10^{-7}", one
    of 1.5e-9 "\sqrt{x} + 1.2 \cdot 10^{-9}")."""
    points = [v.real for name in "abcmnptxyz" for v in symbol(name).approx]
    assert 0.3 <= min(points) < 0.35 and 1.6 < max(points) <= 1.7
    assert not eq(r"\sqrt{x} + 10^{-7}", r"\sqrt{x}")
    assert not eq(r"\sqrt{x} + 10^{-8}", r"\sqrt{x}")
    assert not eq(r"\sqrt{x} + 1.2 \cdot 10^{-9}", r"\sqrt{x}")  # x's first point is 0.68: 1.2e-9 relative
    assert not eq(r"\sin x + 10^{-8}", r"\sin x")
    assert eq(r"\sqrt{x}\sqrt{x}", "x") and eq(r"\sqrt{4x}", r"2\sqrt{x}") and eq(r"\sin^2 x + \cos^2 x", "1")
    # rational functions are also compared exactly at rational points: any nonzero constant differs
    assert not eq("x + 10^{-20}", "x") and eq(r"\frac{x^2 - 4}{x - 2}", "x + 2")


def test_values_equal_is_exact():
    """values_equal: rationals as Fractions (a decimal is the rational it writes: no tolerance),
    irrational constants to working precision beyond the widest rational in them."""
    assert values_equal(parse("0.1"), parse("1/10")) and values_equal(parse("27.0"), parse("27"))
    assert not values_equal(parse("0.3333"), parse("1/3")) and not values_equal(parse("3.14"), parse(r"\pi"))
    assert values_equal(parse(r"\sqrt{8}"), parse(r"2\sqrt{2}"))
    assert values_equal(parse(r"(1+\sqrt2)^{10}"), parse(r"3363 + 2378\sqrt2"))
    assert not values_equal(parse(r"\sqrt{2} + 10^{-7}"), parse(r"\sqrt{2}"))
    assert not values_equal(parse(r"\sqrt{10^{60}+1} - 10^{30}"), parse("0"))  # 5e-31: beyond floats, not 0
    assert parse(r"\sin\frac{\pi}{6}").exact == Fraction(1, 2)  # a constant's function value is evaluated


def test_sympy_budget_bounds_the_sympy_work():
    """sympy_budget(n): at most n sympy evaluations inside, then OutOfBudget (verify says False);
    rationals need none; budgets nest and the outer one comes back."""
    with sympy_budget(0):
        assert values_equal(parse("1/2"), parse("0.5"))  # Fractions: no sympy
        with pytest.raises(OutOfBudget):
            values_equal(parse(r"\sqrt{8}"), parse(r"2\sqrt{2}"))
    with sympy_budget(1):
        with sympy_budget(0):
            with pytest.raises(OutOfBudget):
                values_equal(parse(r"\sqrt{8}"), parse(r"2\sqrt{2}"))
        assert values_equal(parse(r"\sqrt{8}"), parse(r"2\sqrt{2}"))  # the outer budget's one evaluation
    assert values_equal(parse(r"\sqrt{8}"), parse(r"2\sqrt{2}"))  # outside any budget: unlimited
    identity = parse(r"\frac{x^2 - 4}{x - 2}"), parse("x + 2")  # in variables: 1 + 1 per exact point (2)
    with sympy_budget(2), pytest.raises(OutOfBudget):
        values_equal(*identity)
    with sympy_budget(3):
        assert values_equal(*identity)


def test_brackets_at_infinity_are_ignored():
    r""""[5, \infty]" is "[5, \infty)" (the policy: brackets at infinity are ignored). It already was
    against "x \ge 5", so the two intervals that "x \ge 5" equals were unequal to each other; now the
    three agree. Brackets at a finite end still count, and so do a longer tuple's."""
    assert eq(r"[5, \infty]", r"[5, \infty)") and eq(r"(-\infty, 3)", r"[-\infty, 3)")
    assert eq(r"[5, \infty]", r"x \ge 5") and eq(r"x \ge 5", r"[5, \infty)")
    assert not eq(r"(5, \infty)", r"[5, \infty)") and not eq(r"(-\infty, 3)", r"[-\infty, 3]")
    assert not eq("(1, 2)", "[1, 2)") and not eq("(1, 2, 3)", "[1, 2, 3)")
    assert verify(r"\boxed{[5, \infty]}", r"[5, \infty)")


def test_relations_equal_up_to_a_factor():
    """Equations are equal up to a nonzero factor, inequalities up to a positive one; variables must
    agree; "x = 3" is the answer 3, and every non-name side of an equation must match; chains side by side,
    either way round, with the same operators."""
    assert eq(r"y = -\frac12 x + \frac34", "2x + 4y - 3 = 0") and not eq("2x + 4y = 3", "2x + 4y = -3")
    assert eq("y > 2x + 1", "4x + 2 < 2y") and not eq("y > 2x + 1", "-y > -2x - 1")
    assert not eq("x = 3", "y = 3") and not eq("x > 2", "t > 2") and eq("y - x = 0", "y = x")  # y - x: no words
    assert eq("x = 3", "3") and eq(r"2 \cdot 3 = 6", "6") and not eq("5 = 6", "6") and not eq("1 = 2", "2 = 4")
    assert eq("0 < x + y < 1", "0 < y + x < 1") and eq("0 < x + y < 1", "1 > x + y > 0")
    assert not eq("0 < x + y < 1", r"0 \le x + y < 1")
    # any factor, however small (zero is relative to each side's size: 10^{-13}x = 0 was not x = 0), either way
    # round (y = 10^{-13}x was 10^{13}y = x one way only), constant to 1e-9 of itself (10^{-10}\sqrt{n} passed)
    assert eq("10^{-13} x = 0", "x = 0") and eq("y = 10^{-13} x", "10^{13} y = x")
    assert eq(r"10^{-13}\sqrt{x} > 10^{-13}", r"\sqrt{x} > 1") and not eq(r"-10^{-13}\sqrt{x} > 0", r"\sqrt{x} > 0")
    assert not eq(r"10^{-10}\sqrt{n}(n + 1) = 0", "n + 1 = 0")
    assert not eq(r"(1 + 4 \cdot 10^{-9}\sqrt{x})(y - x) = 0", "y = x")  # k varies by 1.3e-9 of itself
    assert not eq("3x - 3x = 0", "2x - 2x = 0")  # 0 at every point: no k (no equation in x)
    p = [v.real for v in symbol("x").approx]  # both sides 0 at two of the fixed points: the third one decides
    assert eq(f"2(x - {p[1]!r})(x - {p[2]!r}) = 0", f"(x - {p[1]!r})(x - {p[2]!r}) = 0")
    q = p[1] * (1 + 1e-14)  # a root 1e-14 off a point: zero relative to the side's largest value, not smallest
    for r, s in ((q, p[1]), (p[1], q)):
        assert eq(rf"2\sqrt{{x}}(x - {r!r}) = 0", rf"\sqrt{{x}}(x - {s!r}) = 0")
    assert not eq(rf"\sqrt{{x}}(x - {p[1]!r}) = 0", rf"\sqrt{{x}}(x - {p[1]!r})(x - {p[2]!r}) = 0")  # g 0 alone
    assert eq(r"10^{13}(y - \sqrt{x - 5}) > 0", r"y - \sqrt{x - 5} > 0")  # k's rounding (imaginary) relative to k
    # the exact check at the rational points (16/7, 10/11): f 1 at the first; f and g both 0 at one; one exact side
    assert eq(r"\sqrt{2} x = 0", "x = 0") and eq(r"(x - \frac{9}{7}) = 0", r"2x - \frac{18}{7} = 0")
    for r in (r"\frac{16}{7}", r"\frac{10}{11}"):
        assert eq(rf"2(x - {r})(x + 1) = 0", rf"(x - {r})(x + 1) = 0")


EQUIVALENCE_TABLE = ["5", "(A) 5", "A", r"5\%", "0.05", "x = 5", r"\{5\}", "5, 5", "(5)", r"\{5, 6\}", "5, 6",
                     "(5, 6)", "[5, 6]", r"x \ge 5", r"[5, \infty)", r"[5, \infty]", "x = 5, 6",
                     r"\begin{pmatrix}5\\6\end{pmatrix}", r"\langle 5, 6 \rangle", r"5 \pm 1", "4, 6", "five",
                     "y = 5", "x", r"\mathbb{R}", r"x \ne 5", r"(-\infty,5)\cup(5,\infty)", "5 < x < 6"]


def test_equivalent_is_symmetric():
    """equivalent(a, b) == equivalent(b, a) across shapes (a reward must not depend on which side
    is the gold)."""
    for a, b in itertools.combinations(EQUIVALENCE_TABLE, 2):
        eq(a, b)  # asserts the symmetry


# ============================================================================
# extract.py

EXTRACTIONS = [  # (completion, the final answer(s)): the package docstring's EXTRACTION rules
    (r"so \boxed{5}.", ["5"]), (r"\fbox{7}", ["7"]), (r"\boxed 5 is it", ["5"]),
    (r"\boxed{\frac{1}{2}}", [r"\frac{1}{2}"]),
    # the last box and those chained to it: same paragraph, or across one with a hedge
    (r"$x = \boxed{2}$ and $y = \boxed{3}$", ["2", "3"]), (r"\boxed{2}. \boxed{3}.", ["2", "3"]),
    ("\\boxed{5}\n\nOr maybe \\boxed{6}", ["5", "6"]), ("\\boxed{5}\n\nSo we get \\boxed{6}", ["6"]),
    (r"\boxed{7}. Wait, I miscounted. So \boxed{8}", ["8"]), (r"\boxed{7} that was wrong \boxed{8}", ["8"]),
    (r"\boxed{3} and \boxed{3}", ["3", "3"]),
    # truncated or empty boxes are no answer
    (r"so \boxed{5", []), (r"\boxed{}", []), (r"\boxed{ }", []),
    # statements, without a box
    ("Answer: 42", ["42"]), ("Final answer: 7", ["7"]), ("## Answer: 8", ["8"]), ("The answer is 12.", ["12"]),
    (r"the final answer is $\frac{1}{2}$.", [r"\frac{1}{2}"]), ("The answers are $1$ and $2$.", ["1, 2"]),
    ("Answer: $3$ or $4$", ["3, 4"]), ("The correct option is (B).", ["(B)"]),
    ("The answer to the question is 7.", ["7"]), ("#### 72", ["72"]), ("17 is the answer.", ["17"]),
    ("Answer: $$\n42\n$$", ["\n42\n"]), ("<answer>9</answer>", ["9"]), ("<answer>9", []), ("**Final Answer**\n\\[ 42 \\]", [" 42 "]),
    ("the answer is 12 apples", ["12"]), ("The answer is 12, which is even.", ["12"]),
    ("Answer: The number of ways is 120.", ["120"]),
    ("The answer is correct.", []), ("the answer is $12$, or maybe $13$", []),  # chatter; a hedge voids
    ("Answer: 5\nAnswer: 6", ["5", "6"]), ("The answer is 12. The answer is 13.", ["12", "13"]),
    ("Answer: Monday\nMonday\nAnswer: Friday", ["Friday"]),  # a word between: its answer only is removed
    ("Answer: 5. Hmm, let me reconsider the whole problem carefully. Answer: 6", ["6"]),
    ("We get 5 and 6 and 7", []),  # no marker, no answer: no "last number" fallback
    # a line starting "Answer:" after the last box replaces it; a mid-line remark does not
    ("\\boxed{3}\nAnswer: 4", ["4"]), (r"\boxed{3} so the answer: 4 right", ["3"]),
    (r"\boxed{5} and the answer is correct", ["5"]),
]


@pytest.mark.parametrize("completion, answers", EXTRACTIONS)
def test_extract_answers(completion, answers):
    """extract_answers: the final answer(s) of a completion, by the EXTRACTION rules; [] for none.
    extract_answer: them as one string, several joined by ", "; None for none."""
    assert extract_answers(completion) == answers
    assert extract_answer(completion) == (", ".join(answers) if answers else None)


def test_extraction_bounds():
    """The work on any completion is bounded: only the last MAX_TAIL characters are searched, a
    chain of more than MAX_BOXES boxes is box spam (no answer), boxes more than MAX_GAP characters
    apart do not chain, and only the last MAX_STATEMENTS statements are examined."""
    assert extract_answers(r"\boxed{5}" + "x" * (MAX_TAIL - len(r"\boxed{5}"))) == ["5"]
    assert extract_answers(r"\boxed{5}" + "x" * (MAX_TAIL - len(r"\boxed{5}") + 1)) == []
    assert extract_answers("x" * (2 * MAX_TAIL) + " Answer: 5") == ["5"]
    boxes = [rf"\boxed{{{i}}}" for i in range(MAX_BOXES + 1)]
    assert extract_answers(" ".join(boxes[:MAX_BOXES])) == [str(i) for i in range(MAX_BOXES)]
    assert extract_answers(" ".join(boxes)) == []
    assert extract_answers(r"\boxed{1}" + " " * MAX_GAP + r"\boxed{2}") == ["1", "2"]
    assert extract_answers(r"\boxed{1}" + " " * (MAX_GAP + 1) + r"\boxed{2}") == ["2"]
    chatter = "The answer is correct.\n"
    assert extract_answers("Answer: 5\n" + chatter * (MAX_STATEMENTS - 1)) == ["5"]
    assert extract_answers("Answer: 5\n" + chatter * MAX_STATEMENTS) == []
