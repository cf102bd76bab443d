"""The embedded default task: integer arithmetic with a short worked solution ending in \\boxed{}.

Two kinds of problem, about equally often:
    57+38-21   ->  57+38=95;95-21=74;\\boxed{74}
    47*36      ->  47*30=1410;47*6=282;1410+282=1692;\\boxed{1692}
The worked solutions are the warm-start's supervised data (the paper's formatting SFT); RL then only
sees the question and a reward from the verifier, so any gain comes from reinforcement.
"""
import random

# Every character the task uses, plus a few the model might emit; '\boxed{' is one token.
CHARS = "0123456789+-*/=;:.,()[]{}\\ "
SPECIAL = ["<|pad|>", "<|endoftext|>", "<|unk|>"]
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
    """A character-level tokenizer (a BPE model with no merges) that transformers loads."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    vocab = {t: i for i, t in enumerate(SPECIAL)}
    vocab.update({c: len(SPECIAL) + i for i, c in enumerate(CHARS)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<|unk|>"))
    tok.decoder = decoders.Fuse()  # characters join without spaces
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tok.add_tokens([AddedToken(BOXED, normalized=False)])
    return tok


TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "eos_token": "<|endoftext|>",
    "pad_token": "<|pad|>",
    "unk_token": "<|unk|>",
    "chat_template": CHAT_TEMPLATE,
    "model_max_length": 256,
}
