import math
import time
from pathlib import Path

import torch

from nanoatr.data import Problem, load_problems
from nanoatr.evaluate import (completion_entropies, during_training, entropy_key, evaluate, pass_at_k,
                              sample_and_grade)
from nanoatr.model import Qwen3
from nanoatr.rollout import generate
from nanoatr.tokenizer import encode_prompts, load_tokenizer
from rounding import U64, entropy_error, qwen3_float64, within
from tiny import make_model_dir

ROOT = Path(__file__).resolve().parent.parent


def shipped():
    model_dir = ROOT / "data/tiny-qwen3"
    return Qwen3.from_pretrained(model_dir), load_tokenizer(model_dir), load_problems(ROOT / "data/arith/heldout.jsonl", limit=6)


def test_resumed_sampling_draws_the_same_completions(monkeypatch):
    model, tok, problems = shipped()
    kw = dict(max_new_tokens=40, batch_size=5, seed=3, progress=False)
    whole = list(sample_and_grade(model, tok, problems, 3, **kw))
    done = {(r["problem_id"], r["sample"]) for r in whole[:7]}  # interrupted mid-batch
    steps = []  # what a terminal's progress bar is told: (its total, a step), each time
    monkeypatch.setattr("nanoatr.evaluate.tqdm.update", lambda bar, n=1: steps.append((bar.total, n)))
    rest = list(sample_and_grade(model, tok, problems, 3, skip=done, **kw))
    assert whole[7:] == rest and steps == [(len(rest), 1)] * len(rest)


def test_evaluate_summary_matches_rows_and_follows_from_the_counts_alone():
    """"correct": each problem's correct samples of n = 4, in order; Mean@2 and Pass@2 follow from it exactly."""
    model, tok, problems = shipped()
    start = time.perf_counter()
    summary, rows = evaluate(model, tok, problems, k=2, n=4, max_new_tokens=40, progress=False)
    assert len(rows) == 6 * 4 and 0 < summary["seconds"] <= time.perf_counter() - start  # its own time
    counts = summary["correct"]
    assert counts == [sum(r["correct"] for r in rows if r["problem_id"] == i) for i in range(6)]
    assert len(set(counts)) > 1  # problems that differ: the order matters
    assert summary["mean@2"] == 100 * (sum(c / 4 for c in counts) / 6)
    assert summary["pass@2"] == 100 * (sum(pass_at_k(4, c, 2) for c in counts) / 6)


# ---------------------------------------------------------------------------
# the evaluation policy's entropy

def random_policy(tmp_path):
    """A random tiny Qwen3 (std 0.3: spread next-token distributions), its character tokenizer without a pad
    token (as Llama's); in float64: two ways of computing an entropy differ only by rounding.qwen3_float64."""
    path = make_model_dir(tmp_path / "m", {"pad_token": None})
    return Qwen3.from_pretrained(path, dtype=torch.float64).eval(), load_tokenizer(path)


PROBLEMS = [Problem("12+3", "15"), Problem("7*8", "56"), Problem("1", "1")]


