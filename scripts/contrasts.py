"""What a sweep asks of its runs, and how each question is measured seed by seed.

A comparison is a Contrast: on each seed, the sum of weight x score over its terms; A − B (`difference_of`)
is +1 A − 1 B, an --effect (`parse_effect`) any weights summing to 0, e.g. the main effect of one edge of a
2 x 2. A pre-registered Hypothesis predicts a contrast's side in one score; a Claim (--reject) says a
difference of a stated size is ruled out. `questions` reads them from the flags of scripts/sweep.py (and
scripts/between_sweeps.py reads its comparisons the same way); `measured` gives a contrast's seed-paired
values (scripts/stats.py's Paired) from the runs' results (scripts/sweep_report.py's `result`).
"""
import math
import re
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stats  # noqa: E402  (scripts/stats.py)

WARM_START = "warm-start"  # --compare kl3/warm-start: each run's end against its own step-0 evaluation


class Contrast(NamedTuple):
    """What a comparison measures on each seed: the sum of weight x score over its terms. A term (weight, arm,
    at_start) reads the arm's score at the end, or at step 0 (its own warm start) when at_start."""
    name: str     # "kl3 − clip", "kl3 − warm-start", or an --effect's name
    terms: tuple  # ((1.0, "kl3", False), (-1.0, "clip", False))


class Hypothesis(NamedTuple):
    contrast: Contrast  # A - B (B may be warm-start), or an --effect
    score: str          # a result key: "heldout/mean@k", "entropy_end"
    predicted: int      # +1: above 0 (A > B), -1: below 0 (A < B), 0: differs from 0


class Claim(NamedTuple):  # --reject: is a difference of `effect` (or beyond it) ruled out?
    contrast: Contrast
    score: str
    effect: float


class Questions(NamedTuple):  # what the report asks of the runs, besides Table 3 (sweep.py's flags)
    effects: dict[str, Contrast]   # --effect, by name
    contrasts: list[Contrast]      # the seed-paired comparisons: --compare, then the effects
    hypotheses: list[Hypothesis]   # --hypothesis: with the claims, the pre-registered family
    claims: list[Claim]            # --reject


def difference_of(a: str, b: str) -> Contrast:
    """A − B: A's runs against B's, or against their own step 0 when B is warm-start."""
    second = (-1.0, a, True) if b == WARM_START else (-1.0, b, False)
    return Contrast(f"{a} − {b}", ((1.0, a, False), second))


def parse_effect(tokens: list[str], methods: list[str]) -> Contrast:
    """--effect NAME WEIGHT ARM [WEIGHT ARM ...]: a contrast of arms (each once, weights summing to 0), e.g.
    the main effect of a 2 x 2's low edge, low +0.5 lowhyb -0.5 clip +0.5 kl3 -0.5 highhyb. Tokens alternate
    weight and arm, so an arm's ':' '=' ',' never need quoting. ValueError naming what is wrong."""
    name, rest = tokens[0], tokens[1:]
    if "/" in name or name in (*methods, WARM_START):
        raise ValueError(f"--effect {name}: an effect's name has no '/' and is not a method's")
    if not rest or len(rest) % 2:
        raise ValueError(f"--effect {name}: write NAME WEIGHT ARM [WEIGHT ARM ...], e.g. --effect {name} "
                         "+0.5 A -0.5 B")
    terms = []
    for weight, arm in zip(rest[::2], rest[1::2]):
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(f"--effect {name}: {weight!r} is not a weight (a number such as +0.5 before "
                             "each arm)") from None
        if w == 0 or not math.isfinite(w):
            raise ValueError(f"--effect {name}: the weight of {arm} is {weight} (a number other than 0)")
        if arm not in methods:
            raise ValueError(f"--effect {name}: {arm} is not among the methods ({' '.join(methods)})")
        if arm in (a for _, a, _ in terms):
            raise ValueError(f"--effect {name}: {arm} is named twice")
        terms.append((w, arm, False))
    if abs(math.fsum(w for w, _, _ in terms)) > 1e-9:
        raise ValueError(f"--effect {name}: the weights sum to {math.fsum(w for w, _, _ in terms):g}, not 0 "
                         "(a contrast compares arms)")
    return Contrast(name, tuple(terms))


def effect_text(c: Contrast) -> str:
    """'low = 0.5 lowhyb − 0.5 clip + 0.5 kl3 − 0.5 highhyb': an effect's definition."""
    signed = [f"{'−' if w < 0 else '+'} {abs(w):g} {arm}" for w, arm, _ in c.terms]
    first = signed[0][2:] if c.terms[0][0] > 0 else "−" + signed[0][2:]
    return " ".join([f"{c.name} = {first}", *signed[1:]])


