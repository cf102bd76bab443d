r"""The Countdown task: its reward (nanoatr/verifier/countdown.py; hand-checked and adversarial cases), its
generator (data/countdown_puzzle.py, data/make_countdown.py), the shipped files, and --task countdown end to end."""
import json
import random
import time
from fractions import Fraction
from pathlib import Path

import pytest

from nanoatr.data import TASKS, Problem, countdown_key, load_problems
from nanoatr.rewards import countdown_reward
from nanoatr.verifier.countdown import evaluate_expression, parse_answer, reward
from tiny import make_default  # noqa: F401  (puts data/ on the path)
import make_countdown as countdown  # noqa: E402  (data/make_countdown.py)
import countdown_puzzle as puzzle  # noqa: E402  (data/countdown_puzzle.py)
from conftest import jsonl, strict_file  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data"
B = "\\boxed{"


def box(expr: str) -> str:
    return f"some steps;{B}{expr}}}"


# ---------------------------------------------------------------------------------------------
# hand-checked


T = "3,5,8:19"  # the numbers 3, 5, 8 and the target 19


@pytest.mark.parametrize("expr, answer", [
    ("(8*3)-5", T),                        # 24-5
    ("8*3-5", T),                          # precedence: * before -
    ("3*8-5", T),
    ("(3*8)-5", T),
    ("3*(8)-5", T),                        # redundant parentheses
    (" 8 * 3 - 5 ", T),                    # spaces
    ("((8*3)-5)", T),
    ("(7*3)+5", "7,3,5:26"),
    ("(5+(1+7))*7", "7,7,1,5:91"),        # repeated number used as often as listed
    ("2*2+5", "2,2,5:9"),
    ("(8-5)*(10+6)", "10,6,8,5:48"),
    ("8/(3-8/3)", "3,3,8,8:24"),          # the classic: a fraction on the way, 8/(1/3) = 24
    ("(6/4)*16", "4,6,16:24"),            # 3/2 * 16
    ("8/2+1", "1,2,8:5"),
    ("1/2*8", "1,2,8:4"),                 # exact fractions, no float rounding
    ("1/3*3*1", "1,1,3,3:1"),
    ("(2-2)/8", "2,2,8:0"),               # 0/8 is fine
    ("5-5", "5,5:0"),                     # target zero
    ("3-5", "3,5:-2"),                    # target negative
    ("100-1", "1,100:99"),
    ("7", "7:7"),                         # one number
])
def test_hand_checked_solutions(expr, answer):
    assert reward(box(expr), answer) == 1.0


@pytest.mark.parametrize("expr, answer, why", [
    ("8*3+5", T, "wrong value (29)"),
    ("8*3", T, "number 5 not used"),
    ("8*3-5-5", T, "5 used twice"),
    ("8*3-4", T, "4 is not one of the numbers"),
    ("8*3-5+0", T, "0 is not one of the numbers"),
    ("24-5", T, "24 is not one of the numbers"),
    ("19", T, "the target alone"),
    ("83-5", T, "digits glued into a new number"),
    ("-5+8*3", T, "unary minus"),
    ("8*-3-5", T, "unary minus inside"),
    ("8*3-(5)(1)", T, "implicit product"),
    ("8^3-5", T, "power"),
    ("8**3-5", T, "python power"),
    ("8*3-5.0", T, "decimal"),
    ("(8*3-5", T, "unbalanced"),
    ("8*3-5)", T, "unbalanced"),
    ("8*3-5=19", T, "an equation, not an expression"),
    ("", T, "empty"),
    ("x", T, "a variable"),
    ("8×3-5", T, "unicode times"),
    ("８*3-5", T, "fullwidth digit"),
    ("²*3-5", T, "superscript digit"),
    ("2*4+1", "2,2,5:9", "4 is not one of the numbers"),
    ("2+2+5", "2,5:9", "2 given once, used twice"),
    ("9", "2,2,5:9", "the target alone"),
    ("8/(2-2)", "2,2,8:0", "division by zero scores 0, never raises"),
    ("8/(2-2)*0", "0,2,2,8:0", "division by zero, even times 0"),
])
def test_wrong_expressions_score_zero(expr, answer, why):
    assert reward(box(expr), answer) == 0.0, why


