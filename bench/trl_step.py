"""One GRPO step, ours against TRL's GRPOTrainer: the same model, data, shapes and settings, in one run.

    /work/venv-trl/bin/python bench/trl_step.py                   # both models, median of 5 steps each
    /work/venv-trl/bin/python bench/trl_step.py --models embedded --steps 2 --warmup 1      # a short run
    python bench/trl_step.py --ours-only --models embedded     # our side alone, timed as in the comparison

TRL is not a requirement of nanoatr: it is installed for this benchmark only, in its own virtualenv
that sees the system's packages (so the same torch, transformers and nanoatr dependencies), with
torch held at its pinned version:

    python -m venv --system-site-packages /work/venv-trl
    /work/venv-trl/bin/pip install trl==1.16.0 torch==2.13.0    # torch already there: it stays as it is

Written against trl 1.16.0 (with transformers 5.23.0, accelerate 1.15.0, datasets 5.2.0, torch
2.13.0); the versions found are printed. Without trl this prints how to install it and exits 0
(--ours-only runs our side alone, TRL's column '-').

One step is, on both sides, the same work (each side's default way of doing it):
  generate    8 prompts x 8 completions = 64, sampled at temperature 1 (no top-k / top-p), up to
              --max-new-tokens (48, train.py's default), ended at EOS. Ours: train.rollout ->
              rollout.generate with TrainConfig's default sampler (read from TrainConfig, not assumed
              here). TRL: its own transformers generate (no vLLM) on the CPU.
  reward      the embedded task's reward: nanoatr.verifier.verify(completion, gold answer), 1 or 0
  advantages  Dr. GRPO: reward minus the group's mean, no std scaling (TRL scale_rewards="none")
  updates     4 micro-batches of 16 completions, forward (log-probs + entropy) / backward each,
              gradients accumulated, then gradient-norm clipping at 1.0 and ONE AdamW step (lr 1e-4,
              betas (0.9, 0.99), no weight decay). Dr. GRPO loss: token sum over 64 x max-new-tokens
              (TRL loss_type="dr_grpo"), beta 0 (no reference model), one epoch (TRL num_iterations=1).
Timed: each side's whole step, wall clock, median over --steps after --warmup steps (the warm-up
compiles our loss and lets TRL build its dataloader), the two sides alternating step by step: a
TrainerCallback runs our step k right after TRL's step k ends, and TRL's step k+1 is timed from
then to its on_step_end -- so TRL's time includes everything its loop does between two optimizer
steps (fetching the batch, tokenising, logging), as a user's run pays it. Our step is
train.grpo_step (train.rollout + train.optimize + the metrics line), on a train.Run built by hand as
train.py builds it (lora.load_policy, Scorer, AdamW as in train.setup).

How TRL is configured (GRPOConfig), and what it maps to in ours (TrainConfig):
  per_device_train_batch_size=16, gradient_accumulation_steps=4   micro_batch=16; minibatches=1
      -> steps_per_generation=4, generation_batch_size=64 (checked)  prompts_per_step=8 x group_size=8
  num_generations=8                                                group_size=8
  num_iterations=1                                                 epochs=1
  max_completion_length=48, temperature=1.0, top_p=1.0, top_k=0   max_new_tokens, temperature, top_p, top_k
  loss_type="dr_grpo", scale_rewards="none", epsilon=0.2           aggregation="dr-grpo", std_normalize=False,
                                                                   clip="clip", eps=0.2 (--clip: any of ours)
  beta=0.0 (no reference model)                                    beta=0.0
  learning_rate=1e-4, adam_beta2=0.99, weight_decay=0,             lr=1e-4, AdamW betas (0.9, 0.99),
  max_grad_norm=1.0, lr_scheduler_type="constant"                  weight_decay=0, grad_clip=1.0 (constant lr)
  use_vllm=False, use_cpu=True, bf16=False (float32 weights)       device cpu, dtype float32
  gradient_checkpointing=False                                     grad_checkpoint=False
  shuffle_dataset=False on a dataset laid out in our prompt order  (so step k has the same 8 prompts)
  report_to="none", save_strategy="no"; everything else TRL's default (optim adamw_torch_fused,
  logging_steps 10, the fused log-prob head TRL patches in, sdpa attention)
Differences that remain, each side's own default:
  - TRL's GRPOConfig defaults gradient_checkpointing=True and bf16=True; both are turned off here, so
    that both sides do the same float32 forward and backward once (checkpointing would recompute it).
  - With num_iterations=1 and steps_per_generation == gradient_accumulation_steps, TRL skips the
    no-grad old-log-prob forward (old = the update's own detached log-probs); ours, with one
    minibatch, does the same (train.optimize scores no rows before the first update). Both sides
    make exactly 4 forward passes of 16 completions per step (counted and printed).
  - The samples differ (each side's own sampler and seeds), so on the embedded model completion
    lengths differ from step to step; their medians are printed next to the times.
  - AdamW: both fused (TRL's default on torch >= 2.8; ours train.make_optimizer).
  - Threads: torch's default unless --threads N; both sides run in this one process, so with the same
    count. (train.py's own default, --threads 0, picks the cores other processes leave idle before each
    step; this benchmark keeps one count for both sides.)

Models (--models):
  embedded  data/tiny-qwen3 (0.79M parameters, its character tokenizer) on data/arith/train.jsonl
  58M       a random Qwen3 of bench/rollout.py's "small" shape (vocabulary 32,000, hidden 512,
            8 layers, 8 / 4 heads of 64, FFN 1536, untied embeddings: 57.9M parameters), saved with
            transformers to a temporary directory that both sides load. Its tokenizer is built in
            process: the embedded tokenizer's characters and "\\boxed{" plus 31,969 CJK / Hangul filler
            characters, one token each, so that every one of the 32,000 ids decodes (TRL decodes every
            completion); same chat template, same arithmetic prompts, same verifier. A random model
            almost never draws EOS (1 in 32,000), so every completion runs to --max-new-tokens and
            every reward is 0: the work is the same as with real rewards (zero advantages skip nothing
            on either side).
Per phase (generate, reward, forward, backward, optimizer, other) the time is taken by wrapping each
side's functions with a timer (perf_counter, no profiler): ours rollout.generate, train.grade, the
Scorer's forward and loss.policy_loss (where train.py calls them); TRL's _generate_single_turn,
_calculate_rewards, compute_loss, _clip_grad_norm and optimizer.step (callbacks); both
torch.Tensor.backward and torch.nn.utils.clip_grad_norm_. "other" is the rest of the step.

The last line is the speed-up, TRL's step time over ours, e.g.
`GRPO step ours/TRL: embedded 2.05x, 58M 1.52x`.
"""
import argparse
import importlib.util
import functools
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TRL_VERSION = "1.16.0"  # the version this benchmark was written and checked against
INSTALL = (f"python -m venv --system-site-packages /work/venv-trl && /work/venv-trl/bin/pip install "
           f"trl=={TRL_VERSION} torch==2.13.0, then run: /work/venv-trl/bin/python bench/trl_step.py")
