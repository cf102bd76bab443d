"""torchrun with 2 gloo processes on CPU trains exactly as one process on the same global batch."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import train
from nanoatr.data import Shard
from nanoatr.machinery import distributed
from rounding import U64, sum_orders, within
from conftest import error_line, jsonl, strict_file

ROOT = Path(__file__).resolve().parent.parent
# --rollout-batch 2: both runs sample the same two chunks of 2 prompts with the same seeds (one chunk
# per rank, or both in turn in one process); --minibatches 2 so the second optimizer step sees ratios != 1;
# --micro-batch 2: each rank accumulates 2 micro-batches per optimizer step (DDP no_sync on the first).
ARGS = ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(ROOT / "data/arith/train.jsonl"),
        "--eval-data", str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "3", "--eval-k", "2",
        "--eval-batch-size", "2", "--prompts-per-step", "4", "--group-size", "4", "--rollout-batch", "2",
        "--minibatches", "2", "--micro-batch", "2", "--max-new-tokens", "32", "--steps", "2", "--lr", "1e-3",
        "--no-compile", "--device", "cpu"]  # gloo on CPU, also on a machine with a GPU


def launch(tmp_path, name: str, ranks: int, mode: list) -> subprocess.CompletedProcess:
    """train.py on ARGS in float64 (tests/float64_train.py), under torchrun with `ranks` gloo processes, or
    as one plain process (ranks=1, no torchrun); rank 0 saves its first optimizer step's gradient in
    tmp_path / f"{name}.pt"."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "NANOATR_FIRST_STEP": str(tmp_path / f"{name}.pt")}
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else []
    proc = subprocess.Popen([sys.executable, *torchrun, str(ROOT / "tests/float64_train.py"), *ARGS, *mode,
                             "--out-dir", str(tmp_path), "--name", name],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its ranks, not torchrun alone
        raise
    assert proc.returncode == 0, err[-3000:]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("mode", [[], ["--lora-rank", "4", "--beta", "0.05", "--grad-checkpoint"]],
                         ids=["full", "lora+beta"])
def test_two_ranks_give_the_gradient_of_one_process(tmp_path, mode):
    """Two ranks compute the first optimizer step's gradient that one process does, to float64 rounding;
    both go on to train, off-policy on the second minibatch.

    Only the first step is compared: from identical weights and identical rollouts (same chunks, seeds and
    shapes), the two runs differ only in the order in which they add up the micro-batches' gradients. After
    it no rounding bound holds: AdamW moves a weight by lr g / (|g| + eps) (eps 1e-8), so a rounding
    difference d in a gradient moves the weight by up to lr d / eps (1e5 d at lr 1e-3), and the next
    forward's float32 islands (RMSNorm, RoPE: rounding.qwen3_float64) and sampled tokens pass that on by
    amounts no arithmetic bounds. So the later steps are checked for what they prove (they run, train, and
    see ratios != 1), not compared number by number."""
    two = launch(tmp_path, "two", 2, mode)
    assert two.stdout.count("heldout Mean@2") == 2  # only rank 0 prints
    launch(tmp_path, "one", 1, mode)

    one_step, two_step = (torch.load(tmp_path / f"{n}.pt") for n in ("one", "two"))
    # Each micro-batch's gradient is computed by the same code on the same weights, rows and shapes in both
    # runs (a rank scales its loss by the world size 2 and DDP divides by 2: powers of two, exact), so the
    # one process's gradient ((g1 + g2) + g3) + g4 and the ranks' (g1 + g2) + (g3 + g4) (all-reduce) are two
    # orders of one float64 sum of the n terms that backward added in (one process's count: each
    # micro-batch's one or more): per element, at most sum_orders(n, U64) x sum |term| apart (Higham 4.1).
    n = one_step["terms"]
    for k, (g1, g2, parts) in enumerate(zip(one_step["grad"], two_step["grad"], one_step["abs_parts"])):
        assert g1.dtype == g2.dtype == torch.float64
        bound = sum_orders(n, U64) * parts
        within(g1, g2, float(bound.max()), f"parameter {k}'s gradient, one process vs two ranks")
        assert torch.all((g1 - g2).abs() <= bound), f"parameter {k}: apart by more than float64 rounding"
    assert any(g.abs().max() > 0 for g in one_step["grad"])  # a gradient to compare

    weights = "adapter_model.safetensors" if mode else "model.safetensors"
    a, b = (load_file(tmp_path / n / "checkpoint" / weights) for n in ("one", "two"))
    assert a.keys() == b.keys()
    if not mode:  # both trained: AdamW's first step alone moves a weight with a gradient by about lr (1e-3)
        start = load_file(ROOT / "data/tiny-qwen3/model.safetensors")
        for w in (a, b):
            assert max((w[k].double() - start[k].double()).abs().max().item() for k in w) > 5e-4

    rows = [jsonl(tmp_path / n / "metrics.jsonl") for n in ("one", "two")]
    assert [r["step"] for r in rows[0]] == [r["step"] for r in rows[1]] == [0, 1, 2, 2]  # eval, 2 steps, eval
    assert all(r1.keys() == r2.keys() for r1, r2 in zip(*rows))
    # the evaluation before training: identical weights, the same samples, gathered in rank order and
    # averaged by the same code, so the same numbers (timings and CPU threads aside)
    for key in rows[0][0]:
        if not key.startswith(("time", "tokens_per_s")) and not key.endswith("seconds") and key != "threads":
            assert rows[0][0][key] == rows[1][0][key], key
    for r in rows:  # the second minibatch was off-policy, on both
        assert r[2]["ratio_max"] > 1 or r[2]["ratio_min"] < 1


def test_sampling_does_not_depend_on_the_number_of_ranks():
    """A rollout chunk's seed is a function of the step and its place in the step, not of the rank: two
    ranks with two prompts each see the chunks (and seeds, and minibatch rows) one process sees."""
    shard = Shard(seed=3, prompts_per_step=4, chunk=1, group_size=2)
    assert Shard(0, 4, 4, 2).chunk_seed(7, 0) == 7  # one chunk: the seed it always had
    one = Shard(3, 4, 1, 2)
    ranks = [Shard(3, 4, 1, 2, rank=r, world=2) for r in range(2)]
    # below 2**32 (torch's CPU generator reads no more) and apart: two steps' chunks, epoch 1's shuffles, noise
    seeds = {shard.chunk_seed(t, c, salt) for t in (5, 6) for c in (0, 1) for salt in (0, 2)}
    seeds |= {g.initial_seed() for g in [r.noise(5) for r in ranks] + [one.noise(6)]}  # ranks' and steps'
    assert len(seeds) == 11 and max(seeds) < 1 << 32 and shard.chunk_seed(5, 1, 1) == shard.chunk_seed(5, 1)
    assert [m.tolist() for m in Shard(3, 1, 1, 8).minibatches(5, 2, 1)] == [[6, 7, 0, 2, 3, 1, 4, 5],  # epoch 0: as ever
                                                                             [2, 7, 4, 6, 5, 0, 3, 1]]  # epoch 1: new
    assert [seed for _, seed in one.chunks(5, 0, 4)] == [seed for s in ranks for _, seed in s.chunks(5, 0, 2)]
    assert one.problems(10, 5, 0, 4) == [i for s in ranks for i in s.problems(10, 5, 0, 2)]
    rows = one.minibatches(5, 2, 2)
    per_rank = [s.minibatches(5, 2, 2) for s in ranks]
    assert all(torch.equal(rows[m], torch.cat([per_rank[0][m], per_rank[1][m] + 4])) for m in range(4))


def test_cpu_threads_take_the_cores_others_leave_idle(monkeypatch):
    import io
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        t = distributed.CpuThreads(train.TrainConfig().threads)  # train.py's default --threads: measured
        t.cores = [0, 1, 2, 3]
        stat = "cpu  9 9 9 9 9 9 9 9\ncpu1 1 2 3 100 200 6 7 8 9 9\ncpu4 50 0 0 0 0 0 0 0\n"  # 4: not ours
        monkeypatch.setattr(distributed, "open", lambda path: io.StringIO(stat), raising=False)
        assert t._sample()[1] == (1 + 2 + 3 + 6 + 7 + 8) / os.sysconf("SC_CLK_TCK")  # busy: all but idle, iowait
        samples = iter([(10.0, 100.0, 5.0), (11.0, 103.0, 6.0), (12.0, 104.0, 7.0), (13.0, 108.0, 8.0)])
        monkeypatch.setattr(t, "_sample", lambda: next(samples))
        t.last = t._sample()
        assert t.adjust() == 2 and torch.get_num_threads() == 2  # 3 busy core-s in 1 s, 1 of them ours: 2 others
        assert t.adjust() == 4  # 1 busy, all ours: nobody else
        assert t.adjust() == 1  # 4 busy, 1 ours: 3 others, at least one thread stays
        assert distributed.CpuThreads(3).adjust() == 3  # --threads N is kept
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert distributed.CpuThreads(0).fixed == torch.get_num_threads()  # the user's explicit choice wins
    finally:
        torch.set_num_threads(before)


def test_cpu_threads_see_a_busy_process_on_our_cores(monkeypatch):
    """A real busy loop pinned to one of our cores shows up as about one core used by others."""
    import time
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    core = sorted(os.sched_getaffinity(0))[0]
    busy = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])
    try:
        t = distributed.CpuThreads(0)
        time.sleep(0.5)
        assert t.others() > 0.5
    finally:
        busy.kill()
        busy.wait()
        torch.set_num_threads(before)