def test_only_the_last_box_counts():
    right, wrong = f"{B}(8*3)-5}}", f"{B}8+3+5}}"
    assert reward(wrong + ";" + right, "3,5,8:19") == 1.0
    assert reward(right + ";" + wrong, "3,5,8:19") == 0.0
    assert reward(right + ";" + B + "(8*3)-5", "3,5,8:19") == 0.0  # the last box is unclosed: truncated output


def test_text_around_the_box():
    assert reward(f"8*3=24;24-5=19;{B}(8*3)-5}}", "3,5,8:19") == 1.0
    assert reward(f"{B}(8*3)-5}} and then some text 123", "3,5,8:19") == 1.0
    assert reward("(8*3)-5", "3,5,8:19") == 0.0  # no box, no answer
    assert reward("\\boxed (8*3)-5", "3,5,8:19") == 0.0
    assert reward(f"{B}{{(8*3)-5}}}}", "3,5,8:19") == 0.0  # braces are not parentheses


# ---------------------------------------------------------------------------------------------
# adversarial: never raises, bounded time


def test_malformed_answers_and_non_string_completions_score_zero():
    assert parse_answer(" 3,8,5,2,1,1,1,1:9 ") == ([3, 8, 5, 2, 1, 1, 1, 1], 9)  # MAX_NUMBERS, not one more:
    assert parse_answer("3,5") is parse_answer("x:1") is parse_answer("3,8,5,2,1,1,1,1,1:9") is None
    for answer in ["", ":", "3,5", "3,5:", ":19", "a,b:c", "3,,5:8", "3,5:8:9", "3;5:8", None, 19, "1" * 300,
                   ",".join(["1"] * 20) + ":20", "3,5:99999999999", "-3,5:2"]:
        assert reward(box("3+5"), answer) == 0.0, answer
    for c in [None, 123, b"\\boxed{3+5}", ["\\boxed{3+5}"]]:  # completions that are not text
        assert reward(c, "3,5:8") == 0.0


def test_huge_numbers_are_refused_not_computed():
    assert reward(box("9999999*9999999"), "9999999,9999999:99999980000001") == 0.0
    assert evaluate_expression("1" * 7 + "+1") is None   # literal longer than 6 digits
    assert evaluate_expression("999999*999999") == (Fraction(999999 * 999999), [999999, 999999])
    t0 = time.perf_counter()
    # as many multiplications as characters allow: the literal cap bounds the number of factors
    assert evaluate_expression("*".join(["999999"] * 28)) is None
    assert reward(box("*".join(["999999"] * 28)), ",".join(["999999"] * 8) + ":1") == 0.0
    assert time.perf_counter() - t0 < 1.0


def test_deep_nesting_is_refused():
    assert evaluate_expression("(" * 12 + "1" + ")" * 12) == (Fraction(1), [1])
    assert evaluate_expression("(" * 13 + "1" + ")" * 13) is None
    for depth in [50, 1000, 100_000]:
        assert reward(box("(" * depth + "3+5" + ")" * depth), "3,5:8") == 0.0
        assert reward(box("(" * depth), "3,5:8") == 0.0


def test_long_and_garbage_strings_are_fast_and_zero():
    rng = random.Random(0)
    alphabet = "0123456789+-*/()[]{}\\ =;:.,abxed"
    t0 = time.perf_counter()
    for n in [1, 10, 100, 1000, 100_000]:
        for _ in range(20):
            junk = "".join(rng.choice(alphabet) for _ in range(n))
            assert reward(junk, "3,5,8:19") in (0.0, 1.0)
            assert reward(B + junk + "}", "3,5,8:19") in (0.0, 1.0)
    nested = B * 100 + "3+5" + "}" * 100  # the last box is the innermost one: \boxed{3+5}
    assert reward(nested, "3,5:8") == 1.0
    assert reward(B * 100_000 + "3+5" + "}" * 100_000, "3,5:8") == 0.0  # no box in the searched tail
    assert reward(B * 100_000 + "3+5", "3,5:8") == 0.0  # none closed
    assert reward("x" * 10_000_000 + box("3+5"), "3,5:8") == 1.0  # only the tail is read
    assert reward(box("3+5" + " " * 1000), "3,5:8") == 0.0  # over MAX_EXPR_CHARS
    assert reward(box("1+" * 100 + "1"), "1,1:2") == 0.0  # too many literals: refused early
    assert time.perf_counter() - t0 < 10.0