MODELS = ("embedded", "58M")
P, G, MICRO = 8, 8, 16  # prompts per step, completions per prompt, completions per forward/backward
sys.path.insert(0, str(ROOT / "bench"))
from phases import PHASES, Phases  # noqa: E402  (bench/phases.py)
from rollout import build_58m  # noqa: E402  (bench/rollout.py: the "small" preset's shape and a tokenizer)


# ----------------------------------------------------------------------------
# Ours: train.py's own functions on a train.Run built as train.setup builds it

def ours_setup(model_dir: Path, args, phases: Phases):
    import train
    from nanoatr import lora
    from nanoatr.data import Shard
    from nanoatr.machinery import distributed
    from nanoatr.machinery.decoding import decode_plan
    from nanoatr.machinery.flags import TrainConfig, resolve
    from nanoatr.machinery.distributed import Dist
    from nanoatr.scoring import Scorer
    from nanoatr.tokenizer import load_tokenizer, make_stopper, eos_token_ids
    from nanoatr.rewards import Rewards, math_reward
    cfg = resolve(TrainConfig(model=str(model_dir), prompts_per_step=P, group_size=G, minibatches=1, epochs=1,
                              micro_batch=MICRO, max_new_tokens=args.max_new_tokens, temperature=1.0,
                              top_p=1.0, top_k=0, lr=args.lr, weight_decay=0.0, grad_clip=1.0,
                              aggregation="dr-grpo", std_normalize=False, beta=0.0, clip=args.clip,
                              compile=args.compile), {})
    d = Dist(0, 1, torch.device("cpu"))
    model, peft_model = lora.load_policy(cfg, Path(cfg.model), None, d.device)
    tok = load_tokenizer(model_dir)
    precision = distributed.precision(cfg.dtype, d.device)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = train.make_optimizer(cfg, trained)  # as train.setup
    shard = Shard(cfg.seed, cfg.prompts_per_step, cfg.prompts_per_step, cfg.group_size)
    run = train.Run(cfg, model, distributed.wrap(Scorer(model, precision), d), opt, trained, tok,
                    eos_token_ids(tok, model_dir), make_stopper(tok, cfg.stop), Rewards.of(math_reward),
                    shard, d, precision, peft_model, None,
                    dict(template=cfg.prompt_template, system_prompt=cfg.system_prompt,
                         enable_thinking=cfg.thinking),
                    plan=decode_plan(d.device, cfg.sampler, cfg.temperature))  # as train.setup
    phases.wrap(train, "generate", "generate")
    phases.wrap(train, "grade", "reward")
    phases.wrap(run.scorer, "forward", "forward")
    phases.wrap(train, "policy_loss", "forward")
    phases.wrap(run.opt, "step", "optimizer")
    return run


