r"""Exact values with bounds: the numbers and expressions the parser builds, and their arithmetic.

A value is a Num: exact (a Fraction while rational, else a sympy object) plus `approx`, its complex
value at N_POINTS fixed pseudo-random points. Every operation that could blow up refuses with
ParseError BEFORE building anything (the MAX_* bounds below): docs/library.md#values"""
from __future__ import annotations

import cmath
import math
import random
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple, Optional, Tuple, Union

import sympy

MAX_DEPTH = 24            # nested groups / parentheses / fraction arguments / exponents
MAX_LITERAL_DIGITS = 200  # digits in one number literal
MAX_BITS = 4096           # width of any rational we build (~1230 decimal digits)
MAX_EXP = 4096            # |numerator| of an exponent
MAX_DEGREE = 256          # |exponent| on an expression with variables (x^256; the points bound the rest)
MAX_NODES = 2000          # nodes of a sympy expression tree
MAX_ROOT = 64             # root index / exponent denominator
MAX_SCI_EXP = 1000        # |k| in 1.5e{k} and 1.5\times10^{k}
MAX_FACTORIAL = 1000      # n in n! (and n! must also fit in MAX_BITS: n <= ~560)
MAX_TRIG_ARG = 1e4        # |argument| of a trigonometric function (sympy reduces it modulo pi)
MAX_RADICAND_BITS = 256   # total width of the rationals under inexact roots in one answer: sympy
#                           factors radicands (and merges sqrt(a)*sqrt(b) into sqrt(ab)), which is
#                           slow for big ones: sqrt(3^2500+2) alone takes ~0.2 s
N_POINTS = 3

Approx = Optional[Tuple[complex, ...]]
GREEK = frozenset("alpha beta gamma delta epsilon theta lambda mu nu phi rho sigma tau omega".split())
FUNCTIONS = {"sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec,
              "csc": sympy.csc, "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
              "ln": sympy.log, "log": sympy.log, "exp": sympy.exp}
_TRIG = frozenset(["sin", "cos", "tan", "cot", "sec", "csc"])
ATOM_COMMANDS = frozenset({"frac", "sqrt", "pi", "infty", "binom"}) | GREEK | frozenset(FUNCTIONS)


class ParseError(ValueError):
    """The string is not (safely) parseable math; callers fall back to text comparison."""


class Num(NamedTuple):
    exact: Union[Fraction, sympy.Expr]
    approx: Approx = None               # only meaningful for sympy values; see approx()


def approx(n: Num) -> Approx:
    if isinstance(n.exact, Fraction):
        try:
            return (complex(float(n.exact)),) * N_POINTS
        except OverflowError:
            return None
    return n.approx


def to_sympy(x):
    return sympy.Rational(x.numerator, x.denominator) if isinstance(x, Fraction) else x


def _from_sympy(e) -> Union[Fraction, sympy.Expr]:
    if e.has(sympy.zoo, sympy.nan):
        raise ParseError("undefined value")
    if e.is_Rational:
        return Fraction(int(e.p), int(e.q))
    return e


def check_rational(x: Fraction) -> Fraction:
    if max(x.numerator.bit_length(), x.denominator.bit_length()) > MAX_BITS:
        raise ParseError("number too large")
    return x


def _zip(f, a: Approx, b: Approx) -> Approx:
    """Apply a float op pointwise; None (unknown) when either side is unknown or it overflows."""
    if a is None or b is None:
        return None
    try:
        out = tuple(f(x, y) for x, y in zip(a, b))
    except (ArithmeticError, ValueError):
        return None
    return None if any(math.isinf(abs(v)) or v != v for v in out) else out


def symbolic(x) -> bool:
    """Does this exact value contain a variable?"""
    return not isinstance(x, Fraction) and bool(x.free_symbols)


# sympy evaluates every expression it builds, and on expressions in variables that evaluation asks
# its assumption system questions (is this negative?) that can run for minutes (real roots of a
# degree-4096 polynomial). So expressions with variables are built UNEVALUATED: their tree is the
# input's, at most MAX_NODES nodes, and they are compared by evaluation at points, never by sympy
# reasoning. Constants are still evaluated (2\sqrt3 == \sqrt{12} structurally).
def _binop(a: Num, b: Num, frac_op, sym_op, float_op) -> Num:
    if isinstance(a.exact, Fraction) and isinstance(b.exact, Fraction):
        try:
            return Num(check_rational(frac_op(a.exact, b.exact)))
        except ZeroDivisionError:
            raise ParseError("division by zero") from None
    x, y = to_sympy(a.exact), to_sympy(b.exact)
    exact = _from_sympy(sym_op(x, y, not (symbolic(x) or symbolic(y))))
    return Num(exact, _zip(float_op, approx(a), approx(b)))


