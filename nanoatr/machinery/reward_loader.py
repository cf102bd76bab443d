"""Loading the reward functions --reward names: FILE.py:FUNCTION by its path, MODULE:FUNCTION an installed
module, weighted by --reward-weights and checked against the data's columns; every problem is one ConfigError
naming the flag."""
import dataclasses
import importlib
import importlib.util
import math
import sys
from pathlib import Path
from typing import Callable

import torch

from nanoatr.data import TASKS, Problem, load_problems
from nanoatr.machinery.flags import ConfigError, check_number
from nanoatr.rewards import Rewards, RewardError, arguments, one_line, signature_problem

FIRST_ROWS = 16  # the rows of each file whose columns a reward function's signature is checked against


def load_rewards(cfg, files: list[str]) -> Rewards:
    """The reward functions of a command (--reward, --reward-weights; none: the --task's built-in), the one
    that says what is correct chosen (--correct-reward: judged), each checked against the columns of the
    first rows of every file (check_signatures). Every problem is one ConfigError, before any model loads."""
    builtin = TASKS[cfg.task].reward
    rewards = from_flags(cfg.reward, cfg.reward_weights, builtin)
    firsts = {f: load_problems(f, limit=FIRST_ROWS, answer_field=cfg.answer_field, need_answer=not cfg.reward)
              for f in files}
    rewards = judged(rewards, cfg.correct_reward, builtin, [p for ps in firsts.values() for p in ps])
    for file, problems in firsts.items():
        check_signatures(rewards, problems, file)
    return rewards


def judged(rewards: Rewards, name: str, builtin: Callable, problems: list[Problem]) -> Rewards:
    """`rewards` with the function named `name` (--correct-reward; "": the task's `builtin`) as the judge of
    correctness: one of them, or the built-in added with weight 0 (graded beside them, adding nothing), or
    (total) none: the weighted total. The built-in by default needs a gold in every row of `problems`, else
    the total judges."""
    chosen = name or builtin.__name__
    if chosen in rewards.names:
        return dataclasses.replace(rewards, correct=rewards.names.index(chosen))
    golds = all(p.answer is not None for p in problems)
    if chosen == "total" or (not name and not golds):
        return dataclasses.replace(rewards, correct=None)
    if chosen != builtin.__name__:
        raise ConfigError(f"--correct-reward {chosen}: not one of the reward functions "
                          f"({', '.join(rewards.names)}), the task's {builtin.__name__}, or total")
    if not golds:
        raise ConfigError(f"--correct-reward {chosen} grades against the gold answer, and a row has none "
                          "(--answer-field names its column)")
    return Rewards((*rewards.functions, builtin), (*rewards.names, chosen), (*rewards.weights, 0.0),
                   rewards.state, correct=len(rewards.names))


def check_signatures(rewards: Rewards, problems: list[Problem], file: str) -> None:
    """A ConfigError naming the first function whose signature cannot take the keyword arguments of
    `file`'s batches (rewards.signature_problem), as its first rows give them."""
    try:
        names = [*arguments(problems, [""] * len(problems), [[]] * len(problems)), "trainer_state"]
    except RewardError as e:  # a column named like a reward function's own argument
        raise ConfigError(f"{file}: {e}") from None
    for fn, name in zip(rewards.functions, rewards.names):
        if problem := signature_problem(fn, name, names, file):
            raise ConfigError(problem)


def from_flags(specs: list[str], weights: list[float], builtin: Callable) -> Rewards:
    """The functions of --reward (none: the task's `builtin`), each named by its FUNCTION, with the weights
    of --reward-weights (none: 1 each); every problem a ConfigError naming the flag, before any step."""
    functions = [load(spec) for spec in specs] or [builtin]
    names = [spec.rpartition(":")[2] for spec in specs] or [builtin.__name__]
    weights = weights or [1.0] * len(functions)
    if len(weights) != len(functions):
        raise ConfigError(f"--reward-weights: {len(weights)} weight(s) for {len(functions)} reward "
                          "function(s); give one each, in the order of --reward")
    for w in weights:
        check_number("reward_weights", w)
        if not math.isfinite(torch.tensor(float(w), dtype=torch.float32).item()):  # rewards are float32
            raise ConfigError(f"--reward-weights: {w} is too large for float32, the rewards' precision "
                              f"(at most {torch.finfo(torch.float32).max:.3g})")
    if twice := [n for n in names if names.count(n) > 1]:
        raise ConfigError(f"--reward: two functions named {twice[0]}; metrics.jsonl logs each by its name "
                          "(reward/<name>)")
    return Rewards(tuple(functions), tuple(names), tuple(float(w) for w in weights))


def load(spec: str) -> Callable:
    """The function one --reward names: FILE.py:FUNCTION (the file imported by its path, once) or
    MODULE:FUNCTION."""
    source, _, name = spec.rpartition(":")
    if not source or not name.isidentifier():
        raise ConfigError(f"--reward {spec}: expected FILE.py:FUNCTION or MODULE:FUNCTION")
    module = import_file(source, spec) if source.endswith(".py") else import_module(source, spec)
    fn = getattr(module, name, None)
    if fn is None:
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ConfigError(f"--reward {spec}: {source} has no {name}" +
                          (f" (it has {', '.join(found[:8])})" if found else ""))
    if not callable(fn):
        raise ConfigError(f"--reward {spec}: {name} is a {type(fn).__name__}, not a function")
    return fn


def import_file(source: str, spec: str):
    """The module of a .py file, imported by its path under the file's stem, once: a second --reward of the
    same file finds it in sys.modules. A loaded module of that name from elsewhere is a ConfigError."""
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"--reward {spec}: no file {source}")
    if (loaded := sys.modules.get(path.stem)) is not None:
        if Path(getattr(loaded, "__file__", None) or "").resolve() == path.resolve():
            return loaded
        raise ConfigError(f"--reward {spec}: a module named {path.stem} is already loaded "
                          f"({getattr(loaded, '__file__', None) or 'built in'}): rename {source}")
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[path.stem] = module  # before running it, as `import` does (dataclasses look it up)
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # sys.exit() in the file too
        del sys.modules[path.stem]
        raise ConfigError(f"--reward {spec}: importing {source} raised {one_line(e)}") from None
    return module


def import_module(source: str, spec: str):
    """An importable module (installed, or on PYTHONPATH), by name."""
    try:
        return importlib.import_module(source)
    except (Exception, SystemExit) as e:  # sys.exit() in the module too
        if isinstance(e, ModuleNotFoundError) and e.name and f"{source}.".startswith(f"{e.name}."):
            raise ConfigError(f"--reward {spec}: no module named {source} (a file is given by its path: "
                              f"FILE.py:{spec.rpartition(':')[2]})") from None
        raise ConfigError(f"--reward {spec}: importing {source} raised {one_line(e)}") from None
