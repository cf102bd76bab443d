"""Held out means held out: no evaluation problem of an embedded task is a training or RL problem, or a
problem of its warm-start's supervised stream, up to its key (nanoatr.data.arith_key, countdown_key: the
numbers as a multiset and the answer or target), and no evaluation problem comes twice, within a split
or across them."""
import json
import re
import sys
from pathlib import Path

import pytest

from nanoatr.data import Problem, arith_key, countdown_key, not_held_out

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
sys.path.insert(0, str(ROOT / "scripts"))
import split_overlap  # noqa: E402  (scripts/split_overlap.py)


def test_no_evaluation_problem_is_trained_on_seen_by_the_warm_start_or_comes_twice():
    """On the shipped Countdown files split_overlap.py's counts (checked on a crafted copy below) are 0, the stream
    its first 250 x 64 of 1050 (8 s; arithmetic's: below). Issue 38's old streams held 225 held-out keys."""
    for line in split_overlap.report("countdown", DATA, 250):
        assert re.fullmatch(r"countdown \w+: \d{3,} problems; sharing a key with train 0, rl 0; repeats 0; "
                            r"sharing a key with the warm-start's stream \(250 x 64\) 0", line), line


def test_split_overlap_counts_what_is_shared_and_repeated(tmp_path):
    """A copy of the files (--data-dir): held-out shares 3+2 with train's 2+3 and holds 7*6 twice; validation
    repeats it as 6*7 and holds 65*59, the warm-start stream's third problem (59*65) up to its key."""
    files = {"train": [("2+3", "5")], "heldout": [("3+2", "5"), ("7*6", "42"), ("7*6", "42")],
             "val": [("6*7", "42"), ("65*59", "3835")]}
    (tmp_path / "arith").mkdir()
    for split, problems in files.items():
        (tmp_path / f"arith/{split}.jsonl").write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n"
                                                               for q, a in problems))
    assert split_overlap.report("arith", tmp_path, 1) == [
        f"arith {split}: {n} problems; sharing a key with train {shared}; repeats 1; sharing a key with the "
        f"warm-start's stream (1 x 64) {streamed}" for split, n, shared, streamed in [("heldout", 3, 1, 0),
                                                                                      ("val", 2, 0, 1)]]


@pytest.mark.parametrize("key, a, b, same", [  # same None: b is a's key, by hand
    (arith_key, "75-72-61=-58", ((61, 72, 75), -58), None),
    (arith_key, "63*15=945", "15*63=945", True),                 # a*b against b*a
    (arith_key, "75-72-61=-58", "75-61-72=-58", True),           # reordered terms
    (arith_key, "75-72+61=64", "75-72-61=-58", False),           # another answer
    (arith_key, "63*16=1008", "63*15=945", False),               # another number
    (countdown_key, "3,8,5,2:19", ((2, 3, 5, 8), 19), None),
    (countdown_key, "2,5,8,3:19", "3,8,5,2:19", True),
    (countdown_key, "3,8,5,2:20", "3,8,5,2:19", False),          # another target
    (countdown_key, "2,2,5,8:19", "2,5,8,8:19", False),          # a multiset, not a set: two 2s are not one
])
def test_a_key_is_the_numbers_and_the_answer_or_target(key, a, b, same):
    problem = lambda text: Problem(*text.split("=")) if key is arith_key else Problem(text, text)  # noqa
    assert key(problem(a)) == b if same is None else (key(problem(a)) == key(problem(b))) == same
    with pytest.raises(ValueError, match="not a Countdown problem"):
        countdown_key(Problem("63*15", "945"))


def test_split_overlap_prints_the_documented_figures(capsys):
    """`python scripts/split_overlap.py --task arith`, the figures data/make_default.py quotes: nothing
    shared, nothing repeated, over the stream of the shipped warm-start's steps (the default)."""
    steps = 725  # data/make_default.py: "it stopped at step 725"; Countdown's, make_countdown.py's --steps
    assert split_overlap.TASKS["countdown"][4] == 1050
    split_overlap.main(["--task", "arith"])
    expected = [f"arith {split}: {n} problems; sharing a key with train 0; repeats 0; sharing a key with the "
                f"warm-start's stream ({steps} x 64) 0" for split, n in (("heldout", 256), ("val", 128))]
    assert capsys.readouterr().out.splitlines() == expected


NOT_HELD_OUT = ("--eval-data {}: {} of its {} problems evaluated are training problems (--data's, up to the "
                "order of their numbers): its scores are not held out")


@pytest.mark.parametrize("task, trained, evaluated, shared", [
    ("math", ["63*15", "75-72-61"], ["15*63", "75-61-72", "63*16"], 2),  # the same problem up to its key
    ("countdown", ["3,8,5,2:19"], ["2,3,5,8:19", "3,8,5,2:20"], 1),
    ("math", ["What is two plus two?"], ["What is two plus two?", "What is 2+2?"], 1),  # no numbers: as is
    ("math", ["63*15"], ["64*15"], 0),
])
def test_an_evaluation_file_sharing_training_problems_is_said_not_held_out(task, trained, evaluated, shared):
    def problems(texts):
        if task == "countdown":
            return [Problem(f"reach {t}", t) for t in texts]
        answers = {"63*15": "945", "15*63": "945", "75-72-61": "-58", "75-61-72": "-58", "63*16": "1008",
                   "64*15": "960"}
        return [Problem(t, answers.get(t, "4")) for t in texts]
    line = not_held_out("e.jsonl", problems(trained), problems(evaluated), task)
    assert line == (NOT_HELD_OUT.format("e.jsonl", shared, len(evaluated)) if shared else None)


def test_train_py_with_its_training_file_as_eval_data_says_it_is_not_held_out(tmp_path, capsys):
    """--eval-data equal to --data: said at the start, each evaluation named by its file, never held-out."""
    import train
    data = str(DATA / "arith/train.jsonl")
    train.main(["--model", str(DATA / "tiny-qwen3"), "--data", data, "--eval-data", data, "--eval-limit", "4",
                "--eval-k", "1", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8",
                "--no-compile", "--steps", "1", "--out-dir", str(tmp_path), "--name", "r"])
    out = capsys.readouterr().out
    assert NOT_HELD_OUT.format(data, 4, 4) + "\n" in out
    assert "held-out" not in out and "step 0: train Mean@1 " in out


class Handed(Exception):
    """What data/make_countdown.py handed sft.warm_start: the build stops there."""


def test_make_countdown_rebuilds_the_shipped_files_and_the_stream_split_overlap_counts(tmp_path, monkeypatch):
    """`python data/make_countdown.py --data-dir D --out M`: the task files byte for byte (issue 38's order: held-out,
    validation, transfer, then the pool clear of them), and the warm-start's stream as split_overlap.py draws it."""
    import make_countdown

    def warm_start(model, tok, stream, *args, **kwargs):
        raise Handed(stream)
    monkeypatch.setattr(make_countdown.sft, "warm_start", warm_start)
    monkeypatch.setattr(sys, "argv", ["make_countdown.py", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "m")])
    with pytest.raises(Handed) as handed:
        make_countdown.main()
    names = ["heldout", "val", "transfer", "train"]
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted(f"{name}.jsonl" for name in names)
    for name in names:
        assert (tmp_path / f"d/{name}.jsonl").read_bytes() == (DATA / f"countdown/{name}.jsonl").read_bytes(), name
    built, counted = handed.value.args[0], split_overlap.warm_start_stream("countdown")
    assert [next(built) for _ in range(64)] == [next(counted) for _ in range(64)]