def add(a, b):
    return _binop(a, b, lambda x, y: x + y, lambda x, y, ev: sympy.Add(x, y, evaluate=ev), lambda x, y: x + y)


def mul(a, b):
    return _binop(a, b, lambda x, y: x * y, lambda x, y, ev: sympy.Mul(x, y, evaluate=ev), lambda x, y: x * y)


def div(a, b):
    return _binop(a, b, lambda x, y: x / y,
                  lambda x, y, ev: sympy.Mul(x, sympy.Pow(y, -1, evaluate=ev), evaluate=ev),
                  lambda x, y: x / y)


def neg(a: Num) -> Num:
    ap = None if a.approx is None else tuple(-v for v in a.approx)  # Fractions: derived lazily
    return Num(sympy.Mul(-1, a.exact, evaluate=False) if symbolic(a.exact) else -a.exact, ap)


def _size_bits(n: Num) -> Optional[float]:
    """Rough width in bits of the number (for the power guard); None if unknown."""
    if isinstance(n.exact, Fraction):  # math.log2 is exact enough on big ints and never overflows
        num, den = abs(n.exact.numerator), n.exact.denominator
        return max(math.log2(num) if num else 0.0, math.log2(den))
    ap = approx(n)
    if ap is None:
        return None
    return max(abs(math.log2(abs(v))) if v else 0.0 for v in ap) + 1


def _charge(budget: list, bits: int):
    budget[0] -= bits
    if budget[0] < 0:
        raise ParseError("radicands too large")


def power(b: Num, e: Num, budget: Optional[list] = None) -> Num:
    """b**e, refused when the result could exceed MAX_BITS (checked before building anything).
    budget: [bits left] of MAX_RADICAND_BITS, shared by one whole parse."""
    budget = [MAX_RADICAND_BITS] if budget is None else budget
    size = _size_bits(b)
    in_variables = symbolic(b.exact)
    if isinstance(e.exact, Fraction):
        p, q = e.exact.numerator, e.exact.denominator
        if abs(p) > (MAX_DEGREE if in_variables else MAX_EXP) or q > MAX_ROOT:
            raise ParseError("exponent too large")
        if size is None:  # infinity or overflowed approximation: only tiny exponents
            if abs(p) > 8:
                raise ParseError("exponent too large")
        elif size * abs(p) / q > MAX_BITS:
            raise ParseError("power too large")
        if isinstance(b.exact, Fraction):
            return _rational_power(b.exact, p, q, budget)
        ev = Fraction(p, q)
    else:  # irrational or symbolic exponent: bound it through its approximate value
        ea = approx(e)
        limit = MAX_DEGREE if in_variables else MAX_EXP
        if size is None or ea is None or any(abs(v) > limit or abs(v) * size > MAX_BITS for v in ea):
            raise ParseError("power too large")
        ev = e.exact
    if not (isinstance(ev, Fraction) and ev.denominator == 1):  # a root of a sympy value
        # Complex powers ((2+i)^{1/3}, 2^i, x^i) send sympy into branch-cut reasoning that takes
        # up to seconds; answers use i only in polynomials and e^{i\theta}.
        if b.exact != sympy.E and not (_real_valued(b) and _real_valued(e)):
            raise ParseError("complex power")
        _charge(budget, sum(r.p.bit_length() + r.q.bit_length()
                            for r in to_sympy(b.exact).atoms(sympy.Rational)))
    evaluate = not (in_variables or symbolic(ev))  # see _binop
    exact = _from_sympy(sympy.Pow(to_sympy(b.exact), to_sympy(ev), evaluate=evaluate))
    return Num(exact, _zip(lambda x, y: x ** y, approx(b), approx(Num(ev, e.approx))))


def _real_valued(n: Num) -> bool:
    ap = approx(n)
    return ap is not None and all(abs(v.imag) <= 1e-12 * max(1.0, abs(v)) for v in ap)


