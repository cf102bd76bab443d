"""Recursive-descent parser for the small LaTeX/ASCII math subset that final answers are written in.

The input is untrusted model output, so nothing here is ever eval'd or handed to sympify /
parse_expr / parse_latex. The parser builds values itself: a ``fractions.Fraction`` while the value
is rational (fast, exact), a sympy object once radicals, pi, infinity or variables appear.

Every construct that could blow up in time or memory is refused with ParseError *before* it is
built: nesting deeper than MAX_DEPTH, literals longer than MAX_LITERAL_DIGITS, rationals wider than
MAX_BITS, and powers whose result would be wider than MAX_BITS (estimated from the base's size and
the exponent before anything is computed). That is what bounds the verifier's time, not a timer.

Each sympy value carries ``approx``: its complex value at N_POINTS points (every variable gets a
fixed pseudo-random value per point). It rejects unequal answers without sympy, and it is the
identity test for expressions with variables (see verifier's docstring).
"""
from __future__ import annotations

import math
import random
import re
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple, Optional, Tuple, Union

import sympy

MAX_DEPTH = 24            # nested groups / parentheses / fraction arguments / exponents
MAX_LITERAL_DIGITS = 200  # digits in one number literal
MAX_BITS = 4096           # width of any rational we build (~1230 decimal digits)
MAX_EXP = 4096            # |numerator| of an exponent
MAX_ROOT = 64             # root index / exponent denominator
MAX_SCI_EXP = 1000        # |k| in 1.5e{k} and 1.5\times10^{k}
MAX_RADICAND_BITS = 256   # total width of the rationals under inexact roots in one answer: sympy
#                           factors radicands (and merges sqrt(a)*sqrt(b) into sqrt(ab)), which is
#                           slow for big ones: sqrt(3^2500+2) alone takes ~0.2 s
N_POINTS = 3

Approx = Optional[Tuple[complex, ...]]
_GREEK = frozenset("alpha beta gamma delta epsilon theta lambda mu nu phi rho sigma tau omega".split())
_ATOM_COMMANDS = frozenset({"frac", "sqrt", "pi", "infty"}) | _GREEK


class ParseError(ValueError):
    """The string is not (safely) parseable math; callers fall back to text comparison."""


class Num(NamedTuple):
    exact: Union[Fraction, sympy.Expr]
    approx: Approx = None               # only meaningful for sympy values; see approx()
    dec: Optional[Tuple[int, Fraction]] = None  # (significant digits, unit in last place) for a
    #                                           lone decimal literal, used by the tolerance rule


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


def _check(x: Fraction) -> Fraction:
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


def _binop(a: Num, b: Num, frac_op, sym_op, float_op) -> Num:
    if isinstance(a.exact, Fraction) and isinstance(b.exact, Fraction):
        try:
            return Num(_check(frac_op(a.exact, b.exact)))
        except ZeroDivisionError:
            raise ParseError("division by zero") from None
    exact = _from_sympy(sym_op(to_sympy(a.exact), to_sympy(b.exact)))
    return Num(exact, _zip(float_op, approx(a), approx(b)))


def add(a, b):
    return _binop(a, b, lambda x, y: x + y, lambda x, y: x + y, lambda x, y: x + y)


def mul(a, b):
    return _binop(a, b, lambda x, y: x * y, lambda x, y: x * y, lambda x, y: x * y)


def div(a, b):
    return _binop(a, b, lambda x, y: x / y, lambda x, y: x / y, lambda x, y: x / y)


def neg(a: Num) -> Num:
    ap = None if a.approx is None else tuple(-v for v in a.approx)  # Fractions: derived lazily
    return Num(-a.exact, ap, a.dec)


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
    if isinstance(e.exact, Fraction):
        p, q = e.exact.numerator, e.exact.denominator
        if abs(p) > MAX_EXP or q > MAX_ROOT:
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
        if size is None or ea is None or any(abs(v) > MAX_EXP or abs(v) * size > MAX_BITS for v in ea):
            raise ParseError("power too large")
        ev = e.exact
    if not (isinstance(ev, Fraction) and ev.denominator == 1):  # a root of a sympy value
        _charge(budget, sum(r.p.bit_length() + r.q.bit_length() for r in to_sympy(b.exact).atoms(sympy.Rational)))
    exact = _from_sympy(sympy.Pow(to_sympy(b.exact), to_sympy(ev)))
    return Num(exact, _zip(lambda x, y: x ** y, approx(b), approx(Num(ev, e.approx))))


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
            return Num(_check(Fraction(sign * int(rn), int(rd)) ** p))
    _charge(budget, base.numerator.bit_length() + base.denominator.bit_length())
    exact = sympy.Pow(to_sympy(base), sympy.Rational(1, q)) * sign
    exact = _from_sympy(exact ** p)
    try:
        ap = (complex(float(base)) ** (1 / q) * sign) ** p
    except (ArithmeticError, ValueError):
        ap = None
    return Num(exact, None if ap is None or math.isinf(abs(ap)) else (ap,) * N_POINTS)


