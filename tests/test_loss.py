"""Every --clip method's gradient on hand-built tokens, Theorem 4.1, aggregation, compile, chunked log-probs.

    python -m pytest tests/test_loss.py -q

Expected gradients are written out from the formulas in each method's docstring (the sources it names),
never computed by the code under test.  Each batch row is a list of ratios w with one
advantage, plus a padding token whose logp is garbage (inf / nan): it must get zero loss and gradient.
"""
import math
import warnings

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from nanoatr import loss as L
from nanoatr import scoring as S
from nanoatr import divergence, methods
from nanoatr.divergence import kl3_ratio_range
from nanoatr.machinery import flags
from rounding import U32, UBF16, entropy_error, log_softmax_error, sum_orders, within

F64 = torch.float64
W = [0.5, 0.75, 0.85, 1.0, 1.1, 1.25, 1.5, 2.5, 3.5, 5.0]  # ratios on both sides of every band
GARBAGE = [math.inf, math.nan, -math.inf]  # what the padding token of row i holds in logp


def summed_loss(method, logp, old, advantages, mask, *, full_kl=None, generator=None, **hparams):
    """policy_loss, the trainer's entry, eager, with counts of 1: under dr-grpo its scalar is the plain
    sum of the per-token losses (sum / (1 x 1)), so d loss / d logp is each token's own gradient. The
    sequence-level methods (gspo, gspo-token, kl3-seq) always aggregate per sequence: the scalar is then
    the sum of each sequence's token mean, and a token's gradient 1 / n of its own (n: the sequence's
    length)."""
    return L.policy_loss(method, logp, old, advantages, mask, agg="dr-grpo", num_sequences=1, num_tokens=1,
                         max_new_tokens=1, compile=False, full_kl=full_kl, generator=generator, **hparams)


def run(method, ratios, advantages, *, q=0.3, **hparams):
    """summed_loss on rows of `ratios` (one row per advantage) + one padding token per row; q: pi_old of
    every token. Returns (loss, d loss / d logp, metrics), the gradient without the padding column, after
    checking that padding gets none.
    """
    B = len(advantages)
    w = torch.tensor(ratios, dtype=F64).expand(B, -1) if not isinstance(ratios[0], list) else \
        torch.tensor(ratios, dtype=F64)
    old = torch.full(w.shape, math.log(q), dtype=F64)
    pad = torch.tensor([[GARBAGE[i % 3]] for i in range(B)], dtype=F64)
    logp_ = torch.cat([old + w.log(), pad], 1).requires_grad_()
    old_ = torch.cat([old, torch.full((B, 1), -math.inf, dtype=F64)], 1)
    mask = torch.cat([torch.ones(w.shape), torch.zeros(B, 1)], 1)
    loss, metrics = summed_loss(method, logp_, old_, torch.tensor(advantages, dtype=F64), mask, **hparams)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp_.grad).all()
    assert (logp_.grad[:, -1] == 0).all()
    return loss.detach(), logp_.grad[:, :-1], metrics


def col(*values):
    return torch.tensor(values, dtype=F64)[:, None]


def keep(*rows):
    return torch.tensor(rows, dtype=F64)


def close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected.to(actual.dtype), **kw)


# ----------------------------------------------------------------------------
# Ratio-range methods: d loss / d logp = -A w where the gradient is kept, 0 where cut

# Exercise 1 (docs/exercises.md) is graded by the tests named test_clip_cuts_the_ppo_set*: one per
# behaviour of its contract, so that partial work earns partial credit, and each failure says what is wrong.
PPO_ROWS = {"A=+1": (1.0, [1, 1, 1, 1, 1, 0, 0, 0, 0, 0], "A > 0: cut where w > 1 + eps = 1.2"),
            "A=-1": (-1.0, [0, 0, 1, 1, 1, 1, 1, 1, 1, 1], "A < 0: cut where w < 1 - eps = 0.8"),
            "A=0": (0.0, [1] * 10, "A = 0: nothing cut, and no gradient anyway")}  # (§V.4 PPO eps=.2)


def ppo_tokens(advantages=(1.0, -1.0, 0.0)):
    """The grid W, one row per advantage, as the Tokens a method receives (no padding: all valid)."""
    w = torch.tensor(W, dtype=F64).expand(len(advantages), -1)
    return methods.Tokens(w, w.log(), col(*advantages).expand_as(w), torch.ones_like(w, dtype=torch.bool),
                          torch.zeros_like(w), None, None)


def wrong_at(actual, expected, advantages) -> str:
    """'' when actual == expected, else where they differ: "at A = -1, w = 1.25: 1, not 0; ... (7 more)"."""
    actual, expected = torch.as_tensor(actual).to(F64), torch.as_tensor(expected).to(F64).expand_as(actual)
    bad = ~torch.isclose(actual, expected, rtol=1e-6, atol=1e-9, equal_nan=False)
    spots = [f"A = {advantages[i]:+g}, w = {W[j]:g}: {actual[i, j].item():.4g}, not {expected[i, j].item():.4g}"
             for i, j in bad.nonzero().tolist()]
    return "at " + "; ".join(spots[:2]) + (f" ({len(spots) - 2} more)" if len(spots) > 2 else "") if spots else ""


@pytest.mark.parametrize("row", PPO_ROWS)
def test_clip_cuts_the_ppo_set_gradient(row):
    A, kept, rule = PPO_ROWS[row]
    _, grad, _ = run("clip", W, [A])
    expected = -A * torch.tensor(W, dtype=F64) * torch.tensor(kept, dtype=F64)
    where = wrong_at(grad, expected[None], [A])
    assert not where, f"clip's gradient d loss / d log w is wrong ({rule}; -A w where kept, 0 where cut) {where}"


@pytest.mark.parametrize("side, expected, rule", [
    ("high", keep([0] * 5 + [1] * 5, [0] * 10, [0] * 10), "cut_high = (A > 0) & (w > upper)"),
    ("low", keep([0] * 10, [1, 1] + [0] * 8, [0] * 10), "cut_low = (A < 0) & (w < lower)")], ids=["high", "low"])
def test_clip_cuts_the_ppo_set_masks_and_clip_frac(side, expected, rule):
    """The mask clip returns, then the share of tokens loss.py logs from it (clip_frac_low / clip_frac_high)."""
    _, cut_low, cut_high, _ = methods.clip(ppo_tokens(), eps=0.2)
    mask = cut_high if side == "high" else cut_low
    assert mask.dtype == torch.bool, f"clip: cut_{side} is {mask.dtype}, not a bool tensor ({rule})"
    where = wrong_at(mask, expected, (1.0, -1.0, 0.0))
    assert not where, f"clip's cut_{side} is wrong ({rule}, lower = 0.8, upper = 1.2) {where}"
    frac = run("clip", W, [1.0, -1.0, 0.0])[2][f"clip_frac_{side}"].item()
    share = int(expected.sum())
    assert frac == pytest.approx(share / 30), \
        f"clip_frac_{side} is {frac:.4f}, expected {share}/30 = {share / 30:.4f}: {rule}, on valid tokens only"


def test_clip_cuts_the_ppo_set_loss_values():
    """ratio_clip's loss itself (not only its gradient): -min(w A, clamp(w, lower, upper) A), shaped like ratio."""
    t = ppo_tokens((2.0, -0.5, 0.0))
    loss, cut_low, cut_high = methods.ratio_clip(t.ratio, t.advantages, 0.8, 1.2)
    assert loss.shape == cut_low.shape == cut_high.shape == t.ratio.shape, \
        f"ratio_clip returned shapes {[tuple(x.shape) for x in (loss, cut_low, cut_high)]}, not the ratio's {tuple(t.ratio.shape)}"
    expected = -torch.minimum(t.ratio * t.advantages, t.ratio.clamp(0.8, 1.2) * t.advantages)
    where = wrong_at(loss.detach(), expected, (2.0, -0.5, 0.0))
    assert not where, f"ratio_clip's loss is wrong (-min(w A, clamp(w, lower, upper) A), to be minimised) {where}"