# ----------------------------------------------------------------------------
# TRL

def arith_reward(completions, answer, **kwargs):
    """The embedded task's reward for TRL: verify(completion text, gold answer)."""
    from nanoatr.verifier import verify
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(verify(t, a)) for t, a in zip(texts, answer)]


def trl_setup(model_dir: Path, rows, args, out_dir: str, callback):
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer
    config = GRPOConfig(
        output_dir=out_dir, max_steps=args.warmup + args.steps,
        per_device_train_batch_size=MICRO, gradient_accumulation_steps=(P * G) // MICRO, num_generations=G,
        num_iterations=1, max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        loss_type="dr_grpo", scale_rewards="none", epsilon=0.2, beta=0.0,
        learning_rate=args.lr, adam_beta2=0.99, weight_decay=0.0, max_grad_norm=1.0,
        lr_scheduler_type="constant",
        use_vllm=False, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        model_init_kwargs={"dtype": "float32"}, shuffle_dataset=False, seed=0,
        report_to="none", save_strategy="no", disable_tqdm=True)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p.question}], "answer": p.answer}
                              for p in rows])
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=arith_reward, args=config, train_dataset=data,
                          callbacks=[callback])
    trainer.remove_callback(PrinterCallback)  # logs are still computed every logging_steps, not printed
    a = trainer.args
    checkpointing = bool(a.gradient_checkpointing or getattr(a, "activation_checkpointing", False))
    checks = {"generation_batch_size": (a.generation_batch_size, P * G),
              "steps_per_generation": (a.steps_per_generation, 4),
              "gradient_accumulation_steps": (a.gradient_accumulation_steps, 4),
              "num_iterations": (a.num_iterations, 1),
              "per_device_train_batch_size": (a.per_device_train_batch_size, MICRO),
              "use_vllm": (a.use_vllm, False), "bf16": (a.bf16, False), "device": (a.device.type, "cpu"),
              "loss_type": (trainer.loss_type, "dr_grpo"),
              "beta": (trainer.beta, 0.0), "ref_model": (trainer.ref_model, None),
              "model dtype": (trainer.model.dtype, torch.float32), "weight_decay": (a.weight_decay, 0.0),
              "activation checkpointing": (checkpointing, False)}
    wrong = {k: v for k, v in checks.items() if v[0] != v[1]}
    if wrong:
        raise SystemExit(f"error: TRL is not configured as intended: {wrong}")
    return trainer


def make_callback(phases: Phases, ours_step, record):
    """Times TRL's steps (on_step_end to on_step_end, minus ours) and runs our step k after TRL's step k."""
    from transformers import TrainerCallback

    class Lockstep(TrainerCallback):
        mark = t_opt = None

        def on_train_begin(self, args, state, control, **kw):
            phases.now.clear()
            phases.calls.clear()
            self.mark = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kw):
            phases.add("optimizer", time.perf_counter() - self.t_opt)

        def on_step_end(self, args, state, control, **kw):
            record("TRL", phases.take(time.perf_counter() - self.mark))
            step = state.global_step - 1
            t0 = time.perf_counter()
            tokens = ours_step(step)
            record("ours", phases.take(time.perf_counter() - t0), tokens)
            self.mark = time.perf_counter()

    return Lockstep()


def check_same_prompts(trainer, run, rows):
    """Assert that the prompts TRL feeds its model are ours, token for token."""
    from nanoatr.tokenizer import encode_prompts
    conv = [{"role": "user", "content": rows[0].question}]
    assert (trainer._tokenize_prompts([conv])[0][0]
            == encode_prompts(run.tok, [rows[0]])[0]), "prompts differ"


