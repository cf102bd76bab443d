"""The paper's figures from a run's own logs, as hand-written SVG (no plotting package).

    python -m nanoatr.plot runs/kl3 runs/clip [--out curves.svg] [--window 10]
    python -m nanoatr.plot --passk runs/kl3/eval.jsonl [--out passk.svg]

Figure 2: four panels, one line per run: (a) return ``reward_mean``, (b) ``entropy``,
(c) ``completion_len`` (each a faint raw line under a trailing moving average), and
(d) the evaluation Mean@k logged under ``eval/mean@K`` (else the first ``eval/.../mean@K``
key). A run directory holds ``metrics.jsonl`` (one JSON object per line, x axis ``step``;
lines missing a key, or with a non-finite value, are skipped for that panel) and
``config.json``, whose ``clip`` names the method in the legend.

Figure 4: Mean@K and Pass@K against K (log2 axis), one line per eval file. A file is
jsonl in one of three shapes (other rows, such as a summary line, are ignored):
  {"problem_id": 3, "sample": 0, "correct": true, ...}    one row per completion
  {"problem_id": 3, "verdicts": [true, false, ...]}       one row per problem
  {"k": 8, "mean@k": 23.1, "pass@k": 41.9}                precomputed, in percent
From verdicts (which win over precomputed rows in the same file), K runs over
1, 2, 4, ... up to the fewest samples any problem has, and that number itself.
One benchmark per file: a repeated (problem_id, sample) pair is an error.

Paths carry ``class="curve"`` (``"raw"`` for the faint lines), ``data-run`` and
``data-metric`` so tests and scripts can find them. SVG opens in any browser;
no PNG is written, to keep one renderer.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

from nanoatr.metrics import default_ks, moving_average, summarize, verdicts_by_problem

TRAIN_PANELS = (("(a) return", "reward_mean"), ("(b) entropy", "entropy"), ("(c) completion length", "completion_len"))
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
PANEL_W, PANEL_H = 480, 300
MARGIN = dict(left=58, right=16, top=28, bottom=40)  # room for tick labels and the panel title


class Line(NamedTuple):
    run: str  # legend label, also written as data-run
    color: str
    xs: list[float]
    ys: list[float]
    raw: list[float] | None = None  # unsmoothed values, drawn faint under ys
    markers: bool = False  # dots on the points: evaluations are sparse


# ---------------------------------------------------------------------------
# Figure 2: training curves of one or more runs


def plot_runs(run_dirs: list[str | Path], out: str | Path, window: int = 10, eval_key: str | None = None) -> Path:
    """Draw return, entropy, completion length and eval Mean@k for each run into one SVG."""
    runs = [(run_label(Path(d)), read_metrics(Path(d) / "metrics.jsonl")) for d in run_dirs]
    eval_key = eval_key or pick_eval_key([rows for _, rows in runs])
    panels = []
    for title, key in TRAIN_PANELS:
        lines = []
        for i, (label, rows) in enumerate(runs):
            xs, ys = series(rows, key)
            if xs:
                raw = ys if window > 1 else None
                lines.append(Line(label, COLORS[i % len(COLORS)], xs, moving_average(ys, window), raw))
        panels.append((title, key, lines))
    eval_lines = []
    for i, (label, rows) in enumerate(runs):
        xs, ys = series(rows, eval_key) if eval_key else ([], [])
        if xs:
            eval_lines.append(Line(label, COLORS[i % len(COLORS)], xs, ys, markers=True))
    panels.append((f"(d) {eval_key or 'evaluation'}", eval_key or "eval", eval_lines))
    legend = [(label, COLORS[i % len(COLORS)]) for i, (label, _) in enumerate(runs)]
    _png(panels, cols=2, xlabel="step", log2x=False, out=Path(out).with_suffix(".png"))
    return write_svg(figure(panels, legend, cols=2, xlabel="step"), out)


def read_metrics(path: Path) -> list[dict]:
    """The JSON objects of a metrics.jsonl; a truncated last line (a run killed mid-write) is dropped."""
    if not path.is_file():
        raise ValueError(f"{path.parent}: no metrics.jsonl (is it a run directory?)")
    lines = [(i, s) for i, s in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if s.strip()]
    rows = []
    for j, (lineno, text) in enumerate(lines):
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            if j == len(lines) - 1:
                break
            raise ValueError(f"{path}:{lineno}: invalid JSON: {e.msg}") from None
        if isinstance(row, dict):
            rows.append(row)
    return rows


def run_label(run_dir: Path) -> str:
    """Legend text: the directory name, plus the clip method from config.json when there is one."""
    name = run_dir.resolve().name
    config_path = run_dir / "config.json"
    if not config_path.is_file():
        return name
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{config_path}:{e.lineno}: invalid JSON: {e.msg}") from None
    clip = config.get("clip") if isinstance(config, dict) else None
    return f"{name} ({clip})" if clip and clip != name else name


def series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key`` sorted by step; a step logged twice (a resumed run) keeps its last value."""
    by_step = {}
    for row in rows:
        step, value = _number(row.get("step")), _number(row.get(key))
        if step is not None and value is not None:
            by_step[step] = value
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def pick_eval_key(runs_rows: list[list[dict]]) -> str | None:
    """The eval key to plot: ``eval/mean@K`` (the average) if logged, else the first ``eval/<x>/mean@K``."""
    keys = [k for rows in runs_rows for row in rows for k in row if re.fullmatch(r"eval/(.+/)?mean@\d+", k)]
    average = [k for k in keys if k.count("/") == 1]
    return (average or keys or [None])[0]