def test_clip_cuts_the_ppo_set_with_tensor_bounds():
    """ratio_clip takes per-token bounds too (dynamic and trgppo call it so): here a band per row, each on
    a ratio of the grid (1.25, 0.75), which is inside: kept, not cut."""
    t = ppo_tokens((1.0, -1.0))
    lower, upper = col(0.6, 0.75).expand_as(t.ratio), col(1.25, 2.0).expand_as(t.ratio)
    loss, cut_low, cut_high = methods.ratio_clip(t.ratio, t.advantages, lower, upper)
    expected = -torch.minimum(t.ratio * t.advantages, torch.clamp(t.ratio, lower, upper) * t.advantages)
    for what, actual, expect in [("loss", loss.detach(), expected),
                                 ("cut_high", cut_high, keep([0] * 6 + [1] * 4, [0] * 10)),
                                 ("cut_low", cut_low, keep([0] * 10, [1] + [0] * 9))]:
        where = wrong_at(actual, expect, (1.0, -1.0))
        assert not where, f"ratio_clip's {what} is wrong with tensor bounds (a band per row: A = +1 in [0.6, 1.25], " \
                          f"A = -1 in [0.75, 2.0]; a ratio on a bound is inside) {where}"


def test_clip_cuts_the_ppo_set_at_another_eps():
    """clip(t, eps) uses its eps: 0.3 gives the band [0.7, 1.3]; and it returns (loss, cut_low, cut_high, {})."""
    out = methods.clip(ppo_tokens(), eps=0.3)
    assert isinstance(out, tuple) and len(out) == 4 and out[3] == {}, \
        f"clip returned {type(out).__name__} of {len(out) if isinstance(out, tuple) else '?'} things, not (loss, cut_low, cut_high, {{}})"
    _, grad, _ = run("clip", W, [1.0, -1.0], eps=0.3)
    kept = keep([1, 1, 1, 1, 1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    where = wrong_at(grad, -col(1.0, -1.0) * torch.tensor(W, dtype=F64) * kept, (1.0, -1.0))
    assert not where, f"clip(t, eps=0.3)'s gradient is wrong (its band is [1 - eps, 1 + eps] = [0.7, 1.3]) {where}"


def test_clip_higher_cuts_the_dapo_set():
    """Exercise 2's own check (the knob test below takes every eps_low, eps_high)."""
    _, grad, m = run("clip-higher", W, [2.0, -0.5])
    kept = keep([1, 1, 1, 1, 1, 1, 0, 0, 0, 0],  # 1.25 <= 1.28 now kept  (§V.4 DAPO .2/.28)
                [0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    close(grad, -col(2.0, -0.5) * torch.tensor(W, dtype=F64) * kept)
    assert m["clip_frac_high"].item() == pytest.approx(4 / 20)


def test_dynamic_bounds_numbers():
    # the bounds themselves: w just inside / just outside each §V.5 value keeps / loses the gradient
    for q, lo, hi in [(0.9, 0.7687, 1.1872), (0.5, 0.5, 1.3062), (0.1, 0.5, 2.0), (0.001, 0.5, 10.0)]:
        _, grad, _ = run("dynamic", [hi - 2e-4, hi + 2e-4], [1.0], q=q)
        assert grad[0, 0] != 0 and grad[0, 1] == 0, q
        _, grad, _ = run("dynamic", [lo - 2e-4, lo + 2e-4], [-1.0], q=q)
        assert grad[0, 0] == 0 and grad[0, 1] != 0, q


def test_clip_cov_picks_n_random_candidates_reproducibly():
    """policy_loss draws clip-cov's random keys from the generator it is given: the same seed picks the same
    n = floor(0.02 x 200) = 4 tokens (w = 1, |A| = 2: a token's gradient is 0 exactly where it was picked),
    other seeds others. Which tokens may be picked: the knob test below."""
    logp = torch.randn(4, 50, generator=torch.Generator().manual_seed(0), dtype=F64)

    def chosen(seed):
        x = logp.clone().requires_grad_()
        loss, m = summed_loss("clip-cov", x, logp, torch.tensor([2.0, 2.0, -2.0, -2.0], dtype=F64), torch.ones(4, 50),
                              generator=torch.Generator().manual_seed(seed), clip_cov_ratio=0.02, clip_cov_lb=0.5)
        loss.backward()
        assert (x.grad == 0).sum() == 4 and m["cov_frac"].item() == pytest.approx(4 / 200)
        return tuple((x.grad == 0).flatten().tolist())
    assert chosen(1) == chosen(1) and len({chosen(s) for s in range(4)}) > 1


def test_soft_gate_gradient_matches_sapo():
    _, grad, m = run("soft-gate", W, [1.0, -1.0])
    sapo_pos = [-0.47, -0.738, -0.845, -1.0, -1.097, -1.231, -1.41, -1.491, -0.981, -0.353]  # §V.4, tau = 1
    close(grad[0], torch.tensor(sapo_pos, dtype=F64), atol=1e-3, rtol=0)
    assert m["clip_frac_low"].item() == 0 and m["clip_frac_high"].item() == 0  # the rest: the knob test below


# ----------------------------------------------------------------------------
# Divergence constraints (unified clip, Eq. 5): cut where C fails and w A > A

W_KL = [0.5, 0.66, 0.68, 0.75, 1.0, 1.25, 1.41, 1.44, 1.5, 2.5]


@pytest.mark.parametrize("method, kept_pos, kept_neg", [
    # KL1: w >= exp(-0.07) = 0.9324, no upper bound
    ("kl1", [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]),
    # KL2: exp(-+sqrt(0.14)) = [0.6878, 1.4538]
    ("kl2", [1, 1, 1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]),
    # KL3: [0.6710, 1.4222] (Theorem 4.2)
    ("kl3", [1, 1, 1, 1, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]),
    # KL3-IS: w log w - w + 1 <= 0.07 <=> [0.6500, 1.3968]
    ("kl3-is", [1, 1, 1, 1, 1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
])
def test_kl_constraints_cut_the_right_tokens(method, kept_pos, kept_neg):
    loss, grad, m = run(method, W_KL, [1.0, -1.0], delta=0.07)
    kept = keep(kept_pos, kept_neg)
    w = torch.tensor(W_KL, dtype=F64)
    close(grad, -col(1.0, -1.0) * w * kept)
    # Eq. 5 replaces a cut ratio by w_old = 1: the loss of a cut token is -A, of a kept one -w A (row by row)
    for A, row in ((1.0, kept[0]), (-1.0, kept[1])):
        close(run(method, W_KL, [A], delta=0.07)[0], (-A * torch.where(row.bool(), w, 1.0)).sum())
    assert m["clip_frac_high"].item() == pytest.approx((10 - sum(kept_pos)) / 20)
    assert m["clip_frac_low"].item() == pytest.approx((10 - sum(kept_neg)) / 20)


# What each divergence rule compares with delta, for one token with pi_old = 1 (kl3-adaptive's delta_t = delta;
# kl3-seq's one-token sequence: T k3(s) = k3(w); kl-full given k3(w) as its full KL)
DIVERGENCE_OF = {"kl1": divergence.k1, "kl2": divergence.k2, "kl3": divergence.k3, "kl3-is": divergence.k3_is,
                 "kl3-adaptive": divergence.k3, "kl3-seq": divergence.k3, "kl-full": divergence.k3}


@pytest.mark.parametrize("method, log_w, A", [(m, *side) for m in DIVERGENCE_OF for side in ((0.3, 1.0), (-0.3, -1.0))
                                              if (m, side[1]) != ("kl1", 1.0)])  # k1 < 0 above 1: never cut
def test_a_token_whose_divergence_is_delta_exactly_is_kept(method, log_w, A):
    """The rule is "divergence <= delta": with delta the token's own divergence (computed as the method computes
    it, in float64) the token is kept, gradient -A w; with delta one ulp below it is cut, on its side, gradient 0."""
    log_ratio = torch.tensor([[log_w]], dtype=F64, requires_grad=True)
    at = DIVERGENCE_OF[method](log_ratio.detach()).item()  # a Python float: exactly the float64 compared
    for delta, kept in ((at, True), (math.nextafter(at, 0.0), False)):
        t = methods.Tokens(log_ratio.exp(), log_ratio, torch.full((1, 1), A, dtype=F64),
                           torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, 1, dtype=F64),
                           divergence.k3(log_ratio.detach()), None)
        loss, cut_low, cut_high, _ = methods.METHODS[method](t, delta=delta, **(
            {"delta_max": 1.0} if method == "kl3-adaptive" else {}))
        (grad,) = torch.autograd.grad(loss.sum(), log_ratio)
        cut = cut_high if A > 0 else cut_low
        said = f"w = {math.exp(log_w):.4f}, A = {A}, KL3 = {at!r}, delta = {delta!r}"
        assert cut.item() == (not kept) and (cut_low | cut_high).sum().item() == (not kept), said
        assert grad.item() == pytest.approx(-A * math.exp(log_w) if kept else 0.0, rel=1e-12), said


# ----------------------------------------------------------------------------
# Sequence-level ratio

GSPO_LOGW = [[0.1, -0.1, 0.3], [0.3, 0.3, 0.3], [-0.3, -0.3, -0.3], [0.5, 0.0, 0.25]]
GSPO_A = [1.0, 2.0, -0.5, -1.0]  # unequal: a cut sequence's -A cannot cancel another's


def gspo_batch(method, agg="dr-grpo", **hp):
    logw = torch.tensor(GSPO_LOGW, dtype=F64)
    mask = torch.ones(4, 4)
    mask[:, 3] = 0
    mask[3, 2] = 0  # the last sequence has 2 tokens
    logw = torch.cat([logw, torch.zeros(4, 1, dtype=F64)], 1)
    old = torch.full((4, 4), -1.0, dtype=F64)
    logp = (old + logw).requires_grad_()
    loss, m = L.policy_loss(method, logp, old, torch.tensor(GSPO_A, dtype=F64), mask, agg=agg, num_sequences=4,
                            num_tokens=int(mask.sum()), max_new_tokens=4, compile=False,
                            **hp or {"eps_low": 0.2, "eps_high": 0.2})
    loss.backward()
    return loss, logp.grad, m


# The paper's future work (Sec. 6.5): sequence-level KL3 (kl3-adaptive: the knob test below). T k3(s), s = exp(mean
# log w): 0.1 -> 3 (e^.1-1-.1) = 0.0155 kept; 0.3 -> 3 x 0.0499 = 0.150, A > 0 and s > 1: cut; -0.3 -> 3 x 0.0408
# = 0.122, A < 0 and s < 1: cut; 0.25 over 2 -> 2 x 0.0340 = 0.068 kept. Its cut sequence's loss is -A (w_old = 1).
SEQ_K3 = [n * (math.exp(x) - 1 - x) for x, n in [(0.1, 3), (0.3, 3), (-0.3, 3), (0.25, 2)]]


@pytest.mark.parametrize("method, hp, cut_losses", [
    ("gspo", {}, [-2 * 1.2, 0.5 * 0.8]), ("gspo-token", {}, [-2 * 1.2, 0.5 * 0.8]),
    ("kl3-seq", {"delta": 0.07}, [-2.0, 0.5])])
def test_sequence_methods_keep_or_cut_whole_sequences(method, hp, cut_losses):
    """gspo: s = 1.105 (kept), 1.350 (A = 2, above 1.2: cut), 0.741 (A = -0.5, below 0.8: cut), exp(0.25) = 1.284
    (A < 0 above the band: kept), loss -min(s A, clip(s) A); gspo-token, one advantage per sequence, the same in
    value and gradient; kl3-seq cuts the same two (SEQ_K3).
    seq-mean-token-mean is forced (agg='dr-grpo' ignored): d/dlogp_t of (1/4) sum_i loss_i = -A_i s_i / (4 n_i)
    on kept sequences."""
    assert [d <= 0.07 for d in SEQ_K3] == [True, False, False, True]
    loss, grad, m = gspo_batch(method, **hp)
    s1, s4 = math.exp(0.1), math.exp(0.25)
    expected = torch.zeros(4, 4, dtype=F64)
    expected[0, :3] = -1.0 * s1 / (4 * 3)
    expected[3, :2] = +1.0 * s4 / (4 * 2)
    close(grad, expected)
    assert loss.item() == pytest.approx((-s1 + sum(cut_losses) + s4) / 4)
    assert m["seq_clip_frac"].item() == pytest.approx(2 / 4)
    assert m["clip_frac_high"].item() == pytest.approx(3 / 11) and m["clip_frac_low"].item() == pytest.approx(3 / 11)
    assert method != "kl3-seq" or m["seq_kl3"].item() == pytest.approx(sum(SEQ_K3) / 4)


# ----------------------------------------------------------------------------
# Every method at every knob value: token by token against its docstring's formula, written out here

KNOB_DRAWS = {"(0,1)": (0.01, 0.99), "(0,1]": (0.01, 1.0), ">0": (0.01, 4.0), ">1": (1.01, 30.0),
              ">=0": (0.0, 8.0), "[0,1]": (0.0, 1.0), None: (-1.0, 3.0)}  # None: clip-cov's lb, ub


def ratio_clip_ref(w, A, lo, hi):
    """-min(wA, clip(w, lo, hi) A) of one token: (loss, d loss / d log w, cut_low, cut_high)."""
    if A > 0 and w > hi:
        return -hi * A, 0.0, False, True
    if A < 0 and w < lo:
        return -lo * A, 0.0, True, False
    return -w * A, -w * A, False, False


def unified_ref(w, A, inside):
    """Eq. 5 in PPO's min, one token: outside C and wA > A it is cut (loss -A), else -wA."""
    if not inside and w * A > A:
        return -A, 0.0, w < 1, w > 1
    return -w * A, -w * A, False, False


def dual_ref(out, w, A, c):
    """Dual clip on top of a ratio clip: for A < 0 and w > c the loss is -A c, no gradient, cut high."""
    return (-A * c, 0.0, out[2], True) if A < 0 and w > c else out


def token_ref(method, hp, w, A, q, kl):
    """(loss, d loss / d log w, cut_low, cut_high, the method's own metric, EXTRA) of one token of a per-token
    method."""
    lw, k3 = math.log(w), w - 1 - math.log(w)
    if method in ("clip", "dual-clip"):
        out = ratio_clip_ref(w, A, 1 - hp["eps"], 1 + hp["eps"])
        return (*dual_ref(out, w, A, hp["dual_clip_c"]), A < 0 and w > hp["dual_clip_c"]) if method == "dual-clip" \
            else (*out, 0.0)
    if method == "clip-higher":
        return (*ratio_clip_ref(w, A, 1 - hp["eps_low"], 1 + hp["eps_high"]), 0.0)
    if method == "dynamic":
        lo = 0.5 + 0.5 * math.sqrt(max(1 - 4 * hp["eps_low"] / q, 0))
        hi = min(0.5 + 0.5 * math.sqrt(1 + 4 * hp["eps_high"] / q), max(hp["dual_clip_c"], 10))
        return (*dual_ref(ratio_clip_ref(w, A, lo, hi), w, A, hp["dual_clip_c"]), A < 0 and w > hp["dual_clip_c"])
    if method == "soft-gate":
        tau = hp["tau_pos"] if A > 0 else hp["tau_neg"]
        s = 1 / (1 + math.exp(-tau * (w - 1)))
        return -s * 4 / tau * A, -A * 4 * s * (1 - s) * w, False, False, 4 * s * (1 - s)
    if method == "cispo":
        weight = min(max(w, 1 - hp["eps_low"]), 1 + hp["eps_high"])
        return -weight * A * (math.log(q) + lw), -weight * A, False, False, weight != w
    if method == "truly-ppo":
        rollback = kl >= hp["delta"] and w * A > A
        return -w * A + (hp["rollback_alpha"] * kl if rollback else 0.0), -w * A, False, False, rollback
    delta = hp["delta"]
    if method == "kl3-adaptive":
        delta = min(delta * q ** -hp["adapt"], hp["delta_max"])
    bounded = {"kl1": (-lw, -lw), "kl2": (lw * lw / 2,) * 2, "kl3": (k3, k3), "kl3-adaptive": (k3, delta),
               "kl3-is": (w * lw - (w - 1),) * 2, "kl-full": (kl, kl)}
    divergence_, extra = bounded.get(method) or pytest.fail(f"no formula for --clip {method}: write it into token_ref")
    return (*unified_ref(w, A, divergence_ <= delta), extra)


# The metric each method reports of itself, per token, as token_ref's last value
EXTRA = {"dual-clip": "dual_clip_frac", "dynamic": "dual_clip_frac", "soft-gate": "gate", "cispo": "weight_clip_frac",
         "kl1": "k1", "kl2": "k2", "kl3": "kl3", "kl3-is": "k3_is", "kl3-adaptive": "delta_t", "kl-full": "full_kl",
         "truly-ppo": "rollback_frac", "clip-cov": "cov_frac", "kl-cov": "cov_frac"}


def reference(method, hp, t):
    """token_ref's 5 values of every token of t (zeros on padding); for the sequence-level methods the
    gradient is d loss / d log s, s the sequence's ratio (the caller spreads it over its tokens)."""
    B, T = t.ratio.shape
    w, A, q, kl = t.ratio.tolist(), t.advantages.tolist(), t.old_logp.exp().tolist(), t.full_kl.tolist()
    valid = t.valid.tolist()
    out = [[(0.0, 0.0, False, False, 0.0)] * T for _ in range(B)]
    if method == "trgppo":
        l_delta, u_delta = divergence.trgppo_ratio_range(t.old_logp, hp["delta"])  # pinned in test_divergence
    for i, j in t.valid.nonzero().tolist():
        n = sum(valid[i])
        log_s = sum(math.log(w[i][k]) for k in range(T) if valid[i][k]) / n
        s, a = math.exp(log_s), A[i][j]
        if method in ("gspo", "gspo-token"):
            out[i][j] = (*ratio_clip_ref(s, a, 1 - hp["eps_low"], 1 + hp["eps_high"]), 0.0)
        elif method == "kl3-seq":
            out[i][j] = (*unified_ref(s, a, n * (s - 1 - log_s) <= hp["delta"]), 0.0)
        elif method == "trgppo":
            lo, hi = min(l_delta[i, j].item(), 1 - hp["eps"]), max(u_delta[i, j].item(), 1 + hp["eps"])
            out[i][j] = (*ratio_clip_ref(w[i][j], a, lo, hi), 0.0)
        elif method == "clip-cov":
            out[i][j] = (*ratio_clip_ref(w[i][j], a, 1 - hp["eps_low"], 1 + hp["eps_high"]), 0.0)
        elif method == "kl-cov":
            out[i][j] = (-w[i][j] * a, -w[i][j] * a, False, False, 0.0)
        else:
            out[i][j] = token_ref(method, hp, w[i][j], a, q[i][j], kl[i][j])
    if method in ("clip-cov", "kl-cov"):
        covariance_picks(method, hp, t, out)
    return [torch.tensor([[cell[k] for cell in row] for row in out], dtype=F64) for k in range(5)]


def covariance_picks(method, hp, t, out):
    """Cui et al.'s picks among the valid tokens, cov = (A - mean A)(logp - mean logp): clip-cov zeroes the loss
    of n = max(1, floor(ratio N)) uncut tokens with lb < cov < ub, those of smallest noise; kl-cov adds
    coef |log w| to the k = max(1, floor(ratio N)) of largest cov. Each pick's metric (cov_frac) is 1."""
    cells = [tuple(c) for c in t.valid.nonzero().tolist()]
    logp = {c: (t.old_logp[c] + t.log_ratio[c]).item() for c in cells}
    mean_a, mean_logp = sum(t.advantages[c].item() for c in cells) / len(cells), sum(logp.values()) / len(cells)
    cov = {c: (t.advantages[c].item() - mean_a) * (logp[c] - mean_logp) for c in cells}
    ratio = hp["clip_cov_ratio"] if method == "clip-cov" else hp["kl_cov_ratio"]
    x = ratio * len(cells)  # away from just below an integer, where the float32 product rounds up
    assume(x == round(x) or abs(x - round(x)) > 1e-5 * x)
    k = max(1, math.floor(x))
    if method == "clip-cov":
        candidates = [c for c in cells if not any(out[c[0]][c[1]][2:4]) and hp["clip_cov_lb"] < cov[c] < hp["clip_cov_ub"]]
        for i, j in sorted(candidates, key=lambda c: t.noise[c].item())[:k]:
            out[i][j] = (0.0, 0.0, False, False, 1.0)
        return
    for i, j in sorted(cells, key=lambda c: -cov[c])[:k]:
        lw, (loss, grad, *_) = t.log_ratio[i, j].item(), out[i][j]
        coef = hp["kl_cov_coef"]
        out[i][j] = (loss + coef * abs(lw), grad + coef * math.copysign(1, lw), False, False, 1.0)


def random_tokens(seed, B=4, T=6):
    """Tokens with log w in [-3, 3.5], pi_old log-uniform in [1e-3, 1], rows of 1 to T valid tokens (padding:
    ratio 1, A 0, old log-prob 0), full_kl in [0, 0.5], one advantage per row: in [0.5, 2.5], in [-2.5, -0.5],
    0 and in [-2, 2]: no two rows' terms at one ratio can cancel in what is compared."""
    g = torch.Generator().manual_seed(seed)
    log_w = torch.rand(B, T, generator=g, dtype=F64) * 6.5 - 3
    old = torch.rand(B, T, generator=g, dtype=F64) * math.log(1e-3)
    valid = torch.arange(T)[None, :] < torch.randint(1, T + 1, (B,), generator=g)[:, None]
    r = torch.rand(4, generator=g, dtype=F64)
    A = torch.stack([0.5 + 2 * r[0], -0.5 - 2 * r[1], 0 * r[2], 4 * r[3] - 2])[:, None]
    full_kl, noise = torch.rand(B, T, generator=g, dtype=F64) * 0.5, torch.rand(B, T, generator=g, dtype=F64)
    log_w = torch.where(valid, log_w, 0.0).requires_grad_()
    return methods.Tokens(log_w.exp(), log_w, torch.where(valid, A, 0.0), valid, torch.where(valid, old, 0.0),
                          torch.where(valid, full_kl, 0.0).requires_grad_(), noise)


@st.composite
def knobs(draw, method):
    """Each of `method`'s knobs drawn over its allowed range (methods.RULES), kept only if check_hparams takes
    the set (clip-cov's lb < ub, kl3-adaptive's delta_max >= delta)."""
    hp = {k: draw(st.floats(*KNOB_DRAWS[methods.RULES.get(k)])) for k in methods.defaults(method)}
    assume(not ("clip_cov_lb" in hp and hp["clip_cov_lb"] >= hp["clip_cov_ub"]))
    assume(not ("delta_max" in hp and hp["delta_max"] < hp["delta"]))
    return flags.check_hparams(method, **hp)


@pytest.mark.parametrize("method", list(methods.METHODS))
@given(data=st.data(), seed=st.integers(0, 2 ** 31))
@settings(max_examples=30, deadline=None)
def test_every_knob_over_its_range_gives_the_formulas_loss_gradient_cuts_and_metric(method, data, seed):
    """Token by token, not a sum (where a positive and a negative advantage could cancel): the per-token loss,
    d loss / d log w_t (of sum_t c_t loss_t with uneven weights c_t, which tells a sequence's shared gradient
    from a token's own), cut_low, cut_high and the method's own metric (EXTRA), with every knob drawn over its
    range: a constant that matters only away from its default shows here. A new method needs its formula in
    token_ref (or reference); every side it cuts must be the formula's, which puts cut_low below w = 1."""
    hp = data.draw(knobs(method))
    t = random_tokens(seed)
    loss, low, high, extras = methods.METHODS[method](t, **hp)
    c = torch.linspace(0.5, 1.5, t.ratio.numel(), dtype=F64).view_as(t.ratio)
    grads = torch.autograd.grad(torch.where(t.valid, c * loss, 0.0).sum(), [t.log_ratio, t.full_kl], allow_unused=True)
    e_loss, e_grad, e_low, e_high, e_extra = reference(method, hp, t)
    if methods.needs(method, "sequences") and method != "gspo-token":  # each token carries its sequence's loss
        e_grad = e_grad * (torch.where(t.valid, c, 0.0).sum(-1) / t.valid.sum(-1))[:, None]
    else:
        e_grad = e_grad * c
    v, said = t.valid, f"{method} {hp}, seed {seed}"
    close(torch.where(v, loss, 0.0).detach(), e_loss, msg=lambda m: f"{said}: loss: {m}")
    close(torch.where(v, grads[0], 0.0), e_grad, msg=lambda m: f"{said}: d loss / d log w: {m}")
    assert torch.equal(low & v, e_low.bool()) and torch.equal(high & v, e_high.bool()), said
    if method in EXTRA:
        close(torch.where(v, extras[EXTRA[method]], 0).to(F64), e_extra, msg=lambda m: f"{said}: {EXTRA[method]}: {m}")
    if method == "truly-ppo":  # + alpha dKL where it rolls back
        close(grads[1], hp["rollback_alpha"] * c * e_extra, msg=lambda m: f"{said}: d loss / d KL: {m}")

# ----------------------------------------------------------------------------
# Theorem 4.1 and the shared properties

def test_theorem_4_1_unified_clip_has_the_ratio_clip_gradient():
    g = torch.Generator().manual_seed(0)
    lo, hi = 0.8, 1.28
    w = torch.exp(0.6 * torch.randn(4000, generator=g, dtype=F64))
    w = w[((w - lo).abs() > 1e-6) & ((w - hi).abs() > 1e-6)]
    A = torch.randn(w.shape, generator=g, dtype=F64)
    grads = []
    for general in (True, False):
        x = w.log().requires_grad_()
        ratio = x.exp()
        if general:  # Eq. 5 with C = (lo <= w <= hi)
            out = methods.unified_clip(ratio, A, (ratio >= lo) & (ratio <= hi))[0]
        else:        # PPO: -min(wA, clip(w) A)
            out = -torch.minimum(ratio * A, ratio.clamp(lo, hi) * A)
        out.sum().backward()
        grads.append(x.grad)
    close(grads[0], grads[1])
    assert (grads[0] == 0).any() and (grads[0] != 0).any()


def test_kl3_has_the_gradient_of_clip_higher_with_its_range():
    lo, hi = kl3_ratio_range(0.07)
    g = torch.Generator().manual_seed(1)
    logp = torch.randn(8, 64, generator=g, dtype=F64)
    old = logp + 0.4 * torch.randn(8, 64, generator=g, dtype=F64)
    w = (logp - old).exp()
    old = torch.where(((w - lo).abs() < 1e-6) | ((w - hi).abs() < 1e-6), logp, old)  # no ties at the ends
    adv = torch.randn(8, generator=g, dtype=F64)
    mask = torch.rand(8, 64, generator=g) > 0.2
    grads = []
    for method, hp in [("kl3", {"delta": 0.07}), ("clip-higher", {"eps_low": 1 - lo, "eps_high": hi - 1})]:
        x = logp.clone().requires_grad_()
        loss, m = summed_loss(method, x, old, adv, mask, **hp)
        loss.backward()
        grads.append((x.grad, m["clip_frac_low"], m["clip_frac_high"]))
    for a, b in zip(*grads):
        close(a, b)
    assert 0 < grads[0][1] and 0 < grads[0][2]


def inputs(method, B=4, T=6, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=dtype) * 3
    logp = old + 0.4 * torch.randn(B, T, generator=g, dtype=dtype)
    adv = torch.randn(B, generator=g, dtype=dtype)
    mask = torch.ones(B, T)
    mask[0, T // 2:] = 0
    mask[-1, 1:] = 0
    kl = (0.1 * torch.rand(B, T, generator=g, dtype=dtype)) if methods.needs(method, "full_kl") else None
    return logp, old, adv, mask, kl


@pytest.mark.parametrize("method", list(methods.METHODS))
def test_on_policy_every_method_is_plain_policy_gradient(method):
    logp, _, adv, mask, kl = inputs(method)
    x = logp.clone().requires_grad_()
    kl = None if kl is None else torch.zeros_like(kl)  # pi_theta = pi_old
    loss, m = summed_loss(method, x, logp, adv, mask, full_kl=kl)
    loss.backward()
    per_token = mask / mask.sum(-1, keepdim=True).clamp(min=1) if methods.needs(method, "sequences") else mask
    close(x.grad, -adv[:, None].expand_as(logp) * per_token)  # d(-w A)/d logp at w = 1, summed_loss's way
    assert m["clip_frac_low"] == 0 and m["clip_frac_high"] == 0 and m["kl3"] == 0


@pytest.mark.parametrize("method", list(methods.METHODS))
def test_padding_gets_no_loss_and_no_gradient_whatever_it_holds(method):
    """Garbage in the padding (nan, inf) gives the loss, gradient and metrics of clean padding (zeros)."""
    outs = []
    for garbage in (True, False):
        logp, old, adv, mask, kl = inputs(method)
        pad = ~mask.bool()
        logp = torch.where(pad, math.nan if garbage else 0.0, logp).requires_grad_()
        old = torch.where(pad, math.inf if garbage else 0.0, old)
        adv = torch.where(pad, -math.inf if garbage else 0.0, adv[:, None].expand_as(old))  # (B, T)
        if kl is not None:
            kl = torch.where(pad, math.nan if garbage else 0.0, kl).requires_grad_()
        loss, metrics = summed_loss(method, logp, old, adv, mask, full_kl=kl)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and (logp.grad[pad] == 0).all()
        assert all(torch.isfinite(v) for k, v in metrics.items() if not k.startswith("band_"))  # kl1's: inf
        if kl is not None and kl.grad is not None:
            assert torch.isfinite(kl.grad).all() and (kl.grad[pad] == 0).all()
        outs.append((loss.detach(), logp.grad, metrics))
    (loss, grad, metrics), (clean_loss, clean_grad, clean_metrics) = outs
    close(loss, clean_loss)
    close(grad, clean_grad)
    for name in metrics:
        close(metrics[name], clean_metrics[name])


@pytest.mark.parametrize("method", list(methods.METHODS))
def test_pi_old_never_gets_a_gradient(method):
    """pi_old's log-probs are the step's constants: an old_logp that asks for a gradient gets none (nor does
    pi_ref's in the --beta penalty), and logp's gradient is the one a plain old_logp gives. (A ratio built
    from an undetached old_logp fails here: d w / d old_logp = -w.)"""
    logp, old, adv, mask, kl = inputs(method)
    ref = old - 0.1
    grads = []
    for wants_grad in (False, True):
        x = logp.clone().requires_grad_()
        o, r = old.clone().requires_grad_(wants_grad), ref.clone().requires_grad_(wants_grad)
        loss, _ = summed_loss(method, x, o, adv, mask, full_kl=kl, generator=torch.Generator().manual_seed(0))
        (loss + L.kl_to_reference(x, o, r, mask).sum()).backward()
        assert o.grad is None and r.grad is None, "pi_old's (or pi_ref's) side got a gradient"
        grads.append(x.grad)
    close(grads[1], grads[0])


# ----------------------------------------------------------------------------
# Generic checks of the rule itself: where it cuts, and which side it says it cut

# A token that moved far the way its advantage pushes it (A > 0: w up; A < 0: w down) keeps its gradient
# only where a method is built that way; every other method must cut it (or, for the rules that never
# cut, restrain it to under a tenth of the plain policy gradient). A new method that never cuts, or cuts
# the wrong side, fails here unless it is declared with its reason.
KEEPS_FAR_TOKENS = {
    ("kl1", "high"): "a lower bound only: -log w <= delta",
    ("clip-cov", "low"): "eps_low 1 at its defaults (its source's): no lower bound",
    ("kl-cov", "low"): "a log-ratio penalty on the top-covariance tokens, never a cut",
    ("kl-cov", "high"): "a log-ratio penalty on the top-covariance tokens, never a cut",
    ("soft-gate", "low"): "SAPO's gate tends to 4 s (1 - s), s = sigma(-tau_neg), as w -> 0: it keeps ~79%",
    ("cispo", "low"): "no lower bound at its defaults (eps_low 1, the paper's choice): the weight is w itself",
    ("cispo", "high"): "the weight is capped at 1 + eps_high and the gradient kept: CISPO's point",
}


def far_token(method, side, log_w):
    """(d loss / d logp, plain policy gradient -A w, cut_low, cut_high) of sequences of 3 tokens at
    ratio exp(+-log_w) with A = +-1 (the way A pushes): full_kl, where a method needs it, is k3(w) with its
    gradient (a faithful stand-in for the full-vocabulary KL near one token)."""
    sign = 1.0 if side == "high" else -1.0
    old = torch.full((1, 3), math.log(0.3), dtype=F64)
    logp = (old + sign * log_w).requires_grad_()
    lw = logp - old
    full_kl = (lw.exp() - 1 - lw) if methods.needs(method, "full_kl") else None
    loss, m = summed_loss(method, logp, old, torch.tensor([sign], dtype=F64), torch.ones(1, 3),
                          full_kl=full_kl, generator=torch.Generator().manual_seed(0))
    loss.backward()
    plain = -sign * lw.detach().exp()
    return logp.grad, plain, m["clip_frac_low"].item(), m["clip_frac_high"].item()


@pytest.mark.parametrize("side", ["low", "high"])
@pytest.mark.parametrize("method", list(methods.METHODS))
def test_every_method_cuts_a_token_pushed_far_the_way_its_advantage_pushes(method, side):
    for log_w in (3.0, 6.0):  # w = 20 and 403 above, 0.05 and 0.0025 below
        grad, plain, low, high = far_token(method, side, log_w)
        if (method, side) in KEEPS_FAR_TOKENS:
            assert low == high == 0, f"{method} keeps these tokens by design, so it cannot report them cut"
            continue
        said = low if side == "low" else high
        if said or (low + high) > 0:
            assert said == 1 and (low if side == "high" else high) == 0, f"{method} cut the wrong side"
            assert (grad == 0).all(), f"{method}: a token reported cut keeps a gradient"
        else:  # a rule that never cuts: a gate or a rollback must restrain the token
            assert (grad / plain < 0.1).all(), f"{method} lets a token at w = exp({'-' if side == 'low' else ''}{log_w}) " \
                                               "keep its full gradient: it never cuts (declare it if that is the design)"


# No exercise function is called here (kl3's band is its own test below): a test module runs no exercise's code
# at import, or a student copy where that exercise is blank could not collect it (exercise 1's check, say).
ULPS4 = 4 * 2 ** -52  # bisected to adjacent floats of log w: an ulp of w, one for exp, two for the reference


@pytest.mark.parametrize("method, hp, band", [
    ("clip", {}, (0.8, 1.2)), ("clip-higher", {}, (0.8, 1.28)), ("dual-clip", {}, (0.8, 1.2)),
    ("kl1", {}, (math.exp(-0.07), math.inf)), ("kl2", {}, (math.exp(-math.sqrt(0.14)), math.exp(math.sqrt(0.14)))),
    ("gspo", {}, (1 - 3e-4, 1 + 4e-4)), ("trgppo", {}, None), ("dynamic", {}, None), ("soft-gate", {}, None),
    ("kl-cov", {}, None), ("cispo", {}, None), ("kl3-seq", {}, None), ("kl-full", {}, None),
    ("kl3-adaptive", {}, None), ("kl3-adaptive", {"delta_max": 0.09}, None)])  # capped below pi_old 0.6 only
def test_effective_band_is_probed_from_the_method_itself(method, hp, band):
    """The band logged every step (band_low / band_high) and printed in the run header: where the method
    cuts a token pushed that way, found from its own function; None where that depends on more than w."""
    found = L.effective_band(method, tuple(sorted({**methods.defaults(method), **hp}.items())))
    if band is None:
        assert found is None, method
    else:
        assert found == pytest.approx(band, rel=ULPS4), method


@pytest.mark.parametrize("method, hp", [("kl3", {}), ("kl3", {"delta": 0.2}), ("kl3-adaptive", {"adapt": 0.0}),
                                        ("kl3-adaptive", {"delta_max": 0.07})])
def test_effective_band_of_kl3_is_its_ratio_range(method, hp):
    """kl3's band, at its default delta (0.07) and a wider one, is kl3_ratio_range(delta); so is kl3-adaptive's
    where its threshold is delta whatever pi_old (adapt 0, or delta_max = delta)."""
    assert methods.defaults("kl3") == {"delta": 0.07}
    hp = {**methods.defaults(method), **hp}
    found = L.effective_band(method, tuple(sorted(hp.items())))
    assert found == pytest.approx(kl3_ratio_range(hp["delta"]), rel=ULPS4)


def test_the_metrics_are_detached_0_dim_tensors_the_ratio_quantiles_the_band_and_the_mean_kl3():
    logp, old, adv, mask, _ = inputs("kl3")
    _, m = summed_loss("kl3", logp.clone().requires_grad_(), old, adv, mask)
    x = (logp - old)[mask.bool()]
    for name, q in (("ratio_p01", 0.01), ("ratio_p10", 0.1), ("ratio_p90", 0.9), ("ratio_p99", 0.99)):
        assert m[name].item() == pytest.approx(torch.quantile(x.float().exp(), q).item(), rel=1e-6), name
    assert (m["band_low"].item(), m["band_high"].item()) == pytest.approx(kl3_ratio_range(0.07), rel=1e-6)
    assert m["kl3"].item() == pytest.approx((x.exp() - 1 - x).mean().item())
    assert (m["ratio_min"].item(), m["ratio_max"].item()) == pytest.approx((x.exp().min().item(), x.exp().max().item()))
    _, m = summed_loss("soft-gate", logp.clone().requires_grad_(), old, adv, mask)
    assert "band_low" not in m
    for name in ("clip_frac_low", "clip_frac_high", "kl3", "ratio_min", "ratio_max", "gate", "ratio_p99"):
        assert m[name].dim() == 0 and not m[name].requires_grad, name


# ----------------------------------------------------------------------------
# Defaults and hyper-parameter checks

def test_defaults_match_the_sources():
    D = {m: methods.defaults(m) for m in methods.METHODS}
    assert D["clip"] == {"eps": 0.2}
    assert D["clip-higher"] == {"eps_low": 0.2, "eps_high": 0.28}
    assert D["dual-clip"]["dual_clip_c"] == 3.0
    assert D["dynamic"] == {"eps_low": 0.16, "eps_high": 0.2, "dual_clip_c": 10.0}
    assert D["soft-gate"] == {"tau_pos": 1.0, "tau_neg": 1.05}
    assert D["gspo"] == {"eps_low": 3e-4, "eps_high": 4e-4}
    assert D["cispo"] == {"eps_low": 1.0, "eps_high": 4.0}  # no lower bound; TRL's cap 5 = 1 + eps_high
    assert all(D[m]["delta"] == 0.07 for m in ("kl1", "kl2", "kl3", "kl3-is", "kl-full", "truly-ppo"))
    assert all(flags.check_hparams(method) == D[method] for method in methods.METHODS)


def test_every_docstring_names_its_knobs():
    """Each method's docstring has one "Flags: a, b." line naming exactly its knobs (each is a train.py
    flag): a reader of methods.py sees every knob without reading the signature. (One test for all
    methods, named for none: an exercise's `-k <method>` must not select a test that passes blank.)"""
    for method, fn in methods.METHODS.items():
        named = [line.split("Flags:", 1)[1] for line in (fn.__doc__ or "").splitlines() if "Flags:" in line]
        assert len(named) == 1, f"{method}: its docstring needs one 'Flags: ...' line"
        assert [k.strip(" .") for k in named[0].split(",") if k.strip(" .")] == list(methods.defaults(method)), method


@pytest.mark.parametrize("method, hp, message", [
    ("kl3", {"delta": -1.0}, r"--delta must be > 0 \(got -1.0\)"),
    ("kl3", {"delta": 0.0}, "--delta must be > 0"),
    ("clip", {"eps": 1.5}, r"--eps must be in \(0, 1\)"),
    ("clip", {"eps": 0.0}, r"--eps must be in \(0, 1\)"),
    ("dual-clip", {"dual_clip_c": 1.0}, "--dual-clip-c must be > 1"),
    ("clip-higher", {"eps_low": 1.2}, r"--eps-low must be in \(0, 1\]"),
    ("clip-higher", {"eps_high": -0.1}, "--eps-high must be > 0"),
    ("soft-gate", {"tau_neg": 0.0}, "--tau-neg must be > 0"),
    ("kl-cov", {"kl_cov_ratio": 2.0}, "--kl-cov-ratio must be"),
    ("clip-cov", {"clip_cov_lb": 6.0}, "--clip-cov-lb must be < --clip-cov-ub"),
    ("kl3", {"delta": math.nan}, r"--delta must be a finite number \(got nan\)"),
    ("clip", {"eps": math.inf}, r"--eps must be a finite number \(got inf\)"),
    ("kl3", {"eps": 0.2}, "--eps does not apply to --clip kl3"),
    # ids without the method's name: exercise 11's check (-k kl3-adaptive) must select no test that passes blank
    pytest.param("kl3-adaptive", {"delta": 0.1, "delta_max": 0.05}, "--delta-max must be >= --delta", id="delta_max"),
    pytest.param("kl3-adaptive", {"adapt": 1.5}, r"--adapt must be in \[0, 1\]", id="adapt"),
    ("nope", {}, "--clip must be one of"),
])
def test_bad_hparams_name_the_flag(method, hp, message):
    with pytest.raises(ValueError, match=message):
        flags.check_hparams(method, **hp)


def test_kl_to_reference_is_w_times_k3_of_rho_by_hand():
    """--beta's per-token penalty w k3(rho), w = pi_theta / pi_old, rho = pi_ref / pi_theta, 0 on padding."""
    logp, old, ref = (torch.tensor([x], dtype=F64) for x in ([-1.0, -2.0, -0.5], [-1.2, -1.5, 0.0], [-0.7, -2.5, 3.0]))
    w, rho = [math.exp(0.2), math.exp(-0.5)], [math.exp(0.3), math.exp(-0.5)]
    expected = [wi * (r - 1 - math.log(r)) for wi, r in zip(w, rho)] + [0.0]
    close(L.kl_to_reference(logp, old, ref, torch.tensor([[1, 1, 0]])), torch.tensor([expected], dtype=F64))


def test_full_kl_methods_say_what_they_need():
    logp, old, adv, mask, _ = inputs("kl-full")
    with pytest.raises(ValueError, match="needs full_kl"):
        summed_loss("kl-full", logp, old, adv, mask)


# ----------------------------------------------------------------------------
# Aggregation

def test_aggregation_modes_by_hand():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    kw = dict(num_sequences=4, num_tokens=10, max_new_tokens=5)  # counts of the whole optimizer step
    assert L.aggregate(per_token, mask, "dr-grpo", **kw).item() == pytest.approx(15 / (4 * 5))
    assert L.aggregate(per_token, mask, "token-mean", **kw).item() == pytest.approx(15 / 10)
    assert L.aggregate(per_token, mask, "seq-mean-token-mean", **kw).item() == pytest.approx((2.0 + 4.5) / 4)
    with pytest.raises(ValueError, match="--aggregation must be one of"):
        L.aggregate(per_token, mask, "mean", **kw)


# clip-cov and kl-cov pick tokens by their covariance within the micro-batch (as verl does): the split matters
SPLIT_FREE = [m for m in methods.METHODS if m not in ("clip-cov", "kl-cov")]


@pytest.mark.parametrize("method", SPLIT_FREE)
@pytest.mark.parametrize("agg", L.AGGREGATIONS)
def test_micro_batches_add_up_to_the_big_batch(agg, method):
    logp, old, adv, mask, kl = inputs(method, B=6, T=7, seed=3)
    kw = dict(agg=agg, num_sequences=6, num_tokens=int(mask.sum()), max_new_tokens=7, compile=False)
    big = logp.clone().requires_grad_()
    loss_big, _ = L.policy_loss(method, big, old, adv, mask, full_kl=kl, **kw)
    loss_big.backward()
    small = logp.clone().requires_grad_()
    total = 0.0
    for sl in (slice(0, 2), slice(2, 3), slice(3, 6)):
        part, _ = L.policy_loss(method, small[sl], old[sl], adv[sl], mask[sl],
                                full_kl=None if kl is None else kl[sl], **kw)
        part.backward()
        total = total + part.detach()
    close(total, loss_big.detach())
    close(small.grad, big.grad)


# ----------------------------------------------------------------------------
# Compiled = eager

@pytest.mark.parametrize("method", list(methods.METHODS))
def test_compiled_equals_eager(method):
    """In float64 (the compiled graph is the same code in any dtype): inductor's fused kernels sum in their
    own order, vectorised by the CPU's width, so in float32 the two sides differed by an amount that depends
    on the CPU. In float64 its sums of <= 24 tokens differ by <= 2 x 23 x 2^-53 of their terms' size, 10^-14;
    `close` keeps torch's float64 tolerance (1e-7 relative and absolute), far above that."""
    results = []
    for compile in (False, True):
        logp, old, adv, mask, kl = inputs(method)
        x = logp.requires_grad_()
        kl = None if kl is None else kl.requires_grad_()
        hp = {"clip_cov_lb": 0.0} if method == "clip-cov" else {}  # so that some tokens are chosen
        loss, metrics = L.policy_loss(method, x, old, adv, mask, num_sequences=4, num_tokens=int(mask.sum()),
                                      max_new_tokens=6, compile=compile, full_kl=kl,
                                      generator=torch.Generator().manual_seed(0), **hp)
        loss.backward()
        results.append((loss.detach(), x.grad, None if kl is None else kl.grad, metrics))
    (l0, g0, k0, m0), (l1, g1, k1, m1) = results
    close(l1, l0)
    close(g1, g0)
    if k0 is not None:
        close(k1, k0)
    assert m0.keys() == m1.keys()
    for name in m0:
        close(m1[name], m0[name])


def test_compile_failure_falls_back_to_eager_and_warns_once(monkeypatch):
    def broken_compile(fn, **kw):
        def call(*a, **k):
            raise RuntimeError("no C compiler")
        return call
    monkeypatch.setattr(L, "_EAGER", set())
    monkeypatch.setattr(L, "_compiled_loss", lambda: broken_compile(L._fused_loss))
    logp, old, adv, mask, _ = inputs("clip")
    kw = dict(num_sequences=4, num_tokens=int(mask.sum()), max_new_tokens=6)
    with pytest.warns(UserWarning, match="torch.compile of the clip loss failed"):
        a, _ = L.policy_loss("clip", logp, old, adv, mask, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b, _ = L.policy_loss("clip", logp, old, adv, mask, **kw)
    eager, _ = L.policy_loss("clip", logp, old, adv, mask, compile=False, **kw)
    close(a, eager)
    close(b, eager)


# ----------------------------------------------------------------------------
# Chunked log-probs, entropy and full KL

def head(B=3, T=5, D=8, V=11, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, D, generator=g, dtype=dtype)
    weight = torch.randn(V, D, generator=g, dtype=dtype)
    targets = torch.randint(0, V, (B, T), generator=g)
    return hidden, weight, targets


@pytest.mark.parametrize("with_entropy, frozen", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_chunked_logprobs_equal_naive(with_entropy, frozen, chunk_size):
    """Log-probs, entropies and the gradients of a weighted sum of them (frozen: LoRA's lm_head, and a sum of
    the entropies alone, the chunks' backward through the entropy only)."""
    hidden, weight, targets = head()
    g = torch.Generator().manual_seed(1)
    up_logp, up_ent = torch.randn(3, 5, generator=g, dtype=F64), torch.randn(3, 5, generator=g, dtype=F64)
    results = []
    for fn, kw in [(S.token_logprobs, {"chunk_size": chunk_size}), (S.token_logprobs_naive, {})]:
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_(not frozen)
        logp, ent = fn(h, w, targets, temperature=0.7, with_entropy=with_entropy, **kw)
        out = ((ent * up_ent).sum() if with_entropy else 0) + (0 if frozen else (logp * up_logp).sum())
        out.backward()
        results.append((logp, ent, h.grad, w.grad))
    for a, b in zip(*results):
        if a is not None:
            close(a, b)
    assert (results[0][1] is None) == (not with_entropy) and (results[0][3] is None) == frozen


def test_chunked_logprobs_float32_and_bfloat16():
    hidden, weight, targets = head(dtype=torch.float32)
    logp, ent = S.token_logprobs(hidden, weight, targets, chunk_size=4, with_entropy=True)
    ref, ref_ent = S.token_logprobs_naive(hidden, weight, targets, with_entropy=True)
    assert logp.dtype == torch.float32
    # Chunked and whole: the logits' 8-term sums in two orders (sum_orders, of sum |h w|), which log-softmax
    # at most doubles, and each side's own float32 log-softmax and entropy (rounding.py)
    z, sizes = hidden.double() @ weight.double().T, hidden.double().abs() @ weight.double().abs().T
    logits = sum_orders(8, U32) * float(sizes.max())
    within(logp, ref, 2 * logits + 2 * log_softmax_error(z), "chunked log-probs")
    V, z_max = z.shape[-1], float(z.abs().max())
    within(ent, ref_ent, 2 * math.log(V) * logits + 2 * entropy_error(V, z_max), "chunked entropy")
    # bf16 weights and activations: the logits of the bf16-rounded inputs, summed in float32, then rounded
    # to bf16 (UBF16 |z_v| each, besides float32's (D - 1) U32 sum |h w|). log-softmax is 1-Lipschitz in
    # each argument and in their max: log p_y moves by at most b_y + max_v b_v.
    h16, w16 = hidden.bfloat16(), weight.bfloat16()
    logp16, _ = S.token_logprobs(h16, w16, targets, chunk_size=4)
    assert logp16.dtype == torch.float32
    ref16, _ = S.token_logprobs_naive(h16.float(), w16.float(), targets)
    z16 = h16.double() @ w16.double().T
    b = UBF16 * z16.abs() + sum_orders(8, U32) * (h16.double().abs() @ w16.double().abs().T)
    bound = b.gather(-1, targets[..., None])[..., 0] + b.amax(-1) + 2 * log_softmax_error(z16)
    assert ((logp16.double() - ref16.double()).abs() <= bound).all(), float((logp16 - ref16).abs().max())
    # and the log-softmax itself ran in float32, not bf16: its results are not all bf16 numbers
    assert (logp16 != logp16.bfloat16().float()).any(), "the log-softmax ran in bf16 (no float32 upcast)"


def full_kl_naive(hidden, old_hidden, weight, temperature: float = 1.0):
    """The obviously-correct twin of scoring.full_kl: whole (B, T, V) tensors."""
    new = ((hidden @ weight.T) / temperature).log_softmax(-1)
    old = ((old_hidden @ weight.detach().T) / temperature).log_softmax(-1)
    return (old.exp() * (old - new)).sum(-1)


def test_full_kl_equals_naive_and_vanishes_on_policy():
    hidden, weight, _ = head()
    old_hidden = hidden + 0.3 * torch.randn(hidden.shape, generator=torch.Generator().manual_seed(2), dtype=F64)
    results = []
    for fn, kw in [(S.full_kl, {"chunk_size": 4}), (full_kl_naive, {})]:
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        kl = fn(h, old_hidden, w, temperature=0.9, **kw)
        (kl * torch.arange(15, dtype=F64).view(3, 5)).sum().backward()
        results.append((kl, h.grad, w.grad))
    for a, b in zip(*results):
        close(a, b)
    assert (results[0][0] > 0).all()
    close(S.full_kl(hidden, hidden, weight), torch.zeros(3, 5, dtype=F64), atol=1e-12, rtol=0)


def test_logits_are_built_512_rows_at_a_time_by_default(monkeypatch):
    """The memory bound of token_logprobs and full_kl, forward and backward: every log-softmax they run is
    over 512 rows of logits (scoring.CHUNK) at most, here 1200 = 512 + 512 + 176 rows."""
    rows, real = [], S._log_softmax
    monkeypatch.setattr(S, "_log_softmax", lambda h, *a: rows.append(len(h)) or real(h, *a))
    hidden, weight, targets = head(B=2, T=600, D=4, V=5)
    h = hidden.clone().requires_grad_()
    (S.token_logprobs(h, weight, targets)[0].sum() + S.full_kl(h, hidden, weight).sum()).backward()
    assert sorted(set(rows)) == [176, 512] and len(rows) == 3 * (1 + 1 + 2 + 2), rows


def test_compiled_loss_does_not_recompile_for_new_lengths():
    def call(B, T):
        logp, old, adv, mask, _ = inputs("kl3", B=B, T=T, dtype=torch.float32)
        return L.policy_loss("kl3", logp, old, adv, mask, num_sequences=B, num_tokens=int(mask.sum()),
                             max_new_tokens=T)

    call(4, 6)
    with torch.compiler.set_stance("fail_on_recompile"), warnings.catch_warnings():
        warnings.simplefilter("error")  # a recompile would raise, and policy_loss would warn and go eager
        call(4, 9)
        call(5, 13)
    assert "kl3" not in L._EAGER
