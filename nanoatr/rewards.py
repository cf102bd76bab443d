"""Reward functions: built-in, yours, combined. A reward function has the shape of TRL's (GRPOTrainer's
reward_funcs), so one written for TRL runs here unchanged:

    def reward(completions, answer, **kwargs) -> list[float | None]:   # train.py --reward file.py:reward
        return [1.0 if answer_i in text else 0.0 for text, answer_i in zip(completions, answer)]

It is called once per batch with lists of one entry per completion (prompts, completions, completion_ids,
answer, the row's other columns; trainer_state is the run's progress) and returns one number per
completion, or None for one it does not score. Columns arrive as read, `answer` too; a row without one gets
the gold there (the --answer-field column), and the built-in rewards (BUILT_IN) always do. Several combine
by TRL's rule (Rewards.total). Yours runs unsandboxed, on untrusted model output. Its arguments and errors:
docs/library.md#rewards"""
import asyncio
import copy
import dataclasses
import inspect
import math
import numbers
import re
import sys
from dataclasses import dataclass
from typing import Callable

import torch

from nanoatr.verifier import countdown, verify


class RewardError(ValueError):
    """A reward function that failed on a batch; the message is one line naming it and the row."""


# ----------------------------------------------------------------------------
# The built-in tasks' rewards

def completion_text(completion) -> str:
    """A completion's text: a standard one is its text, a conversational one its message's content."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def math_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when a completion's final answer equals its problem's gold `answer`, else 0.0: the verifier
    (nanoatr/verifier), which never executes the completion and finishes in bounded time."""
    return [float(verify(completion_text(c), gold)) for c, gold in zip(completions, answer)]


