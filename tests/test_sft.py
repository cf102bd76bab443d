"""The SFT: sft.py (examples, loss, steps, data order) and sft.py end to end on tiny models: the loss
falls and the format is learned, its model loads in train.py, eval.py and transformers / peft, resuming
is exact, bad input is one line. With Qwen3's real tokenizer (tests/data) for the chat template and the
thinking switch.

Run: python -m pytest tests/test_sft.py -q
"""
import copy
import io
import json
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import eval as eval_cmd
import sft as sft_cmd
import train
import sft
from nanoatr.data import Problem, load_solutions
from nanoatr.model import Qwen3, init_weights
from nanoatr.tokenizer import encode_prompts, format_prompt, load_tokenizer
from qwen3_dirs import hf_model, write_dir
from rounding import U32, U64, log_softmax_error, qwen3_float64, sum_orders, within
from tiny import make_default, make_model_dir
from conftest import error_line, jsonl, strict_file

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = "<think>\nAdd them.\n</think>\n\nWe add: $1+1=2$, so the answer is $\\boxed{2}$."


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """A tiny random Qwen3 with the real tokenizer and chat template (Qwen3-1.7B's layout)."""
    return write_dir(tmp_path_factory.mktemp("qwen3") / "instruct", hf_model(tie=True))


@pytest.fixture(scope="module")
def qtok(qwen3):
    return load_tokenizer(qwen3)


def arithmetic_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        q, a, s = make_default.make_problem(rng)
        rows.append({"problem": q, "solution": s, "answer": a})
    return rows


def write_jsonl(path: Path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


# ----------------------------------------------------------------------------
# Examples: the prompt as train.py builds it, the completion, the thinking switch

@pytest.mark.parametrize("thinking", [None, True, False])
def test_prompt_is_train_pys_and_the_think_block_follows_the_switch(qtok, thinking):
    [(prompt, completion)] = sft.encode(qtok, [("What is 1+1?", SOLUTION)], enable_thinking=thinking)
    assert prompt == encode_prompts(qtok, [Problem("What is 1+1?", "")], enable_thinking=thinking)[0]
    assert completion[-1] == qtok.eos_token_id == qtok.convert_tokens_to_ids("<|im_end|>")
    text = qtok.decode(completion[:-1])
    if thinking is False:  # the prompt closed an empty think block: the written part only
        assert qtok.decode(prompt).endswith("<think>\n\n</think>\n\n")
        assert text == "We add: $1+1=2$, so the answer is $\\boxed{2}$."
    else:
        assert qtok.decode(prompt).endswith("<|im_start|>assistant\n") and text == SOLUTION


def test_completion_text_and_pad_batch_masks_the_completion_only():
    assert sft.completion_text(SOLUTION, "...<think>\n\n</think>\n\n") == SOLUTION.split("</think>\n\n")[1]
    assert sft.completion_text(SOLUTION, "...assistant\n") == SOLUTION
    assert sft.completion_text("no block", "...</think>\n\n") == "no block"
    ids, mask = sft.pad_batch([([5, 6], [7, 8, 1]), ([5], [9, 1])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 1], [5, 9, 1, 0, 0]]
    assert mask.tolist() == [[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]]


# ----------------------------------------------------------------------------
# The loss and the step

def tiny_model(vocab=37, seed=0):
    from conftest import TINY
    from nanoatr.model import Qwen3Config
    model = Qwen3(Qwen3Config(**{**TINY, "vocab_size": vocab}, rope_theta=10_000.0))
    init_weights(model, std=0.1, seed=seed)
    return model


def batch(seed=0, vocab=37):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(3, vocab, (int(p),), generator=g).tolist(), torch.randint(3, vocab, (int(c),), generator=g).tolist())
            for p, c in zip(torch.randint(1, 6, (5,), generator=g), torch.randint(1, 9, (5,), generator=g))]


