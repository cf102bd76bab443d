"""nanoatr/rewards.py: reward functions of TRL's shape from a file or a module, their keyword arguments
(standard and conversational rows), weights and None as TRL combines them, every bad function or return as
one line, and train.py / eval.py with them end to end (a reward failing mid-run keeps the steps done)."""
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import eval as eval_cli
import train
from nanoatr.machinery import checkpoint
from nanoatr.machinery.flags import ConfigError
from nanoatr.data import TASKS, Problem, load_problems
from nanoatr import rewards as rewards_module
from nanoatr.rewards import RewardError, Rewards, countdown_reward, math_reward
from nanoatr.machinery.reward_loader import from_flags, judged
from nanoatr.verifier import countdown, verify
from conftest import error_line, jsonl, metrics, strict_file

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(ROOT / "data/arith/train.jsonl"),
        "--eval-data", "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "24", "--no-compile",
        "--threads", "1"]
STANDARD = Problem("What is 2+3?", "5", fields={"answer": "5", "level": 1})  # a problem/answer row
CHAT = Problem("What is 2+3?", "5", [{"role": "user", "content": "What is 2+3?"}],
               {"reward_model": {"ground_truth": "5"}, "id": 7})  # a DAPO row: its prompt a chat


@pytest.fixture
def write(tmp_path):
    """write(name, source): a reward file in tmp_path; the modules it loads are forgotten afterwards (each
    test a fresh process, as far as imports go)."""
    names = []

    def write(name: str, source: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        names.append(path.stem)
        return path
    yield write
    for name in names:  # only our own: a file named like a loaded module never replaces it
        if str(getattr(sys.modules.get(name), "__file__", "")).startswith(str(tmp_path)):
            del sys.modules[name]


def score(fn, problems, texts):
    return Rewards.of(fn).per_function(problems, texts, [[1, 2]] * len(texts))


# ----------------------------------------------------------------------------
# TRL's shape

def test_a_function_gets_trls_keyword_arguments_one_entry_per_completion():
    seen = {}

    def spy(**kwargs):
        seen.update(kwargs)
        return [0.0] * len(kwargs["completions"])
    Rewards.of(spy).per_function([STANDARD, CHAT], ["so \\boxed{5}", "it is \\boxed{6}"], [[11, 12], [13]])
    assert seen["prompts"] == ["What is 2+3?", [{"role": "user", "content": "What is 2+3?"}]]
    assert seen["completions"] == ["so \\boxed{5}", [{"role": "assistant", "content": "it is \\boxed{6}"}]]
    assert seen["completion_ids"] == [[11, 12], [13]]
    assert seen["answer"] == ["5", "5"]  # the row's answer column as read; a row without one (DAPO's): the gold
    assert seen["level"] == [1, None] and seen["id"] == [None, 7]  # every column; None where a row has none
    assert seen["reward_model"] == [None, {"ground_truth": "5"}]
    assert seen["trainer_state"] is None  # outside a run (eval.py); a run's: the next test
    assert set(seen) == {"prompts", "completions", "completion_ids", "answer", "level", "id", "reward_model",
                         "trainer_state"}


def test_columns_reach_a_reward_as_in_the_data_and_the_answer_field_feeds_only_the_built_in(tmp_path):
    """Rows with `answer` "ANS:450" and `solution` "$450$", read with --answer-field solution: your reward
    gets both columns as written (TRL passes every column as it is); the built-in verifier grades against
    the gold, solution's 450, not against the answer column."""
    data = tmp_path / "both.jsonl"
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "15*30"}], "answer": "ANS:450",
                                "solution": "$450$"}) + "\n")
    seen = {}

    def yours(completions, answer, solution, **kwargs):
        seen.update(answer=answer, solution=solution)
        return [0.0] * len(completions)
    problems = load_problems(data, answer_field="solution")
    scores = Rewards((yours, math_reward), ("yours", "math_reward"), (1.0, 1.0)).per_function(
        problems, ["so \\boxed{450}"], [[1]])
    assert seen == {"answer": ["ANS:450"], "solution": ["$450$"]}
    assert scores[0].tolist() == [0.0, 1.0]  # math_reward graded 450 against the gold $450$


