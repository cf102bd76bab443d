r"""Reading final answers: normalisation, answer shapes, and a recursive-descent math parser.

The input is untrusted model output, so nothing here is ever eval'd or handed to sympify /
parse_expr / parse_latex. The parser builds values itself: a ``fractions.Fraction`` while the value
is rational (fast, exact), a sympy object once radicals, pi, e, i, functions, infinity or
variables appear. Constants are evaluated by sympy (2\sqrt3 is \sqrt{12}); expressions in
variables are built UNEVALUATED, as the input wrote them, because sympy's evaluation of them asks
its assumption system questions with no time bound (see ``_binop``).

PARSER (``parse``): integers, decimals (exact; "0.1\overline{6}" = 1/6), "1.5e3" and
"1.5\times10^{3}", ``\frac``/``a/b``/``\frac12``, mixed numbers (``1\frac14``, "1 1/4"), ``\sqrt``
and ``\sqrt[n]``, powers, n!, ``\binom{n}{k}`` / ``{n \choose k}``, ``\sin \cos \tan \cot \sec
\csc \arcsin \arccos \arctan \ln \exp``, ``\log`` (base 10) and ``\log_b``, ``\pi``, e (Euler's
number), i (imaginary unit), implicit products (``2\sqrt3``, "3xy", "3!4!"), variables (letters,
a few Greek ones, subscripts: a_1). Every construct that could blow up in time or memory is
refused with ParseError *before* it is built: nesting deeper than MAX_DEPTH, literals longer than
MAX_LITERAL_DIGITS, rationals wider than MAX_BITS, powers whose result would be wider than
MAX_BITS (estimated from the base's size and the exponent), powers of expressions in variables
past MAX_DEGREE, complex powers ((2+i)^{1/3}, 2^i) and functions of complex values, trees past
MAX_NODES, n! past MAX_FACTORIAL or MAX_BITS,
binomials whose width bound ``k log2(e n / k)`` passes MAX_BITS, trigonometric arguments past
MAX_TRIG_ARG, radicands past MAX_RADICAND_BITS. That is what bounds the verifier's time, not a
timer. Each sympy value carries ``approx``, its complex value at N_POINTS points (each variable
gets fixed pseudo-random values): it rejects unequal answers without sympy and is the identity
test for expressions with variables.

NORMALISATION (``normalize``, both sides): dropped are ``\left``/``\right``, spacing (``\, \! \;
~ \quad``), ``\displaystyle``, degree marks (``\sin 30^\circ`` is first turned into radians),
``\$`` and ``$``, thousands separators (``1,000`` / ``1 000`` as a whole answer; ``1{,}000``,
``1\,000``), a trailing \text{unit} or plain unit word(s) after a number ("5\text{ cm}", "12
square units", "7 apples"; not "or"/"and"/"not"/...). ``\text{}``/``\mbox{}``/``\mathrm{}``/
``\textbf{}`` keep their content; ``\dfrac``/``\tfrac`` are ``\frac``; ``\ge``/``\geq``/``>=``/
``\geqslant`` are one symbol (also for <=, !=); ``\in`` is "="; ``\approx``: "x \approx 3.14" is
x = 3.14 but "\sqrt2 \approx 1.414" is the exact \sqrt2; ``\mathbb{R}``/"all real numbers" are one
symbol, ``\emptyset``/``\varnothing``/``\{\}`` another; ``\langle \rangle`` are parentheses.

SHAPES (``canonical`` -> Canon.kind): "list" (top-level ",", ";", " or ", " and "), "rel" (=, <,
>, <=, >=, != at top level, chains allowed), "interval" (one variable against constants, set-
builder ``\{x \mid ...\}``, ``x \in`` an interval, |x| < c, \mathbb{R}), "union" (``\cup``),
"set" (``\{...\}``), "tuple" ((...) or [...] with commas), "matrix" (``\begin{pmatrix}`` and
kin), "choice" ((B), B, "(B) 27"), "num" (what ``parse`` reads; "%" noted), "text" (the rest).
"""
from __future__ import annotations

import cmath
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
_GREEK = frozenset("alpha beta gamma delta epsilon theta lambda mu nu phi rho sigma tau omega".split())
_FUNCTIONS = {"sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec,
              "csc": sympy.csc, "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
              "ln": sympy.log, "log": sympy.log, "exp": sympy.exp}
