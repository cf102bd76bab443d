"""Supervised fine-tuning of a Qwen3 directory on question -> solution pairs: the paper's SFT "on the
OpenMathReasoning dataset for formatting before the RLVR process" (Appendix B), one command.

    python sft.py --model /models/Qwen3-1.7B --data data/paper/omr-sft.jsonl \\
        --eval-data data/paper/omr-heldout.jsonl --no-thinking --dtype bfloat16 --name sft-1.7b
    python train.py --preset paper --model runs/sft-1.7b/model --no-thinking ...   # RL from its model
    python sft.py --resume runs/sft-1.7b                                          # continue a stopped run

Writes runs/<name>/: config.json; metrics.jsonl (the loss of every step; eval/<file>/mean@k and pass@k
before, every --eval-every steps and after); checkpoint/ (the LoRA adapter in peft's format, or the full
weights, with the optimizer: --resume continues from it exactly); and at the end model/, a whole model
directory (the base with the adapter merged in, float32, or the full weights; the tokenizer and
generation_config.json) that train.py --model, eval.py --model and transformers load. train.py has no
--adapter: it starts its own LoRA on --model, so the SFT's adapter is merged; the adapter alone stays in
checkpoint/ for peft (eval.py --model runs/<name>/checkpoint takes it too).

Examples are [prompt | solution + EOS]: the prompt built exactly as train.py builds it (the chat template,
--system-prompt, --thinking / --no-thinking), so the model learns the very sequence it continues in RL; the
solution tokenized on its own, as the sampler produces it; the loss the mean -log p over the step's
solution tokens only, each weighing the same. The held-out accuracy is eval.py's (nanoatr/evaluate.py). An
example longer than --max-len is an error naming its file and line, unless --skip-long drops (and counts)
those; nothing is cut silently. LoRA or full fine-tuning (--lora-rank 0); --dtype bfloat16 on a GPU (the
frozen base in bf16, bf16 autocast), float32 on the CPU. One process, one device.

The SFT step (the second half of this file; data/make_default.py and data/make_countdown.py make the
embedded warm-starts with it too):

    examples = encode(tok, [(question, solution), ...], enable_thinking=False)  # (prompt ids, completion ids)
    trainer = Trainer(model, tok.pad_token_id, Recipe(lr=1e-3))
    loss = trainer.step(step, examples)                                          # one AdamW step

One example per right-padded row (--micro-batch rows cut to their own longest; why not packing:
docs/speed.md#sft-padding-not-packing), which needs no attention mask (a real token never attends to a
later pad). The logits are one (B, S, V) tensor when it is small (the tiny models: fast on the CPU, and
what the embedded warm-starts were built with, bit for bit), else scoring.token_logprobs chunk by chunk:
at Qwen3's vocabulary one (8, 2048, V) float32 tensor would be 10 GB.
"""
from dataclasses import dataclass

from nanoatr.machinery.flags import (DATA, EVALUATION, OPTIM, RECORDED, WEIGHTS, ConfigError, EvalFlags,
                                     PromptFlags, Refused, RunFlags, TrainingFlags, arg, check_flags,
                                     override, read)


