"""The embedded default: disjoint splits, a tokenizer transformers loads, solutions the verifier accepts."""
import json
import random
import re
import sys
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from nanoatr.data import Problem, arith_key, load_problems
from tiny import make_default as synthetic  # data/make_default.py
from nanoatr.verifier import verify

DATA = Path(__file__).resolve().parent.parent / "data"


def test_task_files_are_rebuilt_byte_for_byte(tmp_path, monkeypatch):
    """`python data/make_default.py --only-splits` (its data/ made tmp_path): the task files, held-out and
    validation drawn first (a sample of the task's law, no key twice; issue 38), then train.jsonl clear of
    their keys (tests/test_splits.py)."""
    monkeypatch.setattr(synthetic, "HERE", tmp_path)
    monkeypatch.setattr(sys, "argv", ["make_default.py", "--only-splits"])
    synthetic.main()
    written = sorted(p.name for p in tmp_path.rglob("*"))
    assert written == ["arith", "heldout.jsonl", "train.jsonl", "val.jsonl"], written
    splits = {}
    for name in ("heldout", "val", "train"):
        path = tmp_path / f"arith/{name}.jsonl"
        assert path.read_bytes() == (DATA / f"arith/{name}.jsonl").read_bytes(), name
        splits[name] = load_problems(path, dedupe=False)
    assert len(splits["heldout"]) >= 200, "Mean@8 on >= 200 problems keeps the noise near +-3 points"
    for problems in splits.values():
        assert 0.44 < sum("*" in p.question for p in problems) / len(problems) < 0.56  # half multiplications


def test_a_key_drawn_before_is_drawn_again():
    """With the keys of a generator's first 30 problems taken, the same generator's evaluation problems are
    its problems 31-90 (those 90 have distinct keys): each of the first 30 is drawn again, nothing else is
    skipped, and every key drawn is taken. The training pool skips the excluded keys the same way."""
    rng = random.Random(0)
    first = [Problem(q, a) for q, a, _ in (synthetic.make_problem(rng) for _ in range(90))]
    assert len({arith_key(p) for p in first}) == 90
    taken = {arith_key(p) for p in first[:30]}
    rng = random.Random(0)
    assert [synthetic.evaluation_problem(rng, taken) for _ in range(60)] == first[30:]
    assert taken == {arith_key(p) for p in first}
    excluded = {arith_key(p) for p in first[:30]}
    assert synthetic.training_pool(random.Random(0), 60, excluded) == first[30:]


def test_the_training_pool_has_distinct_questions_and_no_excluded_key():
    small = {arith_key(Problem(f"{a}*{b}", str(a * b))) for a in range(10, 50) for b in range(10, 50)}
    pool = synthetic.training_pool(random.Random(1), 500, excluded=small)
    multiplications = [p for p in pool if "*" in p.question]
    assert len({p.question for p in pool}) == 500 and len(multiplications) > 150
    assert not {arith_key(p) for p in pool} & small


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


def test_shipped_tokenizer_matches_the_generator():
    """data/tiny-qwen3/tokenizer.json is synthetic.build_tokenizer()'s; transformers loads it, round-trips."""
    shipped = json.loads((DATA / "tiny-qwen3/tokenizer.json").read_text())
    assert json.loads(synthetic.build_tokenizer().to_str()) == shipped
    tok = PreTrainedTokenizerFast(tokenizer_file=str(DATA / "tiny-qwen3/tokenizer.json"))
    text = "57+38=95;95-21=74;\\boxed{74}"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids).count("\\boxed{") == 1  # one token, not seven
