"""scripts/same_run.py: two runs compared step by step on the metrics both logged, wall-clock ones aside, exactly;
one error line for a run that cannot be read. It backs docs/results.md's check that the binding run's commit
trains the edges run's seed 0 as the edges run's commits did."""
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import same_run  # noqa: E402  (scripts/same_run.py)
from conftest import error_line  # noqa: E402


def run(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


EVAL0 = {"step": 0, "eval/heldout/mean@8": 18.06640625, "eval/heldout/seconds": 61.2}
TRAIN = [{"step": s, "loss": 0.1 * s, "clip_frac_low": 0.02, "time_rollout": 9.0 + s, "tokens_per_s_train": 310.0}
         for s in (1, 2, 3)]


def test_the_same_computation_at_other_speeds_is_identical(tmp_path, capsys):
    a = run(tmp_path / "a", [EVAL0, *TRAIN])
    b = run(tmp_path / "b", [{**EVAL0, "eval/heldout/seconds": 70.0},
                             *({**r, "time_rollout": 30.0, "tokens_per_s_train": 99.0, "groups_zero_std": 0.0}
                               for r in TRAIN)])  # a metric one run lacks is named, not compared
    assert same_run.main([str(a), str(b)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "step 0 eval: identical (1 metrics)", *(f"step {s} train: identical (2 metrics)" for s in (1, 2, 3)),
        "logged by one run only (not compared): groups_zero_std"]


def test_one_bit_of_one_metric_is_a_difference_and_later_steps_can_be_left_out(tmp_path, capsys):
    nudged = [dict(r) for r in TRAIN]
    nudged[2] |= {"loss": math.nextafter(TRAIN[2]["loss"], 1.0), "clip_frac_low": math.nan}  # one ulp up; NaN
    a, b = run(tmp_path / "a", [EVAL0, *TRAIN]), run(tmp_path / "b", [EVAL0, *nudged])
    assert same_run.main([str(a), str(b)]) == 1
    assert f"step 3 train: clip_frac_low 0.02 vs nan, loss {TRAIN[2]['loss']!r} vs {nudged[2]['loss']!r}" in \
        capsys.readouterr().out
    assert same_run.main([str(a), str(b), "--steps", "2"]) == 0  # steps 0 to 2, 2 too
    assert capsys.readouterr().out.splitlines()[-1] == "step 2 train: identical (2 metrics)"
    assert error_line(capsys, same_run.main, [str(a), str(b), "--step", "2"]).endswith("did you mean --steps?")


def test_a_row_one_run_lacks_is_a_difference_and_equal_non_finite_values_are_equal(tmp_path, capsys):
    odd = {"step": 2, "loss": math.nan, "kl3": math.inf, "w": [0.5, -math.inf, math.nan]}
    a, b = run(tmp_path / "a", [TRAIN[0], odd, EVAL0]), run(tmp_path / "b", [TRAIN[0], odd | {"kl3": [math.inf]},
                                                                          TRAIN[2]])
    assert same_run.main([str(a), str(b)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "step 0 eval: logged by the first run only", "step 1 train: identical (2 metrics)",
        "step 2 train: kl3 inf vs [inf]", "step 3 train: logged by the second run only"]
    assert same_run.main([str(a), str(b), "--steps", "2"]) == 1 and same_run.main([str(b), str(b)]) == 0
    assert same_run.main([str(run(tmp_path / "c", TRAIN[:1])), str(run(tmp_path / "d", TRAIN[1:]))]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "no step in common"


@pytest.mark.parametrize("content", [None, "not json\n", '{"loss": 1}\n', b"\xff\xfe\n"])
def test_an_unreadable_run_is_one_error_line_naming_its_file(tmp_path, content, capsys):
    good = run(tmp_path / "good", TRAIN)
    bad = tmp_path / "bad"
    bad.mkdir()
    if content is not None:
        path = bad / "metrics.jsonl"
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    assert same_run.main([str(good), str(bad)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and out.err.startswith("error: ") and "metrics.jsonl" in out.err


def test_a_committed_run_is_identical_to_itself():
    folder = ROOT / "results/edges-countdown/clip-s0"
    lines, same = same_run.compare(same_run.rows(folder), same_run.rows(folder), None)
    assert same and lines[0] == "step 0 eval: identical (12 metrics)" and len(lines) == 35, lines[:3]