def test_loss_is_the_mean_nll_of_completion_tokens_on_both_paths(monkeypatch):
    model, examples = tiny_model(), batch()
    budgets = (sft.DIRECT_LOGITS, 0)  # one (B, S, V) tensor, then scoring.token_logprobs chunk by chunk
    ids, mask = sft.pad_batch(examples, pad_id=0)
    z = model(ids[:, :-1]).double()  # the one-tensor path's float32 logits, bit for bit
    logp = torch.log_softmax(z, -1).gather(-1, ids[:, 1:, None])[..., 0]
    expected = -(logp * mask[:, 1:]).sum() / mask[:, 1:].sum()  # by hand: every completion token once
    # Each path's float32 loss against these: a token's -log p from its float32 log-softmax (chunked: of
    # logits whose 64-term sums ran in another order, sum_orders of sum |h w|, which it at most doubles), then
    # the mean's float32 sum over the n tokens (half of sum_orders(n) of the largest -log p)
    with torch.no_grad():
        h, w = model.hidden(ids[:, :-1]).double(), model.lm_head.weight.double()
    n, nll_max = int(mask[:, 1:].sum()), float(-logp[mask[:, 1:].bool()].min())
    own = log_softmax_error(z) + sum_orders(n, U32) / 2 * nll_max
    tol = {budgets[0]: own, 0: own + 2 * sum_orders(64, U32) * float((h.abs() @ w.abs().T).max())}
    for budget in budgets:
        monkeypatch.setattr(sft, "DIRECT_LOGITS", budget)
        model.zero_grad()
        loss = sft.completion_loss(model, ids, mask, mask[:, 1:].sum())
        loss.backward()
        within(loss.item(), expected.item(), tol[budget], f"loss, DIRECT_LOGITS={budget}")

    # The gradients, in float64: the two paths share the model's forward and backward below the final
    # hidden states h, so they differ only in what they pass down to h and to lm_head's weight W (a leaf h
    # here). There each is (p - onehot(y)) m / n times W (for h) or times h (for W), p = exp(log p): with e the
    # float64 log-softmax's error (log_softmax_error, plus 2 U64 for exp and U64 for the subtraction), an entry
    # of (p - onehot) m / n is at most e (p + onehot) m / n off, and the V-term (h) or N-term (W) sum adds
    # sum_orders of its terms' magnitudes: |dh - dh'| <= (e + sum_orders(V, U64)) |G| |W| and
    # |dW - dW'| <= (e + sum_orders(N, U64)) |G|^T |h|, G = (p + onehot) m / n.
    m64 = copy.deepcopy(model).double()
    with torch.no_grad():
        h64 = m64.hidden(ids[:, :-1])
        z64, w64 = m64.lm_head(h64), m64.lm_head.weight
    n_tok, V = float(mask[:, 1:].sum()), z64.shape[-1]
    G = (torch.softmax(z64, -1) + F.one_hot(ids[:, 1:], V)) * mask[:, 1:, None] / n_tok
    e = log_softmax_error(z64, u=U64) + 3 * U64
    bound_h = (e + sum_orders(V, U64)) * (G @ w64.abs())
    bound_w = (e + sum_orders(G.shape[0] * G.shape[1], U64)) * (G.flatten(0, 1).T @ h64.abs().flatten(0, 1))
    got = []
    for budget in budgets:
        monkeypatch.setattr(sft, "DIRECT_LOGITS", budget)
        h = h64.clone().requires_grad_(True)
        monkeypatch.setattr(m64, "hidden", lambda x, h=h: h)
        m64.zero_grad()
        loss = sft.completion_loss(m64, ids, mask, mask[:, 1:].sum())
        assert loss.dtype == torch.float64  # the direct path no longer rounds a float64 model to float32
        loss.backward()
        got.append((h.grad, m64.lm_head.weight.grad.clone()))
    (h0, w0), (h1, w1) = got
    within(h0, h1, float(bound_h.max()), "d loss / d h, one tensor vs chunked, float64")
    within(w0, w1, float(bound_w.max()), "d loss / d W, one tensor vs chunked, float64")
    assert torch.all((h0 - h1).abs() <= bound_h) and torch.all((w0 - w1).abs() <= bound_w)


def test_whatever_the_padding_holds_the_loss_is_the_same():
    model, examples = tiny_model(), batch()
    ids, mask = sft.pad_batch(examples, pad_id=0)
    pads = torch.zeros_like(mask, dtype=torch.bool)
    for i, (p, c) in enumerate(examples):
        pads[i, len(p) + len(c):] = True
    junk = torch.where(pads, torch.full_like(ids, 11), ids)
    a = sft.completion_loss(model, ids, mask, mask[:, 1:].sum())
    b = sft.completion_loss(model, junk, mask, mask[:, 1:].sum())
    assert a.item() == b.item()  # right padding: real tokens never see a pad


