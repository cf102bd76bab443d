"""The paper's figures from a run's own logs, drawn with matplotlib as SVG and PNG.

    python scripts/plot.py runs/kl3 runs/clip [--out curves.svg] [--window 10]    # Figure 2
    python scripts/plot.py --passk runs/eval/kl3.jsonl [--out passk.svg]          # Figure 4

Figure 2: four panels, one line per run: (a) return `reward_mean` (`reward_mean_first_round` where
logged: with --dynamic-sampling the trained groups are picked for mixed rewards), (b) `entropy`,
(c) `completion_len`
(each a faint raw line under a trailing moving average), and (d) the evaluation Mean@k logged under
`eval/mean@K` (else the first `eval/.../mean@K` key). A run directory holds metrics.jsonl (x axis
`step`; rows missing a key or with a non-finite value are skipped for that panel) and config.json,
whose `clip` names the method in the legend, with each change a resume recorded ("R (kl3; --steps
32->64 at 32)"), and whose step is marked by a dotted vertical line in the run's colour.

Figure 4: Mean@K and Pass@K against K (log2 axis), one line per eval.py output file and benchmark
(one row per completion: benchmark, problem_id, sample, correct); K runs over 1, 2, 4, ... up to the
fewest samples any problem of that benchmark has, and that number itself.

matplotlib is optional (training never needs it): without it these commands say how to install it.
Every line carries a gid "<label>|<metric>" in the SVG, so tests and scripts can find it.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing
from nanoatr.machinery.flags import Parser  # noqa: E402  (one error line, flags only in full)
from nanoatr.machinery.checkpoint import CheckpointError, warn  # noqa: E402
from nanoatr.machinery.resume import change_text, recorded_changes  # noqa: E402
from nanoatr.machinery.metrics_log import jsonl_rows  # noqa: E402
from nanoatr.evaluate import summarize, verdicts_by_problem  # noqa: E402

TRAIN_PANELS = (("(a) return", "reward_mean"), ("(b) entropy", "entropy"),
                ("(c) completion length", "completion_len"))
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


class Line(NamedTuple):
    label: str      # legend text (lines with the same label share one legend entry)
    color: str
    xs: list[float]
    ys: list[float]
    raw: list[float] | None = None  # unsmoothed values, drawn faint under ys
    markers: bool = False           # dots on the points: evaluations are sparse
    style: str = "-"
    # (low, high) at each x, shaded: an interval over seeds
    band: tuple[list[float], list[float]] | None = None
    marks: tuple[float, ...] = ()   # steps where the run changed on a resume: dotted vertical lines


class Panel(NamedTuple):
    title: str
    metric: str
    lines: list[Line]


def draw(panels: list[Panel], out, xlabel: str, cols: int = 2, log2x: bool = False) -> Path:
    """Write the panels side by side to `out` (.svg) and the same figure as .png beside it; returns out."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("error: drawing figures needs matplotlib: pip install matplotlib") from None
    plt.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for line in panel.lines:
            if line.raw is not None:
                ax.plot(line.xs, line.raw, color=line.color, alpha=0.2, linewidth=0.8)
            if line.band is not None:
                ax.fill_between(line.xs, *line.band, color=line.color, alpha=0.18, linewidth=0,
                                gid=f"{line.label}|{panel.metric}|band")
            (art,) = ax.plot(line.xs, line.ys, line.style, color=line.color, label=line.label, linewidth=1.5,
                             marker="o" if line.markers else None, markersize=3)
            art.set_gid(f"{line.label}|{panel.metric}")
            for x in line.marks:
                ax.axvline(x, color=line.color, linestyle=":", linewidth=1,
                           gid=f"{line.label}|{panel.metric}|change@{x:g}")
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(xlabel)
        if log2x:
            ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.tight_layout()
    if handles:  # one legend under the panels; bbox_inches="tight" makes room for it
        fig.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=1 if cols == 1 else min(4, len(handles)), fontsize=8, frameon=False)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with plt.rc_context({"svg.hashsalt": "nanoatr"}):  # no date and fixed ids: one figure, one file
        fig.savefig(out.with_suffix(".svg"), bbox_inches="tight", metadata={"Date": None})
    fig.savefig(out.with_suffix(".png"), dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out.with_suffix(".svg")


def read_metrics(path) -> list[dict]:
    """The JSON objects of a metrics.jsonl, for readers (plot, sweep): bad lines skipped with one warning."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: no {path.name} (is it a run directory?)")
    rows, bad, _ = jsonl_rows(path)
    if bad:
        warn(f"warning: {path}: skipped {len(bad)} unreadable line(s) (line {', '.join(map(str, bad[:3]))}"
             f"{', ...' if len(bad) > 3 else ''})")
    return [row for _, row in rows]


def change_lines(saved: dict, where) -> list[str]:
    """'at step 32: --steps 32 -> 64, --eval-every 0 -> 8': each recorded change with its step (the notes
    under scripts/runs_table.py's and scripts/sweep_report.py's tables)."""
    return [f"at step {c['step']}: {change_text(c)}" for c in recorded_changes(saved, where)]


def default_ks(n: int) -> list[int]:
    """K values for a Pass@K-vs-K curve from n samples: 1, 2, 4, ... up to n, and n itself."""
    if n < 1:
        raise ValueError(f"need at least one sample per problem, got {n}")
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else ks + [n]


def moving_average(values, window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start), as the paper smooths its curves."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    return [sum(values[max(0, i + 1 - window):i + 1]) / min(i + 1, window) for i in range(len(values))]


def series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of `key` sorted by step; a step logged twice keeps its last value."""
    by_step = {}
    for row in rows:
        step, value = _number(row.get("step")), _number(row.get(key))
        if step is not None and value is not None:
            by_step[step] = value
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def _number(v: object) -> float | None:
    # bools are ints to Python, and NaN/inf (json writes them) cannot be drawn
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


# ---------------------------------------------------------------------------
# Figure 2: training curves of one or more runs

def curve_panels(runs: list[tuple], window: int, eval_key: str | None) -> list[Panel]:
    """runs: (label, color, metrics rows, steps of changes on resume). Lines sharing a label (seeds of one
    method) share a colour."""
    panels = []
    for title, key in (*TRAIN_PANELS, (f"(d) {eval_key or 'evaluation'}", eval_key)):
        lines = []
        for label, color, rows, marks in runs:
            k = key
            if k == "reward_mean" and any("reward_mean_first_round" in r for r in rows):
                k = "reward_mean_first_round"  # the policy's return, not that of the groups kept for training
            xs, ys = series(rows, k) if k else ([], [])
            if not xs:
                continue
            smooth = not k.startswith("eval/") and window > 1
            lines.append(Line(label, color, xs, moving_average(ys, window) if smooth else ys,
                              ys if smooth else None, markers=not smooth, marks=marks))
        panels.append(Panel(title, key or "eval", lines))
    return panels


def plot_runs(run_dirs, out, window: int = 10, eval_key: str | None = None) -> Path:
    """Return, entropy, completion length and eval Mean@k of each run (Figure 2)."""
    runs = [(*run_legend(Path(d)), read_metrics(Path(d) / "metrics.jsonl")) for d in run_dirs]
    runs = [(label, COLORS[i % len(COLORS)], rows, marks) for i, (label, marks, rows) in enumerate(runs)]
    eval_key = eval_key or pick_eval_key([rows for _, _, rows, _ in runs])
    return draw(curve_panels(runs, window, eval_key), out, "step")


def run_legend(run_dir: Path) -> tuple[str, tuple[int, ...]]:
    """(legend text, steps of its changes): the directory name, plus from config.json the clip method and
    each change a resume recorded, "R (kl3; --steps 32->64 at 32)". A config.json that is missing,
    unreadable or not a JSON object, or a malformed record of changes, is an error (ValueError naming the
    file) rather than a legend that hides the run's method and changes."""
    name, path = run_dir.resolve().name, run_dir / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path} is missing: not a run directory of train.py") from None
    except OSError as e:
        raise ValueError(f"{path} cannot be read ({e.strerror or e})") from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise ValueError(f"{path} is not JSON ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object")
    clip = config.get("clip")
    changes = recorded_changes(config, path)
    words = ([clip] if clip and clip != name else []) + \
        [f"{change_text(c, '->')} at {c['step']}" for c in changes]
    label = f"{name} ({'; '.join(words)})" if words else name
    return label, tuple(dict.fromkeys(c["step"] for c in changes))


