"""The default run on a busy machine: seconds per step with 0, 1 and 3 other CPU-bound processes,
with the default thread policy (--threads 0: the idle cores, re-checked every step) and with torch's
usual one-thread-per-core forced (--threads = cores).

    python bench/contention.py                 # about 10-15 minutes on 2 cores
    python bench/contention.py --steps 8 --loads 0 1

Each cell is one `python train.py` of the embedded default for --steps steps (evaluation cut to 8
problems, so that the step time is what is measured); the figure is the median over the steps after
the first two (compiling) of time_rollout + time_train in metrics.jsonl. The background processes are
started by this script, one busy loop each (`while True: pass`), and killed before the next cell.
Run it on an otherwise quiet machine: anything else running counts as load. The last line is the
default policy's worst slowdown against the quiet machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --tiny: a run of a few tokens, eager, for a check that the script runs (tests/test_bench.py)
TINY_RUN = ["--no-compile", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8",
            "--eval-limit", "2", "--eval-k", "1"]


def step_seconds(threads: int, steps: int, out: Path, tiny: bool = False) -> tuple[float, list[int]]:
    """Median seconds per step of the default run (tiny: TINY_RUN's), and the thread counts it chose."""
    name = f"t{threads}-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    subprocess.run([sys.executable, "train.py", "--steps", str(steps), "--eval-limit", "8", "--threads",
                    str(threads), "--out-dir", str(out), "--name", name, "--save-every", str(steps),
                    *(TINY_RUN if tiny else [])], cwd=ROOT, env=env, check=True, capture_output=True)
    rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time_rollout" in r][2:]
    return statistics.median(r["time_rollout"] + r["time_train"] for r in rows), [r["threads"] for r in rows]


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12, help="steps per cell (the first two are not timed)")
    ap.add_argument("--loads", type=int, nargs="+", default=[0, 1, 3], help="numbers of busy processes")
    ap.add_argument("--tiny", action="store_true", help="each cell a run of a few tokens, eager (TINY_RUN): "
                    "seconds, to check the script runs; its figures are not the default run's")
    args = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    policies = {"default (--threads 0)": 0, f"{cores} threads forced": cores}
    print(f"{cores} cores; default run, {args.steps} steps per cell; median s/step (threads chosen)",
          flush=True)
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        for load in args.loads:
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
            try:
                time.sleep(1.0)
                for label, threads in policies.items():
                    secs, chosen = step_seconds(threads, args.steps, Path(tmp), args.tiny)
                    table[label, load] = secs
                    print(f"  {load} busy  {label:24s} {secs:6.2f} s/step  threads {sorted(set(chosen))}",
                          flush=True)
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
    print("\n| policy | " + " | ".join(f"{n} busy" for n in args.loads) + " |")
    print("|---|" + "---|" * len(args.loads))
    for label in policies:
        quiet = table[label, args.loads[0]]
        print(f"| {label} | " + " | ".join(f"{table[label, n]:.2f} s ({table[label, n] / quiet:.1f}x)"
                                           for n in args.loads) + " |")
    quiet = table["default (--threads 0)", args.loads[0]]
    worst = max(table["default (--threads 0)", n] for n in args.loads) / quiet
    print(f"default policy: worst slowdown {worst:.2f}x the quiet machine's {quiet:.2f} s/step")


if __name__ == "__main__":
    main()