def time_trl_phases(trainer, phases: Phases):
    """Wrap TRL's generate, reward, loss and clipping to time its phases, and count its log-prob passes."""
    phases.wrap(trainer, "_generate_single_turn", "generate")
    phases.wrap(trainer, "_calculate_rewards", "reward")
    phases.wrap(trainer, "compute_loss", "forward")
    phases.wrap(trainer, "_clip_grad_norm", "optimizer")
    counter = trainer._get_per_token_logps_and_entropies  # counted, not timed (inside compute_loss)

    @functools.wraps(counter)
    def counted(*a, **k):
        phases.calls["_get_per_token_logps_and_entropies"] += 1
        return counter(*a, **k)
    trainer._get_per_token_logps_and_entropies = counted


def print_setting(name: str, run, trainer, args):
    """Print the model's size and the step both sides take: prompts, completions, micro-batches, methods
    (trainer None: our side alone, --ours-only)."""
    trl = "TRL not run (--ours-only)" if trainer is None else \
        f"TRL optim {getattr(trainer.args.optim, 'value', trainer.args.optim)}"
    print(f"\n{name}: {run.model.num_parameters() / 1e6:.2f}M parameters, "
          f"vocabulary {run.model.config.vocab_size}; "
          f"{P} prompts x {G} = {P * G} completions of <= {args.max_new_tokens} tokens, "
          f"{(P * G) // MICRO} micro-batches of {MICRO}, one AdamW step; "
          f"ours --clip {args.clip}, sampler {run.cfg.sampler}, compile {run.cfg.compile}; {trl}; "
          f"{args.steps} timed steps after {args.warmup} warm-up, {torch.get_num_threads()} threads",
          flush=True)


def print_phases(results: dict, tokens: dict, forwards: dict, args, n_steps: int) -> str:
    """Print each side's median phases, tokens and forward passes per step; returns TRL's step over ours
    ("2.05x"), or when TRL did not run (--ours-only, its column then '-') our median step ("412.3ms")."""
    sides = [s for s in ("ours", "TRL") if results[s] or s == "ours"]
    if any(len(results[s]) != n_steps for s in sides):
        raise SystemExit(f"error: expected {n_steps} steps of each side, "
                         f"got {len(results['ours'])} / {len(results['TRL'])}")
    med = {s: {k: statistics.median(r[k] for r in results[s][args.warmup:]) for k in (*PHASES, "step")}
           for s in sides}
    ntok = {s: f"{statistics.median(tokens[s][args.warmup:]):.0f}" if s in sides else "-" for s in tokens}
    fwd = {s: f"{statistics.median(forwards[s][args.warmup:]):.0f}" if s in sides else "-" for s in forwards}
    print(f"  {'phase':10s} {'ours':>10s} {'TRL':>10s}   TRL/ours")
    for k in (*PHASES, "step"):
        o, t = med["ours"][k], med["TRL"][k] if "TRL" in med else None
        ratio = f"{t / o:6.2f}x" if t is not None and o > 1e-4 else "     -"
        trl = f"{t * 1e3:8.1f}ms" if t is not None else f"{'-':>10s}"
        print(f"  {k:10s} {o * 1e3:8.1f}ms {trl}   {ratio}")
    print(f"  completion tokens per step (median): ours {ntok['ours']}, TRL {ntok['TRL']}; "
          f"forward passes with gradients per step: ours {fwd['ours']}, TRL {fwd['TRL']}")
    print("  steps (s): ours " + " ".join(f"{r['step']:.2f}" for r in results["ours"]) +
          " | TRL " + (" ".join(f"{r['step']:.2f}" for r in results["TRL"]) or "-") + "  (first: warm-up)",
          flush=True)
    if "TRL" not in med:
        return f"{med['ours']['step'] * 1e3:.1f}ms"
    return f"{med['TRL']['step'] / med['ours']['step']:.2f}x"


