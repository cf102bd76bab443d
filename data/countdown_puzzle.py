r"""The Countdown puzzle (`--task countdown`): four numbers 1-10 and a target, reached with + - * /, each
number used once. How data/make_countdown.py draws a problem of the task's law and writes a worked solution
or a search trace for it, and which targets a set of numbers can reach (the transfer split's law, and the
difficulty measures of --describe). Nothing here needs torch or the library: the rules, in one place.

A problem is 'n1,n2,...:target'. make_problem draws the numbers, then the target where a uniformly random
path of steps lands (a positive integer <= max_value at every step): targets with many solutions come up
more often. Its solution is a search trace (Spec.fmt "search", the warm start's format; make_countdown.py
says why): random attempts separated by ';', the steps of one attempt by ',', then the attempt that reached
the target as \boxed{expression}:

    2*8=16,6*16=96;2+8=10,10+6=16,2+16=18;\boxed{2+((2+8)+6)}
"""
import random
from fractions import Fraction

BOXED = "\\boxed{"


# ----------------------------------------------------------------------------
# Problems and random worked solutions (positive integers at every step)


def _options(values: list[int], max_value: int):
    """Every (i, op, j, result) combining values[i] op values[j] (i != j, written in that order) into a
    positive integer <= max_value: + and * in both orders, a-b if a > b, a/b if b divides a (b > 1)."""
    out = []
    for i, a in enumerate(values):
        for j, b in enumerate(values):
            if i == j:
                continue
            if a + b <= max_value:
                out.append((i, "+", j, a + b))
            if a * b <= max_value and a > 1 and b > 1:
                out.append((i, "*", j, a * b))
            if a > b:
                out.append((i, "-", j, a - b))
            if b > 1 and a % b == 0:
                out.append((i, "/", j, a // b))
    return out


def _apply(values, exprs, option):
    i, op, j, r = option
    e = f"({exprs[i]}{op}{exprs[j]})"
    keep = [k for k in range(len(values)) if k not in (i, j)]
    return [values[k] for k in keep] + [r], [exprs[k] for k in keep] + [e], f"{values[i]}{op}{values[j]}={r}"


def worked(steps: list[str], expr: str) -> str:
    """'a*b=c;c+d=e;' + \\boxed{expr} (the outer parentheses of expr dropped)."""
    if expr.startswith("(") and expr.endswith(")"):
        expr = expr[1:-1]
    return "".join(s + ";" for s in steps) + BOXED + expr + "}"


def random_path(rng: random.Random, numbers: list[int], max_value: int):
    """A uniformly random sequence of steps (at each step a uniform choice among the valid options)
    combining all numbers; (target, solution text) or None if it gets stuck."""
    values, exprs, steps = list(numbers), [str(n) for n in numbers], []
    while len(values) > 1:
        opts = _options(values, max_value)
        if not opts:
            return None
        values, exprs, step = _apply(values, exprs, rng.choice(opts))
        steps.append(step)
    return values[0], worked(steps, exprs[0])


def solutions(numbers: list[int], target: int, max_value: int) -> list[str]:
    """Every worked solution (all step orders, both orders of + and *) reaching target; exhaustive."""
    out = []

    def go(values, exprs, steps):
        if len(values) == 1:
            if values[0] == target:
                out.append(worked(steps, exprs[0]))
            return
        for opt in _options(values, max_value):
            v, e, s = _apply(values, exprs, opt)
            go(v, e, steps + [s])

    go(list(numbers), [str(n) for n in numbers], [])
    return out


def _attempt(rng: random.Random, numbers: list[int], target: int, max_value: int):
    """One attempt of a search trace: random steps until two values are left, then the step that
    makes the target if some operation does (a one-step look-ahead); if none does, the attempt is
    abandoned there. (reached, steps, expression of the target or None)."""
    values, exprs, steps = list(numbers), [str(n) for n in numbers], []
    while len(values) > 1:
        opts = _options(values, max_value)
        if len(values) == 2:
            opts = [o for o in opts if o[3] == target]
        if not opts:
            return False, steps, None
        values, exprs, step = _apply(values, exprs, rng.choice(opts))
        steps.append(step)
    return values[0] == target, steps, exprs[0]


def search_trace(rng: random.Random, numbers: list[int], target: int, max_value: int, max_attempts: int):
    """Format "search": attempts (steps joined by ',') separated by ';' until one reaches the target,
    then \\boxed{its expression}; None if none does within max_attempts."""
    attempts = []
    for _ in range(max_attempts):
        ok, steps, expr = _attempt(rng, numbers, target, max_value)
        attempts.append(",".join(steps))
        if ok:
            return worked(attempts, expr)  # 'attempt;attempt;' + \\boxed{expr}
    return None


class Spec:
    """The task's knobs: how many numbers, their range, the largest value any step may make."""

    def __init__(self, n_numbers: int = 4, low: int = 1, high: int = 10, max_value: int = 100,
                 min_target: int = 10, fmt: str = "search", max_attempts: int = 4):
        self.n_numbers, self.low, self.high = n_numbers, low, high
        self.max_value, self.min_target = max_value, min_target
        self.fmt, self.max_attempts = fmt, max_attempts


def make_problem(rng: random.Random, spec: Spec) -> tuple[str, str, str]:
    """(question, answer, a random worked solution). The target is where a uniformly random path of
    steps lands (so targets with many solutions come up more often); question and answer are both
    'n1,n2,...:target', numbers in random order."""
    while True:
        numbers = [rng.randint(spec.low, spec.high) for _ in range(spec.n_numbers)]
        path = random_path(rng, numbers, spec.max_value)
        if path is None or path[0] < spec.min_target:
            continue
        target, solution = path
        if spec.fmt == "search":
            solution = search_trace(rng, numbers, target, spec.max_value, spec.max_attempts)
            if solution is None:
                continue
        text = ",".join(map(str, numbers)) + f":{target}"
        return text, text, solution


# ----------------------------------------------------------------------------
# What a set of numbers can reach


def reachable(numbers: tuple) -> set:
    """Every value an expression over all of `numbers` (each once, + - * /, any order and grouping) can take,
    exactly (Fractions): the task's rules, which are the reward's."""
    values = {}

    def go(items: tuple) -> set:
        key = tuple(sorted(items))
        if key in values:
            return values[key]
        if len(items) == 1:
            return {items[0]}
        out = set()
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                a, b = items[i], items[j]
                rest = items[:i] + items[i + 1:j] + items[j + 1:]
                results = {a + b, a * b, a - b, b - a}
                results |= {a / b} if b else set()
                results |= {b / a} if a else set()
                for r in results:
                    out |= go(rest + (r,))
        values[key] = out
        return out

    return go(tuple(Fraction(n) for n in numbers))


def integer_reachable(numbers: tuple, max_value: int) -> set:
    """The values reachable with a positive integer <= max_value at every step (the generator's rules)."""
    out = set()

    def go(items: tuple):
        if len(items) == 1:
            out.add(items[0])
            return
        for i in range(len(items)):
            for j in range(len(items)):
                if i != j:
                    a, b = items[i], items[j]
                    rest = tuple(x for k, x in enumerate(items) if k not in (i, j))
                    for r in (a + b, a * b, a - b, a // b if b > 1 and a % b == 0 else 0):
                        if 0 < r <= max_value:
                            go(rest + (r,))

    go(tuple(numbers))
    return out
