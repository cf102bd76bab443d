"""One GRPO step on the embedded default, phase by phase: ours vs the same step done the textbook way
with transformers, on the same weights and prompts, in the same run.

    python bench/step.py                      # 8 prompts x 8 samples = 64 completions, ~2 minutes
    python bench/step.py --steps 5 --no-reference

The phases are those of train.py's train_step, called with the same library functions
(rollout.generate, verifier.verify, loss.group_advantages, scoring.score, loss.policy_loss,
AdamW), each timed on its own:
  rollout      sample G completions per prompt (KV cache; stops when every row has hit EOS)
  reward       decode and grade every completion
  advantages   group advantages (Dr. GRPO) and the left-padded prompt batch
  old logp     no-grad forward of the rollout policy (pi_old's log-probs, recomputed with the training
               forward). Ours, as train.py, scores only the rows of minibatches 2..: before the first
               optimizer step the update's own log-probs are pi_old's, bit for bit. The reference
               scores every row first, as most GRPO code does.
  update fwd   forward with gradients: log-probs and entropy (chunked) + the clipped loss
  backward     loss.backward()
  optimizer    gradient-norm clipping + AdamW step
(update fwd, backward and optimizer add up over --minibatches optimizer steps.)

The reference runs the same phases with transformers' Qwen3ForCausalLM loaded from the same
directory: generate(do_sample=True, use_cache=True) for the rollout and full (B, T, V) logits +
log_softmax for the log-probs, as most GRPO code does; reward, advantages, loss and AdamW are shared.
Both sides score and train on our rollout's completions (the same tokens); the reference's own
rollout is only timed. Times are medians over --steps steps after --warmup steps (the warm-up
compiles the loss).
"""
import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nanoatr.loss import group_advantages  # noqa: E402
from nanoatr.data import load_problems  # noqa: E402
from nanoatr.loss import policy_loss  # noqa: E402
from nanoatr.model import Qwen3  # noqa: E402
from nanoatr.rollout import Rollout, generate, left_pad, sampling_logprobs  # noqa: E402
from nanoatr.machinery.decoding import decode_plan  # noqa: E402
from nanoatr.scoring import Scores, score  # noqa: E402
from nanoatr.tokenizer import encode_prompts, load_tokenizer, eos_token_ids  # noqa: E402
from nanoatr.verifier import verify  # noqa: E402

PHASES = ["rollout", "reward", "advantages", "old logp", "update fwd", "backward", "optimizer"]


class Ours:
    rescore_first = False  # minibatch 1's old log-probs are its update's own, detached

    def __init__(self, path):
        self.model = Qwen3.from_pretrained(path)

    def generate(self, prompts, args, eos_ids, pad, gen):
        return generate(self.model, prompts, args.max_new_tokens, temperature=args.temperature,
                        eos_token_id=eos_ids, generator=gen, pad_id=pad,
                        plan=decode_plan(self.model.lm_head.weight.device, temperature=args.temperature))

    def score(self, prompt_ids, prompt_mask, tokens, temperature, with_entropy=False):
        return score(self.model, prompt_ids, prompt_mask, tokens, temperature, with_entropy=with_entropy)