@dataclass
class SFTConfig(PromptFlags, TrainingFlags, EvalFlags, RunFlags):
    """sft.py's flags: its own, then where it differs from train.py in the shared groups."""
    model: str | None = arg(None, "the Qwen3 model directory to fine-tune (HF format: config.json, "
                            "safetensors, tokenizer), or a Hugging Face hub id (Qwen/Qwen3-1.7B) fetched "
                            "into or read from its cache", DATA, resume=WEIGHTS)
    data: str | None = arg(None, "SFT rows, jsonl {problem, solution, answer} (data/get_paper_data.py: "
                           "omr-sft.jsonl)", DATA,
                           resume=Refused("the run's batches are drawn from its own file"))
    eval_data: list[str] = arg([], "held-out problem files whose Mean@k is measured every --eval-every steps "
                               "(e.g. omr-heldout.jsonl; none: no evaluation)", DATA, nargs="*",
                               resume=EVALUATION)
    max_len: int = arg(2048, "longest example, prompt + solution + EOS, in tokens; a longer one is an error "
                       "naming it, unless --skip-long", DATA, ">=1",
                       resume=Refused("it changes which examples are trained (and the evaluation's budget)"))
    skip_long: bool = arg(False, "drop the examples longer than --max-len (counted and reported) instead of "
                          "stopping", DATA, resume=Refused("it changes which examples are trained"))
    # --epochs and --steps: train further (or stop sooner): each epoch has its own shuffle
    epochs: float = arg(1.0, "passes over --data (each in its own shuffle)", OPTIM, ">0", resume=RECORDED)
    steps: int = arg(0, "optimizer steps (0 = --epochs x rows / --batch-size)", OPTIM, ">=0", resume=RECORDED)
    batch_size: int = arg(16, "examples per optimizer step", OPTIM, ">=1",
                          resume=Refused("the run's data order is drawn per batch size"))
    warmup: int = arg(20, "steps of linear learning-rate warm-up", OPTIM, ">=0",
                      resume=Refused("it changes the run's learning-rate schedule"))
    thinking: bool | None = override(PromptFlags, "thinking", help="Qwen3's enable_thinking switch in the "
                                     "chat template (default: the template's own). --no-thinking trains on "
                                     "the written solution after a <think> block; thinking keeps the block")
    micro_batch: int = override(TrainingFlags, "micro_batch", help="examples per forward/backward (gradient "
                                "accumulation); 0 = the whole batch")
    lr: float = override(TrainingFlags, "lr", help="AdamW learning rate, after a linear --warmup")
    weight_decay: float = override(TrainingFlags, "weight_decay", 0.01)
    lora_rank: int = override(TrainingFlags, "lora_rank", 32)
    eval_k: int = override(EvalFlags, "eval_k", 4)
    eval_max_new_tokens: int = override(EvalFlags, "eval_max_new_tokens", help="completion budget of "
                                        "evaluation (0 = --max-len)")
    eval_batch_size: int = override(EvalFlags, "eval_batch_size", 64)
    name: str = override(RunFlags, "name", help="run name (default: sft-<time>-<random>); a new run refuses "
                         "an existing folder")
    save_every: int = override(RunFlags, "save_every", 100)
    seed: int = override(RunFlags, "seed", help="seed of the data order, LoRA's initialisation and "
                         "evaluation sampling")


def read_flags(argv=None):
    return read(SFTConfig, argv, __doc__)


if __name__ == "__main__":  # --help and a bad flag answer now, before torch loads; main() reads them again
    read_flags()

import contextlib
import functools
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from nanoatr import lora
from nanoatr.machinery import checkpoint, distributed
from nanoatr.machinery.decoding import decode_plan
from nanoatr.data import DataError, Problem, load_problems, load_solutions
from nanoatr.evaluate import evaluate, fits
from nanoatr.machinery.session import Session
from nanoatr.scoring import token_logprobs
from nanoatr.tokenizer import eos_token_ids, format_prompt, ignored_prompt_flags, load_tokenizer

def check(cfg: SFTConfig, given: set) -> None:
    """The flags checked, the first thing wrong a ConfigError."""
    if not cfg.model or not cfg.data:
        raise ConfigError("sft.py needs --model DIR (a Qwen3 directory) and --data FILE (rows with problem, "
                          "solution, answer)")
    check_flags(cfg, given)


