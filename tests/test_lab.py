"""The training-loop exercises (docs/exercises.md, 10 and 11): short real runs of train.py on the default task.

    python -m pytest tests/test_lab.py -q

Each run is 1-2 steps of 4 prompts x 4 completions (a few seconds on one core).
"""
import json
import math
import sys
from pathlib import Path

import pytest

import train

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import sweep_report  # noqa: E402  (scripts/sweep_report.py)
from conftest import jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(ROOT / "data/arith/train.jsonl"),
        "--eval-data", str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "4", "--eval-k", "2",
        "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "40", "--no-compile"]


def train_run(tmp_path, name, *args) -> sweep_report.Run:
    """Train one run in-process; returns it as the sweep's Run (method = --clip)."""
    clip = args[args.index("--clip") + 1] if "--clip" in args else "kl3"
    train.main([*FAST, "--out-dir", str(tmp_path), "--name", name, *args])
    return sweep_report.Run(clip, clip, {}, 0, tmp_path / name)


def train_rows(run: sweep_report.Run) -> list[dict]:
    return [r for r in jsonl(run.dir / "metrics.jsonl") if "clip_frac_low" in r]


# ----------------------------------------------------------------------------
# Exercise 10: make clipping act, and read it off metrics.jsonl (sweep_report.result)

def fake_run(tmp_path, name, rows, eval_k=2) -> sweep_report.Run:
    run = sweep_report.Run("kl3", "kl3", {}, 1, tmp_path / name)
    run.dir.mkdir()
    (run.dir / "config.json").write_text(json.dumps({"clip": "kl3", "eval_k": eval_k, "seed": 1}))
    (run.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def step(s, low, high):
    return {"step": s, "reward_mean": 0.5, "loss": 0.1, "clip_frac_low": low, "clip_frac_high": high}


def test_result_of_a_hand_written_log(tmp_path):
    rows = [{"step": 0, "eval/mean@2": 30.0, "eval/pass@2": 50.0},
            step(1, 0.01, 0.0), step(2, 0.5, 0.5),      # step 2 is logged again after a resume ...
            step(2, 0.03, 0.02), step(3, 0.02, 0.01),   # ... and its last row counts
            {"step": 3, "eval/mean@2": 40.0, "eval/pass@2": 62.5}]
    run = fake_run(tmp_path, "a", rows)
    res = sweep_report.result(run, 3)
    assert res["method"] == "kl3" and res["seed"] == 1 and res["k"] == 2 and res["dir"] == run.dir.name  # the folder beside results.json
    assert (res["mean@k"], res["pass@k"], res["mean@k_start"], res["pass@k_start"]) == (40.0, 62.5, 30.0, 50.0)
    assert res["cut_low"] == pytest.approx(100 * (0.01 + 0.03 + 0.02) / 3)
    assert res["cut_high"] == pytest.approx(100 * (0.0 + 0.02 + 0.01) / 3)
    # no evaluation at step 0: the start is nan; eval_k comes from config.json
    res = sweep_report.result(fake_run(tmp_path, "b", [step(1, 0.1, 0.2), {"step": 1, "eval/mean@4": 10.0,
                                                                           "eval/pass@4": 20.0}], eval_k=4), 1)
    assert res["k"] == 4 and res["mean@k"] == 10.0
    assert math.isnan(res["mean@k_start"]) and math.isnan(res["pass@k_start"])
    assert res["cut_low"] == pytest.approx(10.0) and res["cut_high"] == pytest.approx(20.0)
    # not finished (no evaluation at the last step): None
    assert sweep_report.result(fake_run(tmp_path, "c", rows[:3]), 3) is None


def test_clipping_acts_only_with_several_updates_per_rollout(tmp_path):
    one = train_run(tmp_path, "one", "--steps", "2", "--minibatches", "1")
    four = train_run(tmp_path, "four", "--steps", "2", "--minibatches", "2", "--epochs", "2")
    a, b = sweep_report.result(one, 2), sweep_report.result(four, 2)
    assert a["cut_low"] == a["cut_high"] == 0.0           # w = 1 exactly: nothing can be cut
    assert all(r["ratio_min"] == r["ratio_max"] == 1.0 for r in train_rows(one))
    assert b["cut_low"] + b["cut_high"] > 0                # later updates see w != 1, and some tokens leave
    assert any(r["ratio_min"] < 1.0 < r["ratio_max"] for r in train_rows(four))
    assert a["k"] == b["k"] == 2 and 0 <= a["mean@k"] <= 100


# ----------------------------------------------------------------------------
# Exercise 11: KL3 with a per-token delta (methods.kl3_adaptive) in real runs

def test_kl3_adaptive_in_a_real_run(tmp_path):
    """One step, two minibatches: the first sees w = 1 (the same update for every method), so the second
    scores the same ratios under both rules; delta_t >= delta keeps every token kl3 keeps. lr 3e-3 moves the
    policy enough in one update that a few % of the second minibatch's tokens leave kl3's region."""
    kl3 = train_rows(train_run(tmp_path, "kl3", "--steps", "1", "--clip", "kl3", "--lr", "3e-3"))[0]
    same = train_rows(train_run(tmp_path, "adapt0", "--steps", "1", "--clip", "kl3-adaptive", "--adapt", "0",
                                "--lr", "3e-3"))[0]
    adaptive = train_rows(train_run(tmp_path, "adapt", "--steps", "1", "--clip", "kl3-adaptive", "--lr", "3e-3"))[0]
    for key in ("loss", "reward_mean", "clip_frac_low", "clip_frac_high", "kl3", "ratio_min", "ratio_max", "grad_norm"):
        assert same[key] == kl3[key], key                  # adapt = 0 is kl3
    assert same["delta_t"] == pytest.approx(0.07)
    assert adaptive["delta_t"] > 0.07                     # q < 1 somewhere: more room than delta
    assert kl3["clip_frac_low"] + kl3["clip_frac_high"] > 0
    assert adaptive["clip_frac_low"] <= kl3["clip_frac_low"] and adaptive["clip_frac_high"] <= kl3["clip_frac_high"]
