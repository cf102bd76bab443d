"""GRPO with a choice of clipping rule; ATR-GRPO (--clip kl3) is the paper's method.

    python train.py --clip kl3 --delta 0.07      # the embedded default: a tiny Qwen3 learns arithmetic

One step: sample G completions for each of P prompts -> grade them -> group advantages -> old
log-probs (one no-grad forward) -> for each epoch and minibatch: new log-probs, the clipped
surrogate, backward (gradient accumulation over micro-batches), AdamW step -> one metrics line.
"""
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from nanoatr import checkpoint
from nanoatr.advantages import group_advantages
from nanoatr.config import ConfigError, arg, die, parse
from nanoatr.data import DataError, load_problems
from nanoatr.evaluate import evaluate
from nanoatr.loss import DEFAULTS, METHODS, NEEDS_FULL_KL, check_hparams, full_kl, policy_loss
from nanoatr.model import ModelError, Qwen3
from nanoatr.rollout import generate, left_pad, score
from nanoatr.tokenizer import TokenizerError, encode_prompts, load_tokenizer, stop_token_ids
from nanoatr.verifier import verify

AGGREGATIONS = ["dr-grpo", "token-mean", "seq-mean-token-mean"]


@dataclass
class TrainConfig:
    model: str = arg("data/tiny-qwen3", "model directory (HF format: config.json, safetensors, tokenizer)")
    data: str = arg("data/arith/train.jsonl", "training problems (jsonl: problem/answer or DAPO format)")
    eval_data: list[str] = arg(["data/arith/heldout.jsonl"], "held-out problem files evaluated during training")
    clip: str = arg("kl3", "clipping rule (loss.METHODS)", choices=sorted(METHODS))
    aggregation: str = arg("dr-grpo", "loss aggregation", choices=AGGREGATIONS)
    std_normalize: bool = arg(False, "divide advantages by the group's std (GRPO); off = Dr. GRPO")
    steps: int = arg(400, "rollout steps (each feeds minibatches x epochs optimizer steps)")
    prompts_per_step: int = arg(16, "distinct prompts sampled per rollout step")
    group_size: int = arg(8, "completions per prompt (G)")
    minibatches: int = arg(2, "optimizer steps per epoch over a rollout batch; >1 makes clipping act")
    epochs: int = arg(1, "passes over each rollout batch")
    micro_batch: int = arg(0, "sequences per forward/backward (gradient accumulation); 0 = whole minibatch")
    lr: float = arg(1e-4, "AdamW learning rate")
    weight_decay: float = arg(0.0, "AdamW weight decay")
    grad_clip: float = arg(1.0, "clip the gradient norm to this (0 = off)")
    max_new_tokens: int = arg(48, "completion budget in tokens")
    temperature: float = arg(1.0, "sampling temperature of rollouts (and of the log-probs trained on)")
    top_p: float = arg(1.0, "nucleus sampling of rollouts")
    top_k: int = arg(0, "top-k sampling of rollouts (0 = off)")
    eval_every: int = arg(0, "evaluate every N steps (0 = only before and after training)")
    eval_k: int = arg(8, "k of Mean@k / Pass@k")
    eval_temperature: float = arg(1.0, "sampling temperature of evaluation")
    eval_top_p: float = arg(1.0, "nucleus of evaluation sampling")
    eval_limit: int = arg(0, "evaluate on the first N problems of each file (0 = all)")
    save_every: int = arg(50, "write the checkpoint every N steps (and at the end)")
    out_dir: str = arg("runs", "parent directory of run directories")
    name: str = arg("", "run name (default: <clip>-<time>)")
    resume: str = arg("", "continue the run in this run directory from its checkpoint")
    seed: int = arg(0, "seed of prompt order, sampling and initialisation")
    compile: bool = arg(True, "compile the loss with torch.compile (falls back to eager if it fails)")
    hparams: dict = arg(None, "clip method hyper-parameters after defaults (written to config.json)", cli=False)


def hparam_flags(parser):
    """--eps, --delta, ...: every clip method's hyper-parameters, defaulting to the method's own."""
    names = sorted({k for d in DEFAULTS.values() for k in d})
    for k in names:
        users = ", ".join(f"{m}={d[k]}" for m, d in sorted(DEFAULTS.items()) if k in d)
        parser.add_argument("--" + k.replace("_", "-"), type=float, default=None, dest=k,
                            help=f"clip hyper-parameter; defaults per method: {users}")


