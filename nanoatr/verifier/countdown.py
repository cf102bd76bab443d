r"""The Countdown reward: reach a target from given numbers with + - * /, each number used exactly once.

``reward(completion, answer)``, answer "3,8,5,2:19" (the numbers, ':', the target): 1.0 when the LAST
\boxed{...} holds an expression that uses each number exactly once, only + - * / and parentheses, and
whose exact value equals the target (8/(3-8/3) = 24 counts); else 0.0. Model text is never evaluated
(eval/exec/sympy); the MAX_* bounds fix the time; it never raises. In full: docs/library.md#countdown"""
from __future__ import annotations

from fractions import Fraction

__all__ = ["reward", "parse_answer", "last_box", "evaluate_expression"]

BOXED = "\\boxed{"
MAX_COMPLETION_TAIL = 4000   # only the end of a completion is searched for the box
MAX_EXPR_CHARS = 200         # a longer boxed expression scores 0
MAX_DEPTH = 12               # parenthesis nesting
MAX_LITERAL_DIGITS = 6       # a longer integer literal scores 0
MAX_NUMBERS = 8              # numbers in a problem (the answer string) at most
MAX_NUMBER = 10 ** 6         # given numbers and targets at most this (the answer string)


class _Reject(Exception):
    """Internal: the expression is not acceptable (caught inside reward, never escapes)."""


def parse_answer(answer: str) -> tuple[list[int], int] | None:
    """'3,8,5,2:19' -> ([3, 8, 5, 2], 19); None if malformed."""
    if not isinstance(answer, str) or len(answer) > 200:
        return None
    nums, sep, target = answer.strip().partition(":")
    if not sep:
        return None
    try:
        numbers = [int(x) for x in nums.split(",")]
        t = int(target)
    except ValueError:
        return None
    if not 1 <= len(numbers) <= MAX_NUMBERS or any(not 0 <= n <= MAX_NUMBER for n in numbers) or \
            abs(t) > MAX_NUMBER:
        return None
    return numbers, t


def last_box(completion: str) -> str | None:
    """Content of the last \\boxed{...} (nested braces), or None (none, unclosed, or too long)."""
    s = completion[-MAX_COMPLETION_TAIL:]
    i = s.rfind(BOXED)
    if i < 0:
        return None
    start = i + len(BOXED)
    depth = 1
    for j in range(start, min(len(s), start + MAX_EXPR_CHARS + 1)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[start:j]
    return None


class _Parser:
    """expr := term (('+' | '-') term)* ; term := factor (('*' | '/') factor)* ;
    factor := integer | '(' expr ')'. Whitespace is skipped. Collects the integer literals."""

    def __init__(self, text: str, max_literals: int):
        self.s = text
        self.i = 0
        self.literals: list[int] = []
        self.max_literals = max_literals

    def peek(self) -> str:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1
        return self.s[self.i] if self.i < len(self.s) else ""

    def expr(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.s[self.i]
            self.i += 1
            rhs = self.term(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            op = self.s[self.i]
            self.i += 1
            rhs = self.factor(depth)
            if op == "*":
                value = value * rhs
            else:
                if rhs == 0:
                    raise _Reject("division by zero")
                value = value / rhs
        return value

    def factor(self, depth: int) -> Fraction:
        c = self.peek()
        if c == "(":
            if depth >= MAX_DEPTH:
                raise _Reject("too deep")
            self.i += 1
            value = self.expr(depth + 1)
            if self.peek() != ")":
                raise _Reject("unbalanced")
            self.i += 1
            return value
        j = self.i
        while j < len(self.s) and "0" <= self.s[j] <= "9":  # ASCII digits only (str.isdigit takes '²')
            j += 1
        if j == self.i:
            raise _Reject("expected a number")
        if j - self.i > MAX_LITERAL_DIGITS:
            raise _Reject("literal too long")
        n = int(self.s[self.i:j])
        self.i = j
        self.literals.append(n)
        if len(self.literals) > self.max_literals:
            raise _Reject("too many numbers")
        return Fraction(n)


def evaluate_expression(text: str, max_literals: int = MAX_NUMBERS) -> tuple[Fraction, list[int]] | None:
    """(exact value, integer literals in order) of an arithmetic expression, or None if it is not one
    (bad syntax, division by zero, too long, too deep, too many or too long literals). Never raises."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_EXPR_CHARS:
        return None
    p = _Parser(text, max_literals)
    try:
        value = p.expr(0)
        if p.peek() != "":
            return None  # trailing characters
    except (_Reject, RecursionError):
        return None
    return value, p.literals


def reward(completion: str, answer: str) -> float:
    """1.0 if the last \\boxed{} of `completion` holds an expression that uses each number of `answer`
    ("n1,n2,...:target") exactly once and equals the target exactly, else 0.0. Never raises."""
    try:
        if not isinstance(completion, str):
            return 0.0
        parsed = parse_answer(answer)
        if parsed is None:
            return 0.0
        numbers, target = parsed
        content = last_box(completion)
        if content is None:
            return 0.0
        result = evaluate_expression(content, max_literals=len(numbers))
        if result is None:
            return 0.0
        value, literals = result
        if sorted(literals) != sorted(numbers):
            return 0.0
        return 1.0 if value == target else 0.0
    except Exception:  # belt and braces: a reward must never crash a training run
        return 0.0
