"""Tolerances from arithmetic, for the tests that compare two computations of the same numbers which differ
only in rounding: the order of a kernel's sums (another CPU, another thread count, chunked or whole, a KV
cache or the full forward, compiled or eager, ours or transformers'). CI on an Intel Xeon failed such a
comparison, in float32 with a tolerance tuned on an AMD EPYC (tests/test_grpo.py, fixed in 4215947). So such
a comparison runs in float64 wherever both sides can, and its tolerance is a bound on rounding, never a
measurement on one machine.

The bounds are first-order worst cases (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.):
a correctly rounded operation errs by at most u relative (an elementwise function such as exp or cos by one
ulp, 2u), and a sum of n terms, in any order, by at most (n - 1) u sum|x| (Thm 4.1), so two orders of one
sum differ by at most twice that. `within` checks a difference against its bound and, with
NANOATR_ROUNDING=1 in the environment (and pytest -s), prints both: the "measured" column of the table in
docs or a report comes from there, on whatever machine runs it.
"""
import contextlib
import math
import os

import torch

U32 = 2.0 ** -24   # float32's unit roundoff
U64 = 2.0 ** -53   # float64's
UBF16 = 2.0 ** -8  # bfloat16's (8 significant bits)


def sum_orders(n: int, u: float) -> float:
    """How far two orders of one sum of n terms lie apart, as a share of the sum of the terms' magnitudes."""
    return 2 * max(n - 1, 0) * u


def log_softmax_error(z, temperature: float = 1.0, u: float = U32) -> float:
    """How far log softmax(z / T) computed in unit roundoff u, in any order, lies from the exact one, for
    logits z (..., V) held exactly: z / T rounded (u M, M = max |z / T|; the log-softmax of a shifted input
    moves by up to twice the largest shift), the max subtracted (u 2M), exp (one ulp: 2u relative), the sum of
    V positive terms ((V - 1) u relative, which the log turns into an absolute error), the log (u log V) and
    the last subtraction (u (2M + log V)): u (6M + V + 1 + 2 log V)."""
    z = torch.as_tensor(z)
    V, M = z.shape[-1], float((z.double() / temperature).abs().max())
    return u * (6 * M + V + 1 + 2 * math.log(V))


def entropy_error(vocab: int, z_max: float, temperature: float = 1.0, u: float = U32) -> float:
    """How far -sum p log p over V tokens, computed from a log-softmax in unit roundoff u, lies from the exact
    one: an error e in every log p (log_softmax_error) moves it by e (H + 1) <= e (log V + 1) (p = exp(log p)
    moves relatively by e too), and its own V-term sum by (V - 1) u H <= (V - 1) u log V."""
    e = log_softmax_error(torch.full((vocab,), float(z_max)), temperature, u)
    return e * (math.log(vocab) + 1) + sum_orders(vocab, u) / 2 * math.log(vocab)


def qwen3_float64(config, same_code: bool = True) -> float:
    """How far two float64 forwards of one Qwen3 can lie apart, as a share of the largest |logit|, when only
    their rounding differs. In float64 the reductions themselves are far below what follows (a length-n sum
    errs by (n - 1) 2^-53 of its terms' size; here n <= 2^9, so <= 2^-44 a reduction); what is left are the
    two float32 islands that our model keeps, as transformers' does: each RMSNorm normalises in float32
    (x.float()), and RoPE's cos and sin are taken of float32 angles (nanoatr/model/qwen3.py).

    same_code (both forwards ours): an island then computes the same float32 numbers from inputs that agree
    to ~1e-15, except where a kernel may take another path for another length (a vector loop or a scalar
    tail: cos and sin one ulp apart; not so in torch 2.13 on AVX2, measured) or an input lies within ~1e-15
    of a float32 rounding boundary (a chance of ~2^-29 an entry): at most one ulp, 2 U32, an entry.
    Otherwise (ours against transformers'): the norms are other code, in float32: the mean of d squares
    errs by (d - 1) U32 relative, its rsqrt by half that and U32, the product by U32: (d/2 + 2) U32 an entry
    (d = hidden_size; head_dim for the q and k norms), and the rotations as above.
    On the way to a logit there are, per layer, four norms (input, q, k, post-attention) and two rotations
    (q, k), then the final norm. A relative error e in each entry of one island moves the logits by about
    e x max|logit| (the norms rescale what they pass on): one ulp planted in every entry of every island at
    once moved the logits of the tests' random models by at most 20 U32 of their largest, against 26 U32 for
    the 13 islands of 2 layers at gain 1. Gain 2 is taken."""
    L, hidden, head = config.num_hidden_layers, config.hidden_size, config.head_dim
    def norm(d):
        return 2 * U32 if same_code else (d / 2 + 2) * U32
    per_layer = 2 * norm(hidden) + 2 * norm(head) + 2 * 2 * U32
    return 2 * (L * per_layer + norm(hidden))