def resolve(cfg: TrainConfig, given_hparams: dict) -> TrainConfig:
    """Fill in the method's default hyper-parameters and check every value; ConfigError names the flag."""
    unused = [k for k, v in given_hparams.items() if v is not None and k not in DEFAULTS[cfg.clip]]
    if unused:
        raise ConfigError(f"--{unused[0].replace('_', '-')} does not apply to --clip {cfg.clip} "
                          f"(its flags: {', '.join('--' + k.replace('_', '-') for k in DEFAULTS[cfg.clip]) or 'none'})")
    cfg.hparams = {**DEFAULTS[cfg.clip], **{k: v for k, v in given_hparams.items() if v is not None}}
    try:
        check_hparams(cfg.clip, **cfg.hparams)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    positive = ["steps", "prompts_per_step", "group_size", "minibatches", "epochs", "max_new_tokens", "eval_k"]
    for name in positive:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(cfg, name)})")
    if (cfg.prompts_per_step * cfg.group_size) % cfg.minibatches:
        raise ConfigError(f"--minibatches {cfg.minibatches} must divide prompts x group size "
                          f"({cfg.prompts_per_step * cfg.group_size})")
    if not cfg.temperature > 0:
        raise ConfigError(f"--temperature must be > 0 for training: the policy gradient needs sampled, scored tokens")
    if not cfg.lr > 0:
        raise ConfigError(f"--lr must be > 0 (got {cfg.lr})")
    return cfg


def resumed_config(cfg: TrainConfig, extra: dict, given: set) -> tuple[TrainConfig, dict]:
    """The run's saved config, with only the flags given now on top (e.g. --steps to go further)."""
    saved_file = Path(cfg.resume) / "config.json"
    if not saved_file.is_file():
        raise ConfigError(f"--resume {cfg.resume}: no config.json there, not a run directory")
    saved = json.loads(saved_file.read_text())
    hparams = saved.pop("hparams") or {}
    cfg = TrainConfig(**{**saved, **{k: getattr(cfg, k) for k in given}})
    if "clip" not in given:
        extra = {**hparams, **{k: v for k, v in extra.items() if v is not None}}
    return cfg, extra


def prompt_order(n_problems: int, step: int, per_step: int, seed: int) -> list[int]:
    """Problem indices for a step: a fresh seeded shuffle every pass over the data (resumable by step)."""
    out = []
    for i in range(step * per_step, (step + 1) * per_step):
        epoch, j = divmod(i, n_problems)
        out.append(random.Random(seed * 7919 + epoch).sample(range(n_problems), n_problems)[j])
    return out