def test_random_expressions_never_raise():
    rng = random.Random(1)
    tokens = ["1", "2", "3", "0", "10", "+", "-", "*", "/", "(", ")", " ", "99999", "x", "."]
    for _ in range(3000):
        expr = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 30)))
        assert reward(box(expr), "1,2,3:6") in (0.0, 1.0)
        r = evaluate_expression(expr)
        assert r is None or isinstance(r[0], Fraction)


# ---------------------------------------------------------------------------------------------
# the generator


SPEC = puzzle.Spec(n_numbers=4, high=10, max_value=100, min_target=10, fmt="expr")


def test_generated_solutions_are_correct_and_wrong_targets_fail():
    rng = random.Random(0)
    for _ in range(200):
        question, answer, solution = puzzle.make_problem(rng, SPEC)
        assert question == answer
        numbers, target = parse_answer(answer)
        assert len(numbers) == 4 and all(1 <= n <= 10 for n in numbers) and 10 <= target <= 100
        assert reward(solution, answer) == 1.0
        assert reward(solution, ",".join(map(str, numbers)) + f":{target + 1}") == 0.0
        steps = solution.split(B)[0].rstrip(";").split(";")
        assert len(steps) == 3  # one step per combination


def test_solutions_are_many_and_all_correct():
    numbers, target = [3, 5, 8, 2], 19
    sols = puzzle.solutions(numbers, target, 100)
    assert len(sols) >= 10 and len(set(sols)) == len(sols)
    assert all(reward(s, "3,5,8,2:19") == 1.0 for s in sols)


# ---------------------------------------------------------------------------------------------
# the shipped task


def test_shipped_rl_prompts_are_the_pools_in_its_order():
    pool = [p.question for p in load_problems(DATA / "countdown/train.jsonl")]
    rl = [p.question for p in load_problems(DATA / "countdown/rl.jsonl")]
    assert 0.4 * len(pool) < len(rl) < 0.7 * len(pool)  # 42% never solved, a few always
    position = {q: i for i, q in enumerate(pool)}
    assert all(q in position for q in rl) and [position[q] for q in rl] == sorted(position[q] for q in rl)


def test_pass_rate_filter_keeps_the_sometimes_solved(monkeypatch):
    pool = [Problem(f"{i},1,1,1:{10 + i}", f"{i},1,1,1:{10 + i}") for i in range(10)]
    solved = {0: 0, 1: 1, 2: 7, 3: 8, 4: 4}  # problem -> how many of its 8 samples are right (0 if unnamed)

    def fake_evaluate(model, tok, problems, k, **kw):
        assert k == countdown.FILTER_SAMPLES and kw["seed"] == countdown.FILTER_SEED and not kw["progress"]
        assert kw["max_new_tokens"] == TASKS["countdown"].max_new_tokens and kw["rewards"].functions == (countdown_reward,)
        return {"mean@8": 0.0, "correct": [solved.get(i, 0) for i in range(len(problems))]}, []
    monkeypatch.setattr(countdown, "evaluate", fake_evaluate)
    monkeypatch.setattr(countdown, "eos_token_ids", lambda tok, model_dir: [0])
    assert countdown.pass_rate_filter(None, None, Path("m"), pool) == [pool[1], pool[2], pool[4]]


def test_shipped_tokenizer_matches_the_generator():
    shipped = json.loads((DATA / "tiny-qwen3-countdown/tokenizer.json").read_text())
    assert json.loads(make_default.build_tokenizer().to_str()) == shipped
    for folder, config in [("tiny-qwen3-countdown", lambda v: countdown.model_config(v, 128, 4)),
                           ("tiny-qwen3", make_default.tiny_config)]:  # the shipped models' shapes
        cfg = json.loads((DATA / folder / "config.json").read_text())
        assert all(cfg.get(k) == v for k, v in vars(config(cfg["vocab_size"])).items()), folder


