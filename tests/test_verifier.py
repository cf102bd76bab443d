"""Tests for nanoatr.verifier: extraction, normalisation and the equivalence policy, kind by kind.

Safety (hostile input, bounds) is in test_verifier_safety.py; the labelled case file in
test_verifier_cases.py."""
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings, strategies as st

from nanoatr.verifier import verify


def boxed(ans: str) -> str:
    """A typical worked solution ending in a boxed answer."""
    return ("We first simplify the expression, then substitute x = 3 and y = 7 into it. "
            "Checking the edge cases 12 and 45 gives the same result, so the final answer is "
            f"$\\boxed{{{ans}}}$.")


# (answer inside \boxed{}, gold, expected) --------------------------------------------------
INTEGERS = [
    ("25", "025", True), ("25", "25", True), ("025", "25", True), ("27", "27.0", True),
    ("-1", "-1.0", True), ("-1", "1.0", False), ("+5", "5", True), ("5.0", "5", True),
    ("5.00", "5", True), ("1,000", "1000", True), ("1{,}000", "1000", True), ("1\\,000", "1000", True),
    ("1,234,567", "1234567", True), ("-2,000", "-2000", True), ("1000", "1,000", True),
    ("34", "34", True), ("35", "34", False), ("0", "0", True), ("0", "-0.0", True),
    ("-7", "7", False), ("100", "10", False), ("12", "120", False), ("2^{10}", "1024", True),
    ("10^3", "1000", True), ("\\$5", "5", True), ("5 dollars", "5", True),
]

FRACTIONS = [
    ("\\frac{1}{2}", "1/2", True), ("\\dfrac{1}{2}", "0.5", True), ("\\tfrac{1}{2}", "\\frac12", True),
    ("1/2", "\\frac{1}{2}", True), ("\\frac12", "0.5", True), ("\\frac{2}{4}", "\\frac{1}{2}", True),
    ("-\\frac{3}{4}", "-0.75", True), ("\\frac{-3}{4}", "-3/4", True), ("\\frac{3}{-4}", "-3/4", True),
    ("-\\frac{3}{4}", "3/4", False), ("1/2", "2", False), ("2", "1/2", False), ("\\frac{1}{2}", "\\frac{2}{1}", False),
    ("\\frac{10}{3}", "3\\frac{1}{3}", True), ("1\\frac{1}{4}", "5/4", True), ("1 1/4", "\\frac54", True),
    ("-1\\frac{1}{4}", "-1.25", True), ("11/4", "1 1/4", False), ("2\\frac{1}{2}", "2.5", True),
    ("\\frac{\\frac{1}{2}}{3}", "1/6", True), ("\\frac{1}{2}+\\frac{1}{3}", "5/6", True),
    ("\\frac(1)(2)", "\\frac12", False), ("6\\div 4", "3/2", True), ("\\frac{7}{8}", "0.875", True), ("0.875", "7/8", True),
]

# Decimals are the exact rationals they write: no tolerance, so a rounded decimal never earns the
# reward for an exact answer (1.414 is not sqrt 2), and an exact answer never matches a rounded gold.
DECIMALS_EXACT = [
    ("0.33", "1/3", False), ("0.333", "1/3", False), ("0.3333", "1/3", False), ("0.33333", "\\frac{1}{3}", False),
    ("0.3334", "1/3", False), ("0.3332", "1/3", False), ("0.6667", "2/3", False), ("0.6666", "2/3", False),
    ("0.6665", "2/3", False), ("0.5001", "1/2", False), ("0.4999", "0.5", False), ("3.14", "\\pi", False),
    ("3.1416", "\\pi", False), ("3.1415", "\\pi", False), ("3.1417", "\\pi", False), ("1.414", "\\sqrt{2}", False),
    ("1.41", "\\sqrt{2}", False), ("1/3", "0.3333", False), ("0.\\overline{3}", "1/3", True), ("0.1\\overline{6}", "\\frac16", True), ("0.3333", "0.33333", False), ("2.5", "2.50", True),
    ("1234.05", "1234.0", False), ("1234.0", "1234", True), (".5", "0.5", True), ("0.1", "1/10", True),
]