def run_eval(model, tok, eval_sets, cfg, stop_ids, step, log):
    """Mean@k / Pass@k on every eval file; logged under eval/<file>/... and eval/... (their average)."""
    results = {}
    for name, problems in eval_sets.items():
        summary, rows = evaluate(model, tok, problems, k=cfg.eval_k, max_new_tokens=cfg.max_new_tokens,
                                 temperature=cfg.eval_temperature, top_p=cfg.eval_top_p, stop_ids=stop_ids,
                                 seed=cfg.seed, progress=False)
        results.update({f"eval/{name}/{k}": v for k, v in summary.items()})
        log.samples(step, name, rows[:: max(1, len(rows) // 4)][:4])
    for key in (f"mean@{cfg.eval_k}", f"pass@{cfg.eval_k}"):
        results[f"eval/{key}"] = sum(results[f"eval/{n}/{key}"] for n in eval_sets) / len(eval_sets)
    log.write({"step": step, **results})
    return results


class RunLog:
    """metrics.jsonl and samples.jsonl; each line is written whole and flushed, so an interrupted
    run leaves only complete lines behind."""

    def __init__(self, run_dir: Path):
        self.metrics = open(run_dir / "metrics.jsonl", "a")
        self.sample_file = open(run_dir / "samples.jsonl", "a")

    def write(self, row: dict):
        self.metrics.write(json.dumps(row) + "\n")
        self.metrics.flush()

    def samples(self, step, name, rows):
        for r in rows:
            self.sample_file.write(json.dumps({"step": step, "eval": name, **r}) + "\n")
        self.sample_file.flush()


def train_step(model, opt, tok, problems, cfg, stop_ids, step):
    """One rollout step and its optimizer steps; returns the metrics line."""
    P, G = cfg.prompts_per_step, cfg.group_size
    batch = [problems[i] for i in prompt_order(len(problems), step, P, cfg.seed)]
    prompts = [p for p in encode_prompts(tok, batch) for _ in range(G)]  # [p0 x G, p1 x G, ...]
    golds = [p.answer for p in batch for _ in range(G)]

    # 1. Rollout with the current policy (which is also pi_old for this step).
    t0 = time.perf_counter()
    model.eval()
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    tokens, _, mask = generate(model, prompts, cfg.max_new_tokens, temperature=cfg.temperature,
                               top_p=cfg.top_p, top_k=cfg.top_k, eos_token_id=stop_ids, generator=gen,
                               pad_id=tok.pad_token_id or 0)
    lengths = mask.sum(-1)
    texts = tok.batch_decode([t[:n] for t, n in zip(tokens.tolist(), lengths.tolist())], skip_special_tokens=True)
    rewards = torch.tensor([float(verify(t, g)) for t, g in zip(texts, golds)])
    advantages = group_advantages(rewards, G, normalize_std=cfg.std_normalize)
    prompt_ids, prompt_mask = left_pad(prompts, tok.pad_token_id or 0)
    t_rollout = time.perf_counter() - t0

    # 2. Old log-probs: one no-grad forward per micro-batch, the same shapes the update will use,
    #    so that the first minibatch sees a ratio of exactly 1.
    t0 = time.perf_counter()
    model.train()
    N = P * G
    mb = N // cfg.minibatches
    micro = cfg.micro_batch or mb
    needs_kl = cfg.clip in NEEDS_FULL_KL  # these compare whole next-token distributions, not one token
    with torch.no_grad():
        old = [score(model, prompt_ids[i:i + micro], prompt_mask[i:i + micro], tokens[i:i + micro],
                     cfg.temperature, return_hidden=needs_kl) for i in range(0, N, micro)]
        old_logp = torch.cat([o[0] for o in old])
        # pi_old's distributions are kept as hidden states (B, T, D), far smaller than (B, T, V) log-probs,
        # plus the lm_head weight as it was, since full fine-tuning moves it too.
        old_hidden = torch.cat([o[2] for o in old]) if needs_kl else None
        old_weight = model.lm_head.weight.detach().clone() if needs_kl else None
    del old

    # 3. Updates: epochs x minibatches optimizer steps, each normalised over its whole minibatch.
    stats, grad_norms, first = [], [], True
    gen_shuffle = torch.Generator().manual_seed(cfg.seed * 31 + step)
    for _ in range(cfg.epochs):
        order = torch.randperm(N, generator=gen_shuffle)
        for m in range(cfg.minibatches):
            idx = order[m * mb:(m + 1) * mb]
            opt.zero_grad(set_to_none=True)
            n_tokens = int(mask[idx].sum())
            for j in range(0, mb, micro):
                sel = idx[j:j + micro]
                logp, entropy, hidden = score(model, prompt_ids[sel], prompt_mask[sel], tokens[sel],
                                              cfg.temperature, with_entropy=True, return_hidden=True)
                if first:
                    check_ratio_is_one(logp, old_logp[sel], mask[sel])
                extra = {"full_kl": full_kl(hidden, old_hidden[sel], model.lm_head.weight, old_weight=old_weight,
                                            temperature=cfg.temperature)} if needs_kl else {}
                loss, metrics = policy_loss(cfg.clip, logp, old_logp[sel], advantages[sel], mask[sel],
                                            agg=cfg.aggregation, num_sequences=mb, num_tokens=n_tokens,
                                            max_new_tokens=cfg.max_new_tokens, compile=cfg.compile,
                                            generator=gen_shuffle, **extra, **cfg.hparams)
                loss.backward()
                m_ = mask[sel].float()
                stats.append({**{k: v.item() for k, v in metrics.items()}, "loss": loss.item(),
                              "entropy": float((entropy.detach() * m_).sum() / m_.sum().clamp(min=1)),
                              "_tokens": float(m_.sum())})
            first = False
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)))
            opt.step()
    t_train = time.perf_counter() - t0

    groups = rewards.view(P, G)
    row = {"step": step + 1, "reward_mean": rewards.mean().item(), "accuracy": (rewards > 0).float().mean().item(),
           "completion_len": lengths.float().mean().item(),
           "truncated": (~torch.isin(tokens.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1),
                                     torch.tensor(stop_ids))).float().mean().item(),
           "groups_all_correct": (groups.min(1).values == 1).float().mean().item(),
           "groups_all_wrong": (groups.max(1).values == 0).float().mean().item(),
           "grad_norm": sum(grad_norms) / len(grad_norms)}
    row.update(merge_stats(stats))
    row.update({"time_rollout": t_rollout, "time_train": t_train})
    return row


def merge_stats(stats: list[dict]) -> dict:
    """Token-weighted means over micro-batches; min/max where the name says so."""
    out, weight = {}, sum(s["_tokens"] for s in stats) or 1.0
    for k in stats[0]:
        if k == "_tokens":
            continue
        values = [s[k] for s in stats]
        out[k] = min(values) if k.endswith("_min") else max(values) if k.endswith("_max") else \
            sum(v * s["_tokens"] for v, s in zip(values, stats)) / weight
    return out