@pytest.mark.parametrize("device", ["gpu", "tpu", "cuda:x", "", "mps", "cuda:-1", "cuda:01", "CPU", "cuda:1.5"])
@pytest.mark.parametrize("command", ["train", "eval", "sample"])
def test_a_device_that_is_not_cpu_or_cuda_is_one_line_in_every_command(tmp_path, capsys, command, device):
    import eval as eval_cli
    import sample
    main, argv = {"train": (train.main, [*ARGS, "--out-dir", str(tmp_path), "--name", "r"]),
                  "eval": (eval_cli.main, ["--k", "1", "--out", str(tmp_path / "e.jsonl")]),
                  "sample": (sample.main, ["1+1"])}[command]
    assert error_line(capsys, main, [*argv, "--device", device]) == \
        f"error: --device {device!r}: expected cpu, cuda, cuda:N (a GPU's number) or auto"
    assert list(tmp_path.iterdir()) == []  # no run folder, no --out file


@pytest.mark.parametrize("device, gpus, rank, expected", [
    ("cuda", 0, 0, "--device cuda: no CUDA device is available (use --device cpu)"),
    ("cuda:0", 0, 0, "--device cuda:0: no CUDA device is available"),
    ("auto", 0, 0, "cpu"), ("cpu", 2, 0, "cpu"), ("auto", 2, 1, "cuda:1"), ("cuda", 2, 1, "cuda:1"),
    ("cuda:1", 2, 0, "cuda:1"),
    ("cuda:2", 2, 0, "--device cuda:2: rank 0 needs GPU 2, but there are 2"),
    ("cuda:9999", 16, 0, "--device cuda:9999: rank 0 needs GPU 9999, but there are 16"),  # torch: cuda:15
    ("cuda", 2, 2, "--device cuda: rank 2 needs GPU 2, but there are 2"),
])
def test_a_device_this_machine_lacks_is_one_line(monkeypatch, device, gpus, rank, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    try:
        got = str(distributed.pick_device(device, rank))
    except distributed.DeviceError as e:
        got = str(e)
    assert got.startswith(expected), got


def test_every_sitting_of_a_run_records_the_code_host_and_versions_it_ran(tmp_path):
    """config.json's "provenance": the start's sitting (commit, tree state, UTC time, host, versions), and a
    resume's appended to it, the original kept."""
    import datetime
    import importlib.metadata
    import platform
    fast = [*ARGS[:ARGS.index("--steps")], "--eval-data", "--save-every", "1", "--device", "cpu"]
    train.main([*fast, "--steps", "1", "--out-dir", str(tmp_path), "--name", "r"])
    first = strict_file(tmp_path / "r/config.json")["provenance"]
    train.main(["--resume", str(tmp_path / "r"), "--steps", "2"])
    sittings = strict_file(tmp_path / "r/config.json")["provenance"]
    assert len(first) == 1 and sittings[0] == first[0] and [s["step"] for s in sittings] == [0, 1]
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    for s in sittings:
        assert s["commit"] == (git.stdout.strip() if (ROOT / ".git").exists() and git.returncode == 0 else "unknown")
        assert s["dirty"] in (True, False) if s["commit"] != "unknown" else s["dirty"] == "unknown"
        assert datetime.datetime.fromisoformat(s["started"]).utcoffset() == datetime.timedelta(0)
        assert s["host"]["cores"] == os.cpu_count() and s["host"]["cpu"] and isinstance(s["host"]["gpus"], list)
        assert (s["python"], s["torch"], s["transformers"]) == (
            platform.python_version(), torch.__version__, importlib.metadata.version("transformers"))


def test_provenance_is_unknown_without_git_or_outside_its_own_checkout(tmp_path, monkeypatch):
    """git missing or past its timeout, or the package installed inside some other repository (a virtual
    environment in a project): the commit is unknown, and the run goes on."""

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    def slow_git(*args, **kwargs):
        raise subprocess.TimeoutExpired("git", 5)
    for fake in (no_git, slow_git):
        monkeypatch.setattr(subprocess, "run", fake)
        assert (distributed.provenance(3)["commit"], distributed.provenance(3)["dirty"]) == ("unknown", "unknown")
    monkeypatch.undo()
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("no git")
    outer = tmp_path / "project"
    (outer / "venv/site-packages/nanoatr").mkdir(parents=True)
    for command in (["init", "-q"], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty",
                                     "-m", "x"]):
        subprocess.run(["git", "-C", str(outer), *command], check=True)
    monkeypatch.setattr(distributed, "__file__", str(outer / "venv/site-packages/nanoatr/machinery/distributed.py"))
    assert distributed.provenance(0)["commit"] == "unknown"  # the project's commit is not ours
    monkeypatch.setattr(distributed, "__file__", str(outer / "nanoatr/machinery/distributed.py"))
    assert distributed.provenance(0)["commit"] == subprocess.run(
        ["git", "-C", str(outer), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