SCI_AND_POWERS = [
    ("1.5\\times10^{3}", "1500", True), ("1.5 \\times 10^3", "1500", True), ("1.5e3", "1500", True),
    ("1.5E3", "1.5\\times10^{3}", True), ("1.5e-3", "0.0015", True), ("2\\cdot10^{4}", "20000", True),
    ("1.5\\times10^{3}", "150", False), ("2^{-1}", "1/2", True), ("2^{3^2}", "512", True), ("(-2)^3", "-8", True),
    ("-2^2", "-4", True), ("-2^2", "4", False), ("4^{1/2}", "2", True), ("8^{\\frac{2}{3}}", "4", True),
    ("2**3", "8", True), ("1.2346e4", "12346", True), ("3^{1501/2}", "3^{750}\\sqrt{3}", True),
]

RADICALS_AND_PI = [
    ("2\\sqrt{3}", "\\sqrt{12}", True), ("\\sqrt{12}", "2\\sqrt3", True), ("2\\sqrt{3}", "3\\sqrt{2}", False),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True), ("\\frac{2}{\\sqrt{3}-1}", "\\sqrt{3}+1", True),
    ("\\sqrt{3}+1", "\\sqrt{3}-1", False), ("(1+\\sqrt{2})^2", "3+2\\sqrt{2}", True), ("\\sqrt[3]{27}", "3", True),
    ("\\sqrt[3]{-8}", "-2", True), ("\\sqrt[3]{2}", "2^{1/3}", True), ("\\sqrt{16}", "4", True),
    ("\\sqrt{2}\\sqrt{3}", "\\sqrt{6}", True), ("\\frac{\\pi}{2}", "\\pi/2", True), ("2\\pi", "\\pi\\cdot 2", True),
    ("\\frac{\\pi}{3}", "\\frac{\\pi}{6}", False), ("\\pi", "3", False), ("4\\pi", "4 \\pi", True),
    ("\\frac{4\\pi}{3}", "\\frac43\\pi", True), ("\\sqrt{2}", "2", False), ("\\infty", "\\infty", True),
    ("-\\infty", "\\infty", False), ("-(x + \\infty)", "-\\infty", False), ("5\\sqrt{2}", "\\sqrt{50}", True),
    ("\\sqrt{8}", "2\\sqrt{2}", True), ("\\frac\\pi2", "\\pi/2", True), ("\\sqrt x", "x^{1/2}", True),  # an argument of one command, one letter
]

PERCENT_DEGREES_UNITS = [
    ("50\\%", "50", True), ("50", "50\\%", True), ("50\\%", "0.5", True), ("5", "50\\%", False),
    ("12.5\\%", "12.5", True), ("30^\\circ", "30", True), ("30^{\\circ}", "30", True), ("30", "30^\\circ", True),
    ("45°", "45", True), ("30^\\circ", "60", False), ("5\\text{ cm}", "5", True), ("5 \\text{cm}^2", "5", True),
    ("5\\mbox{ inches}", "5", True), ("5\\mathrm{~m}", "5", True), ("5 cm", "5", True), ("6\\text{ cm}", "5", False),
    ("\\text{5 meters}", "5", True), ("12 \\text{ square units}", "12", True),
    ("34\\text{ or 35}", "34", False), ("34\\text{ not}", "34", False), ("34 \\text{ or maybe not}", "34", False),
]

SPACING_AND_EQUATIONS = [
    ("\\left( 1, 2 \\right)", "(1,2)", True), ("\\left(\\frac{1}{2}\\right)", "1/2", True), ("1\\!2", "12", True),
    ("3\\;", "3", True), ("~7", "7", True), ("\\quad 7", "7", True), ("\\displaystyle\\frac{1}{2}", "0.5", True),
    ("x = 5", "5", True), ("x=5", "x = 5", True), ("y = 2x+3", "2x+3", True), ("a_1 = 4", "4", True),
    ("x = 6", "5", False), ("x + y = 5", "5", False), ("x \\approx 3.1416", "\\pi", False), ("x \\approx 3.1416", "3.1416", True), ("x \\in (1, 2]", "(1,2]", True),
    ("5.", "5", True), ("$5$", "5", True), ("\\(5\\)", "5", True),
]

