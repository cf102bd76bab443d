"""scripts/between_sweeps.py: a comparison's change from one sweep to another, paired by seed (the binding
run's "rate x method"), against hand computations; the committed edges run against itself; one error line."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import between_sweeps as BS  # noqa: E402  (scripts/between_sweeps.py)
import stats  # noqa: E402  (scripts/stats.py)

LOW = "clip-higher:eps_low=0.329,eps_high=0.2"
HIGH = "clip-higher:eps_low=0.2,eps_high=0.422"


def sweep(folder: Path, scores: dict, *bare) -> Path:
    """A sweep folder whose results.json holds {(method, seed): heldout Mean@k} (None: null), and a run of each
    (method, seed) in `bare` that holds no score at all."""
    folder.mkdir()
    runs = [{"method": m, "seed": s, "heldout/mean@k": v, "heldout/entropy": None if v is None else v / 100}
            for (m, s), v in scores.items()] + [{"method": m, "seed": s} for m, s in bare]
    (folder / "results.json").write_text(json.dumps(runs))
    return folder


def rows(capsys, *argv) -> list[list[str]]:
    assert BS.main([str(a) for a in argv]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()  # a markdown table: a rule under the header, every row as many cells, ending in \n
    assert out.endswith("|\n") and lines[1] == "|---" * (lines[0].count("|") - 1) + "|", out
    assert {line.count("|") for line in lines} == {lines[0].count("|")}, out
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_change_of_a_difference_by_hand(tmp_path, capsys):
    """kl3 − clip is 1, 1, 1, 1 in the first sweep and 2, 3, 4, 7 in the second: the changes 1, 2, 3, 6 have
    mean 3, sd sqrt(14/3) = 2.1602, se 1.0801, and t(0.975, 3) = 3.1824 gives 3 -+ 3.4373 = [-0.44, +6.44]."""
    first = sweep(tmp_path / "a", {**{("clip", s): 10.0 for s in range(4)},
                                   **{("kl3", s): 11.0 for s in range(4)}})
    second = sweep(tmp_path / "b", {**{("clip", s): 20.0 for s in range(4)},
                                    **{("kl3", s): 20.0 + d for s, d in enumerate([2, 3, 4, 7])}})
    (row,) = rows(capsys, first, second, "--compare", "kl3/clip")
    assert row == ["kl3 − clip", "heldout/mean@k", "4", "+1.00", "+4.00", "+3.00 [-0.44, +6.44]", "4 : 0"]


def test_the_trend_over_three_sweeps_by_hand(tmp_path, capsys):
    """kl3 − clip on seeds 0-2: (0, 1, 2), (0, 2, 1), (5, 4, 3) over the three sweeps; seed 3 lacks the middle
    sweep. Midranks per seed (1, 2, 3), (1, 3, 2), (3, 2, 1): L = 14 + 13 + 10 = 37. Of the 6^3 = 216
    equally likely orders (each seed adds 14, 13, 13, 11, 11 or 10), L >= 37 in 96 and L <= 37 in 156
    (counted by hand-written enumeration; tests/test_stats.py checks page_trend against Page's table)."""
    values = [{0: 0, 1: 0, 2: 5, 3: 9}, {0: 1, 1: 2, 2: 4}, {0: 2, 1: 1, 2: 3, 3: 9}]
    folders = [sweep(tmp_path / name, {**{("clip", s): 10.0 for s in range(4)},
                                       **{("kl3", s): 10.0 + d for s, d in v.items()}})
               for name, v in zip("abc", values)]
    (row,) = rows(capsys, *folders, "--compare", "kl3/clip")
    rising, falling = stats.page_trend([[0, 1, 2], [0, 2, 1], [5, 4, 3]])[1:]
    assert row == ["kl3 − clip", "heldout/mean@k", "3", "+1.67", "+2.33", "+2.00", "37", f"{rising:.2g}",
                   f"{falling:.2g}"]
    assert (round(rising * 216), round(falling * 216)) == (96, 156)


def test_an_effect_pairs_by_seed_over_the_seeds_both_sweeps_finished(tmp_path, capsys):
    """low = ½(LOW − clip) + ½(kl3 − HIGH). The second sweep lacks seed 2 of kl3: seeds 0, 1 and 3 are
    compared, and both sweeps' means are over those seeds, so that the change is their difference. First
    sweep: the effect is 1 on every seed except 2 (100); second: 2, 3, 4 on seeds 0, 1, 3."""
    first, second = {}, {}
    for s in range(4):
        first.update({("clip", s): 10.0, (LOW, s): 11.0 if s != 2 else 209.0, ("kl3", s): 12.0,
                      (HIGH, s): 11.0})
        extra = {0: 1.0, 1: 3.0, 3: 5.0}.get(s, 0.0)
        second.update({("clip", s): 10.0, (LOW, s): 11.0 + extra, (HIGH, s): 11.0})
        if s != 2:
            second[("kl3", s)] = 12.0 + 1.0
    a, b = sweep(tmp_path / "a", first), sweep(tmp_path / "b", second)
    (row,) = rows(capsys, a, b, "--effect", "low", "+0.5", LOW, "-0.5", "clip", "+0.5", "kl3", "-0.5", HIGH)
    # the changes 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.3027 -> 2 -+ 2.4841
    assert row == ["low", "heldout/mean@k", "3", "+1.00", "+3.00", "+2.00 [-0.48, +4.48]", "3 : 0"]


def test_a_score_that_is_null_or_nan_leaves_its_seed_out(tmp_path, capsys):
    """A run whose score is null (a hand-edited results.json), NaN (an evaluation that logged none) or absent
    is not a number: its seed drops out of the pairing, as a missing run's does, instead of a traceback."""
    a = sweep(tmp_path / "a", {("clip", s): 10.0 for s in range(4)} | {("kl3", s): 11.0 for s in range(4)})
    b = sweep(tmp_path / "b", {("clip", s): 10.0 for s in range(4)} | {("kl3", 0): 12.0, ("kl3", 1): None,
                                                                       ("kl3", 2): float("nan")}, ("kl3", 3))
    (row,) = rows(capsys, a, b, "--compare", "kl3/clip")
    assert row == ["kl3 − clip", "heldout/mean@k", "1", "+1.00", "+2.00", "+1.00", "1 : 0"]


@pytest.mark.parametrize("sweeps", [2, 3])
def test_a_comparison_no_seed_has_in_both_is_a_row_saying_so(tmp_path, capsys, sweeps):
    """b's runs are of seed 1 and hold no score (a run is its method and seed, and what it logged)."""
    a, b = sweep(tmp_path / "a", {("clip", 0): 1.0, ("kl3", 0): 2.0}), sweep(tmp_path / "b", {}, ("clip", 1), ("kl3", 1))
    (row,) = rows(capsys, a, *[b] * (sweeps - 1), "--compare", "kl3/clip")
    assert row == ["kl3 − clip", "heldout/mean@k", "0"] + ["—"] * (4 if sweeps == 2 else 6)


@pytest.mark.parametrize("args, message", [
    (["missing", "--compare", "kl3/clip"], "missing: no results.json"),
    (["broken", "--compare", "kl3/clip"], "results.json: not JSON"),
    (["a", "--compare", "kl3/grpo"], "--compare kl3/grpo: write A/B with A and B among the methods (clip kl3)"),
    (["a", "--effect", "e", "+1", "kl3", "-0.5", "clip"], "--effect e: the weights sum to 0.5"),
    (["a"], "nothing to compare"),
    (["a", "--compare", "kl3/clip", "--score", "accuracy"], "--score accuracy: a score is"),
    (["runs", "--compare", "kl3/clip"], "runs/results.json: not a sweep's results"),  # [{"seed": 0}]
    (["a", "--comp", "kl3/clip"], "--comp: did you mean --compare?"),  # a flag only in full
])
def test_what_cannot_be_compared_is_one_error_line(tmp_path, args, message):
    sweep(tmp_path / "a", {("clip", 0): 1.0, ("kl3", 0): 2.0})
    for name, text in [("broken", "{"), ("runs", '[{"seed": 0}]')]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(text)
    out = subprocess.run([sys.executable, str(ROOT / "scripts/between_sweeps.py"), "a", *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: "), out.stderr
    assert message in out.stderr, out.stderr


def test_the_documented_rate_by_method_table_is_its_commands_output(capsys):
    """docs/results.md's rate x method table (the binding run's answer) is what its command prints on the
    committed runs of the two sweeps, cell for cell (the doc writes its names and minus signs for readers)."""
    doc = (ROOT / "docs/results.md").read_text()
    command, after = doc.split("    python scripts/between_sweeps.py ")[1].split("\n\n", 1)
    argv = command.replace("\\\n", " ").split()
    assert argv[:2] == ["results/edges-countdown", "results/binding-countdown"]
    printed = rows(capsys, ROOT / argv[0], ROOT / argv[1], *argv[2:])
    assert [(r[0], r[1], r[2]) for r in printed] == [(c, s, "8") for c in ("kl3 − clip", "low", "high")
                                                     for s in ("heldout/mean@k", "heldout/pass@k", "heldout/entropy")]
    as_printed = {"KL3 − Clip": "kl3 − clip", "held-out Mean@8": "heldout/mean@k",
                  "held-out Pass@8": "heldout/pass@k", "held-out entropy": "heldout/entropy"}
    table = [line for line in after.split("\n\n")[0].splitlines() if line.startswith("| ")][1:]  # no header
    documented = [[as_printed.get(cell.strip(), cell.strip().replace("−", "-")) for cell in line.strip("|").split("|")]
                  for line in table]
    assert documented == printed
