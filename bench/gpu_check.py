"""Every GPU figure in one call, for one lent GPU: under 8 minutes on one H100, compiles included.

    python bench/gpu_check.py                        # every part, within --budget 480 seconds
    python bench/gpu_check.py --parts c,c-eval --budget 240     # a rerun of some parts
    python bench/gpu_check.py --device cpu --tiny    # the code path on tiny shapes (tests/test_gpu_smoke.py)

Each part runs in a process of its own, within its share of --budget: a part past its share is stopped,
says `part X: over budget`, and the next part starts. Every figure is printed (flushed) as soon as it is
measured; the last line is SUMMARY, every key figure on one line.

  a       the device's plan (on CUDA compiled + CUDA graphs) against the eager loop: a float32 model, 24
          rows ending at EOS at different steps, finished rows leaving the batch. Tokens identical, the
          largest log-prob gap, the batch sizes decoded, host syncs per rollout, compiles
  b-0.6b  ours at batch 256 x 512 new tokens (random weights, bf16, prompts of 64-256 tokens), its first
  b-1.7b  call (compiling and recording) apart, against transformers' generate with its static cache
          (first call apart) and its dynamic cache (over the first 128 new tokens: it is slow)
  c       two --preset paper steps on the 1.7B shape (bench/gpu_smoke.py --paper: LoRA r 32, bf16,
          checkpointed activations, 32 completions of 2048 tokens: no EOS ends one early):
          phases, peak memory; the first step's extra time is compiling and recording
  c-eval  an evaluation batch of --preset paper (8 rows, T 0.3, top-p 0.95, LoRA merged): the decode
          step's time at a short context and at the mean context of a batch held to 32,768 tokens by one
          row; with c, the paper's run projected (1,000 steps; 21 evaluations of 100 problems x 8
          samples, 8 rows at a time) against the paper's ~7 hours on one A100
  d       python train.py --clip kl3 --delta 0.07 --steps 20 (the embedded default run) on this device
  e       transformers' teacher-forced log-probs of our rollout's tokens against the sampler's (0.6B
          shape, bf16, 8 rows x 256 tokens): mean and max gap
--tiny: every model the tiny shape and a few tokens, on any device (the figures exercise the code only).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import gpu_smoke  # noqa: E402  (SHAPES; parse_args and train_steps: the --preset paper step)
import rollout  # noqa: E402  (random_model, ragged_prompts, timed, to_hf; sides and time_sides: part b)
from nanoatr import lora  # noqa: E402
from nanoatr.machinery import decoding  # noqa: E402
from nanoatr.machinery.flags import PRESETS  # noqa: E402
from nanoatr.machinery.decoding import CHECK_EVERY, decode_plan  # noqa: E402
from nanoatr.rollout import EAGER, DecodePlan  # noqa: E402
from nanoatr.rollout import generate  # noqa: E402

# Each part's share of --budget: its seconds out of the default 480, guessed for an H100 from the H200's
# figures of issue 35, compiles included (a part over its share: a larger --budget, or --parts for it alone).
PARTS = {"a": 35, "b-0.6b": 80, "b-1.7b": 80, "c": 125, "c-eval": 75, "d": 50, "e": 35}
FIGURES = "FIGURES "  # a part's line that carries figures (JSON) to the SUMMARY, not printed
# --preset paper's run: 1,000 steps; evaluations before, every 50 steps and after (train.py: 21), each of
# 100 problems (AIME 2024, AIME 2025, AMC 2023) x 8 samples in batches of 8 rows, up to 32,768 tokens.
PAPER_RUN = dict(steps=1000, evaluations=21, batches=100, rows=8, tokens=32_768, a100_hours=7.0)


class Sizes:
    """The shapes and lengths of each part: the issue's, or tiny ones (--tiny)."""

    def __init__(self, tiny: bool):
        self.b_shapes = {"b-0.6b": "tiny" if tiny else "0.6b", "b-1.7b": "tiny" if tiny else "1.7b"}
        self.batch, self.new, self.hf_tokens = (4, 8, 4) if tiny else (256, 512, 128)
        self.paper_shape = "tiny" if tiny else "1.7b"
        self.paper_flags = ["--max-new-tokens", "16", "--no-compile"] if tiny else []  # else the preset's
        self.eval_tokens = 64 if tiny else PAPER_RUN["tokens"]  # the longest evaluation batch
        self.eval_prompt, self.eval_steps = (8, 8) if tiny else (128, 256)
        self.check_new = 200
        self.e_shape, self.e_new = ("tiny", 16) if tiny else ("0.6b", 256)
        self.train_flags = (["--steps", "2", "--eval-limit", "4", "--no-compile"] if tiny
                            else ["--steps", "20"])


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes and lengths: the code path, in seconds")
    ap.add_argument("--budget", type=float, default=480.0,
                    help="seconds for every part together (default 480)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--part", default=None, help=argparse.SUPPRESS)  # run one part here (the parent's child)
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or args.budget <= 0:
        ap.error(f"--parts: unknown {', '.join(unknown)}" if unknown else "--budget must be positive")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA")
        return 0
    if args.part:
        return run_part_here(args.part, device, Sizes(args.tiny))
    import transformers
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"commit {commit()}" + (", tiny shapes" if args.tiny else ""), flush=True)
    total = sum(PARTS[p] for p in parts)
    figures = {}
    for part in parts:
        share = args.budget * PARTS[part] / total
        print(f"\n== part {part} ({share:.0f} s)", flush=True)
        figures[part] = run_part(part, share, args)
    if "status" in figures.get("c", {}) and "status" in figures.get("c-eval", {}):
        figures["run"] = projection(figures["c"], figures["c-eval"])
    print("SUMMARY " + " | ".join([f"device={name}"] + [summary(k, v) for k, v in figures.items()]),
          flush=True)
    return 0


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