INTERVALS_AND_LISTS = [
    ("(1, 2]", "(1,2]", True), ("(1,2)", "(1,2]", False), ("[1,2]", "(1,2)", False), ("(2,1)", "(1,2)", False),
    ("(-\\infty, 3)", "(-\\infty,3)", True), ("[0, \\infty)", "[0,\\infty)", True),
    ("(\\frac12, 3]", "(0.5, 3]", True), ("(1, 2, 3)", "(1,2,3)", True), ("(1,2)", "(1,2,3)", False),
    ("(-\\infty,1)\\cup(2,\\infty)", "(2,\\infty)\\cup(-\\infty,1)", True), ("2, 1", "1, 2", True),
    ("1, 2", "1,2", True), ("1, 2, 3", "3, 2, 1", True), ("1, 2", "1, 2, 3", False), ("2, 1", "1", False),
    ("1", "1, 2", False), ("1, 1", "1, 2", False), ("\\{1, 2\\}", "\\{2,1\\}", True), ("x = 1, 2", "1, 2", True),
    ("x=1 \\text{ or } x=2", "1, 2", True), ("\\frac{1}{2}, -3", "-3, 0.5", True), ("1; 2", "2, 1", True),
    ("2 \\pm \\sqrt{3}", "2+\\sqrt3, 2-\\sqrt3", True), ("\\pm 2021", "2021", False), ("\\pm 2", "2, -2", True),
    ("\\pm 2", "\\pm 2", True),
]

CHOICES_AND_TEXT = [
    ("(B)", "B", True), ("\\text{(B)}", "B", True), ("B", "(B)", True), ("\\textbf{(B)}", "B", True),
    ("(B) 27", "B", True), ("\\textbf{(C) }27", "B", False), ("(C)", "B", False), ("A", "B", False),
    ("\\text{Monday}", "monday", True), ("Monday", "Tuesday", False), ("\\text{Yes}", "yes", True),
    ("\\text{no}", "yes", False), ("\\text{even}", "Even", True), ("red  and   blue", "red and blue", True),
    ("\\text{odd}", "1", False), ("5", "\\text{five}", False),
]

SYMBOLIC = [
    ("x^2+2x+1", "(x+1)^2", True), ("2x+3", "3+2x", True), ("2x+3", "2x+4", False), ("\\frac{x}{2}", "0.5x", True),
    ("x", "y", False), ("\\theta + \\theta", "2\\theta", True), ("2xyz", "2zyx", True),
    ("2^{n}", "2^n", True), ("n+1", "1+n", True),
]

ALL_TABLES = (INTEGERS + FRACTIONS + DECIMALS_EXACT + SCI_AND_POWERS + RADICALS_AND_PI
              + PERCENT_DEGREES_UNITS + SPACING_AND_EQUATIONS + INTERVALS_AND_LISTS + CHOICES_AND_TEXT
              + SYMBOLIC)


# The kinds added for issue 18 (each a class of answer, not one example) ---------------------
INEQUALITIES = [
    ("x \\ge 5", "x \\geq 5", True), ("k \\geq 2", "k \\ge 2", True), ("x \\geqslant 1", "x \\ge 1", True),
    ("5 \\le x", "x \\ge 5", True), ("5 < x", "x > 5", True), ("5 > x", "x > 5", False), ("x > 5", "x \\ge 5", False),
    ("x \\ge 5", "[5, \\infty)", True), ("x > 5", "(5, \\infty)", True), ("x > 5", "[5, \\infty)", False),
    ("(-\\infty, 2]", "x \\le 2", True), ("1 < x \\le 3", "(1, 3]", True), ("1 \\le x < 3", "(1, 3]", False),
    ("3 \\ge x > 1", "1 < x \\le 3", True), ("x \\in (1, 3]", "1 < x \\le 3", True),
    ("x < -1 \\text{ or } x > 2", "(-\\infty,-1)\\cup(2,\\infty)", True), ("x \\ne 0", "(-\\infty,0)\\cup(0,\\infty)", True),
    ("|x| < 2", "-2 < x < 2", True), ("|x| \\ge 2", "x \\le -2 \\text{ or } x \\ge 2", True),
    ("\\{x \\mid x > 2\\}", "x > 2", True), ("x \\ge \\frac{1}{2}", "x \\geq 0.5", True), ("x > 2", "t > 2", False),
    ("y > 2x + 1", "2x + 1 < y", True), ("y > 2x + 1", "4x + 2 < 2y", True), ("y > 2x + 1", "y \\ge 2x + 1", False),
    ("y > 2x + 1", "-y > -2x - 1", False),
]

