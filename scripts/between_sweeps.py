"""How a comparison changes from one sweep to another that shares its seeds: "rate x method" of the binding
run (docs/results.md), the change of KL3 − Clip and of each edge's effect from lr 5e-5 (the edges run) to
lr 2e-4 (the binding run), paired by seed.

    python scripts/between_sweeps.py results/edges-countdown results/binding-countdown --compare kl3/clip \
        --effect low +0.5 LOWARM -0.5 clip +0.5 kl3 -0.5 HIGHARM --score heldout/mean heldout/entropy
    python scripts/between_sweeps.py results/edges-countdown results/middle-countdown \
        results/binding-countdown --compare kl3/clip          # three or more sweeps: Page's trend test

Each folder's results.json (written by `sweep.py --report`) gives every finished run's scores. A comparison
(A/B, A/warm-start, or an --effect as sweep.py writes one: scripts/contrasts.py) has on seed s the value
C(s) in each sweep; its change is D(s) = C_second(s) − C_first(s), over the seeds where both sweeps finished
every arm it names (paired by seed: a seed fixes the step-0 evaluation and the first rollout whatever the
rate). The table gives each sweep's mean C, and the mean D with its 95% paired t-interval and seeds
above : below 0 (scripts/stats.py). Exploratory: no verdict and no multiplicity control, whatever the
interval says.

Given three or more sweeps, in the order a trend is predicted (e.g. rising learning rates), it gives each
sweep's mean C over the seeds all of them share and Page's test of an ordered trend of C over the sweeps,
the seeds as blocks (stats.page_trend): L and its exact one-sided p's, of C rising and of C falling.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing
import stats  # noqa: E402  (scripts/stats.py)
from contrasts import (Contrast, contrast_of, difference, digits, effects_of, score_key,  # noqa: E402
                       term_values)
from nanoatr.machinery.flags import Parser  # noqa: E402  (a bad flag is one error line)


def read_results(folder: Path) -> list[dict]:
    """The finished runs of a sweep folder (its results.json). ValueError naming the folder."""
    path = folder / "results.json"
    if not path.is_file():
        raise ValueError(f"{folder}: no results.json (python scripts/sweep.py ... --out {folder} --report "
                         "writes it)")
    try:
        runs = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(runs, list) or \
            not all(isinstance(r, dict) and {"method", "seed"} <= r.keys() for r in runs):
        raise ValueError(f"{path}: not a sweep's results (a list of runs, each with its method and seed)")
    return runs


def change(first: list[dict], second: list[dict], c: Contrast, key: str) -> tuple[stats.Paired, ...] | None:
    """(C in the first sweep, C in the second, D = second − first), each over the seeds where D is defined
    (None where there is no such seed)."""
    terms = [term_values(runs, c, key) for runs in (first, second)]
    seeds = set.intersection(*(set(values) for t in terms for _, values in t))
    if not seeds:
        return None
    kept = [[(w, {s: values[s] for s in seeds}) for w, values in t] for t in terms]
    return (stats.contrast(kept[0]), stats.contrast(kept[1]),
            stats.contrast(kept[1] + [(-w, values) for w, values in kept[0]]))


def table(first: list[dict], second: list[dict], contrasts: list[Contrast], keys: list[str],
          names: tuple[str, str]) -> str:
    lines = [f"| comparison | score | seeds | {names[0]} | {names[1]} | change [95% t-interval] "
             "| seeds > 0 : < 0 |", "|---" * 7 + "|"]
    for c in contrasts:
        for key in keys:
            measured = change(first, second, c, key)
            if measured is None:
                lines.append(f"| {c.name} | {key} | 0 | — | — | — | — |")
                continue
            one, two, d = measured
            n = digits(key)
            lines.append(f"| {c.name} | {key} | {d.n} | {one.mean:+.{n}f} | {two.mean:+.{n}f} "
                         f"| {difference(d, key)} | {d.wins} : {d.losses} |")
    return "\n".join(lines) + "\n"


def trend_table(sweeps: list[list[dict]], contrasts: list[Contrast], keys: list[str],
                names: list[str]) -> str:
    lines = [f"| comparison | score | seeds | {' | '.join(names)} | Page's L | p rising | p falling |",
             "|---" * (len(names) + 6) + "|"]
    for c in contrasts:
        for key in keys:
            terms = [term_values(runs, c, key) for runs in sweeps]
            seeds = sorted(set.intersection(*(set(values) for t in terms for _, values in t)))
            if not seeds:
                lines.append(f"| {c.name} | {key} | 0 |" + " — |" * (len(names) + 3))
                continue
            blocks = [[sum(w * values[s] for w, values in t) for t in terms] for s in seeds]
            L, rising, falling = stats.page_trend(blocks)
            means = " | ".join(f"{sum(b[i] for b in blocks) / len(seeds):+.{digits(key)}f}"
                               for i in range(len(names)))
            lines.append(f"| {c.name} | {key} | {len(seeds)} | {means} | {L:g} | {rising:.2g} "
                         f"| {falling:.2g} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", type=Path, nargs="+", metavar="SWEEP",
                        help="two sweep folders (their results.json) sharing seeds and arm names; three or "
                             "more for the trend test, in the predicted order")
    parser.add_argument("--compare", nargs="+", default=[], metavar="A/B", help="differences A − B")
    parser.add_argument("--effect", nargs="+", action="append", default=[], metavar=("NAME", "WEIGHT ARM"),
                        help="a contrast, as sweep.py's: NAME WEIGHT ARM [WEIGHT ARM ...], weights summing "
                             "to 0")
    parser.add_argument("--score", nargs="+", default=["heldout/mean"], metavar="SCORE",
                        help="heldout/mean, transfer/pass, heldout/entropy, entropy, ... "
                             "(default: heldout/mean)")
    args = parser.parse_args(argv)
    try:
        if len(args.sweeps) < 2:
            raise ValueError("give two sweep folders, or three or more for the trend test")
        sweeps = [read_results(folder) for folder in args.sweeps]
        methods = sorted(set.intersection(*({r["method"] for r in runs} for runs in sweeps)))
        effects = effects_of(args.effect, methods)
        contrasts = [contrast_of(pair, "--compare", methods, effects) for pair in args.compare]
        contrasts += effects.values()
        if not contrasts:
            raise ValueError("nothing to compare: give --compare A/B or --effect")
        keys = [score_key(score, "--score") for score in args.score]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    names = [folder.resolve().name for folder in args.sweeps]
    print(table(*sweeps, contrasts, keys, names) if len(sweeps) == 2 else
          trend_table(sweeps, contrasts, keys, names), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