def _rational_power(x: Fraction, p: int, q: int, budget: list) -> Num:
    """x**(p/q) for rational x. Odd roots of negatives are real (\\sqrt[3]{-8} = -2), as a student means."""
    if x == 0 and p < 0:
        raise ParseError("division by zero")
    sign = -1 if (x < 0 and q % 2 == 1) else 1
    base = abs(x) if sign < 0 else x
    if base >= 0:
        rn, ok_n = sympy.integer_nthroot(base.numerator, q)
        rd, ok_d = sympy.integer_nthroot(base.denominator, q)
        if ok_n and ok_d:  # exact root: stay in Fraction land
            return Num(check_rational(Fraction(sign * int(rn), int(rd)) ** p))
    _charge(budget, base.numerator.bit_length() + base.denominator.bit_length())
    exact = sympy.Pow(to_sympy(base), sympy.Rational(1, q)) * sign
    exact = _from_sympy(exact ** p)
    try:
        ap = (complex(float(base)) ** (1 / q) * sign) ** p
    except (ArithmeticError, ValueError):
        ap = None
    return Num(exact, None if ap is None or math.isinf(abs(ap)) else (ap,) * N_POINTS)


def _whole(n: Num, what: str) -> int:
    if not (isinstance(n.exact, Fraction) and n.exact.denominator == 1):
        raise ParseError(f"{what} of a non-integer")
    return int(n.exact)


def factorial(n: Num) -> Num:
    """n! for 0 <= n <= MAX_FACTORIAL whose result fits MAX_BITS (size from lgamma, before computing)."""
    k = _whole(n, "factorial")
    if not 0 <= k <= MAX_FACTORIAL or math.lgamma(k + 1) / math.log(2) > MAX_BITS:
        raise ParseError("factorial out of range")
    return Num(Fraction(math.factorial(k)))


def binomial(n: Num, k: Num) -> Num:
    """C(n, k) for integers; 0 when k < 0 or k > n >= 0. The result's width is estimated first."""
    n, k = _whole(n, "binomial"), _whole(k, "binomial")
    if n < 0:
        raise ParseError("binomial of a negative")
    if k < 0 or k > n:
        return Num(Fraction(0))
    k = min(k, n - k)
    # C(n, k) >= 2^k (so k <= MAX_BITS: math.comb takes few steps) and C(n, k) <= (e n / k)^k: an
    # upper bound on the width from logarithms of the integers themselves (no float cancellation).
    if k > MAX_BITS or k and k * (math.log2(n) - math.log2(k) + 1.443) > MAX_BITS:
        raise ParseError("binomial too large")
    return Num(Fraction(math.comb(n, k)))


def function(name: str, x: Num) -> Num:
    """sin/cos/.../ln/exp of x: sympy evaluates special values itself (sin(pi/6) = 1/2)."""
    ap = approx(x)
    if ap is None or not _real_valued(x):  # sin(i), ln(2+i): rare in answers, slow in sympy
        raise ParseError("function of an unknown or complex value")
    if name in _TRIG and any(abs(v) > MAX_TRIG_ARG for v in ap):
        raise ParseError("trigonometric argument too large")
    if name == "exp" and any(abs(v) > MAX_EXP for v in ap):
        raise ParseError("exponent too large")
    exact = _from_sympy(FUNCTIONS[name](to_sympy(x.exact), evaluate=not symbolic(x.exact)))  # see _binop
    f = getattr(cmath, {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "ln": "log"}.get(name, name),
                None)
    inverse = {"cot": cmath.tan, "sec": cmath.cos, "csc": cmath.sin}.get(name)
    try:
        out = tuple(1 / inverse(v) if inverse else f(v) for v in ap)
    except (ArithmeticError, ValueError):
        out = None
    return Num(exact, out)


@lru_cache(maxsize=None)  # a handful of names (single letters, a few Greek ones)
def symbol(name: str) -> Num:
    rng = random.Random("nanoatr:" + name)  # deterministic per name, independent of global seed
    # positive, like every point it is evaluated at: sympy then merges nested powers of it cheaply
    # ((x^1000)^(3/2) is x^1500) instead of reasoning about complex branches, which can take minutes
    return Num(sympy.Symbol(name, positive=True),
               tuple(complex(rng.uniform(0.3, 1.7)) for _ in range(N_POINTS)))


PI = Num(sympy.pi, (complex(math.pi),) * N_POINTS)
EULER = Num(sympy.E, (complex(math.e),) * N_POINTS)  # "e" is Euler's number, never a variable,
IMAG = Num(sympy.I, (1j,) * N_POINTS)                # and "i" the imaginary unit (3+4i, (1+i)^2)
INF = Num(sympy.oo, None)