# Two inequalities joined by "and" are their intersection: on a tied end the strict one wins ("x \ge 1 and
# x > 1" is x > 1, not x \ge 1), and each end keeps its own closedness, whichever inequality comes first.
INEQUALITY_PAIRS = [
    ("x \\ge 1 \\text{ and } x > 1", "x > 1", True), ("x \\ge 1 \\text{ and } x > 1", "x \\ge 1", False),
    ("x > 1 \\text{ and } x \\ge 1", "x \\ge 1", False), ("x < 2 \\text{ and } x \\le 2", "x < 2", True),
    ("x \\le 2 \\text{ and } x < 2", "x \\le 2", False),
    ("x \\ge 1 \\text{ and } x \\le 2", "[1, 2]", True), ("x \\le 2 \\text{ and } x \\ge 1", "[1, 2]", True),
    ("x \\ge 1 \\text{ and } x \\le 2", "[1, 2)", False), ("x \\ge 1 \\text{ and } x \\le 2", "(1, 2]", False),
    ("x > 1 \\text{ and } x \\le 2", "(1, 2]", True), ("[1, 2]", "x \\ge 1 \\text{ and } x \\le 2", True),
]

# A one-point solution set ("x \ge 1 and x \le 1", "1 \le x \le 1") is the equation x = 1, and so the value 1;
# an empty one (a strict end on the tie), another point, another variable or a longer interval is not.
POINT_SETS = [
    ("x \\ge 1 \\text{ and } x \\le 1", "x = 1", True), ("x = 1", "x \\ge 1 \\text{ and } x \\le 1", True),
    ("x \\le 1 \\text{ and } x \\ge 1", "1", True), ("1 \\le x \\le 1", "x = 1", True),
    ("x \\ge \\frac12 \\text{ and } x \\le 0.5", "x = \\frac{1}{2}", True),
    ("x \\ge 1 \\text{ and } x \\le 1", "\\{1\\}", True), ("x \\ge 1 \\text{ and } x \\le 1", "x \\in [1, 1]", True),
    ("x \\ge 1 \\text{ and } x \\le 2", "x = 1", False), ("x \\ge 1 \\text{ and } x \\le 1", "x = 2", False),
    ("x \\ge 1 \\text{ and } x \\le 1", "t = 1", False), ("x > 1 \\text{ and } x \\le 1", "x = 1", False),
    ("x \\ge 1 \\text{ and } x < 1", "x = 1", False), ("x \\ge 1 \\text{ and } x \\le 1", "x \\ge 1", False),
    ("x \\ge 1 \\text{ and } x \\le 1", "2", False), ("1 \\le x \\le 2", "x = 1", False),
]

EQUATIONS = [
    ("y = -\\frac12 x + \\frac34", "2x+4y-3=0", True), ("2x + 4y = 3", "y = -\\frac{x}{2} + \\frac{3}{4}", True),
    ("y = -\\frac12 x + \\frac34", "2x+4y+3=0", False), ("x = 3", "3", True), ("3", "3 = x", True), ("3 = x", "x = 3", True),
    ("x = 3", "y = 3", False), ("(x-1)^2 + y^2 = 4", "x^2 - 2x + y^2 - 3 = 0", True), ("x^2 + y^2 = 4", "x^2+y^2=2", False),
    ("y = x^2", "y - x^2 = 0", True), ("y = x^2", "y = x^3", False), ("f(x) = 3x - 1", "3x - 1", True),
    ("x = 2, y = -1", "(2, -1)", True), ("(x, y) = (2, -1)", "(2, -1)", True), ("x = -1, y = 2", "(2, -1)", False),
    ("2 \\cdot 3 = 6", "6", True), ("5 = 6", "6", False), ("x + y = 5", "5", False), ("2 = 2", "x = 2", False),
    ("y = \\sqrt{2} x + \\pi", "2y = 2\\sqrt{2} x + 2\\pi", True),  # proportional, irrational: numerically only
]