_TRIG = frozenset(["sin", "cos", "tan", "cot", "sec", "csc"])
_ATOM_COMMANDS = frozenset({"frac", "sqrt", "pi", "infty", "binom"}) | _GREEK | frozenset(_FUNCTIONS)


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
            return Num(_check(frac_op(a.exact, b.exact)))
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
                  lambda x, y, ev: sympy.Mul(x, sympy.Pow(y, -1, evaluate=ev), evaluate=ev), lambda x, y: x / y)


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
        _charge(budget, sum(r.p.bit_length() + r.q.bit_length() for r in to_sympy(b.exact).atoms(sympy.Rational)))
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
            return Num(_check(Fraction(sign * int(rn), int(rd)) ** p))
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
    exact = _from_sympy(_FUNCTIONS[name](to_sympy(x.exact), evaluate=not symbolic(x.exact)))  # see _binop
    f = getattr(cmath, {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "ln": "log"}.get(name, name), None)
    inverse = {"cot": cmath.tan, "sec": cmath.cos, "csc": cmath.sin}.get(name)
    try:
        out = tuple(1 / inverse(v) if inverse else f(v) for v in ap)
    except (ArithmeticError, ValueError):
        out = None
    return Num(exact, out)


@lru_cache(maxsize=None)  # a handful of names (single letters, a few Greek ones)
def _symbol(name: str) -> Num:
    rng = random.Random("nanoatr:" + name)  # deterministic per name, independent of global seed
    # positive, like every point it is evaluated at: sympy then merges nested powers of it cheaply
    # ((x^1000)^(3/2) is x^1500) instead of reasoning about complex branches, which can take minutes
    return Num(sympy.Symbol(name, positive=True), tuple(complex(rng.uniform(0.3, 1.7)) for _ in range(N_POINTS)))


_PI = Num(sympy.pi, (complex(math.pi),) * N_POINTS)
_E = Num(sympy.E, (complex(math.e),) * N_POINTS)  # "e" is Euler's number, never a variable,
_I = Num(sympy.I, (1j,) * N_POINTS)                # and "i" the imaginary unit (3+4i, (1+i)^2)
_INF = Num(sympy.oo, None)
_NUMBER = re.compile(r"(\d+)(?:\.(\d*))?|\.(\d+)")
_E_EXP = re.compile(r"[eE]([+-]?\d+)")
_SCI = re.compile(r"\s*(?:\\times|\\cdot|\*)\s*10\s*\^\s*(?:\{\s*([+-]?\d+)\s*\}|([+-]?\d+))")
_REPEAT = re.compile(r"\s*\\overline\s*\{\s*(\d{1,20})\s*\}")
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
            elif ((c and c in "({") or (c.isascii() and c.isalpha()) or cmd in _ATOM_COMMANDS
                  or (c.isdigit() and self.s[:self.i].rstrip().endswith("!"))):
                v = mul(v, self.power())  # implicit multiplication: 2\sqrt{3}, 2\pi, (1)(2), 3x, 3!4!
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
        while self.peek() == "!" and self.s[self.i + 1:self.i + 2] != "=":  # n!, but not "n != m"
            self.i += 1
            if self.peek() == "!":
                raise ParseError("double factorial")  # n!! is not (n!)!: refuse rather than guess
            base = factorial(base)
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
        if self.command() == "choose":  # {n \choose k}
            self.i += len("\\choose")
            v = binomial(v, self.expr())
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
            if cmd in ("binom", "dbinom", "tbinom"):
                n = self.arg()
                return binomial(n, self.arg())
            if cmd in _FUNCTIONS:
                return self.function(cmd)
            if cmd == "pi":
                return _PI
            if cmd == "infty":
                return _INF
            if cmd in _GREEK:
                return _symbol(cmd + self.subscript())
            raise ParseError(f"unsupported command \\{cmd}")
        if c.isascii() and c.isalpha():
            j = self.i
            while j < len(self.s) and self.s[j].isascii() and self.s[j].isalpha():
                j += 1
            if j - self.i > 3:  # "yes", "cm" are text (the caller's job); "xyz" is a product
                raise ParseError("word, not math")
            self.i += 1
            name = c + self.subscript()
            return {"e": _E, "i": _I}.get(name) or _symbol(name)
        raise ParseError(f"unexpected {c!r}")

    def subscript(self) -> str:
        """"_1", "_n", "_{10}" after a variable: part of its name (a_1 and a_2 are different)."""
        m = re.match(r"_(?:(\w)|\{\s*(\w{1,8})\s*\})", self.s[self.i:self.i + 14])
        if not m:
            return ""
        self.i += m.end()
        return "_" + (m.group(1) or m.group(2))

    def function(self, name: str) -> Num:
        """\\sin x, \\sin(x), \\sin^2 x, \\log_2 8, \\ln 2: the argument is one power and the
        implicit product of letters after it (\\sin 2x = sin(2x)), as written in answers."""
        base = exponent = None
        if name == "log":  # \log_b x; a bare \log is base 10, as in competition problems
            base = Num(Fraction(10))
            if self.peek() == "_":
                self.i += 1
                base = self.arg()
        if self.peek() == "^":
            self.i += 1
            self.in_exp += 1
            exponent = self.exponent()
            self.in_exp -= 1
            if exponent.exact == -1:
                raise ParseError("inverse-function notation")  # \sin^{-1}: refuse, not 1/sin
        x = self.power()
        while self.peek().isascii() and self.peek().isalpha() or self.command() in _GREEK | {"pi"}:
            x = mul(x, self.power())
        v = function("ln" if base is not None else name, x)
        if base is not None:
            v = div(v, function("ln", base))
        return v if exponent is None else power(v, exponent, self.budget)

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
        value = _check(Fraction(int(whole + frac or "0")) * Fraction(10) ** (exp10 - len(frac)))
        rep = None if (exp10 or not is_dec) else _REPEAT.match(self.s, self.i)
        if rep:  # 0.1\overline{6} = 1/6: a repeating decimal is exact
            self.i = rep.end()
            value += Fraction(int(rep.group(1)), (10 ** len(rep.group(1)) - 1) * 10 ** len(frac))
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
        v = _Parser(s).parse()
    except (ArithmeticError, TypeError) as exc:  # sympy/Fraction edge cases: not parseable math
        raise ParseError(str(exc)) from None
    if not isinstance(v.exact, Fraction):
        for n, _ in enumerate(sympy.preorder_traversal(v.exact)):
            if n > MAX_NODES:  # cannot happen from MAX_ANSWER_CHARS of input; a cheap guarantee
                raise ParseError("expression too large")
    return v


