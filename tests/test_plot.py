"""Tests for nanoatr.plot: well-formed SVG with one curve per run and metric, both figures.

Run: python -m pytest tests/test_plot.py -q
"""
import json
import math
import xml.etree.ElementTree as ET

import pytest

from nanoatr.plot import main, nice_ticks, pass_at_k_curve, plot_pass_at_k, plot_runs, series

NS = "{http://www.w3.org/2000/svg}"


def make_run(root, name, clip, steps=30, eval_every=10):
    run = root / name
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"clip": clip, "delta": 0.07}))
    lines = []
    for s in range(1, steps + 1):
        lines.append({"step": s, "reward_mean": s / steps, "entropy": 1 - s / (2 * steps), "completion_len": 100 + s})
        if s % eval_every == 0:
            lines.append({"step": s, "eval/mean@8": 10 + s, "eval/pass@8": 20 + s, "eval/amc23/mean@8": 5.0})
    lines.append({"step": steps + 1, "entropy": float("nan"), "note": "no reward here"})  # skipped, not drawn
    lines.append({"reward_mean": 0.5})  # no step: skipped
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (run / "metrics.jsonl").write_text(text + '{"step": 99, "reward_')  # a run killed mid-write
    return run


def curves(svg_path):
    root = ET.parse(svg_path).getroot()
    assert root.tag == NS + "svg"
    return root, [p for p in root.iter(NS + "path") if p.get("class") == "curve"]


def test_training_figure_has_one_curve_per_run_and_metric(tmp_path):
    runs = [make_run(tmp_path, "kl3-d0.07", "kl3"), make_run(tmp_path, "a&b <clip>", "clip", eval_every=5)]
    out = plot_runs(runs, tmp_path / "out" / "curves.svg", window=5)
    root, paths = curves(out)
    labels = ["kl3-d0.07 (kl3)", "a&b <clip> (clip)"]
    metrics = ["reward_mean", "entropy", "completion_len", "eval/mean@8"]
    assert sorted((p.get("data-run"), p.get("data-metric")) for p in paths) == sorted(
        (run, m) for run in labels for m in metrics)
    by_key = {(p.get("data-run"), p.get("data-metric")): p.get("d") for p in paths}
    assert by_key[(labels[0], "reward_mean")].count("L") == 29  # 30 steps; the NaN and step-less lines dropped
    assert by_key[(labels[1], "eval/mean@8")].count("L") == 5  # evals at 5, 10, ..., 30
    raw = [p for p in root.iter(NS + "path") if p.get("class") == "raw"]
    assert len(raw) == 2 * 3  # faint unsmoothed lines for the three training panels
    texts = [t.text for t in root.iter(NS + "text")]
    assert set(labels) <= set(texts) and "(d) eval/mean@8" in texts and "(a) return" in texts
    assert "0.5" in texts  # tick labels on the return axis


def test_eval_key_can_be_chosen_and_missing_data_says_so(tmp_path):
    run = make_run(tmp_path, "r", "clip")
    root, paths = curves(plot_runs([run], tmp_path / "a.svg", eval_key="eval/amc23/mean@8"))
    assert {p.get("data-metric") for p in paths} >= {"eval/amc23/mean@8"}
    root, paths = curves(plot_runs([run], tmp_path / "b.svg", eval_key="eval/absent"))
    assert len(paths) == 3 and "no data" in [t.text for t in root.iter(NS + "text")]


def test_series_sorts_steps_and_keeps_the_last_value_of_a_repeated_step():
    rows = [{"step": 2, "x": 1.0}, {"step": 1, "x": 5}, {"step": 2, "x": 3.0}, {"step": 3, "x": True}, {"step": 4}]
    assert series(rows, "x") == ([1.0, 2.0], [5.0, 3.0])


def test_missing_run_dir_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ValueError, match="no metrics.jsonl"):
        plot_runs([tmp_path], tmp_path / "x.svg")
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nope")])
    assert str(e.value) == f"error: {tmp_path / 'nope'}: no metrics.jsonl (is it a run directory?)"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.jsonl").write_text('{"step": 1}\n{oops\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: invalid JSON"):
        plot_runs([bad], tmp_path / "x.svg")