def test_micro_batches_add_up_to_the_whole_batch(monkeypatch):
    """In float64, through the chunked log-probs (which keep it; the one-tensor path's cross-entropy takes
    float32 logits): the whole batch and its micro-batches then differ by Qwen3's float32 islands
    (rounding.qwen3_float64) of the largest logit, at most doubled by the log-softmax; the gradients flow back
    through the same islands (the norms' backward is float32 too), by the same share of the largest. In
    float32 the losses differed by 5.5e-7 on AMD EPYC against a tolerance of 1e-6."""
    monkeypatch.setattr(sft, "DIRECT_LOGITS", 0)
    examples, states = batch(1), []
    for micro in (0, 2):
        model = tiny_model(seed=3).double()
        trainer = sft.Trainer(model, 0, sft.Recipe(lr=1e-2, warmup=0, micro_batch=micro))
        ids, _ = sft.pad_batch(examples, pad_id=0)
        with torch.no_grad():
            z_max = float(model(ids).abs().max())
        loss = trainer.step(1, examples)  # the step's gradients stay in .grad until the next step
        states.append((loss, torch.cat([p.grad.flatten() for p in model.parameters()])))
    islands = 2 * qwen3_float64(model.config)
    within(states[0][0], states[1][0], islands * z_max, "loss")
    within(states[0][1], states[1][1], islands * float(states[0][1].abs().max()), "gradients")
    assert sft.micro_batch_slices([3, 5, 2, 4, 1], 2) == [(slice(0, 2), 5), (slice(2, 4), 4), (slice(4, 6), 1)]


def test_each_epoch_takes_every_example_once_in_its_own_order():
    n, B = 10, 4
    taken = [i for step in range(1, 6) for i in sft.batch_indices(n, step, B, seed=0)]  # 20 = 2 epochs
    assert sorted(taken[:10]) == sorted(taken[10:]) == list(range(10)) and taken[:10] != taken[10:]
    assert sft.batch_indices(n, 3, B, 0) == taken[8:12]  # step 3 alone: what a resumed run takes
    assert sft.batch_indices(n, 1, B, 1) != sft.batch_indices(n, 1, B, 0)


def reference_sft(model, tok, stream, lr, batch_size, steps):
    """data/make_default.py's loop before the shared SFT step (commit b5c8c5a), verbatim but for the checks."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, step / 100)
        rows = []
        for _ in range(batch_size):
            question, solution = next(stream)
            prompt = tok.encode(format_prompt(tok, Problem(question, "")), add_special_tokens=False)
            rows.append((prompt, tok.encode(solution, add_special_tokens=False) + [tok.eos_token_id]))
        S = max(len(p) + len(c) for p, c in rows)
        ids = torch.full((batch_size, S), tok.pad_token_id)
        mask = torch.zeros(batch_size, S)
        for i, (p, c) in enumerate(rows):
            ids[i, :len(p) + len(c)] = torch.tensor(p + c)
            mask[i, len(p):len(p) + len(c)] = 1
        logits = model(ids[:, :-1])
        nll = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
        loss = (nll * mask[:, 1:].flatten()).sum() / mask[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def test_the_warm_start_is_the_old_loop_bit_for_bit(capsys, monkeypatch):
    """The embedded warm-starts now run through sft.py; the weights after 12 steps are exactly the
    old loop's (what makes data/make_*.py rebuild the shipped policies byte for byte). Validation: Mean@4 at
    temperature 1, seeded by the step."""
    seen = []
    monkeypatch.setattr(sft, "evaluate", lambda *a, **kw: seen.append(kw) or ({"mean@4": 25.0}, []))
    tok = load_tokenizer(ROOT / "data/tiny-qwen3")
    models = []
    for which in ("old", "new"):
        model = Qwen3(make_default.tiny_config(len(tok)))
        init_weights(model, seed=0)
        stream = make_default.sft_stream(1, set())
        if which == "old":
            reference_sft(model, tok, stream, 1e-3, 16, 12)
        else:
            sft.warm_start(model, tok, stream, [Problem("12+34-5", "41")], sft.Recipe(lr=1e-3), batch_size=16,
                           max_steps=12, check_every=12, max_new_tokens=8, done=lambda step, acc: True)
        models.append(model.state_dict())
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])
    assert "val mean@4  25.0%" in capsys.readouterr().out
    assert [(s["k"], s["temperature"], s["seed"], s["max_new_tokens"]) for s in seen] == [(4, 1.0, 12, 8)]
    rates = [sft.Recipe(lr=1e-3, warmup=100).lr_at(s) for s in (1, 50, 100, 500)]  # linear, then flat; none
    assert rates + [sft.Recipe(lr=1e-3, warmup=0).lr_at(1)] == [1e-5, 5e-4, 1e-3, 1e-3, 1e-3]  # at warmup 0


# ----------------------------------------------------------------------------
# sft.py end to end

@pytest.fixture(scope="module")
def arith(tmp_path_factory):
    """Toy arithmetic SFT data and its held-out problems (the same questions: the format is what is learned)."""
    root = tmp_path_factory.mktemp("arith")
    rows = arithmetic_rows(48)
    return write_jsonl(root / "sft.jsonl", rows), write_jsonl(root / "heldout.jsonl", rows[:8])


def sft_run(tmp_path, name, *args):
    sft_cmd.main(["--out-dir", str(tmp_path), "--name", name, *args])
    run = tmp_path / name
    return run, jsonl(run / "metrics.jsonl")


def test_loss_falls_and_the_format_is_learned(tmp_path, arith, capsys, monkeypatch):
    """A random tiny model learns the worked-solution format: loss down, held-out Mean@4 (greedy) up. On a
    terminal the evaluations draw no bar of their own inside the run's."""
    terminal = type("Terminal", (io.StringIO,), {"isatty": lambda _: True})()
    monkeypatch.setattr(sys, "stderr", terminal)
    model = make_model_dir(tmp_path / "random", seed=0)
    run, rows = sft_run(tmp_path, "fmt", "--model", str(model), "--data", arith[0], "--eval-data", arith[1],
                        "--lora-rank", "0", "--lr", "3e-3", "--warmup", "5", "--steps", "150", "--batch-size", "16",
                        "--eval-every", "75", "--eval-temperature", "0", "--eval-k", "1", "--max-len", "64")
    losses = [r["loss"] for r in rows if "loss" in r]
    evals = {r["step"]: r["eval/mean@1"] for r in rows if "eval/mean@1" in r}
    assert len(losses) == 150 and sum(losses[-10:]) < 0.25 * sum(losses[:10])
    assert list(evals) == [0, 75, 150] and evals[0] == 0.0 and evals[150] >= 50.0, evals
    assert "sft:" in terminal.getvalue() and "sampling" not in terminal.getvalue()
    assert (run / "model/model.safetensors").is_file() and (run / "checkpoint/trainer_state.pt").is_file()
    assert "held-out Mean@1" in capsys.readouterr().out