def examples_of(cfg: SFTConfig, tok, prompt_kw: dict) -> tuple[list, int]:
    """The encoded examples of --data within --max-len, and how many were longer (dropped with --skip-long,
    else a DataError naming the first)."""
    rows = load_solutions(cfg.data)
    examples = encode(tok, [(r.question, r.solution) for r in rows], **prompt_kw)
    lengths = [len(p) + len(c) for p, c in examples]
    long = [i for i, n in enumerate(lengths) if n > cfg.max_len]
    if long and not cfg.skip_long:
        raise DataError(f"{rows[long[0]].where}: the example is {lengths[long[0]]} tokens (prompt + solution "
                        f"+ EOS), over --max-len {cfg.max_len}; {len(long)} of {len(rows)} rows are: "
                        "--skip-long drops them, or raise --max-len")
    kept = [e for e, n in zip(examples, lengths) if n <= cfg.max_len]
    if not kept:
        raise DataError(f"{cfg.data}: every example is longer than --max-len {cfg.max_len}")
    return kept, len(long)


def held_out(job: "SFTRun", session: Session, step: int):
    """Mean@k / Pass@k on every --eval-data file (eval.py's code), logged as eval/<file>/... and their
    mean."""
    cfg, k, row, shown = job.cfg, job.cfg.eval_k, {}, {}
    for name, problems in job.sets.items():
        with job.precision():
            summary, samples = evaluate(job.model, job.tok, problems, k=k,
                                        max_new_tokens=cfg.eval_max_new_tokens or cfg.max_len,
                                        temperature=cfg.eval_temperature, top_p=cfg.eval_top_p,
                                        eos_ids=job.eos_ids, batch_size=cfg.eval_batch_size, seed=cfg.seed,
                                        prompt_kw=job.prompt_kw, progress=False,
                                        plan=decode_plan(job.model.lm_head.weight.device))
        row.update({f"eval/{name}/{key}": v for key, v in summary.items()})
        shown[name] = samples[:: max(1, len(samples) // 4)][:4]
    for key in (f"mean@{k}", f"pass@{k}"):
        row[f"eval/{key}"] = sum(row[f"eval/{n}/{key}"] for n in job.sets) / len(job.sets)
    session.log_eval(step, row, shown)
    session.say(f"step {step}: held-out Mean@{k} {row[f'eval/mean@{k}']:.1f}%  "
                f"Pass@{k} {row[f'eval/pass@{k}']:.1f}%")


def write_model(cfg: SFTConfig, model_dir: Path, run_dir: Path, model, tok_files: dict) -> Path:
    """run_dir/model: a whole model directory, built beside it and renamed into place (an interrupted write
    leaves the previous one, or none). model: our Qwen3, written as it is in a full fine-tuning; under LoRA
    the adapter of run_dir/checkpoint is merged into --model instead."""
    new, final = run_dir / ".model-new", run_dir / "model"
    shutil.rmtree(new, ignore_errors=True)
    if cfg.lora_rank:
        lora.merge(model_dir, run_dir / "checkpoint", new)  # float32: see lora.merge
    else:
        model.save_pretrained(new)
        for name, data in tok_files.items():
            (new / name).write_bytes(data)
    if final.exists():
        old = run_dir / ".model-old"
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        new.rename(final)
        shutil.rmtree(old)
    else:
        new.rename(final)
    return final


def check_lengths(cfg: SFTConfig, tok, sets: dict, positions: int, prompt_kw: dict) -> None:
    """--max-len, and each --eval-data prompt plus its completion budget, within the model's `positions`;
    a ConfigError names what is past them."""
    if cfg.max_len > positions:
        raise ConfigError(f"--max-len {cfg.max_len} is past the model's {positions} positions "
                          "(max_position_embeddings)")
    for f in cfg.eval_data:
        if problem := fits(tok, sets[Path(f).stem], cfg.eval_max_new_tokens or cfg.max_len, positions, f,
                           "--eval-max-new-tokens", prompt_kw):
            raise ConfigError(problem)


class SFTSession(Session):
    """sft.py's run: its flags and what a resume may change; made or resumed, checkpointed, stopped by a
    signal and closed as train.py's (machinery/session.py)."""
    branches, prefix = False, "sft"  # --resume takes the run folder only

    def read_flags(self, argv, doc: str):
        return read_flags(argv)

    def configure(self, cfg):
        check(cfg, self.given)
        return cfg

    def finished(self) -> bool:
        return False  # resumed after its last step, it evaluates (if not logged) and writes model/ again


@dataclass
class SFTRun:
    """What the SFT's steps use. model: our Qwen3; peft_model: the PeftModel around it under LoRA, else
    None."""
    cfg: SFTConfig
    model: Any
    peft_model: Any
    trainer: "Trainer"
    tok: Any
    examples: list            # (prompt ids, completion ids) within --max-len
    sets: dict                # the --eval-data files' problems, by file name
    eos_ids: list[int]
    prompt_kw: dict
    precision: Any            # autocast context factory (bf16) or nullcontext
    steps: int                # --steps, or --epochs' worth


def setup(session: Session) -> SFTRun:
    """The tokenizer, the examples and held-out sets, the model (resumed: the checkpoint's) and its
    optimizer; the run's first line."""
    cfg, device, model_dir = session.cfg, session.d.device, session.model_dir
    resumed = session.folder.checkpoint  # the checkpoint it goes on from (None: a new run)
    tok = load_tokenizer(model_dir)
    prompt_kw = dict(template=cfg.prompt_template, system_prompt=cfg.system_prompt,
                     enable_thinking=cfg.thinking)
    if problem := ignored_prompt_flags(tok, cfg.prompt_template, cfg.system_prompt, cfg.thinking):
        raise ConfigError(problem)
    examples, dropped = examples_of(cfg, tok, prompt_kw)
    sets = {Path(f).stem: load_problems(f, limit=cfg.eval_limit or None) for f in cfg.eval_data}
    torch.manual_seed(cfg.seed)  # LoRA's initial A matrices
    model, peft_model = lora.load_policy(cfg, model_dir, resumed, device)  # as train.py loads its policy
    check_lengths(cfg, tok, sets, model.config.max_position_embeddings, prompt_kw)
    precision = distributed.precision(cfg.dtype, device)
    recipe = Recipe(cfg.lr, cfg.warmup, cfg.weight_decay, (0.9, 0.95), cfg.grad_clip, cfg.micro_batch)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id  # pads are never trained
    trainer = Trainer(model, pad, recipe, precision)
    if resumed is not None:
        trainer.opt.load_state_dict(session.folder.state["optimizer"])
    steps = cfg.steps or math.ceil(cfg.epochs * len(examples) / cfg.batch_size)
    job = SFTRun(cfg, model, peft_model, trainer, tok, examples, sets, eos_token_ids(tok, model_dir),
                 prompt_kw, precision, steps)
    session.started(lambda: (job.peft_model or job.model, job.trainer.opt),
                    checkpoint.read_tokenizer_files(model_dir))
    trained, start = sum(p.numel() for p in trainer.params), session.start
    dropped = f" ({dropped} over --max-len {cfg.max_len} dropped)" if dropped else ""
    session.say(f"sft {session.folder.path}: {model.num_parameters() / 1e6:.2f}M parameters "
                f"({trained / 1e6:.2f}M trained{f', LoRA r={cfg.lora_rank}' if cfg.lora_rank else ''}), "
                f"{len(examples)} examples{dropped}, {steps} steps of {cfg.batch_size}, {device.type}"
                + (f", from step {start}" if start else ""))
    return job


def main(argv=None):
    with SFTSession(argv, __doc__) as session:  # the run folder made or resumed, locked; errors: one line
        run(setup(session), session)


def run(job: SFTRun, session: Session):
    """The steps from the checkpoint's to job.steps: the loss logged every step, held-out Mean@k before,
    every --eval-every steps and after, checkpoints and signals the session's (Session.steps); then the whole
    model in the run folder's model/."""
    cfg, path = job.cfg, session.folder.path
    if job.sets and session.start == 0 and not session.evaluated(0):
        held_out(job, session, 0)
    t0 = time.perf_counter()
    for step in session.steps(lambda row: {"loss": f"{row['loss']:.3f}"}, total=job.steps, desc="sft"):
        step += 1  # counted from 1: the warm-up's position
        batch = [job.examples[i] for i in batch_indices(len(job.examples), step, cfg.batch_size, cfg.seed)]
        loss = job.trainer.step(step, batch)
        session.log_step({"step": step, "loss": loss, "lr": job.trainer.recipe.lr_at(step),
                          "tokens": sum(len(c) for _, c in batch), "time": time.perf_counter() - t0})
        if job.sets and cfg.eval_every and step % cfg.eval_every == 0 and step < job.steps:
            held_out(job, session, step)
    if session.ended_by_signal:
        return
    if job.sets and not session.evaluated(job.steps):
        held_out(job, session, job.steps)
    model = write_model(cfg, session.model_dir, path, job.model, session.tokenizer_files)
    session.say(f"model: {model}  (train.py --model, eval.py --model)  metrics: {path / 'metrics.jsonl'}")


# ----------------------------------------------------------------------------
# The SFT step: examples, the completion-only loss, one AdamW step

THINK_END = "</think>"
DIRECT_LOGITS = 2**25  # logits elements (B x S x V) up to which the loss builds them in one tensor (128 MB)


def completion_text(solution: str, prompt: str) -> str:
    """The solution as the model is to write it after `prompt`. A prompt that has closed the think block
    already (Qwen3's chat template with enable_thinking=False ends in "<think>\\n\\n</think>\\n\\n") gets only
    the written part after the solution's own think block; otherwise the solution is kept whole."""
    if prompt.rstrip().endswith(THINK_END) and THINK_END in solution:
        return solution.rsplit(THINK_END, 1)[1].lstrip()
    return solution


def encode(tok, pairs, **prompt_kw) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids ending in EOS) for each (question, solution) pair.
    prompt_kw: template, system_prompt, enable_thinking, as tokenizer.format_prompt takes them."""
    out = []
    for question, solution in pairs:
        prompt = format_prompt(tok, Problem(question, ""), **prompt_kw)
        completion = tok.encode(completion_text(solution, prompt), add_special_tokens=False) + \
            [tok.eos_token_id]
        out.append((tok.encode(prompt, add_special_tokens=False), completion))
    return out


def pad_batch(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, S) and the loss mask (B, S): 1 on completion tokens, 0 on prompt and padding."""
    S = max(len(p) + len(c) for p, c in examples)
    ids = torch.full((len(examples), S), pad_id)
    mask = torch.zeros(len(examples), S)
    for i, (p, c) in enumerate(examples):
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)
        mask[i, len(p):len(p) + len(c)] = 1
    return ids, mask