def check_ratio_is_one(logp, old_logp, mask):
    """Before any update the policy is pi_old, so w = 1 exactly; anything else is a scoring bug."""
    gap = ((logp.detach() - old_logp).abs() * mask).max().item()
    if gap > 1e-5:
        raise RuntimeError(f"first-minibatch log-ratio is {gap:.2e}, not 0: the log-probs are not exact "
                           "(dropout on? different shapes between scoring passes?)")


def main(argv=None):
    cfg, extra, given = parse(TrainConfig, argv, __doc__, hparam_flags)
    try:
        if cfg.resume:
            cfg, extra = resumed_config(cfg, extra, given)
        cfg = resolve(cfg, extra)
        run_dir = Path(cfg.resume) if cfg.resume else Path(cfg.out_dir) / (cfg.name or f"{cfg.clip}-{time.strftime('%Y%m%d-%H%M%S')}")
        ckpt = checkpoint.latest(run_dir) if cfg.resume else None
        if cfg.resume and ckpt is None:
            raise ConfigError(f"--resume {cfg.resume}: no checkpoint in that directory")
        model_dir = ckpt or cfg.model
        model = Qwen3.from_pretrained(model_dir)
        tok = load_tokenizer(model_dir)
        problems = load_problems(cfg.data)
        eval_sets = {Path(f).stem: load_problems(f, limit=cfg.eval_limit or None) for f in cfg.eval_data}
    except (ConfigError, ModelError, TokenizerError, DataError) as e:
        die(str(e))
    torch.manual_seed(cfg.seed)
    stop_ids = stop_token_ids(tok, model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99))
    start = 0
    if ckpt is not None:
        state = checkpoint.load_state(ckpt)
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    if cfg.minibatches * cfg.epochs == 1:
        print("warning: each rollout batch feeds one optimizer step, so the ratio is exactly 1 and "
              f"--clip {cfg.clip} has no effect; use --minibatches or --epochs > 1", file=sys.stderr)
    print(f"run {run_dir}: {model.num_parameters() / 1e6:.2f}M parameters, {len(problems)} training problems, "
          f"--clip {cfg.clip} {cfg.hparams}", flush=True)

    try:
        train(cfg, model, tok, opt, problems, eval_sets, stop_ids, run_dir, model_dir, start)
    except KeyboardInterrupt:
        last = checkpoint.latest(run_dir)
        die(f"interrupted; the last checkpoint is {last or 'not written yet'}"
            + (f" (continue with --resume {run_dir})" if last else ""), 130)


def train(cfg, model, tok, opt, problems, eval_sets, stop_ids, run_dir, model_dir, start):
    log = RunLog(run_dir)
    key = f"eval/mean@{cfg.eval_k}"
    before = run_eval(model, tok, eval_sets, cfg, stop_ids, start, log) if start == 0 else None
    if before:
        print(f"step {start}: held-out Mean@{cfg.eval_k} {before[key]:.1f}%  Pass@{cfg.eval_k} "
              f"{before[f'eval/pass@{cfg.eval_k}']:.1f}%", flush=True)
    with tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train", unit="step") as bar:
        for step in bar:
            row = train_step(model, opt, tok, problems, cfg, stop_ids, step)
            log.write(row)
            bar.set_postfix(acc=f"{row['accuracy']:.2f}", kl3=f"{row.get('kl3', 0):.4f}",
                            cut=f"{row.get('clip_frac_low', 0) + row.get('clip_frac_high', 0):.3f}",
                            len=f"{row['completion_len']:.0f}")
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
                res = run_eval(model, tok, eval_sets, cfg, stop_ids, step + 1, log)
                tqdm.write(f"step {step + 1}: held-out Mean@{cfg.eval_k} {res[key]:.1f}%")
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                checkpoint.save(run_dir, model, model_dir, {"step": step + 1, "optimizer": opt.state_dict()})
    after = run_eval(model, tok, eval_sets, cfg, stop_ids, cfg.steps, log)
    print(f"step {cfg.steps}: held-out Mean@{cfg.eval_k} {after[key]:.1f}%  Pass@{cfg.eval_k} "
          f"{after[f'eval/pass@{cfg.eval_k}']:.1f}%" + (f"  (from {before[key]:.1f}%)" if before else ""))
    print(f"metrics: {run_dir / 'metrics.jsonl'}  checkpoint: {run_dir / 'checkpoint'}")


if __name__ == "__main__":
    main()