def pick_eval_key(runs_rows: list[list[dict]]) -> str | None:
    """The eval key to plot: `eval/mean@K` (the average) if logged, else the first `eval/<x>/mean@K`."""
    keys = [k for rows in runs_rows for row in rows for k in row if re.fullmatch(r"eval/(.+/)?mean@\d+", k)]
    average = [k for k in keys if k.count("/") == 1]
    return (average or keys or [None])[0]


# ---------------------------------------------------------------------------
# Figure 4: Mean@K and Pass@K against K

def pass_at_k_curves(path: Path) -> dict[str | None, tuple[list[int], list[float], list[float]]]:
    """{benchmark: (K values, Mean@K %, Pass@K %)} from one eval.py output file. Its problems are keyed by
    (benchmark, problem_id): `eval.py --data a b c` numbers each file's problems from 0. Rows without a
    `benchmark` field (older files) make one curve, under None."""
    if not Path(path).is_file():
        raise ValueError(f"{path}: file not found")
    rows = [r for r in read_metrics(Path(path)) if {"problem_id", "sample", "correct"} <= r.keys()]
    if not rows:
        raise ValueError(f"{path}: no eval rows (expected problem_id, sample, correct per completion)")
    by_benchmark: dict[str | None, list[dict]] = {}
    for row in rows:
        by_benchmark.setdefault(row.get("benchmark"), []).append(row)
    curves = {}
    for name, mine in by_benchmark.items():
        try:
            verdicts = verdicts_by_problem(mine)
            ks = default_ks(min(len(v) for v in verdicts))
            stats = summarize(verdicts, ks)
        except ValueError as e:  # name the file (and benchmark): a repeated sample, a problem with no samples
            raise ValueError(f"{path}: {name + ': ' if name else ''}{e}") from None
        curves[name] = ks, [stats[f"mean@{k}"] for k in ks], [stats[f"pass@{k}"] for k in ks]
    return curves


