r"""When two answers are equal: exact values, collections, intervals, relations (the EQUIVALENCE
POLICY of docs/verifier.md), within SYMPY_BUDGET bounded sympy evaluations per verify call.
"""
from __future__ import annotations

import random
import threading
from contextlib import contextmanager
from fractions import Fraction
from functools import lru_cache
from typing import Optional

import sympy

from .shapes import Canon, Interval, as_intervals, canonical
from .values import Num, add, approx, div, neg, symbolic, to_sympy

SYMPY_BUDGET = 48   # sympy evaluations allowed per verify call (each on a size-bounded tree)
EXACT_POINTS = 2    # rational points for the exact identity test of expressions in variables
MAX_EXACT_DEGREE = 4096  # ... of rational functions up to this degree

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
    """Are two canonical answers the same answer? (docs/verifier.md's EQUIVALENCE POLICY; symmetric)"""
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


def _unordered(xs, ys, same=None) -> bool:
    """Every element matched by a distinct element equal to it by `same` (default: equivalent): a multiset
    comparison."""
    same = same or equivalent
    if len(xs) != len(ys):
        return False
    unused = list(ys)
    for x in xs:
        hit = next((k for k, y in enumerate(unused) if same(x, y)), None)
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


def _infinite(c: Canon) -> bool:
    return c.kind == "num" and (c.value.exact is sympy.oo or c.value.exact is -sympy.oo)


def _brackets_agree(a: Canon, b: Canon) -> bool:
    """Two tuples' brackets agree, except at an infinite end of a pair: "[5, \\infty]" is the interval
    "[5, \\infty)", as it is against "x \\ge 5" (brackets at infinity are ignored)."""
    if a.extra == b.extra:
        return True
    return len(a.value) == len(b.value) == 2 and all(
        p == q or _infinite(x) and _infinite(y) for p, q, x, y in zip(a.extra, b.extra, a.value, b.value))


def _collections_equal(a: Canon, b: Canon) -> bool:
    ka, kb = a.kind, b.kind
    if ka == kb == "tuple":
        return _brackets_agree(a, b) and _ordered(a.value, b.value)
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
        if "interval" not in (a.kind, b.kind):
            return None
        equation = _point_equation(a if ia is not None else b)  # [1, 1] of x is x = 1 (and so 1)
        return equation is not None and equivalent(equation, b if ia is not None else a)
    if a.kind == b.kind == "interval" and a.extra and b.extra and a.extra != b.extra:
        return False  # x > 2 is not t > 2
    return _unordered(ia, ib, _same_interval)


def _point_equation(c: Canon) -> Optional[Canon]:
    """The equation "x = c" of a variable's one-point solution set, the interval [c, c] ("x \\ge 1 and
    x \\le 1", "1 \\le x \\le 1"), else None. Its sides' text is the answer's own, which only this
    answer has: the cheap first check of `equivalent` (equal texts) stays true to it."""
    if c.kind != "interval" or not c.extra or len(c.value) != 1:
        return None
    iv = c.value[0]
    if not (iv.lo_closed and iv.hi_closed and values_equal(iv.lo, iv.hi)):
        return None
    return Canon("rel", c.text, (canonical(c.extra), Canon("num", c.text, iv.lo)), (("=",), (True, False)))


def _same_interval(x: Interval, y: Interval) -> bool:
    def finite(n: Num) -> bool:
        return not (n.exact is sympy.oo or n.exact is -sympy.oo)
    return (values_equal(x.lo, y.lo) and values_equal(x.hi, y.hi)
            and (x.lo_closed == y.lo_closed or not finite(x.lo))
            and (x.hi_closed == y.hi_closed or not finite(x.hi)))


_FLIP = {"<": ">", "≤": "≥", ">": "<", "≥": "≤"}  # an operator with its sides swapped


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
    if op in ("<", "≤"):
        op, lhs, rhs = _FLIP[op], rhs, lhs
    return op, add(lhs.value, neg(rhs.value))


def _same_relation(a: Canon, b: Canon) -> bool:
    """Equations: the same up to a nonzero factor (2x+4y-3=0 is y = -x/2 + 3/4); inequalities: up
    to a positive factor (5 < x is x > 5); chains: side by side."""
    if len(a.extra[0]) == len(b.extra[0]) == 1:
        a, b = sorted((a, b), key=lambda c: c.text)  # one verdict, whichever side is the gold
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
    zero_f, zero_g = 1e-9 * max(map(abs, fa)), 1e-12 * max(map(abs, ga))  # relative to each side's size
    for x, y in zip(fa, ga):  # (10^{-13}x = 0 is x = 0)
        if abs(y) > zero_g:
            ratios.append(x / y)
        elif abs(x) > zero_f:
            return False  # g vanishes here and f does not
    k = ratios[0] if ratios else 0.0
    if k == 0 or not _close([r / k for r in ratios], [1.0] * len(ratios), 1e-9):
        return False  # f vanishes where g does not, or no one k, to 1e-9 of k (10^{-10} \sqrt{x} is not one)
    if positive and (abs(k.imag) > 1e-9 * abs(k) or k.real <= 0):
        return False
    ef, eg = _exact_values(to_sympy(f.exact)), _exact_values(to_sympy(g.exact))
    if ef is None or eg is None:
        return True
    # exactly: the same ratio at every rational point (cross-multiplied: no division by zero)
    return all(ef[0] * y == x * eg[0] for x, y in zip(ef[1:], eg[1:])) and (ef[0] != 0 or eg[0] == 0)