@lru_cache(maxsize=None)  # a handful of names (single letters, a few Greek ones)
def _symbol(name: str) -> Num:
    rng = random.Random("nanoatr:" + name)  # deterministic per name, independent of global seed
    return Num(sympy.Symbol(name), tuple(complex(rng.uniform(0.3, 1.7)) for _ in range(N_POINTS)))


_PI = Num(sympy.pi, (complex(math.pi),) * N_POINTS)
_INF = Num(sympy.oo, None)
_NUMBER = re.compile(r"(\d+)(?:\.(\d*))?|\.(\d+)")
_E_EXP = re.compile(r"[eE]([+-]?\d+)")
_SCI = re.compile(r"\s*(?:\\times|\\cdot|\*)\s*10\s*\^\s*(?:\{\s*([+-]?\d+)\s*\}|([+-]?\d+))")
_MIXED = re.compile(
    r"\s*\\[dtc]?frac\s*(?:\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|(\d)(\d))"  # 1\frac{1}{4}, 1\frac14
    r"|\s+(\d+)\s*/\s*(\d+)(?![\d.^])"                                   # 1 1/4
)


class _Parser:
    def __init__(self, s: str):
        self.s, self.i, self.depth, self.in_exp = s, 0, 0, 0
        self.budget = [MAX_RADICAND_BITS]

    # -- lexing helpers ---------------------------------------------------------------
    def peek(self) -> str:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1
        return self.s[self.i] if self.i < len(self.s) else ""

    def command(self) -> str:
        """Name of the \\command at the cursor (without consuming it), or ''."""
        if self.peek() != "\\":
            return ""
        j = self.i + 1
        while j < len(self.s) and self.s[j].isalpha():
            j += 1
        return self.s[self.i + 1:j]

    def expect(self, c: str):
        if self.peek() != c:
            raise ParseError(f"expected {c!r} at {self.i}")
        self.i += 1

    # -- grammar ----------------------------------------------------------------------
    def parse(self) -> Num:
        v = self.expr()
        if self.peek():
            raise ParseError(f"unexpected {self.s[self.i:self.i + 10]!r}")
        return v

    def expr(self) -> Num:
        v = self.term()
        while self.peek() in ("+", "-"):
            op = self.s[self.i]
            self.i += 1
            rhs = self.term()
            v = add(v, rhs) if op == "+" else add(v, neg(rhs))
        return v

    def term(self) -> Num:
        v = self.unary()
        while True:
            c, cmd = self.peek(), self.command()
            if (c == "*" and self.s[self.i:self.i + 2] != "**") or cmd in ("cdot", "times"):
                self.i += 1 + len(cmd)
                v = mul(v, self.unary())
            elif c == "/" or cmd == "div":
                self.i += 1 + len(cmd)
                v = div(v, self.unary())
            elif (c and c in "({") or (c.isascii() and c.isalpha()) or cmd in _ATOM_COMMANDS:
                v = mul(v, self.power())  # implicit multiplication: 2\sqrt{3}, 2\pi, (1)(2), 3x
            else:  # a digit here ("2 3") is not a product; it stays trailing junk -> ParseError
                return v

    def signs(self) -> bool:
        """Consume a run of unary signs (iteratively: "-----5" must not recurse); True if negative."""
        negative = False
        while self.peek() in ("-", "+"):
            negative ^= self.s[self.i] == "-"
            self.i += 1
        return negative

    def unary(self) -> Num:
        negative = self.signs()
        v = self.power()
        return neg(v) if negative else v

    def power(self) -> Num:
        base = self.atom()
        if self.peek() == "^" or self.s[self.i:self.i + 2] == "**":
            self.i += 1 if self.s[self.i] == "^" else 2
            self.in_exp += 1
            e = self.exponent()
            self.in_exp -= 1
            return power(base, e, self.budget)
        return base

    def exponent(self) -> Num:
        negative = self.signs()
        e = self.power()  # right-associative: 2^3^2 = 2^(3^2); the guard stops 9^{9^{9^9}}
        return neg(e) if negative else e

    def group(self) -> Num:
        self.expect("{")
        v = self.expr()
        self.expect("}")
        return v

    def arg(self) -> Num:
        """Argument of \\frac / \\sqrt: a {group}, or one character as in \\frac12, or one command."""
        c = self.peek()
        if c == "{":
            return self.group()
        if c.isdigit():
            self.i += 1
            return Num(Fraction(int(c)))
        if c == "\\" or (c.isascii() and c.isalpha()):
            return self.atom()
        raise ParseError("bad argument")

    def atom(self) -> Num:
        # Every nested construct (parentheses, groups, \frac/\sqrt arguments, exponents) recurses
        # through here, so this one counter bounds the recursion depth.
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError("nested too deeply")
        v = self._atom()
        self.depth -= 1
        return v

    def _atom(self) -> Num:
        c = self.peek()
        if c.isdigit() or c == ".":
            return self.number()
        if c == "(":
            self.i += 1
            v = self.expr()
            self.expect(")")
            return v
        if c == "{":
            return self.group()
        cmd = self.command()
        if cmd:
            self.i += 1 + len(cmd)
            if cmd == "frac":
                num = self.arg()
                return div(num, self.arg())
            if cmd == "sqrt":
                n = 2
                if self.peek() == "[":
                    self.i += 1
                    idx = self.expr()
                    self.expect("]")
                    if not (isinstance(idx.exact, Fraction) and idx.exact.denominator == 1
                            and 2 <= idx.exact <= MAX_ROOT):
                        raise ParseError("bad root index")
                    n = int(idx.exact)
                return power(self.arg(), Num(Fraction(1, n)), self.budget)
            if cmd == "pi":
                return _PI
            if cmd == "infty":
                return _INF
            if cmd in _GREEK:
                return _symbol(cmd)
            raise ParseError(f"unsupported command \\{cmd}")
        if c.isascii() and c.isalpha():
            self.i += 1
            if self.i < len(self.s) and self.s[self.i].isalpha():
                raise ParseError("word, not math")  # "yes", "cm": text, not the product y*e*s
            return _symbol(c)
        raise ParseError(f"unexpected {c!r}")

    def number(self) -> Num:
        m = _NUMBER.match(self.s, self.i)
        if not m:
            raise ParseError("bad number")
        self.i = m.end()
        whole, frac = (m.group(1) or ""), (m.group(2) or m.group(3) or "")
        if len(whole) + len(frac) > MAX_LITERAL_DIGITS:
            raise ParseError("literal too long")
        is_dec = "." in m.group(0)
        exp10 = 0
        e = _E_EXP.match(self.s, self.i) or _SCI.match(self.s, self.i)
        if e:
            exp10 = int(e.group(1) or e.group(2))
            if abs(exp10) > MAX_SCI_EXP:
                raise ParseError("exponent too large")
            self.i, is_dec = e.end(), True
        digits = whole + frac
        value = _check(Fraction(int(digits)) * Fraction(10) ** (exp10 - len(frac)))
        if is_dec and not (exp10 == 0 and not frac.strip("0")):  # "27.0" (a float gold) is an integer
            sig = len(digits.lstrip("0")) or 1
            return Num(value, None, (sig, Fraction(10) ** (exp10 - len(frac))))
        mixed = None if (self.in_exp or is_dec) else _MIXED.match(self.s, self.i)
        if mixed:
            p, q = (int(g) for g in [g for g in mixed.groups() if g is not None])
            if 0 < p < q:  # a proper fraction right after an integer: 1\frac{1}{4} = 5/4
                self.i = mixed.end()
                return Num(value + Fraction(p, q))
        return Num(value)


def parse(s: str) -> Num:
    """Parse one math expression; raise ParseError for anything outside the safe subset."""
    try:
        return _Parser(s).parse()
    except (ArithmeticError, TypeError) as exc:  # sympy/Fraction edge cases: not parseable math
        raise ParseError(str(exc)) from None