class Reference:
    """The same policy as a transformers model, used the way most GRPO code uses it."""
    rescore_first = True

    def __init__(self, path):
        from transformers import Qwen3ForCausalLM
        self.model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32)

    def generate(self, prompts, args, eos_ids, pad, gen):
        ids, mask = left_pad(prompts, pad)
        torch.manual_seed(gen.initial_seed())
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask.long(),
                                      max_new_tokens=args.max_new_tokens, do_sample=True,
                                      temperature=args.temperature, top_k=0, top_p=1.0,
                                      eos_token_id=eos_ids, pad_token_id=pad, use_cache=True)
        tokens = out[:, ids.shape[1]:]
        is_eos = torch.isin(tokens, torch.tensor(eos_ids))
        real = (is_eos.cumsum(1) - is_eos.long()) == 0
        return Rollout(ids, mask, tokens, torch.zeros(tokens.shape), real, is_eos.any(-1))

    def score(self, prompt_ids, prompt_mask, tokens, temperature, with_entropy=False):
        P = prompt_ids.shape[1]
        ids = torch.cat([prompt_ids, tokens], 1)[:, :-1]
        mask = torch.cat([prompt_mask, torch.ones_like(tokens, dtype=torch.bool)], 1)[:, :-1].long()
        logits = self.model(input_ids=ids, attention_mask=mask,
                            position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
        logp_all = sampling_logprobs(logits[:, P - 1:], temperature)  # (B, T, V)
        logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
        return Scores(logp, entropy, None)


def grade_completions(tok, tokens, mask, golds) -> torch.Tensor:
    """Decode every completion and grade it against its gold answer: 1.0 right, 0.0 wrong."""
    lengths = mask.sum(-1).tolist()
    texts = tok.batch_decode([row[:n] for row, n in zip(tokens.tolist(), lengths)], skip_special_tokens=True)
    return torch.tensor([float(verify(s, g)) for s, g in zip(texts, golds)])


def score_old_logprobs(policy, old_logp, prompt_ids, prompt_mask, tokens, idxs, temperature):
    """Write pi_old's log-probs into old_logp, minibatch by minibatch (ours skips the first: see Ours)."""
    for m, idx in enumerate(idxs):
        if m > 0 or policy.rescore_first:
            with torch.no_grad():
                old_logp[idx] = policy.score(prompt_ids[idx], prompt_mask[idx], tokens[idx], temperature).logp


def one_step(policy, opt, problems, tok, eos_ids, args, step, tokens_from=None):
    """Times of every phase (dict) and the rollout this step trained on."""
    t = {}
    P, G, pad = args.prompts, args.group, tok.pad_token_id or 0
    batch = [problems[(step * P + i) % len(problems)] for i in range(P)]
    prompts = [p for p in encode_prompts(tok, batch) for _ in range(G)]
    golds = [p.answer for p in batch for _ in range(G)]
    N = P * G

    t0 = time.perf_counter()
    policy.model.eval()
    out = policy.generate(prompts, args, eos_ids, pad, torch.Generator().manual_seed(step))
    t["rollout"] = time.perf_counter() - t0
    tokens, mask = (out.tokens, out.mask) if tokens_from is None else tokens_from  # score the same tokens

    t0 = time.perf_counter()
    rewards = grade_completions(tok, tokens, mask, golds)
    t["reward"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    advantages = group_advantages(rewards, G)
    prompt_ids, prompt_mask = left_pad(prompts, pad)
    t["advantages"] = time.perf_counter() - t0

    # Old log-probs minibatch by minibatch, in the order the updates will take them.
    policy.model.train()
    mb = N // args.minibatches
    order = torch.randperm(N, generator=torch.Generator().manual_seed(step))
    idxs = [order[m * mb:(m + 1) * mb] for m in range(args.minibatches)]
    old_logp = torch.zeros(tokens.shape)
    t0 = time.perf_counter()
    score_old_logprobs(policy, old_logp, prompt_ids, prompt_mask, tokens, idxs, args.temperature)
    t["old logp"] = time.perf_counter() - t0

    for k in ("update fwd", "backward", "optimizer"):
        t[k] = 0.0
    for m, idx in enumerate(idxs):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logp, entropy = policy.score(prompt_ids[idx], prompt_mask[idx], tokens[idx], args.temperature,
                                     with_entropy=True)[:2]
        if m == 0 and not policy.rescore_first:
            old_logp[idx] = logp.detach()
        loss, _ = policy_loss("kl3", logp, old_logp[idx], advantages[idx], mask[idx], num_sequences=mb,
                              num_tokens=int(mask[idx].sum()), max_new_tokens=args.max_new_tokens,
                              compile=args.compile_loss, delta=0.07)
        loss.item()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        opt.step()
        t3 = time.perf_counter()
        t["update fwd"] += t1 - t0
        t["backward"] += t2 - t1
        t["optimizer"] += t3 - t2
    if tokens_from is None:  # how far the rollout's own log-probs are from the recomputed ones
        t["rollout vs old logp"] = float(((out.sampler_logp - old_logp).abs() * mask).max())
    return t, (tokens, mask), out


def report(name, times, n_tokens, rollout_tokens):
    """Print the phases; returns the medians and the step time."""
    med = {k: statistics.median(x[k] for x in times) for k in PHASES}
    total = sum(med.values())
    print(f"\n{name}: {total:.3f} s per step, {statistics.median(n_tokens) / total:.0f} completion tokens/s "
          f"(rollout alone {statistics.median(rollout_tokens) / med['rollout']:.0f} tokens/s)")
    for k in PHASES:
        print(f"  {k:16s} {med[k] * 1e3:8.1f} ms  {100 * med[k] / total:5.1f}%")
    return med, total


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="data/tiny-qwen3")
    ap.add_argument("--data", default="data/arith/train.jsonl")
    ap.add_argument("--prompts", type=int, default=8, help="distinct prompts per step")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="completion budget (train.py's default)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--minibatches", type=int, default=2,
                    help="optimizer steps per rollout (train.py's default)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps; medians are reported")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (compiles the loss)")
    ap.add_argument("--no-compile-loss", dest="compile_loss", action="store_false", help="eager loss")
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the transformers step")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    root = Path(__file__).resolve().parents[1]
    model_dir, data = root / args.model, root / args.data
    tok = load_tokenizer(model_dir)
    eos_ids = eos_token_ids(tok, model_dir)
    problems = load_problems(data)
    sides = {"ours": Ours(model_dir)}
    if args.reference:
        sides["transformers"] = Reference(model_dir)
    opts = {k: torch.optim.AdamW(p.model.parameters(), lr=1e-4) for k, p in sides.items()}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.model}: "
          f"{sides['ours'].model.num_parameters() / 1e6:.2f}M parameters; {args.prompts} x {args.group} = "
          f"{args.prompts * args.group} completions of <= {args.max_new_tokens} tokens, "
          f"{args.minibatches} minibatches")
    times = {k: [] for k in sides}
    n_tokens, rollout_tokens = {k: [] for k in sides}, {k: [] for k in sides}
    for step in range(args.warmup + args.steps):
        shared = None
        for name, policy in sides.items():  # same step, same prompts; interleaved so load drift hits both
            t, shared_now, out = one_step(policy, opts[name], problems, tok, eos_ids, args, step, shared)
            shared = shared or shared_now
            if step >= args.warmup:
                times[name].append(t)
                n_tokens[name].append(float(shared[1].sum()))
                rollout_tokens[name].append(float(out.mask.sum()))
    totals, meds = {}, {}
    for name in sides:
        meds[name], totals[name] = report(name, times[name], n_tokens[name], rollout_tokens[name])
    gap = max(x["rollout vs old logp"] for x in times["ours"])
    print(f"\nrollout log-probs vs recomputed old log-probs: max |difference| {gap:.1e} (float32)")
    ours = meds["ours"]
    update = ours["update fwd"] + ours["backward"] + ours["optimizer"]
    others = max(ours[k] for k in ("reward", "advantages", "old logp"))
    line = (f"summary: ours {totals['ours']:.3f} s/step = "
            f"rollout {100 * ours['rollout'] / totals['ours']:.0f}% + "
            f"update {100 * update / totals['ours']:.0f}%; "
            f"largest other phase {100 * others / totals['ours']:.1f}%")
    if args.reference:
        line += (f"; transformers {totals['transformers']:.3f} s/step "
                 f"({totals['transformers'] / totals['ours']:.2f}x ours)")
    print(line)


if __name__ == "__main__":
    main()
