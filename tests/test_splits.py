"""Held out means held out: no evaluation problem of an embedded task is a training or RL problem up to its
key (nanoatr.data.arith_key, countdown_key: the numbers as a multiset and the answer or target), and no
evaluation problem comes twice, within a split or across them."""
import sys
from pathlib import Path

import pytest

from nanoatr.data import Problem, arith_key, countdown_key, load_problems

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
sys.path.insert(0, str(ROOT / "scripts"))
import split_overlap  # noqa: E402  (scripts/split_overlap.py)

# (directory, key, the splits trained on, the evaluation splits); countdown's rl.jsonl is a subset of
# train.jsonl (the pool the SFT warm-start's pass-rate filter chose from), both are listed
SPLITS = {
    "arith": (arith_key, ("train",), ("heldout", "val")),
    "countdown": (countdown_key, ("train", "rl"), ("heldout", "val", "transfer")),
}


def keys(task: str, split: str) -> list:
    key = SPLITS[task][0]
    return [key(p) for p in load_problems(DATA / f"{task}/{split}.jsonl", dedupe=False)]


@pytest.mark.parametrize("task", SPLITS)
def test_no_evaluation_problem_is_a_training_problem(task):
    _, trained, evaluated = SPLITS[task]
    training = {k for split in trained for k in keys(task, split)}
    shared = {split: sum(k in training for k in keys(task, split)) for split in evaluated}
    assert shared == {split: 0 for split in evaluated}, f"{task}: evaluation problems that are training problems, per split: {shared}"


@pytest.mark.parametrize("task", SPLITS)
def test_no_evaluation_problem_comes_twice(task):
    _, _, evaluated = SPLITS[task]
    seen, repeats = set(), []
    for split in evaluated:
        for k in keys(task, split):
            if k in seen:
                repeats.append((split, k))
            seen.add(k)
    assert not repeats, f"{task}: {len(repeats)} evaluation problems repeat an earlier one, e.g. {repeats[:3]}"


def test_arith_key_is_the_numbers_and_the_answer():
    assert arith_key(Problem("63*15", "945")) == ((15, 63), 945)
    assert arith_key(Problem("15*63", "945")) == arith_key(Problem("63*15", "945"))      # a*b against b*a
    assert arith_key(Problem("75-72-61", "-58")) == ((61, 72, 75), -58)
    assert arith_key(Problem("75-61-72", "-58")) == arith_key(Problem("75-72-61", "-58"))  # reordered terms
    assert arith_key(Problem("75-72+61", "64")) != arith_key(Problem("75-72-61", "-58"))   # another answer
    assert arith_key(Problem("63*16", "1008")) != arith_key(Problem("63*15", "945"))       # another number


def test_countdown_key_is_the_numbers_and_the_target():
    assert countdown_key(Problem("3,8,5,2:19", "3,8,5,2:19")) == ((2, 3, 5, 8), 19)
    assert countdown_key(Problem("2,5,8,3:19", "2,5,8,3:19")) == countdown_key(Problem("3,8,5,2:19", "3,8,5,2:19"))
    assert countdown_key(Problem("3,8,5,2:20", "3,8,5,2:20")) != countdown_key(Problem("3,8,5,2:19", "3,8,5,2:19"))
    # a multiset, not a set: two 2s are not one
    assert countdown_key(Problem("2,2,5,8:19", "2,2,5,8:19")) != countdown_key(Problem("2,5,8,8:19", "2,5,8,8:19"))
    with pytest.raises(ValueError, match="not a Countdown problem"):
        countdown_key(Problem("63*15", "945"))


def test_split_overlap_prints_the_documented_figures():
    """scripts/split_overlap.py, whose figures data/make_default.py quotes: the clean held-out split shares
    no key with train.jsonl, but 137 of its 256 problems share one with the warm-start's SFT stream."""
    lines = split_overlap.report("arith", DATA, 750)
    assert lines[0] == ("arith heldout: 256 problems; sharing a key with train 0; repeats 0; "
                        "sharing a key with the warm-start's stream (750 x 64) 137")
    assert lines[1].startswith("arith val: 128 problems; sharing a key with train 0; repeats 0;")