def plot_pass_at_k(eval_files, out) -> Path:
    """Mean@K and Pass@K (percent) against K, one line per eval file and benchmark (Figure 4); the legend
    reads FOLDER/FILE: BENCHMARK (FOLDER/FILE for a file without benchmark fields)."""
    mean_lines, pass_lines = [], []
    for path in map(Path, eval_files):
        for name, (ks, means, passes) in pass_at_k_curves(path).items():
            label = "/".join(path.parts[-2:]) + (f": {name}" if name else "")
            color = COLORS[len(mean_lines) % len(COLORS)]
            mean_lines.append(Line(label, color, ks, means, markers=True))
            pass_lines.append(Line(label, color, ks, passes, markers=True))
    return draw([Panel("(a) Mean@K (%)", "mean@k", mean_lines),
                 Panel("(b) Pass@K (%)", "pass@k", pass_lines)], out, "K", log2x=True)


def main(argv=None) -> None:
    parser = Parser(prog="python scripts/plot.py", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="run directories (Figure 2) or, with --passk, eval files")
    parser.add_argument("--passk", action="store_true", help="Figure 4 from eval.py output files")
    parser.add_argument("--out", help="output .svg (a .png is written beside it; default: curves.svg in the "
                        "first run directory, or passk.svg beside the first eval file)")
    parser.add_argument("--window", type=int, default=10, help="moving-average window of the training panels")
    parser.add_argument("--eval-key", help="metrics key of panel (d) (default: eval/mean@K)")
    args = parser.parse_args(argv)
    try:
        first = Path(args.paths[0])
        if args.passk:
            out = plot_pass_at_k(args.paths, args.out or first.parent / "passk.svg")
        else:
            out = plot_runs(args.paths, args.out or first / "curves.svg", args.window, args.eval_key)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
