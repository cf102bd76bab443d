"""Several processes, one device each: torchrun and its collectives, the precision the model runs in,
CPU threads, signals, and what a run ran on (provenance). Without torchrun (no WORLD_SIZE)
every helper is the identity. How and why: docs/library.md#distributed"""
import contextlib
import datetime
import importlib.metadata
import os
import platform
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class DeviceError(ValueError):
    """A --device that this machine does not have; the message is one line for the user."""


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    device: torch.device

    @property
    def main(self) -> bool:
        """Rank 0 writes the run directory (config, metrics, checkpoints) and prints."""
        return self.rank == 0

    def all_sum(self, x: float) -> float:
        """The sum of a number over all ranks."""
        if self.world == 1:
            return x
        t = torch.tensor(float(x), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.item()


def pick_device(flag: str, local_rank: int = 0) -> torch.device:
    """--device auto: CUDA when there is one (each rank on its own GPU), else the CPU. A device that is
    not cpu, cuda or cuda:N, or that this machine does not have, is a DeviceError."""
    if flag == "auto":
        flag = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = re.fullmatch(r"cuda(?::(0|[1-9][0-9]*))?", flag)
    if flag == "cpu":
        return torch.device("cpu")
    if not cuda:
        raise DeviceError(f"--device {flag!r}: expected cpu, cuda, cuda:N (a GPU's number) or auto")
    if not torch.cuda.is_available():
        raise DeviceError(f"--device {flag}: no CUDA device is available (use --device cpu)")
    index = int(cuda[1]) if cuda[1] else local_rank
    if index >= torch.cuda.device_count():
        raise DeviceError(f"--device {flag}: rank {local_rank} needs GPU {index}, but there are "
                         f"{torch.cuda.device_count()} (torchrun --nproc_per_node must not exceed the GPUs, "
                         "or use --device cpu)")
    return torch.device("cuda", index)


def setup(device_flag: str = "auto") -> Dist:
    """Join the process group when started by torchrun; returns this process's rank, world size and device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_flag, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        # Generous timeout: ranks wait while rank 0 writes a checkpoint or a slow rank evaluates.
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=datetime.timedelta(hours=2))
    return Dist(dist.get_rank() if world > 1 else 0, world, device)


def shutdown():
    if dist.is_initialized():
        dist.barrier()  # every rank is done with its collectives
        if dist.get_backend() == "gloo":
            # gloo's worker thread drops finished work (tensors made in Python, e.g. all_gather_object's)
            # right after completing it, which needs the GIL; destroy_process_group joins that thread
            # while holding the GIL, so a drop still pending deadlocks the exit (pytorch/pytorch#190489).
            # Sleeping releases the GIL and lets the thread finish first.
            time.sleep(0.2)
        dist.destroy_process_group()


def wrap(module: nn.Module, d: Dist) -> nn.Module:
    """DistributedDataParallel around `module` when there are several ranks (rank 0's weights are
    broadcast to all at construction); the module itself otherwise."""
    if d.world == 1:
        return module
    return DDP(module, device_ids=[d.device.index] if d.device.type == "cuda" else None)


def accumulating(scorer: nn.Module, sync: bool):
    """Context of one micro-batch's backward through `scorer` (train.Run's, DDP-wrapped): gradients are
    all-reduced only when `sync` (the last micro-batch of an optimizer step); before that they
    accumulate locally."""
    return contextlib.nullcontext() if sync or not hasattr(scorer, "no_sync") else scorer.no_sync()


def all_gather(items: list, d: Dist) -> list:
    """Every rank's list, concatenated in rank order (the order of the prompts they were given); rank 0's
    value of x on every rank is all_gather([x], d)[0] (a run name made from the clock)."""
    if d.world == 1:
        return list(items)
    out = [None] * d.world
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]


def barrier(d: Dist):
    if d.world > 1:
        dist.barrier()


def precision(dtype: str, device: torch.device):
    """A factory of the autocast context for forward passes: bf16 matmuls when --dtype bfloat16 (trained
    weights stay float32, log-softmax runs in float32)."""
    if dtype == "float32":
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


class CpuThreads:
    """How many torch threads to run on the CPU: `threads` if given (--threads N), else as many as the
    cores this process may use that other processes leave idle (--threads 0, the default), measured by
    `adjust()` before each step. Why: docs/library.md#distributed."""

    def __init__(self, threads: int = 0, device: torch.device = torch.device("cpu")):
        self.cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        unmeasured = device.type != "cpu" or not os.path.exists("/proc/stat") or any(
            os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))  # then torch's own count
        self.fixed = threads or (torch.get_num_threads() if unmeasured else None)
        self.last = self._sample() if self.fixed is None else None
        self.set(self.fixed or len(self.cores) or torch.get_num_threads())

    def _sample(self) -> tuple[float, float, float]:
        """(wall seconds, busy CPU seconds of our cores, this process's CPU seconds)."""
        busy, tick = 0, os.sysconf("SC_CLK_TCK")
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in self.cores:
                    user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
                    busy += user + nice + system + irq + softirq + steal
        return time.monotonic(), busy / tick, time.process_time()

    def others(self) -> float:
        """Cores' worth of CPU that other processes used on our cores since the last call."""
        now = self._sample()
        wall, busy, own = (a - b for a, b in zip(now, self.last))
        self.last = now
        return max(0.0, (busy - own) / wall) if wall > 0 else 0.0

    def adjust(self) -> int:
        """Set and return the thread count for the next stretch of work."""
        if self.fixed is not None:
            return self.fixed
        n = max(1, min(len(self.cores), round(len(self.cores) - self.others())))
        self.set(n)
        return n

    @staticmethod
    def set(n: int) -> None:
        if n != torch.get_num_threads():
            torch.set_num_threads(n)