def bench_model(name: str, model_dir: Path, args, phases: Phases) -> str:
    """One model, our step and TRL's in lockstep, compared phase by phase: TRL's step time over ours (with
    --ours-only our steps alone, and our step's time)."""
    import train
    from nanoatr.data import load_problems
    problems = load_problems(ROOT / args.data)
    run = ours_setup(model_dir, args, phases)
    n_steps = args.warmup + args.steps
    # TRL's dataset laid out in our prompt order: TRL's step k (shuffle off) has our step k's prompts.
    rows = [problems[i] for k in range(n_steps)
            for i in run.shard.problems(len(problems), k, 0, P)]
    results = {"ours": [], "TRL": []}
    tokens = {"ours": [], "TRL": []}
    forwards = {"ours": [], "TRL": []}
    trainer = None

    def ours_step(step):
        row = train.grpo_step(run, problems, step)
        return row["completion_len"] * P * G

    def record(side, t, n_tokens=None):
        calls = dict(phases.calls)
        phases.calls.clear()
        if side == "TRL":
            n_tokens = trainer._metrics["train"]["completions/mean_length"][-1] * P * G
            forwards[side].append(calls.get("_get_per_token_logps_and_entropies", 0))
        else:
            forwards[side].append(calls.get("forward", 0))
        results[side].append(t)
        tokens[side].append(n_tokens)

    if args.ours_only:  # our side alone, step after step, timed as in lockstep
        print_setting(name, run, None, args)
        phases.now.clear()
        phases.calls.clear()
        for step in range(n_steps):
            t0 = time.perf_counter()
            n_tokens = ours_step(step)
            record("ours", phases.take(time.perf_counter() - t0), n_tokens)
        return print_phases(results, tokens, forwards, args, n_steps)
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = trl_setup(model_dir, rows, args, out_dir, make_callback(phases, ours_step, record))
        check_same_prompts(trainer, run, rows)
        time_trl_phases(trainer, phases)
        print_setting(name, run, trainer, args)
        trainer.train()
    return print_phases(results, tokens, forwards, args, n_steps)


def trl_installed() -> bool:
    return importlib.util.find_spec("trl") is not None


def parse(argv):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--steps", type=int, default=5, help="timed steps of each side; medians are reported")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed steps of each side first (compiles our loss)")
    ap.add_argument("--max-new-tokens", type=int, default=48,
                    help="completion budget of both sides (train.py's)")
    ap.add_argument("--data", default="data/arith/train.jsonl", help="the prompts (both models)")
    ap.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate of both sides (train.py's)")
    ap.add_argument("--clip", default="clip",
                    help="our --clip method (clip = PPO's, TRL's dr_grpo objective; with one optimizer step "
                         "per rollout every method gives the same gradient)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="our loss eager (default: "
                    "compiled, as train.py)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads for both sides (0 = torch's default)")
    ap.add_argument("--ours-only", action="store_true",
                    help="time our side alone, as it runs in the comparison (TRL need not be installed): "
                         "the TRL column is '-'")
    args = ap.parse_args(argv)
    args.models = args.models.split(",")
    if unknown := [m for m in args.models if m not in MODELS]:
        ap.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(MODELS)})")
    return args


def print_versions(args):
    """The versions of what runs (TRL's side's packages unless --ours-only) and the thread count."""
    import transformers
    threads = f"{torch.get_num_threads()} threads ({'--threads' if args.threads else 'torch default'})"
    if args.ours_only:
        print(f"TRL not run (--ours-only); transformers {transformers.__version__}, "
              f"torch {torch.__version__}; {threads}", flush=True)
        return
    import accelerate
    import datasets
    import trl
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    print(f"trl {trl.__version__}"
          + ("" if trl.__version__ == TRL_VERSION else f" (written against {TRL_VERSION})")
          + f", transformers {transformers.__version__}, accelerate {accelerate.__version__}, datasets "
          f"{datasets.__version__}, torch {torch.__version__}; {threads}", flush=True)


def main(argv=None):
    args = parse(argv)
    if not args.ours_only and not trl_installed():
        print(f"trl is not installed (it is only for this benchmark, in its own virtualenv): {INSTALL}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT))
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    print_versions(args)
    phases = Phases()
    phases.wrap(torch.Tensor, "backward", "backward")
    phases.wrap(torch.nn.utils, "clip_grad_norm_", "optimizer")
    ratios = []
    try:
        for name in args.models:
            if name == "embedded":
                ratio = bench_model(name, ROOT / "data/tiny-qwen3", args, phases)
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    ratio = bench_model(name, build_58m(Path(tmp)), args, phases)
            ratios.append(f"{name} {ratio}")
    finally:
        phases.restore()  # torch.Tensor.backward, clip_grad_norm_ and train's functions as they were
    if args.ours_only:
        print("GRPO step ours alone (--ours-only): " + ", ".join(ratios))  # our median step time
    else:
        print("GRPO step ours/TRL: " + ", ".join(ratios))  # the last line: TRL's step time over ours
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
