"""The optional KL penalty to a reference policy (--beta > 0): the reference and the estimator.

The paper, like Dr. GRPO and DAPO, sets beta = 0 and never computes a reference. With beta > 0:

  reference   the model training started from. Under LoRA it is the same weights with the adapters
              switched off (peft's disable_adapter), so no second copy is held. Under full
              fine-tuning the weights themselves move, so a frozen copy of --model is loaded
              (twice the weight memory; the trainer says so at start).
  estimator   per token, with samples from pi_old and w = pi_theta / pi_old, rho = pi_ref / pi_theta:
                  kl = w * k3(rho) = w * (rho - 1 - log rho)
              an unbiased estimate of KL(pi_theta || pi_ref) from these stale samples whose gradient,
              through w and rho, is that KL's gradient (clip_methods.md §10, §14; TRL's
              use_bias_correction_kl). Plain k3(rho) is biased once pi_theta != pi_old, and its gradient
              is that of the other direction, KL(pi_ref || pi_theta).
The penalty beta * kl is aggregated like the policy loss (loss.aggregate) and added to it.

Starting from an SFT adapter? Merge it first (python -m nanoatr.lora merge) and train on the merged
model: the reference is then the SFT policy, not the model before SFT (users.md 1.5).
"""
import contextlib

import torch

from nanoatr.divergence import k3
from nanoatr.loss import MAX_LOG_RATIO
from nanoatr.rollout import score


class Reference:
    """Scores completions under pi_ref: `model` with `adapters_off()` entered (nullcontext for a frozen copy)."""

    def __init__(self, model, adapters_off=contextlib.nullcontext, precision=contextlib.nullcontext):
        self.model, self.adapters_off, self.precision = model, adapters_off, precision

    @torch.no_grad()
    def logprobs(self, prompt_ids, prompt_mask, tokens, temperature: float):
        """log pi_ref (B, T) of the completion tokens, at the sampling temperature (as the policy is scored)."""
        with self.adapters_off(), self.precision():
            return score(self.model, prompt_ids, prompt_mask, tokens, temperature)[0]


def kl_to_reference(logp, old_logp, ref_logp, mask):
    """Per-token w * k3(rho) (B, T), the IS-correct k3 estimate of KL(pi_theta || pi_ref); 0 on padding.

    logp carries the gradient; old_logp and ref_logp are constants. Log-ratios are clamped to
    +-MAX_LOG_RATIO as in the policy loss, so a diverged token stays finite.
    """
    valid = mask.bool()
    log_w = torch.where(valid, logp - old_logp.detach(), 0.0).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    log_rho = torch.where(valid, ref_logp.detach() - logp, 0.0).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return torch.where(valid, log_w.exp() * k3(log_rho), 0.0)
