"""--reward and --reward-weights: the reward functions a run uses, loaded by name (FILE.py:FUNCTION by
its path, MODULE:FUNCTION an installed module); every problem is one ConfigError naming the flag."""
import importlib
import importlib.util
import math
import sys
from pathlib import Path
from typing import Callable

import torch

from nanoatr.machinery.cli import ConfigError, check_number
from nanoatr.rewards import Rewards, one_line

def from_flags(specs: list[str], weights: list[float], builtin: Callable) -> Rewards:
    """The functions of --reward (none: the task's `builtin`), each named by its FUNCTION, with the weights
    of --reward-weights (none: 1 each). Every problem is a ConfigError naming the flag, raised before any
    step."""
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
    twice = [n for n in names if names.count(n) > 1]
    if twice:
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
    loaded = sys.modules.get(path.stem)
    if loaded is not None:
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