# ----------------------------------------------------------------------------
# The parent: each part in a child process, within its share

def run_part(part: str, seconds: float, args) -> dict:
    """Part `part` in a child process of at most `seconds`; its lines echoed as they come. Its figures,
    with "status": "ok", "over budget" or "failed (exit N)" (a part stopped keeps what it reported)."""
    out_dir = tempfile.mkdtemp(prefix="gpu_check_")
    command = part_command(part, args, out_dir)
    # start_new_session: its own process group, stopped with whatever it started
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    figures = {}
    reader = threading.Thread(target=echo, args=(child.stdout, figures), daemon=True)
    reader.start()
    t0 = time.perf_counter()
    try:
        code = child.wait(timeout=seconds)
        status = "ok" if code == 0 else f"failed (exit {code})"
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        status = "over budget"
    reader.join(timeout=10)
    shutil.rmtree(out_dir, ignore_errors=True)
    if part == "d":
        figures["seconds"] = time.perf_counter() - t0
    if status != "ok":
        print(f"part {part}: {status} ({time.perf_counter() - t0:.0f} s of {seconds:.0f})", flush=True)
    return {"status": status, **figures}


def part_command(part: str, args, out_dir: str) -> list[str]:
    """The child's command: train.py itself for part d, this script with --part for the others."""
    if part == "d":
        sizes = Sizes(args.tiny)
        return [sys.executable, "-u", "train.py", "--clip", "kl3", "--delta", "0.07", *sizes.train_flags,
                "--device", args.device, "--out-dir", out_dir, "--name", "gpu-check"]
    tiny = ["--tiny"] if args.tiny else []
    return [sys.executable, "-u", __file__, "--part", part, "--device", args.device, *tiny]


def echo(stream, figures: dict):
    """Print the child's lines as they come; gather the figures of its FIGURES lines instead."""
    for line in stream:
        if line.startswith(FIGURES):
            figures.update(json.loads(line[len(FIGURES):]))
        else:
            print(line, end="", flush=True)


def summary(part: str, figures: dict) -> str:
    """`part: status key=value ...`, a figure's name with _ for its spaces."""
    return f"{part}: " + " ".join(str(v) if k == "status" else f"{k.replace(' ', '_')}={fmt(v)}"
                                  for k, v in figures.items())


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value).replace(" ", "_")


def projection(c: dict, c_eval: dict) -> dict:
    """The paper's run on this device from c's steady step and c-eval's longest evaluation batch."""
    if "step" not in c or "batch s" not in c_eval:
        print("paper run projected: not measured (part c or c-eval gave no figure)", flush=True)
        return {"status": "not measured"}
    run = PAPER_RUN
    training = run["steps"] * c["step"] / 3600
    evaluation = run["evaluations"] * run["batches"] * c_eval["batch s"] / 3600
    total = training + evaluation
    print(f"paper run projected on this device: training {training:.1f} h ({run['steps']} steps x "
          f"{c['step']:.1f} s, every completion at its budget) + evaluations at most {evaluation:.1f} h "
          f"({run['evaluations']} x {run['batches']} batches x {c_eval['batch s']:.0f} s, every batch held "
          f"to {c_eval['batch tokens']:,} tokens by one row) = {total:.1f} h, evaluations "
          f"{evaluation / total:.0%} of it; the paper: ~{run['a100_hours']:.0f} h on one A100", flush=True)
    return {"status": "ok", "training h": training, "evaluations h": evaluation, "total h": total,
            "evaluation share": evaluation / total}