MATRICES = [
    ("\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", True),
    ("\\begin{pmatrix} \\frac12 & \\sqrt{4} \\end{pmatrix}", "\\begin{pmatrix} 0.5 & 2 \\end{pmatrix}", True),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}", False),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\end{pmatrix}", False),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "(1, 2)", True), ("\\langle 1, 2 \\rangle", "(1, 2)", True),
    ("\\left[\\begin{array}{cc} 1 & 0 \\\\ 0 & 1 \\end{array}\\right]", "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}", True),
]

UNSIMPLIFIED = [
    ("5!", "120", True), ("\\binom{5}{2}", "10", True), ("\\dbinom{5}{2}", "10", True), ("{5 \\choose 2}", "10", True),
    ("\\frac{7!}{3!4!}", "35", True), ("3!", "3", False), ("\\binom{5}{2}", "\\binom{5}{3}", True), ("\\binom{5}{1}", "10", False),
    ("\\log_2 32", "5", True), ("\\log 1000", "3", True), ("\\sin \\frac{\\pi}{6}", "\\frac{1}{2}", True),
    ("\\cos 60^\\circ", "0.5", True), ("\\frac{x^2 - 4}{x - 2}", "x + 2", True), ("(a - b)^2", "a^2 - 2ab + b^2", True),
    ("(a - b)^2", "a^2 - b^2", False), ("e^{i\\pi}", "-1", True), ("i^2", "-1", True), ("2^3 \\cdot 3", "24", True),
]

SETS_AND_TUPLES = [
    ("\\left\\{ \\frac{1}{2}, \\sqrt{9} \\right\\}", "\\{3, 0.5\\}", True), ("(\\sqrt{8}, \\frac{6}{4})", "(2\\sqrt{2}, 1.5)", True),
    ("(\\sqrt{8}, \\frac{6}{4})", "(1.5, 2\\sqrt{2})", False), ("\\mathbb{R}", "(-\\infty, \\infty)", True),
    ("\\text{all real numbers}", "\\mathbb{R}", True), ("\\emptyset", "\\varnothing", True), ("\\{\\}", "\\emptyset", True),
    ("\\{4\\}", "4", True), ("2, 3", "(2, 3)", True), ("3, 2", "(2, 3)", False), ("2, 2", "2", True), ("2, 2", "2, 3", False),
]

# Policy pins: percent both ways; the last box group; degrees.
PERCENT = [("25\\%", "25", True), ("25\\%", "0.25", True), ("25", "25\\%", True), ("0.25", "25\\%", True),
           ("25\\%", "2.5", False), ("25\\%", "\\frac14", True), ("2.5\\%", "0.025", True)]

# Near misses: exact, not approximately equal (the float checks alone would accept these).
NEAR_MISSES = [("x + 10^{-20}", "x", False), ("y = 2x + 1 + 10^{-15}", "y = 2x + 1", False),
               ("\\sqrt{10^{200}+1} - 10^{100}", "0", False), ("1 + 10^{-30}", "1", False),
               ("(1+\\sqrt2)^{10}", "3363 + 2378\\sqrt2", True), ("(1+\\sqrt2)^{10}", "3363 + 2379\\sqrt2", False)]

ALL_TABLES = ALL_TABLES + NEAR_MISSES + INEQUALITIES + EQUATIONS + MATRICES + UNSIMPLIFIED + SETS_AND_TUPLES + PERCENT
ALL_TABLES += INEQUALITY_PAIRS + POINT_SETS
# the golds of the real files as written there (025, 27.0, -1.0 and 34 are INTEGERS' already)
ALL_TABLES += [("10^{20}", "1e+20", True), ("\\frac{1}{10}", "0.1", True), ("3", "\\boxed{3}", True)]


@pytest.mark.parametrize("answer,gold,expected", ALL_TABLES)
def test_boxed_equivalence(answer, gold, expected):
    assert verify(boxed(answer), gold) is expected


