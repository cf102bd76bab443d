"""Build the embedded default from scratch: the task files, the tokenizer, the warm-start policy.

    python data/make_default.py            # about 3-6 minutes on 2 CPU cores

Writes
    data/arith/train.jsonl      RL prompts (question + gold answer only; RL never sees a solution)
    data/arith/heldout.jsonl    held-out test problems (never trained on, by SFT or RL)
    data/arith/val.jsonl        problems used only to decide when the warm-start stops
    data/tiny-qwen3/            config.json, model.safetensors, tokenizer.json, tokenizer_config.json

The policy is a ~0.8M-parameter Qwen3 trained by supervised learning on worked solutions (the
paper's formatting SFT; the loop is sft.py's, the one sft.py runs on real checkpoints) until its validation accuracy (4 samples at temperature 1) first reaches
--target. Stopping on a measured accuracy, not a step count, keeps the starting point where RL has
room to show a gain: accuracy jumps late in this training, so a fixed step count over- or undershoots.

A rebuild writes the task files byte for byte, but not the shipped policy, which was made at commit
a129ecd: today's code stops at step 750 with held-out Mean@8 27.9%, Pass@8 67.2% (the same bytes at
b5c8c5a, before the warm-start moved to the shared SFT step, and after, on one thread and on two), and its
weights differ from the shipped ones.
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere without installing

import sft  # noqa: E402  (the repository's sft.py: the SFT step)
from nanoatr.data import Problem, load_problems, save_problems  # noqa: E402
from nanoatr.evaluate import evaluate  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, init_weights  # noqa: E402
from nanoatr.tokenizer import char_tokenizer, load_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZES = {"heldout": 256, "val": 128, "train": 4096}  # drawn in this order, disjoint by question


# ----------------------------------------------------------------------------
# The task: integer arithmetic with a short worked solution ending in \boxed{}
#
# Two kinds of problem, about equally often:
#     57+38-21   ->  57+38=95;95-21=74;\boxed{74}
#     47*36      ->  47*30=1410;47*6=282;1410+282=1692;\boxed{1692}
# The worked solutions are the warm-start's supervised data (the paper's formatting SFT); RL then only
# sees the question and a reward from the verifier, so any gain comes from reinforcement.

# Every character the task uses, plus a few the model might emit; '\boxed{' is one token.
CHARS = "0123456789+-*/=;:.,()[]{}\\ "
BOXED = "\\boxed{"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}="  # the prompt is "question="


def add_sub(rng: random.Random) -> tuple[str, int, str]:
    a, b, c = (rng.randint(10, 99) for _ in range(3))
    op1, op2 = rng.choice("+-"), rng.choice("+-")
    ab = a + b if op1 == "+" else a - b
    abc = ab + c if op2 == "+" else ab - c
    return f"{a}{op1}{b}{op2}{c}", abc, f"{a}{op1}{b}={ab};{ab}{op2}{c}={abc};{BOXED}{abc}}}"


def multiply(rng: random.Random) -> tuple[str, int, str]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    tens, ones = b - b % 10, b % 10
    p1, p2 = a * tens, a * ones
    return f"{a}*{b}", a * b, f"{a}*{tens}={p1};{a}*{ones}={p2};{p1}+{p2}={a * b};{BOXED}{a * b}}}"


def make_problem(rng: random.Random) -> tuple[str, str, str]:
    """(question, answer, worked solution)."""
    question, answer, solution = (add_sub if rng.random() < 0.5 else multiply)(rng)
    return question, str(answer), solution


def make_splits(seed: int, sizes: dict[str, int]) -> dict[str, list[tuple[str, str, str]]]:
    """Disjoint splits by question text, drawn in order, so no held-out question is ever trained on."""
    rng, seen, splits = random.Random(seed), set(), {}
    for name, n in sizes.items():
        rows = []
        while len(rows) < n:
            q, a, s = make_problem(rng)
            if q not in seen:
                seen.add(q)
                rows.append((q, a, s))
        splits[name] = rows
    return splits


def sft_stream(seed: int, exclude: set[str]):
    """An endless stream of worked solutions whose questions are not in `exclude`."""
    rng = random.Random(seed)
    while True:
        q, a, s = make_problem(rng)
        if q not in exclude:
            yield q, s


def build_tokenizer():
    """The task's character-level tokenizer; '\\boxed{' is one token."""
    return char_tokenizer(CHARS, words=[BOXED])


TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "eos_token": "<|endoftext|>",
    "pad_token": "<|pad|>",
    "unk_token": "<|unk|>",
    "chat_template": CHAT_TEMPLATE,
    "model_max_length": 256,
}


def tiny_config(vocab_size: int) -> Qwen3Config:
    return Qwen3Config(vocab_size=vocab_size, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=10_000.0,
                       tie_word_embeddings=True, max_position_embeddings=256)


def warm_start(model, tok, val, args) -> int:
    """The shared SFT (sft.py) on the endless worked-solution stream, every held-out and validation
    question left out, until validation Mean@4 first reaches --target."""
    exclude = {p.question for p in val} | {p.question for p in load_problems(HERE / "arith/heldout.jsonl")}
    return sft.warm_start(model, tok, sft_stream(args.seed + 1, exclude), val, sft.Recipe(lr=args.lr),
                          batch_size=args.batch_size, max_steps=args.max_steps, check_every=args.check_every,
                          max_new_tokens=48, done=lambda step, acc: acc >= args.target)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="seed of the task splits and of the training")
    ap.add_argument("--target", type=float, default=30.0, help="stop when validation Mean@4 (%%) reaches this")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of the warm-start")
    ap.add_argument("--batch-size", type=int, default=64, help="worked solutions per step")
    ap.add_argument("--check-every", type=int, default=25, help="steps between validation checks")
    ap.add_argument("--max-steps", type=int, default=6000, help="give up after this many steps")
    ap.add_argument("--out", default=str(HERE / "tiny-qwen3"), help="where to write the policy and tokenizer")
    args = ap.parse_args()
    torch.manual_seed(args.seed)

    splits = make_splits(args.seed, SIZES)
    for name, rows in splits.items():
        save_problems(HERE / f"arith/{name}.jsonl", [Problem(q, a) for q, a, _ in rows])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2))
    tok = load_tokenizer(out)

    model = Qwen3(tiny_config(len(tok)))
    init_weights(model, seed=args.seed)
    print(f"warm-start of a {model.num_parameters() / 1e6:.2f}M-parameter Qwen3 "
          f"(max {args.max_steps} steps, target {args.target}%)", flush=True)
    steps = warm_start(model, tok, load_problems(HERE / "arith/val.jsonl"), args)
    model.save_pretrained(out)
    heldout = load_problems(HERE / "arith/heldout.jsonl")
    summary = evaluate(model, tok, heldout, k=8, max_new_tokens=48, temperature=1.0, progress=False)[0]
    print(f"saved {out} after {steps} steps: held-out mean@8 {summary['mean@8']:.1f}%  "
          f"pass@8 {summary['pass@8']:.1f}%")


if __name__ == "__main__":
    main()