def completion_loss(model, ids, mask, total):
    """Sum of -log p over the completion tokens of right-padded rows, divided by `total` (the step's
    completion tokens, so that micro-batches add up to the step's mean). The hidden state at position i
    predicts token i + 1."""
    hidden = model.hidden(ids[:, :-1])
    targets, m = ids[:, 1:], mask[:, 1:]
    if hidden.shape[0] * hidden.shape[1] * model.config.vocab_size <= DIRECT_LOGITS:
        logits = model.lm_head(hidden)  # bf16 -> float32 for the log-softmax; float64 stays float64
        nll = F.cross_entropy(logits.flatten(0, 1).to(torch.promote_types(logits.dtype, torch.float32)),
                              targets.flatten(), reduction="none")
        return (nll * m.flatten()).sum() / total
    logp, _ = token_logprobs(hidden, model.lm_head.weight, targets)
    return -(logp * m).sum() / total


@dataclass
class Recipe:
    """The optimisation of an SFT: AdamW, a linear warm-up to lr, then lr; the gradient norm clipped."""
    lr: float = 1e-3
    warmup: int = 100            # steps of the linear warm-up (Adam's first steps are otherwise too large)
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0       # 0 = off
    micro_batch: int = 0         # rows per forward/backward (gradient accumulation); 0 = the whole batch

    def lr_at(self, step: int) -> float:
        return self.lr * min(1.0, step / self.warmup) if self.warmup else self.lr