def test_cli_writes_default_output_inside_the_run(tmp_path, capsys):
    run = make_run(tmp_path, "solo", "kl3")
    main([str(run), "--window", "3"])
    assert (run / "curves.svg").is_file() and "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(run), "--window", "0"])


def write_completions(path, correct_counts, n):
    rows = [{"problem_id": p, "sample": j, "correct": j < c, "completion": "..."} for p, c in enumerate(correct_counts)
            for j in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + json.dumps({"summary": "ignored"}) + "\n")
    return path


def test_pass_at_k_curve_from_each_input_shape(tmp_path):
    completions = write_completions(tmp_path / "c.jsonl", [0, 1, 8], n=8)
    ks, means, passes = pass_at_k_curve(completions)
    assert ks == [1, 2, 4, 8]
    assert means == pytest.approx([100 * 9 / 24] * 4)
    assert passes[0] == pytest.approx(100 * 9 / 24) and passes[-1] == pytest.approx(200 / 3)
    per_problem = tmp_path / "v.jsonl"
    per_problem.write_text("".join(json.dumps({"verdicts": [j < c for j in range(8)]}) + "\n" for c in [0, 1, 8]))
    assert pass_at_k_curve(per_problem) == (ks, means, passes)
    pre = tmp_path / "p.jsonl"
    pre.write_text('{"k": 2, "mean@k": 20, "pass@k": 30}\n{"k": 1, "mean@k": 21, "pass@k": 21}\n')
    assert pass_at_k_curve(pre) == ([1, 2], [21, 20], [21, 30])
    (tmp_path / "e.jsonl").write_text('{"foo": 1}\n')
    with pytest.raises(ValueError, match="no eval rows"):
        pass_at_k_curve(tmp_path / "e.jsonl")
    (tmp_path / "d.jsonl").write_text(completions.read_text() * 2)  # two benchmarks mixed up
    with pytest.raises(ValueError, match="d.jsonl: repeated sample"):
        pass_at_k_curve(tmp_path / "d.jsonl")


def test_pass_at_k_figure_has_one_curve_per_file_and_metric(tmp_path):
    files = [write_completions(tmp_path / "kl3.jsonl", [0, 3, 16], 16),
             write_completions(tmp_path / "clip.jsonl", [1, 2], 12)]
    root, paths = curves(plot_pass_at_k(files, tmp_path / "fig.svg"))
    got = sorted((p.get("data-run").split("/")[-1], p.get("data-metric"), p.get("d").count("L") + 1) for p in paths)
    assert got == [("clip.jsonl", "mean@k", 5), ("clip.jsonl", "pass@k", 5),  # K = 1, 2, 4, 8, 12
                   ("kl3.jsonl", "mean@k", 5), ("kl3.jsonl", "pass@k", 5)]  # K = 1, 2, 4, 8, 16
    xlabels = [t.text for t in root.iter(NS + "text")]
    assert {"1", "2", "4", "8", "16"} <= set(xlabels)
    main(["--passk", str(files[0])])
    assert (tmp_path / "passk.svg").is_file()


@pytest.mark.parametrize("lo, hi", [(0, 1), (-0.3, 0.31), (0.2, 0.2), (0, 0), (100, 4000), (1e-4, 3e-4)])
def test_nice_ticks_cover_the_range_with_round_steps(lo, hi):
    ticks = nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi and 3 <= len(ticks) <= 12
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(mantissa == pytest.approx(m) for m in (1, 2, 2.5, 5))


def test_png_beside_the_svg_where_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")
    out = plot_runs([make_run(tmp_path, "r", "kl3")], tmp_path / "curves.svg")
    png = out.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000  # a real picture, not an empty canvas
    eval_file = tmp_path / "ev.jsonl"
    eval_file.write_text("".join(json.dumps({"problem_id": i, "sample": j, "correct": (i + j) % 3 == 0}) + "\n"
                                 for i in range(5) for j in range(8)))
    assert plot_pass_at_k([eval_file], tmp_path / "passk.svg").with_suffix(".png").is_file()


def test_nice_ticks_of_a_line_flat_up_to_rounding():
    ticks = nice_ticks(0.1, 0.1000000000001)
    assert len(set(ticks)) == len(ticks) > 1 and ticks[0] < 0.1 < ticks[-1]