def test_a_function_is_told_the_runs_progress_as_trls_trainer_state():
    """TRL passes trainer_state (transformers' TrainerState: a curriculum reads .global_step); it is one value,
    not a list, so the search for the row that makes a function raise passes it whole."""
    seen = []

    def curriculum(completions, trainer_state, **kwargs):
        seen.append((trainer_state.global_step, trainer_state.max_steps))
        if trainer_state.global_step >= 8 and "6" in completions:
            raise ValueError("too hard")
        return [1.0] * len(completions)
    rewards = Rewards.of(curriculum)
    assert rewards.at(4, 32).per_function([STANDARD], ["5"], [[1]]).tolist() == [[1.0]] and seen == [(4, 32)]
    assert rewards.state is None  # .at is a copy
    with pytest.raises(RewardError, match=r"curriculum raised ValueError: too hard on row 1 of 2"):
        rewards.at(8, 32).per_function([STANDARD] * 2, ["5", "6"], [[1]] * 2)


def test_each_function_gets_its_own_copy_of_every_argument():
    """A function that edits its lists in place (TRL users write such code) changes nothing the next function
    grades, nor the problems: answer, completions, completion ids, prompts (a chat's messages too) and every
    column (a dict in one too) are each function's own."""
    def grade_then_blank(completions, answer, completion_ids, prompts, level, reward_model, **kwargs):
        answer[:] = ["wrong"] * len(answer)
        completions[0], completion_ids[0][0], prompts[0], level[0] = "x", -1, "p", 99
        prompts[1][0]["content"], reward_model[1]["ground_truth"] = "changed", "changed"
        return [0.0] * len(completions)
    seen = []

    def spy(completions, answer, completion_ids, prompts, level, **kwargs):
        seen.append((completions, answer, completion_ids, prompts, level))
        return [float(a in c) for c, a in zip(completions, answer)]
    scores = Rewards((grade_then_blank, spy), ("a", "b"), (1.0, 1.0)).per_function(
        [STANDARD, CHAT], ["so 5", "6"], [[11, 12], [13]])
    chat = [{"role": "user", "content": "What is 2+3?"}]
    assert seen == [(["so 5", [{"role": "assistant", "content": "6"}]], ["5", "5"], [[11, 12], [13]],
                     ["What is 2+3?", chat], [1, None])]
    assert scores[:, 1].tolist() == [1.0, 0.0] and CHAT.messages == chat
    assert CHAT.fields["reward_model"] == {"ground_truth": "5"}


@pytest.mark.parametrize("empty", [lambda xs: xs.clear(), lambda xs: xs.__setitem__(slice(None), [None] * len(xs))])
def test_a_function_that_empties_its_lists_then_raises_is_one_line_naming_the_row(empty):
    """The error line describes the row from the batch as given, not from what the function left of it."""
    def vandal(completions, answer, **kwargs):
        wrong = [c for c in completions if c != "a"]
        empty(completions), empty(answer)
        if wrong:
            raise ValueError("bad")
        return [0.0] * len(answer)
    with pytest.raises(RewardError, match=r"vandal raised ValueError: bad on row 1 of 2 \(problem 'What is "
                                          r"2\+3\?', completion 'b'\)$"):
        score(vandal, [STANDARD, STANDARD], ["a", "b"])