class Trainer:
    """AdamW on the model's trainable parameters (all of them, or the LoRA adapters), one step per batch."""

    def __init__(self, model, pad_id: int, recipe: Recipe, precision=contextlib.nullcontext):
        self.model, self.pad_id, self.recipe, self.precision = model, pad_id, recipe, precision
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=recipe.lr, weight_decay=recipe.weight_decay,
                                     betas=recipe.betas)

    def step(self, step: int, examples) -> float:
        """One optimizer step on `examples` (step counts from 1: the warm-up's position); returns the loss."""
        for group in self.opt.param_groups:
            group["lr"] = self.recipe.lr_at(step)
        ids, mask = pad_batch(examples, self.pad_id)
        total = mask[:, 1:].sum()
        self.opt.zero_grad(set_to_none=True)
        loss = 0.0
        lengths = [len(p) + len(c) for p, c in examples]
        for rows, width in micro_batch_slices(lengths, self.recipe.micro_batch):
            with self.precision():
                part = completion_loss(self.model, ids[rows, :width], mask[rows, :width], total)
            part.backward()
            loss += part.item()
        if self.recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.recipe.grad_clip)
        self.opt.step()
        return loss


def micro_batch_slices(lengths: list[int], size: int) -> list[tuple[slice, int]]:
    """(rows, width) of each micro-batch: `size` rows at a time (0: all), each cut to its longest row."""
    size = size or len(lengths)
    return [(slice(i, i + size), max(lengths[i:i + size])) for i in range(0, len(lengths), size)]