@pytest.mark.slow  # ~18 s on one core: every step's logits and embedding gradient span Qwen3's 151,936 tokens
def test_qwen3s_chat_format_is_learned_without_thinking(tmp_path, qwen3):
    """Qwen3's tokenizer, chat template and --no-thinking: a random tiny model learns to answer four toy
    questions in the written-solution format (the think block dropped), greedy Mean@1 0% -> 100%."""
    rows = [{"problem": f"What is {a}+{b}?", "answer": str(a + b),
             "solution": f"<think>\nAdd.\n</think>\n\nSo $\\boxed{{{a + b}}}$."}
            for a, b in [(1, 2), (3, 4), (5, 1), (2, 6)]]
    data = write_jsonl(tmp_path / "toy.jsonl", rows)
    run, metrics = sft_run(tmp_path, "toy", "--model", str(qwen3), "--data", data, "--eval-data", data,
                           "--lora-rank", "0", "--no-thinking", "--steps", "80", "--batch-size", "4", "--lr", "1e-2",
                           "--warmup", "5", "--eval-k", "1", "--eval-temperature", "0", "--eval-max-new-tokens", "24",
                           "--max-len", "64")
    assert [r["eval/mean@1"] for r in metrics if "eval/mean@1" in r] == [0.0, 100.0]
    losses = [r["loss"] for r in metrics if "loss" in r]
    assert losses[-1] < 0.1 * losses[0]
    last = jsonl(run / "samples.jsonl")[-1]["completion"]
    assert last == "So $\\boxed{8}$."  # the written part only: no think block of its own


def test_lora_sft_model_loads_in_train_eval_and_transformers(tmp_path, qwen3, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    data = write_jsonl(tmp_path / "d.jsonl", [{"problem": "What is 1+1?", "solution": SOLUTION, "answer": "2"},
                                             {"problem": "What is 2+2?", "solution": SOLUTION.replace("2", "4"),
                                              "answer": "4"}])
    run, rows = sft_run(tmp_path, "lora", "--model", str(qwen3), "--data", data, "--eval-data", data,
                        "--lora-rank", "4", "--steps", "2", "--batch-size", "2", "--no-thinking", "--eval-k", "1",
                        "--eval-max-new-tokens", "4", "--max-len", "128")
    model = run / "model"
    assert strict_file(run / "config.json")["thinking"] is False  # and alpha is 2 x rank (lora.load_policy):
    assert strict_file(run / "checkpoint/adapter_config.json")["lora_alpha"] == 2 * 4
    # the merged model is base + adapter, and transformers and peft take both (with our logits: test_lora's
    # round trips of lora.merge and of a run's adapter checkpoint)
    from test_lora import assert_merged_is_base_plus_adapter
    assert_merged_is_base_plus_adapter(qwen3, run / "checkpoint", model)
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(qwen3), str(run / "checkpoint"))
    AutoModelForCausalLM.from_pretrained(model)
    assert (model / "tokenizer.json").is_file() and (model / "generation_config.json").is_file()
    # train.py starts RL from it; eval.py evaluates it (and the adapter directory as it is)
    train.main(["--model", str(model), "--data", data, "--eval-data", "--steps", "1", "--prompts-per-step", "2",
                "--group-size", "2", "--max-new-tokens", "4", "--no-compile", "--no-thinking", "--lora-rank", "2",
                "--out-dir", str(tmp_path), "--name", "rl"])
    assert (tmp_path / "rl/checkpoint/adapter_model.safetensors").is_file()
    for m in (model, run / "checkpoint"):
        summary = eval_cmd.main(["--model", str(m), "--data", data, "--k", "1", "--max-new-tokens", "4",
                                 "--no-thinking", "--out", str(tmp_path / f"{m.name}.jsonl")])
        assert set(summary["d"]) == {"mean@1", "pass@1", "correct"}


