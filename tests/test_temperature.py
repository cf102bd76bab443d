"""Sampling and scoring at a temperature T != 1, against references that share no code with nanoatr.

The sampler (rollout.generate) draws from softmax(z / T) and records log softmax(z / T) of each token;
the trainer (scoring.score / token_logprobs) scores completions under the same tempered distribution.
tests/test_rollout.py checks the sampler's log-probs with rollout.sampling_logprobs, the very function
the sampler calls, so a wrong temperature there (`z * T` for `z / T`) passed every test. Here the
reference is the formula written out by hand from the model's raw logits, in float64, and the draws
themselves are counted against it.

The Rollout is read through `tokens` and `mask` (and its second field, the sampler's log-probs, by
position): the field names may change, not what the rollout returns.
"""
import copy
import math

import pytest
import torch

from nanoatr.model import Qwen3, Qwen3Config, init_weights
from nanoatr.rollout import SAMPLERS, generate
from nanoatr.scoring import score, token_logprobs
from rounding import U64, log_softmax_error, qwen3_float64, sampled_logprob_error, sum_orders, within

TEMPERATURES = [0.5, 2.0]  # T * T^-1 = 1 apart from T = 1 in either direction; a planted `* T` swaps them
PROMPTS = [[5, 17, 3, 9, 22, 41, 8], [11, 2], [30, 31, 32, 33]]


def softmax_by_hand(z, T):
    """softmax(z / T) along the last dimension, written out in float64: exp(z/T - max) / sum exp(z/T - max)."""
    zt = z.double() / T
    e = (zt - zt.max(-1, keepdim=True).values).exp()
    return e / e.sum(-1, keepdim=True)


def logprob_by_hand(z, T):
    """log softmax(z / T), written out in float64: z/T - max - log sum exp(z/T - max)."""
    zt = z.double() / T
    shifted = zt - zt.max(-1, keepdim=True).values
    return shifted - shifted.exp().sum(-1, keepdim=True).log()


def raw_logits(model, seq):
    """The model's logits (L, V) over one unpadded sequence: one plain forward, no cache."""
    with torch.no_grad():
        return model(torch.tensor([seq]))[0]


# ----------------------------------------------------------------------------
# The sampler's log-probs

@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("temperature, top_k, top_p", [(0.5, 0, 1.0), (2.0, 0, 1.0), (1.5, 20, 0.9)])
def test_sampler_logprobs_are_the_tempered_softmax_by_hand(tiny_model, temperature, top_k, top_p, sampler):
    """Each sampled token's recorded log-prob is log softmax(z / T)[token] of the raw logits of one plain
    forward: the temperature divides at any T (a `* T` gives other numbers at T = 0.5 and 2), top-k / top-p
    only restrict the draw, never the score (the untruncated tempered distribution). The model in float64:
    the sampler's log-probs are float32 whatever it is, the rest differs only by
    rounding.sampled_logprob_error."""
    model = copy.deepcopy(tiny_model).double()
    out = generate(model, PROMPTS, max_new_tokens=9, temperature=temperature, top_k=top_k, top_p=top_p,
                   generator=torch.Generator().manual_seed(0), sampler=sampler)
    sampler_logp = out.sampler_logp  # the log-prob each token was drawn with
    for i, p in enumerate(PROMPTS):
        n = int(out.mask[i].sum())
        completion = out.tokens[i, :n].tolist()
        z = raw_logits(model, p + completion)[len(p) - 1:-1]  # position j scores token j + 1
        ref = logprob_by_hand(z, temperature).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        tol = sampled_logprob_error(model.config, float(z.abs().max()), z.shape[-1], temperature)
        within(sampler_logp[i, :n], ref, tol, "sampler vs by hand")


# ----------------------------------------------------------------------------
# The draws

V_SMALL = 12  # a vocabulary small enough to count every token's draws


@pytest.fixture(scope="module")
def small_vocab_model():
    """A 1-layer Qwen3 with 12 tokens whose next-token logits are spread over a few nats (std 0.3 weights):
    at T = 0.5, 1 and 2 the distributions differ by far more than sampling noise at N draws."""
    cfg = Qwen3Config(vocab_size=V_SMALL, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-6,
                      max_position_embeddings=64, rope_theta=10000.0)
    model = Qwen3(cfg)
    init_weights(model, std=0.3, seed=3)
    return model.eval()


def chi_square(counts, p, min_expected=5.0):
    """Pearson's statistic of counts (V,) against probabilities p (V,), and its degrees of freedom;
    tokens expected fewer than min_expected times are pooled into one cell, as the test needs."""
    n = counts.sum()
    expected = n * p
    small = expected < min_expected
    obs = torch.cat([counts[~small], counts[small].sum().view(1)])
    exp = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1


def bound(df):
    """Far in the tail of chi-square(df) (mean df, sd sqrt(2 df)): 6 sd above the mean, p < 1e-4 for
    df ~ 10. The draws are seeded, so the test is deterministic; the bound only has to be honest."""
    return df + 6 * math.sqrt(2 * df)


