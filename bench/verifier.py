"""Throughput of nanoatr.verifier.verify on typical completions, on one core.

10,000 worked solutions of a few hundred characters: a mix of integer, fraction and radical answers
in \\boxed{...}, some integers on a DAPO-style "Answer: X" line, and inequalities / intervals,
line equations and matrices (about 20% together), about half correct (some correct ones written in
a different but equivalent form, so the parser and sympy paths are exercised, not just string
equality).

    python bench/verifier.py [--n 10000] [--seed 0]

Prints verifications per second as the final summary line (target: >= 2,000/s).
"""
import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nanoatr.verifier import canonical, verify  # noqa: E402

FILLER = [
    "Let $x$ be the number of marbles in the first bag. ",
    "Substituting into the second equation gives $3x + 2y = 17$. ",
    "We factor the quadratic as $(x-3)(x+5) = 0$, so $x = 3$ or $x = -5$. ",
    "Since the side length must be positive, we discard the negative root. ",
    "By the Pythagorean theorem, $a^2 + b^2 = c^2$, hence $c = \\sqrt{a^2+b^2}$. ",
    "Summing the arithmetic series $1 + 2 + \\cdots + n$ gives $\\frac{n(n+1)}{2}$. ",
    "Checking the boundary case $n = 1$ confirms the formula. ",
    "The probability is the number of favourable outcomes over the total, $\\frac{12}{36}$. ",
]


def make_case(rng: random.Random):
    """(completion, gold, intended label) with ~50% correct answers."""
    kind = rng.random()
    correct = rng.random() < 0.5
    if kind >= 0.8:
        return make_structured_case(rng, correct)
    if kind < 0.4:  # integer
        g = rng.randint(-50, 2000)
        gold = rng.choice([str(g), f"{g:03d}" if g >= 0 else str(g), f"{float(g)}"])
        ans = str(g) if correct else str(g + rng.choice([-2, -1, 1, 3, 10]))
        if correct and g >= 1000 and rng.random() < 0.5:
            ans = f"{g:,}"
    elif kind < 0.65:  # fraction
        p, q = rng.randint(1, 60), rng.randint(2, 60)
        gold = f"\\frac{{{p}}}{{{q}}}"
        if correct:
            k = rng.choice([1, 1, 2, 3])
            ans = rng.choice([f"\\frac{{{p * k}}}{{{q * k}}}", f"\\dfrac{{{p}}}{{{q}}}", f"{p}/{q}"])
        else:
            ans = f"\\frac{{{p + 1}}}{{{q}}}"
    else:  # radical (0.65 - 0.8)
        a, b = rng.randint(2, 12), rng.choice([2, 3, 5, 6, 7, 10, 11])
        gold = f"{a}\\sqrt{{{b}}}"
        if correct:  # (\sqrt7 is valid LaTeX for a one-digit radicand only)
            ans = rng.choice([gold, f"\\sqrt{{{a * a * b}}}", f"{a} \\sqrt{b}" if b < 10 else gold])
        else:
            ans = rng.choice([f"{a + 1}\\sqrt{{{b}}}", f"{a}\\sqrt{{{b + 1}}}", f"\\sqrt{{{a * b}}}"])
    body = "".join(rng.choice(FILLER) for _ in range(rng.randint(3, 6)))
    if kind < 0.15:  # DAPO's required last line instead of a box
        return f"{body}\nAnswer: {ans}", gold, correct
    return f"{body}Therefore, the final answer is $\\boxed{{{ans}}}$.", gold, correct


def make_structured_case(rng: random.Random, correct: bool):
    """An inequality/interval, a line equation or a matrix answer (the relation and shape paths)."""
    a, b = rng.randint(1, 9), rng.randint(-9, 9)
    kind = rng.randrange(3)
    if kind == 0:  # x >= a against [a, oo), or a strict bound
        gold = f"[{a}, \\infty)"
        ans = rng.choice([f"x \\ge {a}", f"{a} \\le x"]) if correct else f"x > {a}"
    elif kind == 1:  # y = a x + b against a x - y + b = 0 (or its multiple)
        gold = f"y = {a}x + {b}"
        k = rng.choice([1, 2, -3])
        ans = f"{k * a}x - {k}y + {k * b} = 0" if correct else f"y = {a}x + {b + 1}"
    else:  # a 2x2 matrix, bmatrix against pmatrix
        gold = f"\\begin{{pmatrix}} {a} & {b} \\\\ 0 & 1 \\end{{pmatrix}}"
        ans = f"\\begin{{bmatrix}} {a} & {b if correct else b + 1} \\\\ 0 & 1 \\end{{bmatrix}}"
    body = "".join(rng.choice(FILLER) for _ in range(rng.randint(3, 6)))
    return f"{body}Therefore, the final answer is $\\boxed{{{ans}}}$.", gold, correct


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:  # one core, as the trainer's reward workers would each get
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    rng = random.Random(args.seed)
    cases = [make_case(rng) for _ in range(args.n)]
    verify(*cases[0][:2])  # import/warm sympy outside the timed region

    # Worst case: no cache at all (every gold and answer normalised and parsed from scratch).
    start, cpu_start = time.perf_counter(), time.process_time()
    for c, g, _ in cases:
        canonical.cache_clear()
        verify(c, g)
    uncached, uncached_cpu = (args.n / (time.perf_counter() - start),
                              args.n / (time.process_time() - cpu_start))

    canonical.cache_clear()  # the normal case: cache starts empty, golds repeat across rollouts
    start, cpu_start = time.perf_counter(), time.process_time()
    results = [verify(c, g) for c, g, _ in cases]
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    info = canonical.cache_info()
    wrong = sum(r != label for r, (_, _, label) in zip(results, cases))
    print(f"cases={args.n} verified={sum(results)} ({sum(results) / args.n:.1%}) "
          f"disagreements with intended labels={wrong} "
          f"avg_len={sum(len(c) for c, _, _ in cases) / args.n:.0f} chars "
          f"cache hits={info.hits} misses={info.misses}")
    print(f"uncached: {uncached:,.0f} verifications/s ({uncached_cpu:,.0f} per CPU-second)")
    # CPU time as well: on a shared machine the wall clock also counts other processes' turns
    print(f"verify: {args.n / elapsed:,.0f} verifications/s on one core "
          f"({elapsed * 1e6 / args.n:.0f} us each; {args.n / cpu:,.0f} per CPU-second)")


if __name__ == "__main__":
    main()