# ----------------------------------------------------------------------------
# The child: one part, its figures reported as they are measured

def report(**figures):
    print(FIGURES + json.dumps(figures), flush=True)


def run_part_here(part: str, device, sizes: Sizes) -> int:
    torch.manual_seed(0)
    if part == "a":
        check_against_eager(device, sizes)
    elif part.startswith("b-"):
        rollout_speed(sizes.b_shapes[part], device, sizes)
    elif part == "c":
        paper_steps(device, sizes)
    elif part == "c-eval":
        evaluation_batch(device, sizes)
    elif part == "e":
        teacher_forced_gap(device, sizes)
    return 0


def compiles() -> int:
    """Graphs torch.compile has built in this process so far."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def fast_plan(device) -> DecodePlan:
    """The device's plan; on the CPU the GPU's habits (windows, looks, compaction) without compiling it,
    which takes minutes there."""
    return decode_plan(device) if device.type == "cuda" else \
        DecodePlan("eager", 8, CHECK_EVERY, True, False, decoding.run_steps)


def check_against_eager(device, sizes: Sizes):
    """Part a: the rollout that crashed on the GPU (rows end at EOS at different steps, and leave the
    batch)."""
    model = rollout.random_model(gpu_smoke.SHAPES["tiny"], torch.float32, device)
    prompts = rollout.ragged_prompts(24, (3, 40), model.config.vocab_size, seed=1)
    eos = list(range(0, 1000, 25))  # 40 of 1000 tokens end a row: rows finish at different steps
    batches = []

    class Watched(decoding.StepRunner):  # the batch size of every step
        def __call__(self, s, window):
            batches.append(len(s.rows))
            return super().__call__(s, window)

    def sample(plan, runner=decoding.StepRunner):
        decoding.StepRunner = runner
        g = torch.Generator(device=device).manual_seed(0)
        return generate(model, prompts, sizes.check_new, generator=g, eos_token_id=eos, plan=plan)

    plan = fast_plan(device)
    ref, fast = sample(EAGER), sample(plan, Watched)
    same = ref.tokens.shape == fast.tokens.shape and torch.equal(ref.tokens, fast.tokens) and \
        torch.equal(ref.mask, fast.mask)
    gap = (ref.sampler_logp - fast.sampler_logp).abs().max().item() if same else float("nan")
    sizes_seen = [b for i, b in enumerate(batches) if i == 0 or b != batches[i - 1]]
    lengths, tokens = ref.mask.sum(1), "identical" if same else "DIFFER"
    print(f"a: {plan.decoding} plan (window {plan.window}, a look every {plan.check_every} steps) vs eager, "
          f"float32, 24 rows x <= {sizes.check_new} tokens ending at steps {lengths.min().item()}-"
          f"{lengths.max().item()}: tokens {tokens}, log-prob gap {gap:.1e}; batch sizes "
          f"{' > '.join(map(str, sizes_seen))}; compiles {compiles()}", flush=True)
    report(tokens=tokens, gap=gap, batches=">".join(map(str, sizes_seen)), compiles=compiles())
    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = sample(decode_plan(device))
        torch.cuda.set_sync_debug_mode("default")
        syncs, steps = sum("synchroniz" in str(w.message) for w in caught), out.tokens.shape[1]
        print(f"a: host syncs in a {steps}-step rollout: {syncs} (a look every {CHECK_EVERY} steps: "
              f"{-(-steps // CHECK_EVERY)}; per token would be {steps}); compiles {compiles()}", flush=True)
        report(syncs=syncs, steps=steps, compiles=compiles())
    if not same:
        raise SystemExit("error: the plan's tokens differ from the eager loop's")


def rollout_speed(shape: str, device, sizes: Sizes):
    """Parts b: ours against transformers' generate, static cache then dynamic, at batch x new tokens."""
    model = rollout.random_model(gpu_smoke.SHAPES[shape], torch.bfloat16, device)
    print(f"{shape}: {model.num_parameters() / 1e9:.2f}B parameters, bf16, prompts 64-256 tokens", flush=True)
    prompts = rollout.ragged_prompts(sizes.batch, (64, 256), model.config.vocab_size)
    runs = rollout.sides(model, rollout.to_hf(model), prompts, sizes.new, against=("hf-static", "hf"),
                         hf_tokens=sizes.hf_tokens)
    figures = {}
    for name, run in runs.items():  # one side at a time, reported as soon as measured; hf compiles nothing
        rollout.time_sides({name: run}, sizes.batch, sizes.new, device, int(name != "hf"), 1, figures)
        report(**figures, compiles=compiles())