def sampled_logprob_error(config, z_max: float, vocab: int, temperature: float = 1.0,
                          same_code: bool = True) -> float:
    """How far two log-probs of one token can lie apart when each is the sampler's float32
    log softmax(z / T) (rollout.sampling_logprobs) of logits z from a float64 forward of one Qwen3, the
    forwards differing only in rounding (qwen3_float64, of logits up to z_max): the logits differ by that
    and by their rounding to float32 (U32 z_max each); log-softmax passes a change of its input on at most
    doubled (d log p_y = dz_y - sum p dz), divided by T; and each log-softmax rounds on its own
    (log_softmax_error, twice). Temperature 0 (greedy) is scored at T = 1."""
    T = temperature if temperature > 0 else 1.0  # greedy draws are scored at T = 1
    logits = (qwen3_float64(config, same_code) + 2 * U32) * z_max
    return 2 * logits / T + 2 * log_softmax_error(torch.full((vocab,), float(z_max)), T)


def as_float64(x):
    """x as a float64 tensor; a Python float kept whole (torch.as_tensor would make it float32)."""
    return x.double() if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.float64)


def max_diff(a, b) -> float:
    return float((as_float64(a) - as_float64(b)).abs().max())


def within(a, b, tol: float, what: str = "") -> float:
    """Assert max |a - b| <= tol (a nan fails); returns the difference. NANOATR_ROUNDING=1 prints it."""
    diff = max_diff(a, b)
    if os.environ.get("NANOATR_ROUNDING"):
        print(f"\nrounding: {what}: {diff:.3g} (bound {tol:.3g})")
    assert diff <= tol, f"{what}: {diff:.3g} apart, more than rounding explains ({tol:.3g})"
    return diff


@contextlib.contextmanager
def another_cpu(seed: int = 0, linear_units: int = 64):
    """Inside, our Qwen3 rounds as another CPU's kernels might: every entry of every float32 island (each
    RMSNorm's output, RoPE's cos and sin) one float32 ulp off (2 U32, random signs), and every linear layer's
    output `linear_units` units of its own dtype's rounding off (another order of its sums). What a bound of
    qwen3_float64 must absorb (tests/test_model.py plants it)."""
    from torch import nn
    from nanoatr.model import qwen3
    g = torch.Generator().manual_seed(seed)
    norm, rope, linear = qwen3.RMSNorm.forward, qwen3.rope_cos_sin, nn.Linear.forward

    def off(x, units):
        return x * (1 + units * torch.randn(x.shape, generator=g, dtype=x.dtype).sign())

    def linear_off(self, x):
        y = linear(self, x)
        return off(y, linear_units * (U64 if y.dtype == torch.float64 else U32))
    qwen3.RMSNorm.forward = lambda self, x: off(norm(self, x), 2 * U32)
    qwen3.rope_cos_sin = lambda *a: tuple(off(t, 2 * U32) for t in rope(*a))
    nn.Linear.forward = linear_off
    try:
        yield
    finally:
        qwen3.RMSNorm.forward, qwen3.rope_cos_sin, nn.Linear.forward = norm, rope, linear