def countdown_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when a completion's last \\boxed{} expression uses each number of `answer` ("n1,n2,...:target")
    once and equals the target, else 0.0 (nanoatr/verifier/countdown.py: parsed, never executed)."""
    return [countdown.reward(completion_text(c), gold) for c, gold in zip(completions, answer)]


# The built-in rewards: their `answer` is always the gold (the --answer-field column), never a column as read
BUILT_IN = (math_reward, countdown_reward)


# ----------------------------------------------------------------------------
# Several functions, weighted: what grades a batch

@dataclass(frozen=True)
class TrainerState:
    """A reward function's trainer_state: the fields of transformers' TrainerState that mean the same here."""
    global_step: int  # optimizer steps done
    max_steps: int    # the run's optimizer steps


@dataclass(frozen=True)
class Rewards:
    """The reward functions of a run, each with its name (metrics.jsonl's reward/<name>) and weight, and
    the run's progress they are told (their trainer_state; None outside a run), and which one says a
    completion is correct (`correct`: the index of the function whose reward > 0 makes it so; None: the
    weighted total > 0). A function that only judges has weight 0: it is logged but adds nothing."""
    functions: tuple[Callable, ...]
    names: tuple[str, ...]
    weights: tuple[float, ...]
    state: TrainerState | None = None
    correct: int | None = None

    @staticmethod
    def of(*functions: Callable) -> "Rewards":
        """Functions of weight 1, named as defined (__name__): a task's built-in reward, for one."""
        return Rewards(functions, tuple(f.__name__ for f in functions), (1.0,) * len(functions))

    def at(self, global_step: int, max_steps: int) -> "Rewards":
        """The same functions, told that `global_step` of the run's `max_steps` optimizer steps are done."""
        return dataclasses.replace(self, state=TrainerState(global_step, max_steps))

    def per_function(self, problems: list, completions: list[str], completion_ids: list[list[int]]
                     ) -> torch.Tensor:
        """(N, F) float32: function f's reward of completion i (NaN where it returned None), problems[i]
        being completion i's problem (a data.Problem). A RewardError names the function and the row."""
        kwargs = arguments(problems, completions, completion_ids) | {"trainer_state": self.state}
        golds = kwargs | {"answer": [p.answer for p in problems]}  # what a built-in reward grades against
        columns = [call(fn, name, golds if fn in BUILT_IN else kwargs, problems)
                   for fn, name in zip(self.functions, self.names)]
        return torch.tensor(columns, dtype=torch.float32).reshape(len(columns), len(problems)).T

    def correct_of(self, each: torch.Tensor) -> torch.Tensor:
        """(N,) bool: which completions are correct: function `correct`'s reward > 0 (unscored: not), or
        the total > 0. accuracy, Mean@k and Pass@k count these."""
        return (self.total(each) if self.correct is None else each[:, self.correct]) > 0

    @property
    def judge(self) -> str:
        """What correct_of counts, in words: 'math_reward > 0', or 'the weighted total reward > 0'."""
        return "the weighted total reward > 0" if self.correct is None else f"{self.names[self.correct]} > 0"

    def total(self, each: torch.Tensor) -> torch.Tensor:
        """(N,) TRL's total of each completion: the sum of weight x reward over the functions that scored
        it (a NaN, a None, is left out; no function scored it: 0). Only an unscored entry is left out: a
        product that is not finite (a weight or a reward that overflows float32: inf x 0 is NaN) stays in
        its total, which loss.check_finite then stops on, rather than counting as unscored."""
        products = each * torch.tensor(self.weights, dtype=each.dtype)
        return products.where(~each.isnan(), 0.0).sum(dim=1)


# a column of one of these names would clash with the argument
OWN_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state")


def arguments(problems: list, completions: list[str], completion_ids: list[list[int]]) -> dict[str, list]:
    """The keyword arguments of a batch (docs/library.md#rewards), one entry per completion (each call
    of a function gets its own copy: run)."""
    chat = [p.messages is not None for p in problems]
    columns = list(dict.fromkeys(k for p in problems for k in p.fields))  # every column, in the order met
    clash = [k for k in columns if k in OWN_ARGUMENTS]
    if clash:
        raise RewardError(f"the data has a column {clash[0]!r}, the name of a reward function's own "
                          "argument: rename that column")
    prompts = [p.messages if c else p.question for p, c in zip(problems, chat)]
    completions = [[{"role": "assistant", "content": t}] if c else t for t, c in zip(completions, chat)]
    return {"prompts": prompts, "completions": completions, "completion_ids": completion_ids,
            **{k: [p.fields.get(k) for p in problems] for k in columns},
            "answer": [p.fields["answer"] if "answer" in p.fields else p.answer for p in problems]}


def call(fn: Callable, name: str, kwargs: dict, problems: list) -> list[float]:
    """One function's rewards of a batch, a None as NaN. Anything but one finite number or None per
    completion is a RewardError naming the function and the row. When the function raises, it is called
    again on one completion at a time to name the first that makes it raise."""
    if problem := signature_problem(fn, name, list(kwargs), "this batch"):  # a column the first rows lack?
        raise RewardError(problem)
    try:
        values = run(fn, kwargs)
    except (Exception, SystemExit) as e:
        i = failing_row(fn, kwargs)
        raise RewardError(f"reward function {name} raised {one_line(e)}"
                          + (f" on {row(i, kwargs, problems)}" if i is not None else
                             f" on a batch of {len(problems)} completions (on none of them alone)")) from None
    if not isinstance(values, list):
        raise RewardError(f"reward function {name} returned a {type(values).__name__}, not a list of one "
                          f"reward per completion ({len(problems)})")
    if len(values) != len(problems):
        raise RewardError(f"reward function {name} returned {len(values)} rewards for {len(problems)} "
                          "completions (one per completion, None for one it does not score)")
    values = [scalar(v) for v in values]
    warn_if_unscored(name, values)
    for i, v in enumerate(values):
        if wrong := not_a_reward(v):
            shown, why = wrong
            raise RewardError(f"reward function {name} returned {shown} for {row(i, kwargs, problems)}: "
                              f"{why}")
    return [math.nan if v is None else float(v) for v in values]


UNSCORED: set[str] = set()  # the functions warned about for scoring none of a batch (once each a process)


def warn_if_unscored(name: str, values: list):
    """One warning line, the first time function `name` scores none of a batch (None for every completion,
    as TRL warns): it then adds nothing to their rewards; a misspelt column read with .get, say."""
    if values and all(v is None for v in values) and name not in UNSCORED:
        UNSCORED.add(name)
        print(f"warning: reward function {name} scored none of a batch's {len(values)} completions (it "
              "returned None for each: it adds nothing to their rewards); said once", file=sys.stderr)


def run(fn: Callable, kwargs: dict):
    """What `fn` returns on a batch, as a list when it is a sequence or an iterator (a generator runs here,
    its errors raised like the function's own); an async function's result awaited, as TRL awaits it.
    Anything else (a number, a str, a 0-d array) is returned as is, for call() to refuse. The function gets
    its own copy of every list: what it changes in one, no other function (nor the run) sees."""
    values = fn(**{k: v if k == "trainer_state" else [list(ids) for ids in v] if k == "completion_ids"
                   else copy.deepcopy(v) for k, v in kwargs.items()})
    if inspect.iscoroutine(values):
        values = asyncio.run(values)
    one = isinstance(values, (str, bytes, dict)) or getattr(values, "shape", None) == ()
    return values if one or not hasattr(values, "__iter__") else list(values)


def scalar(value):
    """The number a 0-dimensional array holds (a numpy scalar such as numpy.bool_, a 0-d tensor or array, what
    iterating over a tensor or array gives), as TRL's tensor conversion takes it; any other value as is."""
    return value.item() if getattr(value, "shape", None) == () and hasattr(value, "item") else value


def signature_problem(fn: Callable, name: str, arguments: list[str], file: str) -> str | None:
    """None when `fn` can be called with the keyword `arguments` of `file`'s batches (or Python cannot read
    its signature); else what stops it, as an error line's words (no `completions`: a factory of reward
    functions; a parameter taken by position only; a required one no column gives; others it has no parameter
    and no **kwargs for). Python's binding rules: inspect's bind, but a keyword named like a positional-only
    parameter with a default goes to **kwargs, as the call does (Python 3.11's bind refuses it)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if only := [p.name for p in params.values() if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]:
        return f"reward function {name} takes {only[0]!r} by position only; it is passed by name"
    try:
        by_name = [p for p in params.values() if p.kind is not p.POSITIONAL_ONLY]
        inspect.Signature(by_name).bind(**dict.fromkeys(arguments))
        return None
    except TypeError as e:
        why = str(e)
    if "completions" not in params and inspect.Parameter.VAR_KEYWORD not in {p.kind for p in params.values()}:
        return (f"reward function {name} takes no `completions` argument: is it a factory that makes the "
                f"reward function? Name the function it returns (my_reward = {name}(...) in a file, then "
                "--reward FILE.py:my_reward)")
    if needed := re.fullmatch(r"missing a required argument: '(\w+)'", why):
        return (f"reward function {name} needs a column {needed[1]!r}, which {file} lacks (its batches pass "
                f"{', '.join(arguments)})")
    extra = [k for k in arguments if k not in params or params[k].kind is params[k].POSITIONAL_ONLY]
    return (f"reward function {name} has no **kwargs, but {file} would pass it {', '.join(extra)} (TRL "
            "passes every column): add **kwargs to its parameters")


def not_a_reward(value) -> tuple[str, str] | None:
    """None for a finite number or None (unscored); else what a function returned for one completion, as
    shown in an error line, and why that is no reward."""
    if value is None:
        return None
    if not isinstance(value, numbers.Real):
        return f"a {type(value).__name__} ({value!r:.40})", "a reward is a number, or None"
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int or Fraction beyond float's range
        finite = False
    return None if finite else (f"{value!r:.40}", "a reward is finite (None leaves a completion unscored)")


def failing_row(fn: Callable, kwargs: dict) -> int | None:
    """The first completion that makes `fn` raise when called on it alone, or None."""
    for i in range(len(kwargs["completions"])):
        try:
            run(fn, {k: v if k == "trainer_state" else v[i:i + 1] for k, v in kwargs.items()})
        except (Exception, SystemExit):
            return i
    return None


def row(i: int, kwargs: dict, problems: list) -> str:
    """'row 3 of 64 (problem '...', completion '...')': a completion of the batch, for an error line."""
    return (f"row {i} of {len(problems)} (problem {problems[i].question!r:.60}, completion "
            f"{completion_text(kwargs['completions'][i])!r:.60})")


def one_line(error: Exception) -> str:
    """'ZeroDivisionError: division by zero': an exception as one line, a word over 100 characters (a value
    echoed whole) cut to 40, the whole to 300."""
    words = (w if len(w) <= 100 else w[:40] + "..." for w in str(error).split())
    return f"{type(error).__name__}: {' '.join(words)}"[:300]
