"""The embedded default: disjoint splits, a tokenizer transformers loads, solutions the verifier accepts."""
import json
import random
import re
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from nanoatr.data import Problem, arith_key, save_problems
from tiny import make_default as synthetic  # data/make_default.py
from nanoatr.verifier import verify

DATA = Path(__file__).resolve().parent.parent / "data"


def test_task_files_are_rebuilt_byte_for_byte(tmp_path):
    """train.jsonl is make_default.py's first draw's training part; heldout.jsonl and val.jsonl are drawn
    afresh, clear of it up to the key (issue 38; tests/test_splits.py), with the generator's kind mix."""
    first = synthetic.make_splits(0, synthetic.SIZES)
    splits = {"train": first["train"], **synthetic.eval_splits(0, first["train"])}
    for name, rows in splits.items():
        save_problems(tmp_path / f"{name}.jsonl", [Problem(q, a) for q, a, _ in rows])
        assert (tmp_path / f"{name}.jsonl").read_bytes() == (DATA / f"arith/{name}.jsonl").read_bytes(), name
    assert len(splits["heldout"]) >= 200, "Mean@8 on >= 200 problems keeps the noise near +-3 points"
    evaluation = splits["heldout"] + splits["val"]
    assert 0.45 < sum("*" in q for q, _, _ in evaluation) / len(evaluation) < 0.6  # half multiplications


def test_a_taken_problem_is_redrawn_within_its_kind():
    """fresh_problem keeps the kind drawn: with all but 30 multiplications taken, about half of the fresh
    problems are still multiplications (redrawing the kind too would make nearly all of them additions)."""
    free = {arith_key(Problem(f"{a}*99", str(a * 99))) for a in range(10, 40)}
    every = {arith_key(Problem(f"{a}*{b}", str(a * b))) for a in range(10, 100) for b in range(a, 100)}
    rng, taken = random.Random(0), every - free
    fresh = [synthetic.fresh_problem(rng, taken) for _ in range(40)]
    multiplications = [arith_key(Problem(q, a)) for q, a, _ in fresh if "*" in q]
    assert 10 <= len(multiplications) <= 30 and set(multiplications) <= free
    keys = {arith_key(Problem(q, a)) for q, a, _ in fresh}
    assert len(keys) == 40 and keys <= taken  # none twice, and each one taken once drawn


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