def batch_indices(n: int, step: int, batch_size: int, seed: int) -> list[int]:
    """The examples of step `step` (from 1) over a file of n: epoch after epoch, each in its own seeded
    shuffle, so a resumed run takes exactly the batches an uninterrupted one would."""
    start = (step - 1) * batch_size
    out = []
    for pos in range(start, start + batch_size):
        epoch, i = divmod(pos, n)
        out.append(epoch_order(n, seed, epoch)[i])
    return out


@functools.lru_cache(maxsize=2)
def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


# ----------------------------------------------------------------------------
# The embedded tasks' warm-starts: full SFT of a model trained from scratch on an endless stream


def warm_start(model, tok, stream, val, recipe: Recipe, *, batch_size: int, max_steps: int, check_every: int,
               max_new_tokens: int, done, rewards=None) -> int:
    """SFT on `stream` ((question, solution) pairs) until done(step, validation Mean@4 at temperature 1),
    checked every check_every steps; returns the step count (SystemExit if max_steps pass first)."""
    trainer = Trainer(model, tok.pad_token_id, recipe)
    t0 = time.perf_counter()
    for step in range(1, max_steps + 1):
        loss = trainer.step(step, encode(tok, [next(stream) for _ in range(batch_size)]))
        if step % check_every == 0:
            plan = decode_plan(model.lm_head.weight.device)
            acc = evaluate(model, tok, val, k=4, max_new_tokens=max_new_tokens, temperature=1.0,
                           progress=False, seed=step, rewards=rewards, plan=plan)[0]["mean@4"]
            print(f"step {step:5d}  loss {loss:.3f}  val mean@4 {acc:5.1f}%  "
                  f"{time.perf_counter() - t0:5.0f}s", flush=True)
            if done(step, acc):
                return step
    raise SystemExit(f"the warm-start never stopped in {max_steps} steps (see --target)")


if __name__ == "__main__":
    main()