# (full completion, gold, expected): extraction --------------------------------------------
COMPLETIONS = [
    (boxed("27"), 27.0, True), (boxed("34"), 34, True), (None, "1", False), (boxed("None"), None, False),  # non-str
    (boxed("True"), True, False), ("Answer: " + "1" * 400, "1" * 400, True), ("Answer: " + "1" * 401, "1" * 401, False),
    ("The sum is 34.\nAnswer: 34", "34", True),                         # DAPO's required last line
    ("**Answer:** **73**", "73", True),                                 # markdown bold
    ("Answer: \\frac{1}{2}.", "0.5", True),
    ("So the answer is: **6**", "6", True),
    ("Therefore the answer is $\\boxed{6}$.", "6", True),
    ("\\boxed{5}.\n\nLater: \\boxed{7}", "7", True),                     # the LAST box counts
    ("\\boxed{5} and then later \\boxed{7}", "7", False),              # different boxes, one group: a hedge
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt2}{2}", True),      # nested braces
    ("\\boxed{\\{1,2\\}}", "1, 2", True),                               # escaped braces inside the box
    ("so $\\boxed 5$", "5", True),                                      # \boxed without braces
    ("The result is \\boxed{12", "12", False),                          # truncated: unclosed box
    ("\\boxed{3} hmm wait, \\boxed{\\frac{12}", "3", False),
    ("We compute 3 + 31 = 34", "34", False),                            # no marker: last number never counts
    ("", "34", False),
    ("\\boxed{6}\n\nI am confident the answer is correct.", "6", True), # chatter after the box
    ("\\boxed{6}\nAnswer: 7", "7", True),                               # later marker wins
    ("Answer: 7\n\\boxed{6}", "6", True),
    ("\\boxed{6}\n**Final Answer:** 7", "7", True),
    ("\\boxed{5}. To double-check the answer: 2+3=5.", "5", True),  # mid-line "answer:" is chatter
    ("x" * 10_000 + "\\boxed{9}", "9", True),                           # long completion
    ("\\boxed{9}" + "x" * 19_991, "9", True), ("\\boxed{9}" + "x" * 19_992, "9", False),  # the last 20,000 chars
    ("Answer: 5\nAnswer: " + "\\," * 200 + "5", "5", False),  # 400 chars at most, in every answer
]


# Statements without a box: the last one counts; the answer is its first math span or leading value.
STATEMENTS = [
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac34", True),
    ("The perimeter follows.\n\n**Final Answer**\n\\[ 42 \\]", "42", True),
    ("### Final Answer\n\n$42$", "42", True),
    ("The answer is 10.\nHmm, I missed a case; with it the answer is 12.", "12", True),
    ("Answer: 10\n\nAnswer: 12", "12", False),                       # two final answers: a hedge
    ("Answer: 10\n\nWait, I missed the empty set.\n\nAnswer: 12", "12", True),  # a correction
    ("The answer is 12. Or maybe the answer is 13.", "13", False),
    ("So $\\frac{5}{3}$ is the final answer.", "\\frac53", True),
    ("The answer is 12 marbles, since each bag holds 3.", "12", True),
    ("The answer is 12 or 13.", "12", False),
    ("<think>6*7</think>\n<answer>42</answer>", "42", True),
    ("I believe the answer is correct.", "5", False),
    ("The answer is $x = 4$.", "4", True),
]


# Several boxes: equal boxes are one answer; different boxes in one final chain are a list, which
# never equals a single gold (boxing candidates earns nothing); a new paragraph or a correction
# ("wait", "wrong") starts a new chain, unless the text hedges ("or maybe").
BOX_GROUPS = [
    ("$\\boxed{3}$, $\\boxed{4}$, $\\boxed{5}$", "5", False),
    ("It is $\\boxed{4}$ or $\\boxed{5}$.", "4", False),
    ("$x = \\boxed{2}$ and $y = \\boxed{3}$", "(2, 3)", True),
    ("$x = \\boxed{2}$ and $y = \\boxed{3}$", "2, 3", True),
    ("So $\\boxed{\\frac12}$, i.e. $\\boxed{0.5}$.", "0.5", True),
    ("First try: $\\boxed{4}$. That was wrong, so $\\boxed{5}$.", "5", True),    # a correction
    ("So $a = \\boxed{4}$, and the sum is $\\boxed{5}$.", "5", False),         # one paragraph: both count
    ("First try: $\\boxed{4}$.\n\nThat was wrong: I counted a pair twice. So $\\boxed{5}$.", "5", True),
    ("$\\boxed{4}$.\n$\\boxed{5}$.\n$\\boxed{6}$.", "6", False),
    ("It is $\\boxed{4}$.\n\nOr maybe it is $\\boxed{5}$.", "5", False),                # a hedge across paragraphs
    ("\\boxed{5}\n\n**Final Answer**\n\\boxed{5}", "5", True),
]


