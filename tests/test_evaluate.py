from pathlib import Path

from nanoatr.data import load_problems
from nanoatr.evaluate import evaluate, sample_and_grade
from nanoatr.model import Qwen3
from nanoatr.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parent.parent


def shipped():
    model_dir = ROOT / "data/tiny-qwen3"
    return Qwen3.from_pretrained(model_dir), load_tokenizer(model_dir), load_problems(ROOT / "data/arith/heldout.jsonl", limit=6)


def test_resumed_sampling_draws_the_same_completions():
    model, tok, problems = shipped()
    kw = dict(max_new_tokens=40, batch_size=5, seed=3, progress=False)
    whole = list(sample_and_grade(model, tok, problems, 3, **kw))
    done = {(r["problem_id"], r["sample"]) for r in whole[:7]}  # interrupted mid-batch
    rest = list(sample_and_grade(model, tok, problems, 3, skip=done, **kw))
    assert whole[7:] == rest


def test_evaluate_summary_matches_rows():
    model, tok, problems = shipped()
    summary, rows = evaluate(model, tok, problems, k=2, n=4, max_new_tokens=40, progress=False)
    assert len(rows) == 6 * 4
    assert abs(summary["mean@2"] - 100 * sum(r["correct"] for r in rows) / len(rows)) < 1e-9
    assert 0 <= summary["pass@2"] <= 100 and summary["pass@2"] >= summary["mean@2"]
