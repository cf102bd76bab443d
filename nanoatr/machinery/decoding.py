"""How decode steps run fast: the plan each device gets, and the runner that compiles and replays a step.
It changes no token (tests/test_decode.py compares every plan with the eager loop). How and why:
docs/library.md#decoding"""
import contextlib
import ctypes
import functools
import warnings

import torch

from nanoatr.rollout import EAGER, DecodePlan

WINDOW = 256  # GPU: attention reads the cache in windows of this many slots (one CUDA graph per window)
CHECK_EVERY = 16  # GPU: decode steps between two looks at which rows have finished (a look waits for the GPU)


def decode_plan(device, sampler: str = "inverse-cdf", temperature: float = 1.0) -> DecodePlan:
    """The one place where the device chooses how decoding runs: on CUDA compiled and replayed from CUDA
    graphs, looking at the rows every CHECK_EVERY steps (torch.multinomial, whose generator a replay would
    not advance, runs eagerly); on the CPU eagerly, every step looked at."""
    if torch.device(device).type != "cuda":
        steady_cpu_allocator()
        return EAGER
    replayable = sampler == "inverse-cdf" or temperature <= 0
    return DecodePlan("compiled" if replayable else "eager", WINDOW, CHECK_EVERY, replayable, True, run_steps)


def run_steps(step, model, sampling, generator, plan: DecodePlan):
    """A fast plan's runner (DecodePlan.runner): a StepRunner, looked up when called (tests replace it)."""
    return StepRunner(step, model, sampling, generator, plan)


@functools.cache
def steady_cpu_allocator() -> bool:
    """Fix glibc malloc's mmap threshold at 32 MB (its largest), once per process; False without glibc.
    Why: docs/library.md#decoding."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        # M_MMAP_THRESHOLD (-3) and M_TRIM_THRESHOLD (-1)
        return bool(libc.mallopt(-3, 32 << 20)) and bool(libc.mallopt(-1, 128 << 20))
    except (OSError, AttributeError):
        return False


class StepRunner:
    """Runs one decode step as the plan says: eagerly, compiled, or compiled and replayed from CUDA graphs.
    A failed recording or replay falls back to the compiled step, a failed compile to the eager step, each
    with one warning: the same tokens either way."""
    use_graphs = True  # False once a recording or a replay has failed in this process

    def __init__(self, step, model, sampling, generator, plan: DecodePlan, graphs=None):
        """step(model, state, window, sampling, generator): one decode step in place (rollout.decode_step).
        graphs: what records and replays it (tests pass a stand-in); None: CudaGraphs where they apply."""
        self.model, self.sampling, self.generator, self.eager = model, sampling, generator, step
        self.step = compiled_step(step) if plan.decoding == "compiled" else step
        device = model.lm_head.weight.device
        if graphs is None and plan.decoding == "compiled" and device.type == "cuda" and StepRunner.use_graphs:
            graphs = CudaGraphs()
        self.graphs = graphs
        # Under autocast, a replayed graph must not use autocast's cache of cast weights (freed on exit).
        amp = torch.is_autocast_enabled(device.type)
        self.autocast = (torch.autocast(device.type, torch.get_autocast_dtype(device.type),
                                        cache_enabled=False)
                         if amp and graphs is not None else contextlib.nullcontext())

    def launch(self, s, window: int):
        """The step on state s, compiled or eager, without graphs."""
        with self.autocast:
            self.step(self.model, s, window, self.sampling, self.generator)

    def run(self, s, window: int):
        """launch, and after a failed compile the eager step from then on (in this process)."""
        try:
            self.launch(s, window)
        except Exception as err:  # compiling failed (no Triton, an unsupported op...): nothing ran yet
            if self.step is self.eager or isinstance(err, torch.OutOfMemoryError):  # no compile to blame
                raise
            warnings.warn(f"torch.compile of the decode step failed ({type(err).__name__}: "
                          f"{str(err)[:200]}); decoding uncompiled from now on")
            self.step = COMPILED[self.eager] = self.eager
            self.launch(s, window)

    def __call__(self, s, window: int):
        if self.graphs is None:
            return self.run(s, window)
        shape = (len(s.rows), window)
        if shape in self.graphs:
            try:
                return self.graphs.replay(shape)
            except Exception as err:  # the launch failed, so nothing ran: the step runs without graphs
                self.without_graphs("replaying", err)
                return self.run(s, window)
        self.graphs.warm_up(lambda: self.run(s, window))  # the step, for real (compiling it the first time)
        try:
            self.graphs.record(shape, lambda: self.launch(s, window))
        except Exception as err:  # recording runs nothing, and the step has run: not again
            self.without_graphs("recording", err)

    def without_graphs(self, what: str, err: Exception):
        warnings.warn(f"{what} the decode step's CUDA graph failed ({type(err).__name__}: {str(err)[:200]}); "
                      "decoding without CUDA graphs from now on")
        self.graphs = None
        StepRunner.use_graphs = False

    def forget(self):
        """Drop the graphs: they read the state's tensors that rows leaving the batch have replaced."""
        if self.graphs is not None:
            self.graphs.drop()


class CudaGraphs:
    """A decode step's CUDA graphs, one per (rows, window) shape, sharing one private memory pool (graphs
    that share a pool must replay in the order they were recorded: windows only grow, and a smaller batch
    drops them all). The only part of decoding that needs CUDA; tests/test_decode.py stands in for it."""

    def __init__(self):
        self.graphs = {}
        self.pool = torch.cuda.graph_pool_handle()

    def __contains__(self, shape) -> bool:
        return shape in self.graphs

    def warm_up(self, fn):
        """fn() for real on a side stream, as recording requires (compiling and warming up happen there)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)

    def record(self, shape, fn):
        """Record fn()'s kernels as the graph of this shape; recording launches none of them."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            fn()
        self.graphs[shape] = graph

    def replay(self, shape):
        self.graphs[shape].replay()

    def drop(self):
        """Forget every graph, and take a fresh pool for the next ones (a capture into a retired pool fails
        an allocator assert, issue 35: docs/library.md#decoding)."""
        self.graphs.clear()
        self.pool = torch.cuda.graph_pool_handle()


COMPILED = {}  # a decode step -> its torch.compile, or the step itself once compiling it has failed


def compiled_step(step):
    """torch.compile(step) as one graph (fullgraph), built on first use and kept: one compile per process.
    dynamic=True makes the batch, the cache's length and the window symbolic from the first call, so no
    size change compiles it again (docs/library.md#decoding)."""
    if step not in COMPILED:
        COMPILED[step] = torch.compile(step, fullgraph=True, dynamic=True)
    return COMPILED[step]