def _number(v: object) -> float | None:
    # bools are ints to Python, and NaN/inf (json writes them) cannot be drawn
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


# ---------------------------------------------------------------------------
# Figure 4: Mean@K and Pass@K against K


def plot_pass_at_k(eval_files: list[str | Path], out: str | Path) -> Path:
    """Draw Mean@K and Pass@K (percent) against K, one line per eval file (formats in the module docstring)."""
    mean_lines, pass_lines, legend = [], [], []
    for i, path in enumerate(map(Path, eval_files)):
        label, color = "/".join(path.parts[-2:]), COLORS[i % len(COLORS)]
        ks, means, passes = pass_at_k_curve(path)
        mean_lines.append(Line(label, color, ks, means, markers=True))
        pass_lines.append(Line(label, color, ks, passes, markers=True))
        legend.append((label, color))
    panels = [("(a) Mean@K (%)", "mean@k", mean_lines), ("(b) Pass@K (%)", "pass@k", pass_lines)]
    _png(panels, cols=2, xlabel="K", log2x=True, out=Path(out).with_suffix(".png"))
    return write_svg(figure(panels, legend, cols=2, xlabel="K", log2x=True), out)


def pass_at_k_curve(path: Path) -> tuple[list[float], list[float], list[float]]:
    """(K values, Mean@K %, Pass@K %) from one eval file."""
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    rows = read_metrics(path)
    completions = [r for r in rows if {"problem_id", "sample", "correct"} <= r.keys()]
    per_problem = [r["verdicts"] for r in rows if isinstance(r.get("verdicts"), list)]
    precomputed = sorted((r["k"], r["mean@k"], r["pass@k"]) for r in rows if {"k", "mean@k", "pass@k"} <= r.keys())
    if completions and per_problem:
        raise ValueError(f"{path}: mixes per-completion rows and per-problem 'verdicts' rows")
    try:
        verdicts = verdicts_by_problem(completions) if completions else per_problem
        if verdicts:
            ks = default_ks(min(len(v) for v in verdicts))
            stats = summarize(verdicts, ks)
            return ks, [stats[f"mean@{k}"] for k in ks], [stats[f"pass@{k}"] for k in ks]
    except ValueError as e:  # name the file: a repeated sample, a problem with no samples
        raise ValueError(f"{path}: {e}") from None
    if precomputed:
        return tuple(map(list, zip(*precomputed)))
    raise ValueError(
        f"{path}: no eval rows; expected {{'problem_id', 'sample', 'correct'}} per completion, "
        "{'verdicts': [...]} per problem, or {'k', 'mean@k', 'pass@k'}"
    )