# =============================================================================================
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
               r"|over|divided|pi|sin|cos|tan|cot|sec|csc|log|ln|exp|sqrt|mod|either|neither|also|else|except)\b")
# A unit is one or two words ("cm", "square units"); "34\text{ or 35}" / "\text{ not}" are not.
_UNIT_WORD = re.compile(r"\s*(?!" + _STOP_WORDS + r")[a-zA-Z]+\.?(?:\s+(?!" + _STOP_WORDS + r")[a-zA-Z]+\.?)?\s*")
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
    """Presentation-only differences removed (see the module docstring's list)."""
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
_VAR = re.compile(r"(?:[A-Za-z]|\\(?:" + "|".join(sorted(_GREEK)) + r"))(?:_\{?\w{1,8}\}?)?")
# The name side of "x = 5", "f(2) = 7", "a_1 = 4", "AB = 6", "m\angle ABC = 30": not part of the value.
_NAME = re.compile(r"(?:m\s*)?(?:\\(?:angle|overline|widehat|triangle)\s*)?\{?\s*(?:[A-Za-z]{1,3}|\\[a-zA-Z]+)"
                   r"\s*\}?(?:_\{?\w{1,8}\}?|'|\^\{?-1\}?)*(?:\s*\([^()=]{0,20}\))?")
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
    if re.fullmatch(r"[A-Za-z][A-Za-z .'-]*", s) and len(s) > 1:  # words: "yes", "Monday", "no solution"
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
    if c.kind == "list" and all(x.kind == "interval" for x in c.value) and len({x.extra for x in c.value}) == 1:
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
    """Two intervals' intersection, when their endpoints compare as plain numbers (else None)."""
    los = [(_real(a.lo), a.lo, a.lo_closed), (_real(b.lo), b.lo, b.lo_closed)]
    his = [(_real(a.hi), a.hi, a.hi_closed), (_real(b.hi), b.hi, b.hi_closed)]
    if any(t[0] is None for t in los + his):
        return None
    lo = max(los, key=lambda t: (t[0], not t[2]))   # the larger lower end; open beats closed on a tie
    hi = min(his, key=lambda t: (t[0], t[2]))       # the smaller upper end; open beats closed on a tie
    return Interval(lo[1], hi[1], lo[2], hi[2]) if lo[0] < hi[0] else None


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
    """The intervals an answer denotes, or None: "x > 2", "(2, \\infty)", "(-1, 2] ∪ (3, 4)", "\\mathbb{R}"."""
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