class Interrupts:
    """Ctrl-C or SIGTERM while training: finish the step, save a checkpoint, exit with one line (130 / 143).
    A second Ctrl-C stops at once (the steps since the last checkpoint are then lost)."""

    def __enter__(self):
        self.signal = None  # the first signal's number
        self.previous = {s: signal.signal(s, self.request) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def request(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum
        print(f"\n{signal.Signals(signum).name}: stopping after this step (a second Ctrl-C stops at once)",
              file=sys.stderr, flush=True)

    def requested(self, d: Dist) -> bool:
        """On every rank alike: any rank's signal stops all of them after the same step."""
        return d.all_sum(float(self.signal is not None)) > 0


def provenance(step: int) -> dict:
    """A run's sitting from `step` (config.json's "provenance": one per start and resume): this code's commit
    and whether tracked files differ from it ("unknown": not its own git checkout, e.g. a pip install, or
    git missing or slow, which never fails a run), the start (UTC), the host and the versions."""
    here = str(Path(__file__).resolve().parents[2])  # the checkout: above nanoatr/machinery/
    git = ["git", "-C", here, "describe", "--always", "--dirty", "--abbrev=40", "--exclude=*"]  # sha[-dirty]
    try:  # a .git beside the package: an installed copy may lie inside some other repository
        out = subprocess.run(git, capture_output=True, text=True, timeout=5).stdout.strip() \
            if os.path.exists(os.path.join(here, ".git")) else ""
    except (OSError, subprocess.SubprocessError):
        out = ""
    info = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""  # not on macOS
    cpu = re.search(r"^model name\s*:\s*(.+)$", info, re.M)  # none on some ARM machines
    gpus = range(torch.cuda.device_count()) if torch.cuda.is_available() else []
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"step": step, "started": started, "commit": out.removesuffix("-dirty") or "unknown",
            "dirty": out.endswith("-dirty") if out else "unknown",
            "host": {"cpu": cpu[1] if cpu else platform.processor() or platform.machine(),
                     "gpus": [torch.cuda.get_device_name(i) for i in gpus], "cores": os.cpu_count()},
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": importlib.metadata.version("transformers")}