# ---------------------------------------------------------------------------
# SVG drawing


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values (steps of 1, 2, 2.5 or 5 x 10^e) covering [lo, hi]."""
    if hi - lo <= 1e-9 * max(1.0, abs(lo), abs(hi)):  # flat up to rounding: still needs an axis
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    rough = (hi - lo) / n
    magnitude = 10 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= rough * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 12) for i in range(first, last + 1)]


def figure(panels, legend, cols: int, xlabel: str, log2x: bool = False) -> ET.Element:
    width = cols * PANEL_W
    per_row = max(1, (width - 30) // 230)  # legend entries per row
    legend_h = 12 + 20 * math.ceil(len(legend) / per_row)
    height = legend_h + math.ceil(len(panels) / cols) * PANEL_H
    svg = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=str(width), height=str(height),
                     viewBox=f"0 0 {width} {height}", attrib={"font-family": "sans-serif", "font-size": "11"})
    _el(svg, "rect", width=width, height=height, fill="white")
    for i, (label, color) in enumerate(legend):
        x, y = 30 + 230 * (i % per_row), 16 + 20 * (i // per_row)
        _el(svg, "line", x1=x, y1=y, x2=x + 24, y2=y, stroke=color, stroke_width=3)
        _el(svg, "text", label, x=x + 30, y=y + 4, class_="legend")
    for i, (title, metric, lines) in enumerate(panels):
        g = _el(svg, "g", transform=f"translate({(i % cols) * PANEL_W},{legend_h + (i // cols) * PANEL_H})",
                data_metric=metric)
        _panel(g, title, metric, lines, xlabel, log2x)
    ET.indent(svg)
    return svg


def _panel(g: ET.Element, title: str, metric: str, lines: list[Line], xlabel: str, log2x: bool) -> None:
    left, top = MARGIN["left"], MARGIN["top"]
    right, bottom = PANEL_W - MARGIN["right"], PANEL_H - MARGIN["bottom"]
    middle = (left + right) / 2
    _el(g, "text", title, x=middle, y=18, text_anchor="middle", font_size=13)
    _el(g, "text", xlabel, x=middle, y=PANEL_H - 6, text_anchor="middle")
    fx = math.log2 if log2x else float
    xs = [fx(x) for line in lines for x in line.xs]
    ys = [y for line in lines for y in line.ys + (line.raw or [])]
    if not xs:
        _el(g, "text", "no data", x=middle, y=(top + bottom) / 2, text_anchor="middle", fill="#888")
        _el(g, "rect", x=left, y=top, width=right - left, height=bottom - top, fill="none", stroke="#888")
        return
    # a log2 axis ticks at whole powers of two: the paper's K runs 1, 2, 4, ..., 128
    xticks = list(range(math.floor(min(xs)), math.ceil(max(xs)) + 1)) if log2x else nice_ticks(min(xs), max(xs))
    if len(xticks) == 1:
        xticks = [xticks[0] - 1, xticks[0], xticks[0] + 1]
    yticks = nice_ticks(min(ys), max(ys))

    def sx(t):  # t is on the axis scale already (log2 K in Figure 4)
        return left + (t - xticks[0]) / (xticks[-1] - xticks[0]) * (right - left)

    def sy(y):  # SVG's y grows downwards
        return bottom - (y - yticks[0]) / (yticks[-1] - yticks[0]) * (bottom - top)

    for t in xticks:
        _el(g, "line", x1=sx(t), y1=bottom, x2=sx(t), y2=bottom + 4, stroke="#888")
        _el(g, "text", f"{2 ** t:g}" if log2x else f"{t:g}", x=sx(t), y=bottom + 16, text_anchor="middle")
    for t in yticks:
        _el(g, "line", x1=left, y1=sy(t), x2=right, y2=sy(t), stroke="#eee")
        _el(g, "text", f"{t:g}", x=left - 5, y=sy(t) + 4, text_anchor="end")
    _el(g, "rect", x=left, y=top, width=right - left, height=bottom - top, fill="none", stroke="#888")
    for line in lines:
        for cls, values, width, opacity in (("raw", line.raw, 1, 0.25), ("curve", line.ys, 1.8, 1)):
            if values is None:
                continue
            points = [f"{sx(fx(x)):.1f},{sy(y):.1f}" for x, y in zip(line.xs, values)]
            # "l0,0" with a round cap shows a lone point as a dot
            d = "M" + " L".join(points) + (" l0,0" if len(points) == 1 else "")
            _el(g, "path", d=d, fill="none", stroke=line.color, stroke_width=width, stroke_opacity=opacity,
                stroke_linecap="round", stroke_linejoin="round", class_=cls, data_run=line.run, data_metric=metric)
        if line.markers:
            for x, y in zip(line.xs, line.ys):
                _el(g, "circle", cx=sx(fx(x)), cy=sy(y), r=2.5, fill=line.color)


def _png(panels, cols: int, xlabel: str, log2x: bool, out: Path) -> Path | None:
    """The same panels as a PNG where matplotlib is installed; it is not a dependency, so skip if absent."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_W / 96 * cols, PANEL_H / 96 * rows), squeeze=False)
    for ax, (title, _, lines) in zip(axes.flat, panels):
        for line in lines:
            if line.raw:
                ax.plot(line.xs, line.raw, color=line.color, alpha=0.25, linewidth=0.8)
            ax.plot(line.xs, line.ys, color=line.color, label=line.run, marker="o" if line.markers else None,
                    markersize=3)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if log2x:
            ax.set_xscale("log", base=2)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    labelled = max(axes.flat, key=lambda a: len(a.get_legend_handles_labels()[1]))
    fig.legend(*labelled.get_legend_handles_labels(), loc="upper left", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _el(parent: ET.Element, tag: str, text: str | None = None, **attrs) -> ET.Element:
    """Add an SVG element: stroke_width= becomes stroke-width, class_= class; floats get one decimal."""
    def fmt(v):
        return f"{v:.1f}" if isinstance(v, float) else str(v)
    el = ET.SubElement(parent, tag, {k.rstrip("_").replace("_", "-"): fmt(v) for k, v in attrs.items()})
    el.text = text
    return el


def write_svg(svg: ET.Element, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(svg).write(out, encoding="utf-8", xml_declaration=True)
    return out


# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m nanoatr.plot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path,
                        help="run directories (with metrics.jsonl, config.json); with --passk, eval result files")
    parser.add_argument("--out", type=Path, help="SVG to write (default: curves.svg or passk.svg inside the one "
                        "run directory / beside the one eval file, or in the current directory for several)")
    parser.add_argument("--window", type=int, default=10, help="moving-average window, in logged steps, for return, "
                        "entropy and length (1 = raw only; the paper smooths over 100 steps)")
    parser.add_argument("--eval-key", help="metrics.jsonl key for panel (d) (default: eval/mean@K if logged, "
                        "else the first eval/<benchmark>/mean@K)")
    parser.add_argument("--passk", action="store_true", help="draw Mean@K and Pass@K against K (Figure 4) "
                        "from eval result files instead of training curves")
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error("--window must be >= 1")
    name = "passk.svg" if args.passk else "curves.svg"
    if args.out is None:
        home = args.paths[0].parent if args.passk else args.paths[0]
        args.out = home / name if len(args.paths) == 1 else Path(name)
    try:
        if args.passk:
            out = plot_pass_at_k(args.paths, args.out)
        else:
            out = plot_runs(args.paths, args.out, window=args.window, eval_key=args.eval_key)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
