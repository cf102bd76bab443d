"""Build the embedded default from scratch: the task files, the tokenizer, the warm-start policy.

    python data/make_default.py                  # 20 minutes on one core shared with other work (725 steps)
    python data/make_default.py --only-splits    # the task files alone, byte for byte (a second)

Writes
    data/arith/heldout.jsonl    held-out test problems: a sample of the task's law that nothing trains on
    data/arith/val.jsonl        validation problems, drawn the same way: choosing settings, the
                                warm-start's stop
    data/arith/train.jsonl      RL prompts (question + gold answer only; RL never sees a solution)
    data/tiny-qwen3/            config.json, model.safetensors, tokenizer.json, tokenizer_config.json

The splits, evaluation first (task_splits, issue 38). One generator (seed --seed) draws the held-out,
then the validation problems from the task's law, drawing again a problem whose key was drawn already
(nanoatr.data.arith_key: the numbers as a multiset and the answer; '15*63' is '63*15'): a sample of the
law with no key twice. It then draws the training problems, distinct as questions, skipping every
evaluation key; and the warm-start's stream of worked solutions (sft_stream, seed --seed + 1) skips
every evaluation key too. So neither RL nor the warm-start sees an evaluation problem, up to the order
of its numbers (tests/test_splits.py; scripts/split_overlap.py counts, for any copy of the files; before
issue 38 they were disjoint only as strings: docs/results.md, "Held out").

The policy is a ~0.8M-parameter Qwen3 trained by supervised learning on worked solutions (the
paper's formatting SFT; the loop is sft.py's, the one sft.py runs on real checkpoints) until its accuracy
on the validation problems (Mean@4 at temperature 1, every --check-every steps) first reaches --target.
Stopping on a measured accuracy, not a step count, keeps the starting point where RL has room to show a
gain: accuracy jumps late in this training, so a fixed step count over- or undershoots.

The shipped files are this build's (one thread): it stopped at step 725 (validation Mean@4 31.2%, from
23.6% at step 700) and printed held-out Mean@8 28.7%, Pass@8 68.8%. `python scripts/measure_task.py`
(train.py's step-0 evaluation): held-out Mean@8 28.7%, Pass@8 68.8%, 0.087 nats/token; validation
(--data data/arith/val.jsonl) 31.0%, 68.0%, 0.090.
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere without installing

import sft  # noqa: E402  (the repository's sft.py: the SFT step)
from nanoatr.machinery.flags import Parser  # noqa: E402  (one error line, flags only in full)
from nanoatr.data import Problem, arith_key  # noqa: E402
from nanoatr.evaluate import evaluate  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, init_weights  # noqa: E402
from nanoatr.tokenizer import load_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZES = {"heldout": 256, "val": 128, "train": 4096}  # problems per task file
EVALUATION = ("heldout", "val")                       # the evaluation splits, drawn first (task_splits)


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


def save_problems(path: str | Path, problems: list[Problem]) -> None:
    """Write problems as jsonl rows ``{"problem": ..., "answer": ...}`` (chat messages are not kept)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps({"problem": p.question, "answer": p.answer}, ensure_ascii=False) + "\n")


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


def evaluation_problem(rng: random.Random, taken: set, draw=make_problem, key=arith_key) -> Problem:
    """A problem of `draw`'s law (this task's make_problem; make_countdown.py passes its own, with its key)
    whose key is not in `taken`, then added to it: a key drawn again is drawn again, so the evaluation
    splits are a sample of the task's law without repeats."""
    while True:
        question, answer, _ = draw(rng)
        problem = Problem(question, answer)
        if key(problem) not in taken:
            taken.add(key(problem))
            return problem


def training_pool(rng: random.Random, n: int, excluded: set, draw=make_problem,
                  key=arith_key) -> list[Problem]:
    """n problems of `draw`'s law, distinct as questions, none whose key is in `excluded`."""
    seen, pool = set(), []
    while len(pool) < n:
        question, answer, _ = draw(rng)
        problem = Problem(question, answer)
        if question not in seen and key(problem) not in excluded:
            seen.add(question)
            pool.append(problem)
    return pool


def task_splits(seed: int) -> dict[str, list[Problem]]:
    """The task files, from one generator (seed), in this order: the evaluation splits first (EVALUATION,
    a sample of the task's law, no key twice), then the training pool, clear of their keys."""
    rng, taken, splits = random.Random(seed), set(), {}
    for name in EVALUATION:
        splits[name] = [evaluation_problem(rng, taken) for _ in range(SIZES[name])]
    splits["train"] = training_pool(rng, SIZES["train"], taken)
    return splits