def effects_of(tokens: list[list[str]], methods: list[str]) -> dict[str, Contrast]:
    """Every --effect, by name (each with a name of its own). ValueError naming what is wrong."""
    effects = {c.name: c for c in (parse_effect(t, methods) for t in tokens)}
    if len(effects) < len(tokens):
        raise ValueError(f"--effect: each effect has a name of its own ({' '.join(t[0] for t in tokens)})")
    return effects


def contrast_of(text: str, flag: str, methods: list[str], effects: dict[str, Contrast]) -> Contrast:
    """A comparison as a flag names it: "A/B" (A and B among the methods, B may be warm-start), or, except
    for --compare, an --effect's name. ValueError naming the flag."""
    if text in effects and flag != "--compare":
        return effects[text]
    a, slash, b = text.partition("/")
    if not slash or a not in methods or b not in [*methods, WARM_START]:
        also = " or an --effect's name" if flag != "--compare" else ""
        raise ValueError(f"{flag} {text}: write A/B with A and B among the methods "
                         f"({' '.join(methods)}){also}")
    return difference_of(a, b)


# heldout/mean, transfer/pass, mean (the files' average), entropy (the training tokens', last 20 steps),
# heldout/entropy (the evaluation policy's on that file, at the end)
SCORE = r"(?:[\w.-]+/)?(?:mean|pass)|(?:[\w.-]+/)?entropy"


def score_key(name: str, flag: str) -> str:
    """'heldout/mean' -> 'heldout/mean@k', 'entropy' -> 'entropy_end', 'heldout/entropy' -> itself: the result
    key a score name stands for. ValueError naming the flag, for a name that is no score."""
    if not re.fullmatch(SCORE, name):
        raise ValueError(f"{flag} {name}: a score is heldout/mean, transfer/pass (a file's), mean, pass, "
                         "entropy (the training tokens') or heldout/entropy (the evaluation policy's)")
    if name.endswith("entropy"):
        return "entropy_end" if name == "entropy" else name
    return f"{name}@k"


def questions(methods: list[str], effect: list[list[str]], compare: list[str] | None,
              hypothesis: list[list[str]], reject: list[list[str]]) -> Questions:
    """What a sweep's report asks, from its flags: the --effect contrasts, the --compare list (by default
    every method against the first, then the effects), the pre-registered --hypothesis and --reject family.
    ValueError naming the flag."""
    effects = effects_of(effect, methods)
    contrasts = [contrast_of(c, "--compare", methods, effects) for c in compare] if compare else \
        [difference_of(m, methods[0]) for m in methods[1:]]
    contrasts += effects.values()
    sides = {"above": 1, "below": -1, "differs": 0}
    if any(side not in sides for _, _, side in hypothesis):
        raise ValueError("--hypothesis A/B SCORE SIDE: SIDE is above, below or differs (A - B above, "
                         "below or other than 0)")
    hypotheses = [Hypothesis(contrast_of(ab, "--hypothesis", methods, effects),
                             score_key(name, "--hypothesis"), sides[side]) for ab, name, side in hypothesis]
    try:
        effects_claimed = [float(size) for _, _, size in reject]
    except ValueError:
        raise ValueError("--reject A/B SCORE EFFECT: EFFECT is a number, e.g. 3.67") from None
    if any(e == 0 or not math.isfinite(e) for e in effects_claimed):
        raise ValueError("--reject A/B SCORE EFFECT: EFFECT is a difference other than 0")
    claims = [Claim(contrast_of(ab, "--reject", methods, effects), score_key(name, "--reject"), size)
              for (ab, name, _), size in zip(reject, effects_claimed)]
    return Questions(effects, contrasts, hypotheses, claims)


def by_seed(done: list[dict], method: str, key: str) -> dict[int, float]:
    """{seed: the method's `key`} over its finished runs that have a number there (not nan, not null)."""
    return {r["seed"]: r[key] for r in done if r["method"] == method
            and isinstance(r.get(key), (int, float)) and not math.isnan(r[key])}


def term_values(done: list[dict], c: Contrast, key: str) -> list[tuple[float, dict[int, float]]]:
    """(weight, {seed: score}) of each of the contrast's terms: `key` at the end, or at step 0 for a
    warm-start term."""
    return [(w, by_seed(done, arm, f"{key}_start" if at_start else key)) for w, arm, at_start in c.terms]


def measured(done: list[dict], c: Contrast, key: str) -> stats.Paired:
    """The contrast in `key`, seed by seed over the seeds where every one of its arms finished
    (scripts/stats.py)."""
    return stats.contrast(term_values(done, c, key))


def digits(key: str) -> int:
    """Decimals of a score: an entropy (nats per token) 3, a percentage 2."""
    return 3 if key.endswith("entropy") or key == "entropy_end" else 2


def difference(p: stats.Paired, key: str) -> str:
    """'-0.93 [-2.62, +0.76]': the mean difference and its 95% t-interval (none for one seed)."""
    d = digits(key)
    return f"{p.mean:+.{d}f}" + (f" [{p.low:+.{d}f}, {p.high:+.{d}f}]" if p.n > 1 else "")