def test_resume_continues_as_the_uninterrupted_run(tmp_path, arith):
    model = make_model_dir(tmp_path / "random", seed=1)
    common = ["--model", str(model), "--data", arith[0], "--lora-rank", "2", "--batch-size", "8", "--lr", "1e-2",
              "--max-len", "64", "--save-every", "1"]
    whole, _ = sft_run(tmp_path, "whole", *common, "--steps", "4")
    part, _ = sft_run(tmp_path, "part", *common, "--steps", "2")
    sft_cmd.main(["--resume", str(part), "--steps", "4"])
    rows = jsonl(part / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    from safetensors.torch import load_file
    wa, wb = load_file(whole / "checkpoint/adapter_model.safetensors"), load_file(part / "checkpoint/adapter_model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert load_file(whole / "model/model.safetensors").keys() == load_file(part / "model/model.safetensors").keys()


def test_bad_input_is_one_line_and_leaves_no_run(tmp_path, arith, capsys):
    def one_error(argv):
        return error_line(capsys, sft_cmd.main, argv)
    model = make_model_dir(tmp_path / "m", seed=0)
    base = ["--model", str(model), "--out-dir", str(tmp_path / "runs"), "--name", "x", "--lora-rank", "0"]
    no_solution = write_jsonl(tmp_path / "ns.jsonl", [{"problem": "1+1", "solution": "1+1=2;\\boxed{2}",
                                                       "answer": "2"}, {"problem": "2+2", "answer": "4"}])
    assert one_error(base + ["--data", no_solution]).endswith(
        "ns.jsonl:2: no 'solution' (an SFT row needs problem, solution and answer)")
    no_answer = write_jsonl(tmp_path / "na.jsonl", [{"problem": "2+2", "solution": "\\boxed{4}"}])
    assert "na.jsonl:1: missing answer" in one_error(base + ["--data", no_answer])
    line = one_error(base + ["--data", arith[0], "--max-len", "20"])
    assert "sft.jsonl:" in line and "over --max-len 20;" in line and "of 48 rows are: --skip-long drops them" in line
    assert one_error(["--data", arith[0]]).startswith("error: sft.py needs --model DIR")
    assert "--eval-k would be ignored" in one_error(base + ["--data", arith[0], "--eval-k", "2"])
    assert "--lora-alpha" in one_error(base + ["--data", arith[0], "--lora-alpha", "8"])
    assert "--lr must be > 0" in one_error(base + ["--data", arith[0], "--lr", "0"])
    assert "--thinking would be ignored" in one_error(base + ["--data", arith[0], "--thinking"])
    assert not (tmp_path / "runs/x").exists()


def test_skip_long_drops_and_counts(tmp_path, arith, capsys):
    model = make_model_dir(tmp_path / "m", {"pad_token": None})  # no pad token: EOS pads
    lengths = [len(p) + len(c) for p, c in sft.encode(load_tokenizer(model), [(r.question, r.solution)
                                                                              for r in load_solutions(arith[0])])]
    limit = sorted(lengths)[len(lengths) // 2]
    sft_run(tmp_path, "skip", "--model", str(model), "--data", arith[0], "--lora-rank", "0", "--epochs",
            "0.5", "--batch-size", "4", "--max-len", str(limit), "--skip-long")
    kept = sum(n <= limit for n in lengths)  # half an epoch of them: ceil(kept / 8) steps
    assert f"{kept} examples ({48 - kept} over --max-len {limit} dropped), {-(-kept // 8)} steps of 4" in \
        capsys.readouterr().out