def evaluation_keys(splits: dict[str, list[Problem]], names=EVALUATION, key=arith_key) -> set:
    """The keys of every evaluation split: what the training pool and the warm-start's stream never hold."""
    return {key(p) for name in names for p in splits[name]}


def sft_stream(seed: int, excluded: set, draw=make_problem, key=arith_key):
    """An endless stream of (question, worked solution) of `draw`'s law, skipping every problem whose key
    is in `excluded` (the evaluation keys: the warm-start never sees an evaluation problem)."""
    rng = random.Random(seed)
    while True:
        question, answer, solution = draw(rng)
        if key(Problem(question, answer)) not in excluded:
            yield question, solution


def char_tokenizer(chars: str, special=("<|pad|>", "<|endoftext|>", "<|unk|>"), words=()) -> Tokenizer:
    """A character-level tokenizer (a BPE model with no merges) that transformers loads: the special
    tokens, then one token per character, then whole `words` (e.g. "\\boxed{") as single tokens. The
    embedded tasks' models use it (data/make_*.py); so do the tests' tiny model directories."""
    vocab = {t: i for i, t in enumerate(special)}
    vocab.update({c: len(special) + i for i, c in enumerate(chars)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=special[-1]))
    tok.decoder = decoders.Fuse()  # characters join without spaces
    tok.add_special_tokens([AddedToken(t, special=True) for t in special])
    tok.add_tokens([AddedToken(w, normalized=False) for w in words])
    return tok


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


def write_tokenizer(out: Path):
    """Write OUT's tokenizer (tokenizer.json, tokenizer_config.json) and load it back."""
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2))
    return load_tokenizer(out)


def tiny_config(vocab_size: int) -> Qwen3Config:
    return Qwen3Config(vocab_size=vocab_size, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=10_000.0,
                       tie_word_embeddings=True, max_position_embeddings=256)


def warm_start(model, tok, splits: dict[str, list[Problem]], args) -> int:
    """The shared SFT (sft.py) on the worked-solution stream (seed --seed + 1), every evaluation key left
    out, until Mean@4 on the validation split first reaches --target."""
    stream = sft_stream(args.seed + 1, evaluation_keys(splits))
    return sft.warm_start(model, tok, stream, splits["val"], sft.Recipe(lr=args.lr),
                          batch_size=args.batch_size, max_steps=args.max_steps, check_every=args.check_every,
                          max_new_tokens=48, done=lambda step, acc: acc >= args.target)


def main():
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="seed of the task splits and of the training")
    ap.add_argument("--target", type=float, default=30.0,
                    help="stop when validation Mean@4 (%%) reaches this")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of the warm-start")
    ap.add_argument("--batch-size", type=int, default=64, help="worked solutions per step")
    ap.add_argument("--check-every", type=int, default=25, help="steps between validation checks")
    ap.add_argument("--max-steps", type=int, default=6000, help="give up after this many steps")
    ap.add_argument("--out", default=str(HERE / "tiny-qwen3"), help="where to write the policy and tokenizer")
    ap.add_argument("--only-splits", action="store_true",
                    help="only write the task files, data/arith/*.jsonl")
    args = ap.parse_args()
    torch.manual_seed(args.seed)

    splits = task_splits(args.seed)
    for name, problems in splits.items():
        save_problems(HERE / f"arith/{name}.jsonl", problems)
    if args.only_splits:
        return
    out = Path(args.out)
    tok = write_tokenizer(out)

    model = Qwen3(tiny_config(len(tok)))
    init_weights(model, seed=args.seed)
    print(f"warm-start of a {model.num_parameters() / 1e6:.2f}M-parameter Qwen3 "
          f"(max {args.max_steps} steps, target {args.target}%)", flush=True)
    steps = warm_start(model, tok, splits, args)
    model.save_pretrained(out)
    summary = evaluate(model, tok, splits["heldout"], k=8, max_new_tokens=48, temperature=1.0,
                       progress=False)[0]
    print(f"saved {out} after {steps} steps: held-out mean@8 {summary['mean@8']:.1f}%  "
          f"pass@8 {summary['pass@8']:.1f}%")


if __name__ == "__main__":
    main()