def paper_steps(device, sizes: Sizes):
    """Part c: two --preset paper steps; the first compiles and records, the second is the run's step."""
    args = gpu_smoke.parse_args(["--device", device.type, "--paper", "--shape", sizes.paper_shape,
                                 "--steps", "2", *sizes.paper_flags])
    steps = []
    for figures in gpu_smoke.train_steps(args):
        steps.append(figures)
        if len(steps) == 1:
            report(**{"first step": figures["step"], "compiles": compiles()})
        else:
            extra = steps[0]["step"] - figures["step"]
            print(f"c: compiling and recording {extra:.1f} s (the first step less the second); compiles "
                  f"{compiles()}; rollout {figures['rollout'] / figures['step']:.0%} of the step", flush=True)
            report(**{k: v for k, v in figures.items() if v is not None}, compiling=extra,
                   compiles=compiles(), **{"rollout share": figures["rollout"] / figures["step"]})


def evaluation_batch(device, sizes: Sizes):
    """Part c-eval: the decode step of an evaluation batch (8 rows) at a short context and at the middle
    of a batch held to its longest, from two rollouts' times each (n tokens less 1 token: the prefill)."""
    preset = PRESETS["paper"]
    model = rollout.random_model(gpu_smoke.SHAPES[sizes.paper_shape], torch.bfloat16, device)
    lora.add_adapters(model, preset["lora_rank"], preset["lora_alpha"], lora.TARGETS, "random")
    vocab, rows = model.config.vocab_size, PAPER_RUN["rows"]
    amp = torch.autocast(device.type, torch.bfloat16)

    def sample(prompt_len: int, n: int):
        prompts = rollout.ragged_prompts(rows, (prompt_len, prompt_len), vocab)
        g = torch.Generator(device=device).manual_seed(0)
        with amp:
            generate(model, prompts, n, temperature=preset["eval_temperature"], top_p=preset["eval_top_p"],
                     generator=g, plan=decode_plan(device, temperature=preset["eval_temperature"]))

    sample(sizes.eval_prompt, 2)  # compiles the step for the evaluation's sampling
    per_step = {}
    middle = sizes.eval_prompt + sizes.eval_tokens // 2  # the mean context of a batch held to its longest
    for name, prompt_len in (("short", sizes.eval_prompt), ("long", middle)):
        n = sizes.eval_steps
        total = rollout.timed(lambda: sample(prompt_len, n), device)
        prefill = rollout.timed(lambda: sample(prompt_len, 1), device)
        per_step[name] = (total - prefill) / (n - 1)
        print(f"c-eval: {rows} rows, context {prompt_len:,}-{prompt_len + n:,} tokens: "
              f"{per_step[name] * 1e3:.2f} ms per decode step (prefill {prefill:.2f} s)", flush=True)
        report(**{f"step ms {name}": per_step[name] * 1e3})
    # a step's time is linear in its context: the middle's x steps
    batch = sizes.eval_tokens * per_step["long"]
    print(f"c-eval: an evaluation batch held to {sizes.eval_tokens:,} tokens by one row: {batch:.0f} s",
          flush=True)
    report(**{"batch s": batch, "batch tokens": sizes.eval_tokens, "compiles": compiles()})


def teacher_forced_gap(device, sizes: Sizes):
    """Part e: transformers' log-probs (teacher forcing: one forward over prompt + completion) of the
    tokens our rollout drew, against the log-probs it drew them with."""
    model = rollout.random_model(gpu_smoke.SHAPES[sizes.e_shape], torch.bfloat16, device)
    hf = rollout.to_hf(model)
    prompts = rollout.ragged_prompts(8, (64, 256), model.config.vocab_size, seed=2)
    g = torch.Generator(device=device).manual_seed(0)
    out = generate(model, prompts, sizes.e_new, temperature=1.0, generator=g, plan=decode_plan(device))
    ids, mask = torch.cat([out.prompt_ids, out.tokens], 1), torch.cat([out.prompt_mask, out.mask], 1).long()
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # left padding: each row's positions count its own tokens
    P = out.prompt_ids.shape[1]
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    logp = F.log_softmax(logits[:, P - 1:-1].float(), -1).gather(-1, out.tokens[..., None])[..., 0]
    gap = (logp - out.sampler_logp).abs()[out.mask]
    print(f"e: transformers' teacher-forced log-probs vs the sampler's, {sizes.e_shape} shape, bf16, "
          f"8 rows x {sizes.e_new} tokens: mean gap {gap.mean().item():.1e}, max {gap.max().item():.1e}",
          flush=True)
    report(**{"gap mean": gap.mean().item(), "gap max": gap.max().item()})


if __name__ == "__main__":
    raise SystemExit(main())