def test_the_built_in_rewards_are_the_verifiers():
    texts = ["so \\boxed{5}", "\\boxed{5.0}", "\\boxed{6}", "no answer", "\\boxed{(8*3)-5}", "\\boxed{8*3-4}"]
    golds = ["5", "5", "5", "5", "3,5,8:19", "3,5,8:19"]
    assert math_reward(texts, golds) == [float(verify(t, g)) for t, g in zip(texts, golds)] == \
        [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert countdown_reward(texts, golds) == [countdown.reward(t, g) for t, g in zip(texts, golds)] == \
        [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert TASKS["math"].reward is math_reward and TASKS["countdown"].reward is countdown_reward


# ----------------------------------------------------------------------------
# Several functions: weights, None

def test_the_total_is_the_weighted_sum_with_none_left_out_as_trl_does():
    """TRL: rewards_per_func (None as NaN) times reward_weights, nansum over the functions; a completion no
    function scores gets 0. By hand, weights 1 and 0.5:
      row 0: 1.0 + 0.5 x 0.5 = 1.25   row 1: (None) + 0.5 x 2 = 1.0   row 2: None, None: 0
      row 3: -1 + 0.5 x True (1) = -0.5"""
    f = lambda completions, **kwargs: [1.0, None, None, -1]
    g = lambda completions, **kwargs: (0.5, 2, None, True)  # any sequence; a bool is 1 or 0, as in TRL
    rewards = Rewards((f, g), ("f", "g"), (1.0, 0.5))
    scores = rewards.per_function([STANDARD] * 4, ["a", "b", "c", "d"], [[1]] * 4)
    assert scores.shape == (4, 2) and scores.dtype == torch.float32
    assert [[None if math.isnan(x) else x for x in r] for r in scores.tolist()] == \
        [[1.0, 0.5], [None, 2.0], [None, None], [-1.0, 1.0]]
    assert rewards.total(scores).tolist() == [1.25, 1.0, 0.0, -0.5]


def test_a_total_that_overflows_is_not_finite_rather_than_unscored():
    """A reward finite as a Python float can overflow float32 (1e300: inf); weight 0 times it is NaN, which
    a nansum would drop as if unscored, a silent 0. The total keeps it (loss.check_finite stops the run on
    it); a None, unscored, is still left out."""
    f = lambda completions, **kwargs: [1e300, None, 1.0]
    g = lambda completions, **kwargs: [1.0, 2.0, 1e300]
    rewards = Rewards((f, g), ("f", "g"), (0.0, 1.0))
    total = rewards.total(rewards.per_function([STANDARD] * 3, ["a", "b", "c"], [[1]] * 3))
    assert math.isnan(total[0]) and total[1] == 2.0 and total[2] == math.inf


def test_weights_and_names_come_from_the_flags_functions_from_a_file_or_a_module(write, monkeypatch):
    path = write("user_reward_two.py", """
        def short(completions, **kwargs):
            return [1.0 if len(c) < 3 else 0.0 for c in completions]

        def has_five(completions, answer, **kwargs):
            return [1.0 if a in c else None for c, a in zip(completions, answer)]
        """)
    write("user_reward_module.py", "def exact(completions, answer, **kwargs):\n"
                                   "    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n")
    monkeypatch.syspath_prepend(str(path.parent))  # MODULE:FUNCTION, a module on the path
    rewards = from_flags([f"{path}:short", f"{path}:has_five", "user_reward_module:exact"], [2.0, -0.5, 1.0],
                         math_reward)
    assert rewards.names == ("short", "has_five", "exact") and rewards.weights == (2.0, -0.5, 1.0)
    assert rewards.functions[0].__module__ == rewards.functions[1].__module__  # the file imported once
    totals = rewards.total(rewards.per_function([STANDARD] * 4, [" 5", "15 is it", "x", "five"], [[1]] * 4))
    assert totals.tolist() == [2 - 0.5 + 1, -0.5, 2.0, 0.0]  # 2 x short - 0.5 x has_five (None left out) + exact
    default = from_flags([], [], math_reward)
    assert (default.functions, default.names, default.weights) == ((math_reward,), ("math_reward",), (1.0,))
    assert from_flags([], [3.0], countdown_reward).weights == (3.0,)


# ----------------------------------------------------------------------------
# Every bad function or return: one line naming the function and the row

PROBLEMS = [Problem(f"q{i}", str(i)) for i in range(3)]


@pytest.mark.parametrize("body, message", [
    ("return [1.0 / (c != 'boom') for c in completions]",
     "reward function bad raised ZeroDivisionError: float division by zero on row 1 of 3 (problem 'q1', "
     "completion 'boom')"),
    # one line: a word over 100 characters cut to its first 40, the whole error to 300 characters
    ("raise ValueError('on two\\nlines ' + 'a' * 101 + (' ' + 'b' * 100) * 3)",
     f"bad raised ValueError: on two lines {'a' * 40}... {'b' * 100} {'b' * 100} {'b' * 29} on row 0 of 3"),
    ("return [1.0, 2.0]", "reward function bad returned 2 rewards for 3 completions"),
    ("return 1.0", "reward function bad returned a float, not a list of one reward per completion (3)"),
    ("return 'abc'", "reward function bad returned a str, not a list"),
    ("return [1.0, float('nan'), 0.0]", "reward function bad returned nan for row 1 of 3 (problem 'q1', "
     "completion 'boom'): a reward is finite (None leaves a completion unscored)"),
    ("return [1.0, 0.0, float('-inf')]", "reward function bad returned -inf for row 2 of 3"),
    ("return [10 ** 400, 0.0, 0.0]", "reward function bad returned 1000"),
    ("return ['1.0', 0.0, 0.0]", "reward function bad returned a str ('1.0') for row 0 of 3 (problem 'q0', "
     "completion 'a'): a reward is a number, or None"),
    ("return [0.0, 0.0, [1.0]]", "reward function bad returned a list ([1.0]) for row 2 of 3"),
    # a generator runs inside the call: its error is the function's, not a crash
    ("return (1.0 / (c != 'boom') for c in completions)",
     "reward function bad raised ZeroDivisionError: float division by zero on row 1 of 3"),
    ("import numpy\n    return numpy.array(1.0)",
     "reward function bad returned a ndarray, not a list of one reward per completion (3)"),
    ("import numpy\n    return numpy.ones((3, 1))",
     "reward function bad returned a ndarray (array([1.])) for row 0"),
    ("if len(completions) > 1:\n        raise MemoryError('too many')\n    return [0.0]",  # each row alone is fine
     "reward function bad raised MemoryError: too many on a batch of 3 completions (on none of them alone)"),
])
def test_a_bad_return_is_one_line_naming_the_function_and_the_row(write, body, message):
    path = write("user_reward_bad.py", f"def bad(completions, **kwargs):\n    {body}\n")
    with pytest.raises(RewardError) as e:
        from_flags([f"{path}:bad"], [], math_reward).per_function(PROBLEMS, ["a", "boom", "c"], [[1]] * 3)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_what_trl_takes_is_taken_numpy_and_torch_values_and_async_functions():
    """TRL converts a function's return with torch.tensor and awaits an async one: so do we."""
    import numpy as np

    async def later(completions, **kwargs):
        return [1.0, None, 0.5]

    class Graded:  # a callable instance whose __call__ is async
        async def __call__(self, completions, **kwargs):
            return (0.0, 1.0, 2.0)
    for value, expected in [  # a numpy array, a tensor, numpy scalars, 0-d tensors, a generator
            (np.array([1.0, 0.0, 0.5]), [1.0, 0.0, 0.5]), (torch.tensor([1.0, 0.0, 0.5]), [1.0, 0.0, 0.5]),
            ([np.float32(1.0), np.bool_(False), np.int64(2)], [1.0, 0.0, 2.0]),
            ([torch.tensor(1.0), torch.tensor(True), torch.tensor(0.5, dtype=torch.bfloat16)], [1.0, 1.0, 0.5]),
            ((x for x in [1.0, 0.0, 0.5]), [1.0, 0.0, 0.5])]:
        got = score(lambda completions, value=value, **kwargs: value, PROBLEMS, ["a", "b", "c"])
        assert got[:, 0].tolist() == expected, value
    assert score(later, PROBLEMS, ["a", "b", "c"])[:, 0].tolist()[::2] == [1.0, 0.5]
    assert math.isnan(score(later, PROBLEMS, ["a", "b", "c"])[1, 0])  # None: unscored
    graded = Rewards((Graded(),), ("graded",), (1.0,))
    assert graded.per_function(PROBLEMS, ["a", "b", "c"], [[1]] * 3)[:, 0].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("source, message", [
    ("def f(completions, answer):", "reward function f has no **kwargs, but this batch would pass it prompts, "
     "completion_ids, trainer_state (TRL passes every column): add **kwargs to its parameters"),
    ("def f(completions, /, **kwargs):", "reward function f takes 'completions' by position only; it is "
     "passed by name"),
    ("def f(scale):", "reward function f takes no `completions` argument: is it a factory that makes the reward "
     "function? Name the function it returns (my_reward = f(...) in a file, then --reward FILE.py:my_reward)")])
def test_a_signature_that_cannot_take_the_batch_is_one_line_naming_no_row(write, source, message):
    path = write("user_reward_signature.py", source + "\n    return [0.0] * len(completions)\n")
    with pytest.raises(RewardError) as e:
        from_flags([f"{path}:f"], [], math_reward).per_function(PROBLEMS, ["a", "b", "c"], [[1]] * 3)
    assert str(e.value) == message


BATCH = ["completions", "answer", "level"]  # a file's keyword arguments (few: each signature may take them all)


@st.composite
def signatures(draw) -> str:
    """def f(...) over some of BATCH's names and two others: positional-only, either way or keyword-only,
    with and without a default; *args or not, **kwargs or not."""
    names = draw(st.lists(st.sampled_from([*BATCH, "scale", "gold"]), unique=True, max_size=5))
    kinds = sorted(draw(st.lists(st.sampled_from([0, 1, 2]), min_size=len(names), max_size=len(names))))
    parts, defaulted = [], False  # kinds: 0 positional-only, 1 either, 2 keyword-only
    for name, kind in zip(names, kinds):
        defaulted = default = draw(st.booleans()) or (defaulted and kind < 2)  # Python's rule for positionals
        parts.append(f"{name}=1" if default else name)
    if kinds.count(0):
        parts.insert(kinds.count(0), "/")
    if (star := draw(st.booleans())) or 2 in kinds:  # *args, else a bare * before the keyword-only ones
        parts.insert(len(parts) - kinds.count(2), "*args" if star else "*")
    return f"def f({', '.join(parts + ['**kw'] * draw(st.booleans()))}):\n    return []\n"


@settings(max_examples=400, deadline=None)
@given(signatures())
def test_the_signature_check_accepts_exactly_what_pythons_call_accepts(source):
    """The check before the run folder (reward_flags.check_signatures) against an actual call with the
    batch's keyword arguments: a function Python can call is never refused, one it cannot is one line."""
    space = {}
    exec(source, space)
    try:
        space["f"](**dict.fromkeys(BATCH))
        accepted = True
    except TypeError:
        accepted = False
    problem = rewards_module.signature_problem(space["f"], "f", BATCH, "x.jsonl")
    assert (problem is None) == accepted, (source, problem)
    assert accepted or (problem.startswith("reward function f ") and "\n" not in problem)


def test_a_column_named_like_an_argument_is_refused():
    with pytest.raises(RewardError, match="the data has a column 'completions'"):
        score(math_reward, [Problem("q", "1", fields={"completions": 3})], ["a"])


@pytest.mark.parametrize("spec, weights, message", [
    ("{dir}/missing.py:f", [], "--reward {dir}/missing.py:f: no file {dir}/missing.py"),
    ("no_such_module_xyz:f", [], "--reward no_such_module_xyz:f: no module named no_such_module_xyz (a file is "
     "given by its path: FILE.py:f)"),
    ("{dir}/user_reward_ok.py:nope", [], "--reward {dir}/user_reward_ok.py:nope: {dir}/user_reward_ok.py has no "
     "nope (it has good)"),
    ("{dir}/user_reward_ok.py:LIMIT", [], "--reward {dir}/user_reward_ok.py:LIMIT: LIMIT is a int, not a "
     "function"),
    ("{dir}/user_reward_broken.py:f", [], "--reward {dir}/user_reward_broken.py:f: importing "
     "{dir}/user_reward_broken.py raised ModuleNotFoundError: No module named 'not_installed_xyz'"),
    ("{dir}/user_reward_syntax.py:f", [], "importing {dir}/user_reward_syntax.py raised SyntaxError"),
    ("{dir}/user_reward_exits.py:f", [], "importing {dir}/user_reward_exits.py raised SystemExit: 0"),
    ("user_reward_exits:f", [], "--reward user_reward_exits:f: importing user_reward_exits raised SystemExit: 0"),
    ("good", [], "--reward good: expected FILE.py:FUNCTION or MODULE:FUNCTION"),
    ("{dir}/user_reward_ok.py:", [], "expected FILE.py:FUNCTION or MODULE:FUNCTION"),
    ("{dir}/user_reward_ok.py:good", [1.0, 2.0], "--reward-weights: 2 weight(s) for 1 reward function(s); give "
     "one each, in the order of --reward"),
    ("{dir}/user_reward_ok.py:good", [math.nan], "--reward-weights must be a finite number (got nan)"),
    ("{dir}/user_reward_ok.py:good", [1e300], "--reward-weights: 1e+300 is too large for float32"),
    ("{dir}/user_reward_ok.py:good {dir}/user_reward_ok2.py:good", [], "--reward: two functions named good; "
     "metrics.jsonl logs each by its "),
    ("{dir}/json.py:good", [], "a module named json is already loaded ("),  # a file named like a loaded module
    ("{dir}/json.py:good", [], "): rename {dir}/json.py"),
])
def test_a_bad_reward_flag_is_one_line_before_any_step(write, tmp_path, monkeypatch, spec, weights,
                                                        message):
    good = "LIMIT = 3\n\ndef good(completions, **kwargs):\n    return [1.0] * len(completions)\n"
    for name, source in [("user_reward_ok.py", good), ("user_reward_ok2.py", good), ("json.py", good),
                         ("user_reward_broken.py", "import not_installed_xyz\n"),
                         ("user_reward_syntax.py", "def f(:\n"), ("user_reward_exits.py", "import sys\nsys.exit(0)\n")]:
        write(name, source)
    monkeypatch.syspath_prepend(tmp_path)  # user_reward_exits as a module too
    with pytest.raises(ConfigError) as e:
        from_flags(spec.format(dir=tmp_path).split(), weights, math_reward)
    assert message.format(dir=tmp_path) in str(e.value) and "\n" not in str(e.value), str(e.value)


# ----------------------------------------------------------------------------
# train.py and eval.py with your rewards

def test_train_py_runs_on_rewards_from_a_file_each_logged_by_name(write, tmp_path):
    """Two functions, weights 2 and 1: reward/<name> is each one's mean over what it scored (null: nothing),
    reward_mean the weighted total's, accuracy (--correct-reward total) the share of totals > 0."""
    path = write("user_reward_train.py", """
        def odd_ids(completion_ids, **kwargs):
            return [len(ids) % 2 for ids in completion_ids]

        def unscored(completions, trainer_state, **kwargs):  # and the run's progress, as TRL tells it
            with open(__file__ + ".steps", "a") as f:
                f.write(f"{trainer_state.global_step} {trainer_state.max_steps}\\n")
            return [None] * len(completions)
        """)
    train.main([*TINY, "--out-dir", str(tmp_path), "--name", "r", "--steps", "2",
                "--reward", f"{path}:odd_ids", f"{path}:unscored", "--reward-weights", "2", "1",
                "--correct-reward", "total", "--eval-data", str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "1", "--eval-every", "1"])
    rows = [r for r in metrics(tmp_path / "r") if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["reward/unscored"] is None
        assert r["reward_mean"] == pytest.approx(2 * r["reward/odd_ids"], rel=1e-6)
        assert r["accuracy"] == r["reward/odd_ids"]  # totals are 0 or 2
    assert 0 < sum(r["reward/odd_ids"] for r in rows) < 2  # both kinds of completion were met
    config = strict_file(tmp_path / "r/config.json")
    assert config["reward"] == [f"{path}:odd_ids", f"{path}:unscored"] and config["reward_weights"] == [2, 1]
    # trainer_state.global_step: the optimizer steps done, before each rollout and each evaluation
    k, total = config["minibatches"] * config["epochs"], 2 * config["minibatches"] * config["epochs"]
    done = [0, 0, k, k, 2 * k]  # evaluation at step 0, rollout 1, evaluation at step 1, rollout 2, evaluation
    assert Path(f"{path}.steps").read_text() == "".join(f"{n} {total}\n" for n in done)


def test_a_reward_failing_mid_run_keeps_the_steps_done_and_the_run_resumes(write, tmp_path, capsys):
    """Step 3's rollout: the error is one line (exit 1) naming the function and the row; steps 1 and 2,
    never checkpointed under --save-every 10, are saved first. Fixed, the run resumes from there."""
    path = write("user_reward_flaky.py", """
        CALLS = []

        def flaky(completions, **kwargs):
            CALLS.append(len(completions))
            if len(CALLS) >= 3:
                raise ConnectionError("judge unreachable")
            return [float(len(c) % 2) for c in completions]
        """)
    run = tmp_path / "r"
    with pytest.raises(SystemExit) as e:
        train.main([*TINY, "--out-dir", str(tmp_path), "--name", "r", "--steps", "4", "--save-every", "10",
                    "--reward", f"{path}:flaky"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith("error: reward function flaky raised ConnectionError: judge unreachable on row 0 "
                              "of 16 (problem ")
    assert err[-1].endswith(f"; the checkpoint holds step 2 (continue with --resume {run} once the reward is "
                            "fixed)")
    assert checkpoint.check(run / "checkpoint")[0] == 2
    sys.modules.pop(path.stem)  # a new process: the fixed file is imported afresh
    before = checkpoint._sha256(path)
    path.write_text("def flaky(completions, **kwargs):\n    return [float(len(c) % 2) for c in completions]\n")
    train.main(["--resume", str(run)])
    assert [r["step"] for r in metrics(run) if "loss" in r] == [1, 2, 3, 4]
    assert checkpoint.check(run / "checkpoint")[0] == 4
    assert f"note: the file of reward function flaky has changed since the last sitting (its SHA-256 is not the " \
           f"one {run / 'config.json'} records): the steps from 2 on are graded by it\n" in capsys.readouterr().err
    sittings = json.loads((run / "config.json").read_text())["provenance"]  # which code graded, per sitting
    assert [s["reward_sha256"] for s in sittings] == [{"flaky": before}, {"flaky": checkpoint._sha256(path)}]


@pytest.mark.parametrize("command", ["train", "eval"])
def test_a_reward_file_that_calls_sys_exit_is_one_line_exit_2(write, tmp_path, capsys, command):
    """sys.exit(0) in a --reward file is no success: one line naming the file, exit 2, no run folder."""
    path = write("user_reward_quits.py", "import sys\nsys.exit(0)\n")
    main, argv = (train.main, [*TINY, "--out-dir", str(tmp_path), "--name", "r"]) if command == "train" else \
        (eval_cli.main, ["--k", "1", "--out", str(tmp_path / "e.jsonl")])
    assert error_line(capsys, main, [*argv, "--reward", f"{path}:f"]) == \
        f"error: --reward {path}:f: importing {path} raised SystemExit: 0"
    assert not (tmp_path / "r").exists()


def test_what_is_correct_is_the_built_in_verifier_beside_your_rewards_unless_correct_reward_names_one(
        write, tmp_path):
    """A shaping reward that is always 1 (open-r1's cosine_scaled_reward on a gold it cannot parse) makes
    every total > 0. By default the task's verifier (math_reward, graded beside it with weight 0) says what is
    correct: accuracy and eval.py's `correct` are its verdicts; --correct-reward always counts the shaping
    reward instead."""
    path = write("user_reward_shaping.py", """
        def always(completions, **kwargs):
            return [1.0] * len(completions)
        """)
    flags = [*TINY, "--out-dir", str(tmp_path), "--steps", "1", "--reward", f"{path}:always"]
    train.main([*flags, "--name", "default"])
    train.main([*flags, "--name", "named", "--correct-reward", "always"])
    (row,) = [r for r in metrics(tmp_path / "default") if "loss" in r]
    assert row["reward_mean"] == 1.0 and row["accuracy"] == row["reward/math_reward"] < 1.0
    (row,) = [r for r in metrics(tmp_path / "named") if "loss" in r]
    assert row["accuracy"] == 1.0 and "reward/math_reward" not in row
    out = tmp_path / "eval.jsonl"
    eval_cli.main(["--data", str(ROOT / "data/arith/heldout.jsonl"), "--limit", "4", "--k", "2", "--out", str(out),
                   "--reward", f"{path}:always"])
    rows = jsonl(out)[1:]
    assert all(r["reward"] == 1.0 and r["correct"] == verify(r["completion"], r["gold"]) for r in rows)
    assert not all(r["correct"] for r in rows)


def test_eval_py_grades_by_your_rewards_and_resumes_with_their_file_however_spelled(write, tmp_path, monkeypatch,
                                                                                   capsys):
    """Under --correct-reward total a completion is correct when the weighted total is positive. The settings
    line holds a --reward's FILE.py as an absolute path: --skip-done takes ./r.py:f, r.py:f and /abs/r.py:f for
    one another, and from another directory too; another grading (no --reward) it refuses: one table, one grading."""
    write("user_reward_eval.py", """
        def even(completions, **kwargs):
            return [float(len(c) % 2 == 0) for c in completions]
        """)
    out, path = tmp_path / "eval.jsonl", f"{tmp_path}/user_reward_eval.py:even"
    common = ["--data", str(ROOT / "data/arith/heldout.jsonl"), "--k", "2", "--out", str(out)]
    grading = ["--reward-weights", "0.5", "--correct-reward", "total"]
    monkeypatch.chdir(tmp_path)
    eval_cli.main([*common, "--limit", "2", "--reward", "user_reward_eval.py:even", *grading])
    eval_cli.main([*common, "--limit", "3", "--reward", "./user_reward_eval.py:even", *grading, "--skip-done"])
    monkeypatch.chdir(ROOT)
    eval_cli.main([*common, "--limit", "4", "--reward", path, *grading, "--skip-done"])
    settings, *rows = jsonl(out)
    assert (settings["settings"]["reward"], settings["settings"]["reward_weights"]) == ([path], [0.5])
    assert len(rows) == 8 and {r["reward"] for r in rows} == {0.0, 0.5}  # both kinds met
    assert all(r["reward"] == 0.5 * (len(r["completion"]) % 2 == 0) and r["correct"] == (r["reward"] > 0)
               for r in rows)
    capsys.readouterr()
    assert f"--reward ['{path}'] (now [])" in error_line(capsys, eval_cli.main, [*common, "--skip-done"])


def test_eval_py_with_a_failing_reward_is_one_line_and_keeps_what_was_sampled(write, tmp_path, capsys):
    path = write("user_reward_nan.py", """
        def nan(completions, **kwargs):
            return [float("nan")] * len(completions)
        """)
    out = tmp_path / "eval.jsonl"
    with pytest.raises(SystemExit) as e:
        eval_cli.main(["--data", str(ROOT / "data/arith/heldout.jsonl"), "--limit", "2", "--k", "2",
                       "--out", str(out), "--reward", f"{path}:nan"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and err[-1].startswith("error: reward function nan returned nan for row 0 of 4 (")
    assert err[-1].endswith(f"; 0 new completions kept in {out} (continue with --skip-done --out {out} once the "
                            "reward is fixed)")
    assert "settings" in jsonl(out)[0]


def test_a_file_without_gold_answers_trains_on_a_reward_that_reads_its_own_column(write, tmp_path):
    """Your reward may need no gold: rows with a prompt and a `target` column (no answer) train under
    --reward, which reads `target`; without --reward the same file is one line naming the missing column.
    Gold in some rows only is no gold: the weighted total, not the verifier, says what is correct."""
    rows = [{"prompt": [{"role": "user", "content": f"What is {a}+{b}?"}], "target": str(a + b)}
            for a, b in [(2, 3), (4, 4), (7, 1), (6, 3)]]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = write("user_reward_target.py", """
        def exact(completions, target, answer, **kwargs):
            assert all(a is None for a in answer)  # no gold column: nanoatr's `answer` is None
            return [float(t in c[-1]["content"]) for c, t in zip(completions, target)]
        """)
    flags = [*TINY, "--data", str(data), "--out-dir", str(tmp_path), "--steps", "1"]
    train.main([*flags, "--name", "r", "--reward", f"{path}:exact"])
    assert [r["step"] for r in metrics(tmp_path / "r") if "loss" in r] == [1]
    with pytest.raises(SystemExit):
        train.main([*flags, "--name", "no-reward"])
    assert not (tmp_path / "no-reward").exists()
    some = [Problem("What is 2+3?", "5"), Problem("What is 4+4?", None)]
    assert judged(Rewards.of(countdown_reward), "", math_reward, some).correct is None


def test_a_function_that_scores_none_of_a_batch_is_warned_about_once(capsys, monkeypatch):
    """TRL warns when rewards come back None for every row; here one line names the function, once."""
    monkeypatch.setattr(rewards_module, "UNSCORED", set())

    def nothing(completions, **kwargs):
        return [None] * len(completions)
    for _ in range(2):
        score(nothing, PROBLEMS, ["a", "b", "c"])
    assert capsys.readouterr().err.splitlines() == [
        "warning: reward function nothing scored none of a batch's 3 completions (it returned None for each: it "
        "adds nothing to their rewards); said once"]