def test_search_traces_end_in_a_correct_expression():
    spec = puzzle.Spec(n_numbers=4, high=10, max_value=100, min_target=10, fmt="search", max_attempts=4)
    rng = random.Random(0)
    attempts = []
    for _ in range(200):
        _, answer, trace = puzzle.make_problem(rng, spec)
        assert reward(trace, answer) == 1.0
        body = trace.split(B)[0]
        assert body.endswith(";") and 1 <= body.count(";") <= 4
        attempts.append(body.count(";"))
        *failed, last = body[:-1].split(";")
        assert len(last.split(",")) == 3  # the successful attempt combines all four numbers
        assert all(len(a.split(",")) == 2 for a in failed)  # a failed one stops when two values are left
    assert set(attempts) == {1, 2, 3, 4}  # some traces succeed at once, some search


# ---------------------------------------------------------------------------------------------
# --task countdown: one flag picks the warm-start, the files, the budget and the reward


def test_task_defaults_and_reward_reach_train_and_eval(tmp_path):
    import eval as eval_cmd
    import train
    assert TASKS["countdown"].reward is countdown_reward and TASKS["math"].reward is not countdown_reward
    train.main(["--task", "countdown", "--steps", "1", "--prompts-per-step", "8", "--group-size", "4",
                "--eval-data", "--no-compile", "--out-dir", str(tmp_path), "--name", "cd", "--threads", "1"])
    config = strict_file(tmp_path / "cd/config.json")
    assert (config["model"], config["data"], config["max_new_tokens"]) == \
        ("data/tiny-qwen3-countdown", "data/countdown/rl.jsonl", 96)
    row = jsonl(tmp_path / "cd/metrics.jsonl")[-1]
    assert row["accuracy"] > 0  # the math verifier would grade every expression wrong: 0.0
    out = tmp_path / "eval.jsonl"
    eval_cmd.main(["--task", "countdown", "--limit", "8", "--k", "4", "--out", str(out)])
    rows = jsonl(out)[1:]
    assert len(rows) == 64 and any(r["correct"] for r in rows)  # 8 x 4 of each file: held-out and transfer
    assert all(r["correct"] == (reward(r["completion"], r["gold"]) > 0) for r in rows)
    assert [r["benchmark"] for r in rows[::32]] == ["heldout", "transfer"]


def test_transfer_split_is_disjoint_and_solvable():
    """data/countdown/transfer.jsonl (make_countdown.make_transfer): none of its problems is in another split
    (numbers in any order, same target); each target is in 10..100 and reachable under the reward's rules
    (checked here by a found expression that reward() accepts)."""
    others = {countdown_key(p) for s in ("train", "val", "heldout")
              for p in load_problems(DATA / f"countdown/{s}.jsonl")}
    transfer = load_problems(DATA / "countdown/transfer.jsonl")
    keys = {countdown_key(p) for p in transfer}
    assert len(keys) == 256 and not others & keys
    for p in transfer[:40]:
        numbers, target = countdown_key(p)
        assert 10 <= target <= 100 and all(1 <= n <= 10 for n in numbers)
        assert any(v == target for v in puzzle.reachable(numbers))
    # reachable() is the reward's rules: 8 / (3 - 8 / 3) = 24 needs a fraction on the way
    assert 24 in puzzle.reachable((3, 3, 8, 8)) and reward("\\boxed{8/(3-8/3)}", "3,3,8,8:24") == 1.0
    assert 24 not in puzzle.integer_reachable((3, 3, 8, 8), 100)
    assert puzzle.integer_reachable((10, 11), 100) == {1, 21}  # 11 - 10, 10 + 11; not 10 * 11 > 100


def test_a_transfer_problem_has_its_laws_numbers_and_target_and_skips_excluded_keys():
    first = countdown.make_transfer(5, 30, SPEC, set())
    assert len({countdown_key(p) for p in first}) == 30
    again = countdown.make_transfer(5, 20, SPEC, {countdown_key(p) for p in first[:10]})
    assert again == first[10:30]  # the same generator, the first 10 skipped
    for p in first:
        numbers, target = countdown_key(p)
        assert p.question == p.answer and len(numbers) == 4 and all(1 <= n <= 10 for n in numbers)
        assert 10 <= target <= 100 and target in puzzle.reachable(numbers)
