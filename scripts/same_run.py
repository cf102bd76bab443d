"""Do two runs compute the same? Their metrics.jsonl compared step by step on every metric both logged,
wall-clock metrics aside (time_*, tokens_per_s*, */seconds): the check that another commit, or a resumed
run, trains as the first did.

    python scripts/same_run.py results/edges-countdown/clip-s0 /tmp/check/clip-s0 --steps 3

A step's training row and its evaluation row are compared apart (a row is an evaluation when it holds
eval/ metrics), up to --steps (default: every step either logged). One line per row: `identical (N metrics)`,
the metrics that differ with both values, or which run alone logged it; then the metrics only one run logged,
named once. Values are compared exactly, as logged (JSON floats round-trip; NaN equals NaN). Exit 0 when both
logged the same rows and every compared value is equal, 1 when not, 2 (one `error:` line) when a run's
metrics.jsonl is missing or unreadable.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing
from nanoatr.machinery.flags import Parser  # noqa: E402  (a bad flag is one error line)
from nanoatr.machinery.metrics_log import jsonl_rows  # noqa: E402


def wall_clock(key: str) -> bool:
    """A metric that measures time, not the computation: differs between any two runs."""
    return key.startswith("time_") or "tokens_per_s" in key or key.endswith("/seconds")


def rows(run: Path) -> dict:
    """{(step, "train" | "eval"): {metric: value}} of a run folder's metrics.jsonl (the last row of each
    kind at a step wins), parsed as the run's own log is (metrics_log.jsonl_rows); an unreadable line is
    not skipped here but refused. ValueError naming the file."""
    path = run / "metrics.jsonl"
    found, bad, _ = jsonl_rows(path)  # CheckpointError (a ValueError) when the file cannot be read
    if bad:
        raise ValueError(f"{path}, line {bad[0]}: not a JSON object")
    out = {}
    for _, row in found:
        if not isinstance(row.get("step"), int):
            raise ValueError(f"{path}: a row without a step")
        kind = "eval" if any(k.startswith("eval/") for k in row) else "train"
        out[(row["step"], kind)] = {k: v for k, v in row.items() if k != "step" and not wall_clock(k)}
    return out


def equal(x, y) -> bool:
    """Equal as logged; NaN equal to NaN (json reads each afresh, and NaN != NaN), in lists too."""
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(map(equal, x, y))
    return x == y or (x != x and y != y)


def compare(a: dict, b: dict, steps: int | None) -> tuple[list[str], bool]:
    """The report's lines and whether both runs logged the same rows, each value both logged in them equal."""
    lines, same, only, both = [], True, set(), False
    for step, kind in sorted(key for key in set(a) | set(b) if steps is None or key[0] <= steps):
        if (step, kind) not in a or (step, kind) not in b:
            lines.append(f"step {step} {kind}: logged by the {'second' if (step, kind) in b else 'first'} "
                         "run only")
            same = False
            continue
        x, y, both = a[(step, kind)], b[(step, kind)], True
        only |= set(x) ^ set(y)
        shared = sorted(set(x) & set(y))
        differ = [k for k in shared if not equal(x[k], y[k])]
        same &= not differ
        what = ", ".join(f"{k} {x[k]!r} vs {y[k]!r}" for k in differ) or f"identical ({len(shared)} metrics)"
        lines.append(f"step {step} {kind}: {what}")
    if not both:
        lines, same = [*lines, "no step in common"], False
    if only:
        lines.append("logged by one run only (not compared): " + ", ".join(sorted(only)))
    return lines, same


def main(argv=None) -> int:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("first", type=Path, help="a run folder (holding metrics.jsonl)")
    ap.add_argument("second", type=Path, help="the run folder to compare with it")
    ap.add_argument("--steps", type=int, default=None, help="compare steps 0 .. STEPS only")
    args = ap.parse_args(argv)
    try:
        first, second = rows(args.first), rows(args.second)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lines, same = compare(first, second, args.steps)
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
