"""The embedded default: disjoint splits, a tokenizer transformers loads, solutions the verifier accepts."""
import json
import random
import re
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from nanoatr.data import load_problems
from tiny import make_default as synthetic  # data/make_default.py
from nanoatr.verifier import verify

DATA = Path(__file__).resolve().parent.parent / "data"


def test_heldout_is_never_trained_on():
    split = {name: {p.question for p in load_problems(DATA / f"arith/{name}.jsonl")} for name in ("train", "val", "heldout")}
    assert len(split["heldout"]) >= 200, "Mean@8 on >= 200 problems keeps the noise near +-3 points"
    assert not split["heldout"] & split["train"] and not split["heldout"] & split["val"]
    assert not split["val"] & split["train"]
    # the warm-start's supervised stream skips every held-out and validation question
    stream = synthetic.sft_stream(1, split["heldout"] | split["val"])
    assert not {next(stream)[0] for _ in range(2000)} & (split["heldout"] | split["val"])


def arithmetic(question: str) -> int:
    """Left-to-right value of 'a*b' or 'a+b-c' (the task's two shapes)."""
    if "*" in question:
        a, b = question.split("*")
        return int(a) * int(b)
    terms = re.findall(r"[+-]?\d+", question)
    return sum(int(t) for t in terms)


def test_worked_solutions_verify_and_wrong_answers_do_not():
    rng = random.Random(0)
    for _ in range(200):
        question, answer, solution = synthetic.make_problem(rng)
        assert arithmetic(question) == int(answer)
        assert verify(solution, answer)
        assert not verify(solution, str(int(answer) + 1))


def test_shipped_tokenizer_loads_in_transformers_and_round_trips():
    tok = PreTrainedTokenizerFast(tokenizer_file=str(DATA / "tiny-qwen3/tokenizer.json"))
    text = "57+38=95;95-21=74;\\boxed{74}"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids).count("\\boxed{") == 1  # one token, not seven


def test_shipped_tokenizer_matches_the_generator():
    """data/tiny-qwen3/tokenizer.json is exactly what synthetic.build_tokenizer() makes."""
    shipped = json.loads((DATA / "tiny-qwen3/tokenizer.json").read_text())
    assert json.loads(synthetic.build_tokenizer().to_str()) == shipped
