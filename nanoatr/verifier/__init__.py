r"""Answer verifier: ``verify(completion, gold) -> bool`` is the reward for RL with verifiable rewards.

Completions are untrusted model output: nothing from them is ever executed (no eval/exec/sympify; math
is read by our own parser). The package, in the order an answer goes through it:
    extract.py   the final answer(s) of a completion: boxes, answer statements
    shapes.py    normalisation, then the answer's shape: number, list, interval, relation, matrix, ...
    parse.py     the recursive-descent parser of one math expression ...
    values.py    ... into exact values whose every operation is size-bounded before it is built
    equal.py     when two shaped answers are equal
verify never raises, and its time is bounded by construction, not by a timer. What counts as an answer,
when two are equal and why no input is slow: docs/verifier.md.
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
