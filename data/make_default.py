"""Build the embedded default from scratch: the task files, the tokenizer, the warm-start policy.

    python data/make_default.py                  # about 3-6 minutes on 2 CPU cores
    python data/make_default.py --only-splits    # the task files alone, byte for byte (a second)

Writes
    data/arith/train.jsonl      RL prompts (question + gold answer only; RL never sees a solution)
    data/arith/heldout.jsonl    held-out test problems: none is a training problem up to its key
    data/arith/val.jsonl        validation problems, as clean, for choosing settings (not the held-out ones)
    data/tiny-qwen3/            config.json, model.safetensors, tokenizer.json, tokenizer_config.json

The splits. A first draw (seed --seed) gives held-out, validation and training problems, in this order,
disjoint as strings; train.jsonl is its training part. Its held-out and validation parts were the
shipped ones until issue 38 found 26 of the 256 held-out problems (23 of 128 validation) to be training
problems up to the order of their numbers ('15*63' against '63*15'). They are retired: only the
warm-start below still uses them, as the shipped policy was made. heldout.jsonl and val.jsonl are drawn
afresh (seed --seed + EVAL_SEED) by the same generator, redrawing a problem whose key (nanoatr.data.arith_key:
the numbers as a multiset and the answer) is a training problem's or was drawn already (fresh_problem).
What the warm-start saw: a stream of worked solutions from the same generator (seed --seed + 1) that
skips the first draw's held-out and validation questions, as strings, and nothing else. So, up to the
key, it saw nearly every multiplication of any split: 137 of the 256 held-out problems (133 of its 136
multiplications) share a key with one of the first 750 x 64 problems of that stream (a rebuild stops at
step 750; the shipped policy's count of steps is not recorded; scripts/split_overlap.py). The held-out
split is unseen by RL, not by the warm-start.

The policy is a ~0.8M-parameter Qwen3 trained by supervised learning on worked solutions (the
paper's formatting SFT; the loop is sft.py's, the one sft.py runs on real checkpoints) until its accuracy
on the first draw's validation problems (4 samples at temperature 1) first reaches --target. Stopping on
a measured accuracy, not a step count, keeps the starting point where RL has room to show a gain:
accuracy jumps late in this training, so a fixed step count over- or undershoots.

A rebuild writes the task files byte for byte, but not the shipped policy, which was made at commit
a129ecd: today's code stops at step 750 (the same bytes at b5c8c5a, before the warm-start moved to the
shared SFT step, and after, on one thread and on two), and its weights differ from the shipped ones. Its
held-out Mean@8 27.9%, Pass@8 67.2% were measured on the retired held-out split, before issue 38.
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere without installing

import sft  # noqa: E402  (the repository's sft.py: the SFT step)
from nanoatr.data import Problem, arith_key, load_problems, save_problems  # noqa: E402
from nanoatr.evaluate import evaluate  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, init_weights  # noqa: E402
from nanoatr.tokenizer import char_tokenizer, load_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZES = {"heldout": 256, "val": 128, "train": 4096}  # the first draw, in this order, disjoint by question
EVAL_SIZES = {"heldout": 256, "val": 128}            # the evaluation splits, drawn afresh (issue 38)
EVAL_SEED = 1000                                     # their seed is --seed + EVAL_SEED


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
    """The first draw: splits disjoint by question text, drawn in order (train.jsonl is its "train")."""
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


def fresh_problem(rng: random.Random, taken: set) -> tuple[str, str, str]:
    """A problem of make_problem's law whose key (arith_key) is not in `taken`, then added to it. Its kind
    is drawn first, half and half, and a taken problem is redrawn within its kind: the training problems
    take 41% of the multiplications' keys (1,692 of 4,095) and almost none of the additions', so redrawing
    the kind too would leave a split of 0.59 / 1.59 = 37% multiplications, another mix."""
    kind = add_sub if rng.random() < 0.5 else multiply
    while True:
        question, answer, solution = kind(rng)
        key = arith_key(Problem(question, str(answer)))
        if key not in taken:
            taken.add(key)
            return question, str(answer), solution


def eval_splits(seed: int, train: list[tuple[str, str, str]]) -> dict[str, list[tuple[str, str, str]]]:
    """heldout.jsonl and val.jsonl, in this order: EVAL_SIZES fresh problems, none a training problem up
    to its key and no two with one key."""
    rng, taken = random.Random(seed + EVAL_SEED), {arith_key(Problem(q, a)) for q, a, _ in train}
    return {name: [fresh_problem(rng, taken) for _ in range(n)] for name, n in EVAL_SIZES.items()}


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


def warm_start(model, tok, first: dict, args) -> int:
    """The shared SFT (sft.py) on the endless worked-solution stream, the first draw's held-out and
    validation questions left out, until Mean@4 on the first draw's validation problems first reaches
    --target: as the shipped policy was made (the splits redrawn since are not used here)."""
    val = [Problem(q, a) for q, a, _ in first["val"]]
    exclude = {q for q, _, _ in first["heldout"] + first["val"]}
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
    ap.add_argument("--only-splits", action="store_true", help="only write the task files, data/arith/*.jsonl")
    args = ap.parse_args()
    torch.manual_seed(args.seed)

    first = make_splits(args.seed, SIZES)
    splits = {"train": first["train"], **eval_splits(args.seed, first["train"])}
    for name, rows in splits.items():
        save_problems(HERE / f"arith/{name}.jsonl", [Problem(q, a) for q, a, _ in rows])
    if args.only_splits:
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2))
    tok = load_tokenizer(out)

    model = Qwen3(tiny_config(len(tok)))
    init_weights(model, seed=args.seed)
    print(f"warm-start of a {model.num_parameters() / 1e6:.2f}M-parameter Qwen3 "
          f"(max {args.max_steps} steps, target {args.target}%)", flush=True)
    steps = warm_start(model, tok, first, args)
    model.save_pretrained(out)
    heldout = load_problems(HERE / "arith/heldout.jsonl")
    summary = evaluate(model, tok, heldout, k=8, max_new_tokens=48, temperature=1.0, progress=False)[0]
    print(f"saved {out} after {steps} steps: held-out mean@8 {summary['mean@8']:.1f}%  "
          f"pass@8 {summary['pass@8']:.1f}%")


if __name__ == "__main__":
    main()