N = 20_000  # draws per case: a chi-square of ~10 at the right temperature, thousands at a wrong one


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_draws_follow_the_tempered_softmax(small_vocab_model, temperature, sampler):
    """N rows of one prompt, two tokens each. The first tokens (drawn after the prefill) are counted
    against softmax(z / T) of the prompt's raw logits, the second (drawn by a decode step, from the
    cache) against their marginal sum_a p(a) softmax(z_a / T), with z_a the logits after the prompt
    and a. Both pass a chi-square bound at T; the same counts fail it by far at T = 1 and at 1 / T
    (what `* T` draws), so the check can tell the temperatures apart."""
    model, prompt = small_vocab_model, [1, 5, 7]
    out = generate(model, [prompt] * N, max_new_tokens=2, temperature=temperature,
                   generator=torch.Generator().manual_seed(0), sampler=sampler)
    assert out.mask.all() and out.tokens.shape == (N, 2)  # no EOS: every row drew both tokens

    def expected(T):
        p1 = softmax_by_hand(raw_logits(model, prompt)[-1], T)  # (V,)
        after = torch.stack([raw_logits(model, prompt + [a])[-1] for a in range(V_SMALL)])  # (V, V): z_a
        return p1, p1 @ softmax_by_hand(after, T)

    counts = [torch.bincount(out.tokens[:, k], minlength=V_SMALL).double() for k in (0, 1)]
    for k, p in enumerate(expected(temperature)):
        stat, df = chi_square(counts[k], p)
        assert stat <= bound(df), (f"token {k + 1}", stat, df)
    for wrong in (1.0, 1 / temperature):
        for k, p in enumerate(expected(wrong)):
            stat, df = chi_square(counts[k], p)
            assert stat > 20 * bound(df), (f"token {k + 1} at T = {wrong}", stat, df)


# ----------------------------------------------------------------------------
# The trainer's scoring

@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_token_logprobs_and_entropy_are_the_tempered_softmax_by_hand(temperature):
    """scoring.token_logprobs (chunked, the trainer's) at T: log softmax(h W^T / T)[y] and the entropy of
    softmax(h W^T / T), against the formulas written out, over several chunks."""
    g = torch.Generator().manual_seed(0)
    f64 = torch.float64  # float64 stays float64 in scoring: both sides round at 2^-53
    hidden, weight = torch.randn(3, 5, 8, generator=g, dtype=f64), torch.randn(11, 8, generator=g, dtype=f64)
    targets = torch.randint(0, 11, (3, 5), generator=g)
    logp, entropy = token_logprobs(hidden, weight, targets, temperature=temperature, chunk_size=4, with_entropy=True)
    z = hidden @ weight.T  # (3, 5, 11)
    ref = logprob_by_hand(z, temperature)
    # each side: the logits' 8-term sums (two orders: sum_orders, of sum |h w|, / T; log-softmax moves by up
    # to twice that) and its log-softmax's rounding; the entropy -sum p log p at most (log V + 1) times that
    # error, plus the rounding of its own sum of V terms
    logits = sum_orders(8, U64) * float((hidden.abs() @ weight.abs().T).max()) / temperature
    tol = 2 * logits + 2 * log_softmax_error(z, temperature, U64)
    within(logp, ref.gather(-1, targets[..., None])[..., 0], tol, "log-probs")
    within(entropy, -(ref.exp() * ref).sum(-1), tol * (math.log(11) + 1) + sum_orders(11, U64) * math.log(11),
           "entropy")


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_score_is_the_tempered_softmax_by_hand(tiny_model, temperature):
    """scoring.score over left-padded prompts and given completions: each token's log-prob is
    log softmax(z / T)[token] of the raw logits of its own unpadded sequence. In float64 (scoring keeps it):
    the padded forward and the plain one differ by rounding.qwen3_float64, which log-softmax at most doubles
    and divides by T, besides each side's own log-softmax rounding."""
    model = copy.deepcopy(tiny_model).double()
    g = torch.Generator().manual_seed(1)
    completions = torch.randint(0, model.config.vocab_size, (len(PROMPTS), 6), generator=g)
    P = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (P - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[False] * (P - len(p)) + [True] * len(p) for p in PROMPTS])
    with torch.no_grad():
        logp, entropy, hidden = score(model, ids, mask, completions, temperature)
    assert entropy is None and hidden is None  # not asked for: not computed, not kept
    for i, p in enumerate(PROMPTS):
        c = completions[i].tolist()
        z = raw_logits(model, p + c)[len(p) - 1:-1]
        ref = logprob_by_hand(z, temperature).gather(-1, completions[i][:, None])[:, 0]
        z_max = float(z.abs().max())
        tol = 2 * qwen3_float64(model.config) * z_max / temperature + \
            2 * log_softmax_error(z, temperature, U64)
        within(logp[i], ref, tol, "score vs by hand")
