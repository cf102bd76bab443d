r"""Parsing one math expression: a recursive-descent parser of LaTeX or ASCII into a bounded value.

Nothing is ever eval'd or handed to sympify / parse_expr / parse_latex: every value is built by
values.py, within its bounds. What it reads: docs/library.md#parse"""
from __future__ import annotations

import re
from fractions import Fraction

import sympy

from .values import (ATOM_COMMANDS, EULER, FUNCTIONS, GREEK, IMAG, INF, MAX_DEPTH, MAX_LITERAL_DIGITS,
                     MAX_NODES, MAX_RADICAND_BITS, MAX_ROOT, MAX_SCI_EXP, PI, Num, ParseError, add, binomial,
                     check_rational, div, factorial, function, mul, neg, power, symbol)
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
            elif ((c and c in "({") or (c.isascii() and c.isalpha()) or cmd in ATOM_COMMANDS
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
            if cmd in FUNCTIONS:
                return self.function(cmd)
            if cmd == "pi":
                return PI
            if cmd == "infty":
                return INF
            if cmd in GREEK:
                return symbol(cmd + self.subscript())
            raise ParseError(f"unsupported command \\{cmd}")
        if c.isascii() and c.isalpha():
            j = self.i
            while j < len(self.s) and self.s[j].isascii() and self.s[j].isalpha():
                j += 1
            if j - self.i > 3:  # "yes", "cm" are text (the caller's job); "xyz" is a product
                raise ParseError("word, not math")
            self.i += 1
            name = c + self.subscript()
            return {"e": EULER, "i": IMAG}.get(name) or symbol(name)
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
        while self.peek().isascii() and self.peek().isalpha() or self.command() in GREEK | {"pi"}:
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
        value = check_rational(Fraction(int(whole + frac or "0")) * Fraction(10) ** (exp10 - len(frac)))
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
