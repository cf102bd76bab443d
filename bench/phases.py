"""Time the phases of a step (generate, reward, forward, backward, optimizer, the rest) by wrapping the
functions that do each phase with a wall-clock timer (perf_counter, no profiler): bench/trl_step.py times
both sides of its comparison with it."""
import functools
import time
from collections import defaultdict

PHASES = ("generate", "reward", "forward", "backward", "optimizer", "other")


class Phases:
    """Seconds spent per phase in the step in progress, by wrapping the functions that do each phase.
    A wrapped call made inside another wrapped call is not counted twice; restore() undoes every wrap."""

    def __init__(self):
        self.now, self.depth, self.calls, self.wrapped = defaultdict(float), 0, defaultdict(int), []

    def wrap(self, owner, name: str, phase: str):
        fn = getattr(owner, name)
        self.wrapped.append((owner, name, owner.__dict__.get(name, fn) if hasattr(owner, "__dict__") else fn,
                             name in getattr(owner, "__dict__", {})))

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.now[phase] += time.perf_counter() - t0
                self.calls[name] += 1
                self.depth -= 1
        setattr(owner, name, timed)

    def restore(self):
        for owner, name, original, own in reversed(self.wrapped):
            if own:
                setattr(owner, name, original)
            else:  # it was the class's method: drop the instance attribute
                delattr(owner, name)
        self.wrapped.clear()

    def add(self, phase: str, seconds: float):
        self.now[phase] += seconds

    def take(self, total: float) -> dict:
        """This step's phases (and `other` = total - the rest, `step` = total); starts the next step."""
        out = {k: self.now.get(k, 0.0) for k in PHASES[:-1]}
        out["other"], out["step"] = total - sum(out.values()), total
        self.now.clear()
        return out