@pytest.mark.parametrize("completion,gold,expected", COMPLETIONS + STATEMENTS + BOX_GROUPS)
def test_extraction(completion, gold, expected):
    assert verify(completion, gold) is expected


# property tests ---------------------------------------------------------------------------
def _terminating_decimal(r: Fraction):
    q, k = r.denominator, 0
    while q % 2 == 0 or q % 5 == 0:
        q //= 2 if q % 2 == 0 else 5
    if q != 1:
        return None
    while (r * 10 ** k).denominator != 1:
        k += 1
    n = abs(r.numerator * 10 ** k // r.denominator)
    digits = str(n).rjust(k + 1, "0")
    s = digits[:-k] + "." + digits[-k:] if k else digits
    return ("-" if r < 0 else "") + s, k


def latex_forms(r: Fraction):
    p, q = r.numerator, r.denominator
    forms = [f"\\frac{{{p}}}{{{q}}}", f"\\dfrac{{{p}}}{{{q}}}", f"{p}/{q}"]
    if p < 0:
        forms += [f"-\\frac{{{-p}}}{{{q}}}", f"\\frac{{-{-p}}}{{{q}}}"]
    dec = _terminating_decimal(r)
    if dec:
        forms.append(dec[0])
    if q == 1:
        forms += [f"{p:,}", f"{p:,}".replace(",", "{,}"), f"{p:,}".replace(",", "\\,"), str(p)]
    return forms


rationals = st.builds(Fraction, st.integers(-10**6, 10**6), st.integers(1, 10**4))
integers = st.integers(-10**9, 10**9).map(Fraction)
values = st.one_of(rationals, integers)


def gold_strings(r: Fraction):
    golds = [str(r)]  # "3/4", "-5"
    if r.denominator == 1 and abs(r) < 10**15:
        golds.append(str(float(r)))  # AMC-style "27.0"
    return golds


@settings(max_examples=150, deadline=None)
@given(values, st.data())
def test_property_same_value_verifies(r, data):
    form = data.draw(st.sampled_from(latex_forms(r)))
    gold = data.draw(st.sampled_from(gold_strings(r)))
    assert verify(boxed(form), gold), (form, gold)


@settings(max_examples=150, deadline=None)
@given(values, values, st.data())
def test_property_different_value_fails(r, other, data):
    assume(r != other)
    form = data.draw(st.sampled_from(latex_forms(r)))
    gold = data.draw(st.sampled_from(gold_strings(other)))
    assert not verify(boxed(form), gold), (form, gold)


def test_never_evaluates_text(monkeypatch):
    """Run the positive table with eval/exec and sympy's string parsers booby-trapped."""
    import ast
    import builtins
    import inspect

    import sympy
    import sympy.parsing.sympy_parser as sympy_parser

    from nanoatr import verifier
    from nanoatr.verifier import equal, extract, parse, shapes, values

    banned = {"eval", "exec", "sympify", "parse_expr", "parse_latex", "S", "__import__"}
    for module in (verifier, equal, extract, parse, shapes, values):  # statically: no such name is ever referenced
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            name = getattr(node, "id", None) or getattr(node, "attr", None)
            assert name not in banned, (module.__name__, name)

    def trap(*args, **kwargs):
        raise AssertionError("untrusted text reached an evaluator")

    for target, name in ((builtins, "eval"), (builtins, "exec"), (sympy, "sympify"),
                         (sympy, "parse_expr"), (sympy_parser, "parse_expr")):
        monkeypatch.setattr(target, name, trap)
    verifier.canonical.cache_clear()
    positives = [(a, g) for a, g, expected in ALL_TABLES if expected]
    assert all(verify(boxed(a), g) for a, g in positives)
    verifier.canonical.cache_clear()