def test_completion_entropies_are_the_entropy_at_each_sampled_token(tmp_path):
    """By hand: the full (B, P + T, V) logits of [prompt | completion] (position P - 1 + t predicts token t),
    softmax at T = 0.7, -sum p log p at each position, averaged over each row's real tokens."""
    model, tok = random_policy(tmp_path)
    out = generate(model, encode_prompts(tok, PROBLEMS), 12, temperature=0.7, eos_token_id=[tok.eos_token_id],
                   generator=torch.Generator().manual_seed(0))
    assert not out.mask.all() and out.mask.any(-1).all()  # rows of different lengths: the mask matters
    got = completion_entropies(model, out, 0.7, max_positions=20)  # 20 positions: one row a forward
    P = out.prompt_ids.shape[1]
    ids = torch.cat([out.prompt_ids, out.tokens], 1)
    mask = torch.cat([out.prompt_mask, torch.ones_like(out.mask)], 1)
    with torch.no_grad():
        z = model(ids, attention_mask=mask)
    p = (z[:, P - 1:-1] / 0.7).softmax(-1)
    per_token = -(p * p.log()).sum(-1)
    want = (per_token * out.mask).sum(-1) / out.mask.sum(-1)
    # d H / d z_v = -p_v (log p_v + H): logits dz apart move H by at most 2 H max|dz| <= 2 log V max|dz|, the
    # logits being rounding.qwen3_float64 x their largest apart (over T); then each side's own float64
    # rounding (rounding.entropy_error)
    V, z_max = z.shape[-1], float(z.abs().max())
    tol = 2 * math.log(V) * qwen3_float64(model.config) * z_max / 0.7 + 2 * entropy_error(V, z_max, 0.7, U64)
    within(torch.tensor(got, dtype=torch.float64), want, tol, "20 positions a forward")
    within(torch.tensor(completion_entropies(model, out, 0.7), dtype=torch.float64), want, tol, "one forward")


def test_a_uniform_policy_has_entropy_log_v_at_any_temperature(tmp_path):
    """lm_head = 0: every next-token distribution is uniform over the V ids, entropy log V at every token,
    whatever T; the key names T when it is not 1 (greedy decoding is scored at 1)."""
    model, tok = random_policy(tmp_path)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    V = model.lm_head.weight.shape[0]
    assert (entropy_key(0.0), entropy_key(0.6), entropy_key(1.2)) == ("entropy", "entropy@T0.6", "entropy@T1.2")
    for temperature, key, problems, k, budget, picked in (  # picked: the rows kept as samples
            (1.0, "eval/x/entropy", PROBLEMS, 2, 6, [(0, 0), (0, 1), (1, 0), (1, 1)]),
            (0.5, "eval/x/entropy@T0.5", PROBLEMS[:1], 1, 1, [(0, 0)])):  # one completion token in all
        results, samples = during_training(model, tok, {"x": problems}, k, 4,
                                           max_new_tokens=budget, temperature=temperature, seed=1)
        assert [(r["problem_id"], r["sample"]) for r in samples["x"]] == picked
        tol = entropy_error(V, 0.0, 1.0, U64)  # logits all exactly 0: only the entropy's own float64 rounding
        within(results[key], math.log(V), tol, f"uniform at T = {temperature}")
        assert not any("entropy" in k for k in results if k != key)


def test_evaluation_entropy_is_token_weighted_and_leaves_the_samples_alone(tmp_path):
    """The split's entropy is the mean over all completion tokens (rows weighted by length), and scoring
    the entropy draws nothing: the completions are those drawn without it, bit for bit."""
    model, tok = random_policy(tmp_path)
    kw = dict(max_new_tokens=10, temperature=1.0, seed=2, batch_size=4, progress=False)
    plain = list(sample_and_grade(model, tok, PROBLEMS, 3, **kw))
    rows = list(sample_and_grade(model, tok, PROBLEMS, 3, with_entropy=True, **kw))
    assert [{k: v for k, v in r.items() if k != "entropy"} for r in rows] == plain
    assert len({r["length"] for r in rows}) > 1 and all(r["entropy"] > 0 for r in rows)
    assert {r["length"] for r in rows if r["truncated"]} == {10}  # a row's own tokens, all 10 of the budget
    results, samples = during_training(model, tok, {"x": PROBLEMS}, 3, 4,
                                       max_new_tokens=10, temperature=1.0, seed=2)
    assert samples["x"] == rows[::9 // 4][:4]  # every len(rows) // 4-th of the rows, four of them
    want = sum(r["entropy"] * r["length"] for r in rows) / sum(r["length"] for r in rows)
    assert abs(results["eval/x/entropy"] - want) < 1e-9
    assert results["eval/x/truncated"] == sum(r["truncated"] for r in rows) / len(rows) < 1  # a share
    assert want != sum(r["entropy"] for r in rows) / len(rows)  # not the mean of the rows' means
