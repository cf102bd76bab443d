"""Section 5 of the paper, checked on its own setting: a tabular softmax policy at one state.

    python scripts/theory.py [--states 2000] [--eta 1e-3] [--delta 0.07] [--seed 0] [--figure PATH]
    python scripts/theory.py --figure docs/figure1-kl3.svg      # regenerate the figure of the docs

The numbers need torch only. Figure 1 is drawn with matplotlib (optional: without it the script says so
in one line) to runs/theory/figure1-kl3.svg, a .png beside it: an ignored folder, so that a student's
run never changes a tracked file.

One state s, logits theta^k (the current policy pi_k = softmax(theta^k)), an old policy pi_old
(theta^k plus noise, so the ratios w(a) = pi_k(a) / pi_old(a) spread around 1) and an advantage A(a)
per action.  From theta^k we take ONE full-batch policy-gradient step (the expectation over
a ~ pi_old exactly, d(s) = 1) on the ratio-clipped surrogate and one on the KL3-clipped surrogate,
and compare the two new policies.

Section 5.1's premise fixes eps from delta, one event at a time:
    X_-(s): 1 + eps = u_delta  (eps = 0.422 at delta 0.07): actions with w in [1 - eps, l_delta],
            kept by the ratio clip, cut by KL3;
    X_+(s): 1 - eps = l_delta  (eps = 0.329): actions with w in [1 + eps, u_delta], cut by the
            ratio clip, kept by KL3.
A state "satisfies the premise" when its event holds at least one action; otherwise both steps are
identical and there is nothing to predict.

What is measured, per state:
  - Theorem 5.1 (logits): Delta theta = theta^ATR - theta^ratio against
        -/+ eta pi_k(a) [A 1_X(a) - E_{pi_k}[A 1_X]]    (exact: the surrogates are linear in their gradients)
  - Theorem 5.2 (entropy): the sign of Delta H = H(pi^ATR) - H(pi^ratio) against the sign of
        +/- eta Cov_{a~pi_k}(A 1_X(a), log pi_k(a))                          (as printed)
    Its proof (Eq. 30) drops a factor pi_k(a): with Theorem 5.1's Delta theta, the first-order term is
        +/- eta Cov_{a~pi_k}(pi_k(a) [A 1_X(a) - E_{pi_k}[A 1_X]], log pi_k(a))  (pi-weighted)
    The printed covariance is exact to first order for the NATURAL policy gradient step
    (Delta theta = eta A 1_keep, the tabular Fisher inverse), so we take that step too.
The step size: the theorem is first order in eta, so eta must make the O(eta^2) remainder small
against eta * Cov.  With A ~ N(0, 1), eta = 1e-3 moves each logit by ~1e-3 and the measured
Delta H matches eta * Cov to a median relative error ~1e-3 (printed); float64 keeps Delta H ~ 1e-5
far above rounding.

Surrogates: "paper" is Eq. 14/15 as the proof uses them, clip(w) A with no PPO min (out of range =
no gradient whatever the sign of A); "nanoatr" is nanoatr.methods.clip / methods.kl3, PPO's min
included, so a ratio outside the range keeps its gradient when A pushes it back: the events shrink
to X_- with A < 0 and X_+ with A > 0, and the same formulas hold with that smaller X.
"""
import argparse
import sys
import math
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing
from nanoatr.machinery.flags import RANGES, Parser  # noqa: E402  (one error line, flags only in full)
from nanoatr import methods  # noqa: E402
from nanoatr.divergence import k3, kl3_ratio_range  # noqa: E402
from plot import Line, Panel, draw  # noqa: E402  (scripts/plot.py)

EVENTS = ("X-", "X+")
# not tracked (runs/ is ignored); --figure docs/figure1-kl3.svg for the docs
FIGURE = "runs/theory/figure1-kl3.svg"
SURROGATES = ("paper", "nanoatr")


class State(NamedTuple):
    logits: Tensor      # (n,) theta^k, float64
    old_logp: Tensor    # (n,) log pi_old
    advantages: Tensor  # (n,) A(a)


def random_state(gen: torch.Generator, min_actions: int = 4, max_actions: int = 16,
                 logit_scale: float = 1.5, drift: float = 0.4) -> State:
    """Random logits, a pi_old drifted from them (ratios mostly in [0.5, 2]) and N(0, 1) advantages."""
    n = int(torch.randint(min_actions, max_actions + 1, (1,), generator=gen))
    logits = logit_scale * torch.randn(n, generator=gen, dtype=torch.float64)
    old_logits = logits + drift * torch.randn(n, generator=gen, dtype=torch.float64)
    return State(logits, old_logits.log_softmax(-1), torch.randn(n, generator=gen, dtype=torch.float64))


def premise_eps(event: str, delta: float) -> float:
    """Section 5.1: eps with 1 + eps = u_delta for X_-, 1 - eps = l_delta for X_+."""
    l, u = kl3_ratio_range(delta)
    return u - 1 if event == "X-" else 1 - l


def event_indicator(state: State, event: str, delta: float, surrogate: str) -> Tensor:
    """1_X(a): the actions whose gradient exactly one of the two clips cuts, as a float (n,) tensor."""
    l, u = kl3_ratio_range(delta)
    eps = premise_eps(event, delta)
    w = (state.logits.log_softmax(-1) - state.old_logp).exp()
    A = state.advantages
    if event == "X-":
        x = (w >= 1 - eps) & (w < l)
        x = x & (A < 0) if surrogate == "nanoatr" else x  # PPO's min keeps w < l when A > 0
    else:
        x = (w > 1 + eps) & (w <= u)
        x = x & (A > 0) if surrogate == "nanoatr" else x  # ... and w > u when A < 0
    return x.double()


def objective(logits: Tensor, state: State, clip: str, eps: float, delta: float, surrogate: str) -> Tensor:
    """J(theta) = E_{a ~ pi_old}[surrogate(w(a), A(a))], the full-batch objective to maximise."""
    log_w = logits.log_softmax(-1) - state.old_logp
    w, A = log_w.exp(), state.advantages
    if surrogate == "paper":  # Eq. 14 / 15: clip without PPO's min
        if clip == "ratio":
            s = torch.clamp(w, 1 - eps, 1 + eps) * A
        else:                 # Eq. 5 with C = KL3 <= delta: outside C the ratio is the constant 1
            s = torch.where(k3(log_w) <= delta, w, torch.ones_like(w)) * A
    else:                     # the trainer's own per-token losses (minimised, so negated)
        t = methods.Tokens(w[None], log_w[None], A[None], torch.ones_like(w[None], dtype=torch.bool),
                           state.old_logp[None], None, None)
        loss = methods.clip(t, eps=eps)[0] if clip == "ratio" else methods.kl3(t, delta=delta)[0]
        s = -loss[0]
    return (state.old_logp.exp() * s).sum()


def pg_step(state: State, clip: str, eps: float, delta: float, surrogate: str, eta: float,
            natural: bool = False) -> Tensor:
    """theta^{k+1} = theta^k + eta grad J (natural: + eta grad J / pi_k, the tabular Fisher inverse)."""
    logits = state.logits.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(logits, state, clip, eps, delta, surrogate), logits)
    if natural:  # grad_a = pi_k(a) [g(a) - E g], so grad / pi_k = g - E g: the NPG step up to a shift
        grad = grad / state.logits.softmax(-1)
    return state.logits + eta * grad


def entropy(logits: Tensor) -> Tensor:
    logp = logits.log_softmax(-1)
    return -(logp.exp() * logp).sum()


def cov(f: Tensor, g: Tensor, p: Tensor) -> Tensor:
    """Cov_{a ~ p}(f(a), g(a))."""
    return (p * (f - (p * f).sum()) * (g - (p * g).sum())).sum()


def check_state(state: State, event: str, delta: float, surrogate: str, eta: float) -> dict | None:
    """Measured and predicted differences for one state; None when the premise's event is empty."""
    x = event_indicator(state, event, delta, surrogate)
    if not x.any():
        return None
    eps = premise_eps(event, delta)
    sign = -1.0 if event == "X-" else 1.0  # X_-: KL3 removes these gradients; X_+: KL3 adds them
    logp = state.logits.log_softmax(-1)
    pi, g = logp.exp(), state.advantages * x
    out = {}
    for natural in (False, True):
        atr = pg_step(state, "kl3", eps, delta, surrogate, eta, natural)
        ratio = pg_step(state, "ratio", eps, delta, surrogate, eta, natural)
        out["vanilla" if not natural else "natural"] = (atr, ratio)
    atr, ratio = out["vanilla"]
    theorem_51 = sign * eta * pi * (g - (pi * g).sum())
    measured = {k: float(entropy(a) - entropy(r)) for k, (a, r) in out.items()}
    printed = -sign * eta * float(cov(g, logp, pi))  # Theorem 5.2 as printed
    weighted = -sign * eta * float(cov(pi * (g - (pi * g).sum()), logp, pi))
    return {"dH_vanilla": measured["vanilla"], "dH_natural": measured["natural"], "printed": printed,
            "weighted": weighted, "thm51_err": float(((atr - ratio) - theorem_51).abs().max()),
            "rel_err": abs(measured["vanilla"] - weighted) / abs(weighted)}


def agreement(states: int = 2000, eta: float = 1e-3, delta: float = 0.07, seed: int = 0,
              event: str = "X-", surrogate: str = "paper") -> dict:
    """Over `states` random states: how often the predicted sign of Delta H is the measured one."""
    gen = torch.Generator().manual_seed(seed)
    rows = [r for r in (check_state(random_state(gen), event, delta, surrogate, eta) for _ in range(states))
            if r]
    if not rows:
        raise ValueError("no state satisfied the premise; raise --states")

    def rate(pred, meas):
        return sum((r[pred] > 0) == (r[meas] > 0) for r in rows) / len(rows)

    return {"event": event, "surrogate": surrogate, "states": states, "premise": len(rows),
            "printed_vanilla": rate("printed", "dH_vanilla"),
            "weighted_vanilla": rate("weighted", "dH_vanilla"),
            "printed_natural": rate("printed", "dH_natural"),
            "thm51_max_err": max(r["thm51_err"] for r in rows),
            "rel_err_median": sorted(r["rel_err"] for r in rows)[len(rows) // 2]}


# ----------------------------------------------------------------------------
# Figure 1: KL3 against the ratio, its range [l, u] and the symmetric [1 - eps, 1 + eps], eps = 1 - l

def figure1(out, delta: float = 0.07):
    """The paper's Figure 1: KL3(w), the delta line, [l, u] and the symmetric ratio range of eps = 1 - l."""
    l, u = kl3_ratio_range(delta)
    eps = 1 - l
    ws = [0.45 + i * 0.005 for i in range(261)]  # w in [0.45, 1.75]
    blue, gray, red, green = "#1f77b4", "#888888", "#d62728", "#2ca02c"
    lines = [
        Line("KL3(w) = w − 1 − log w", blue, ws, [w - 1 - math.log(w) for w in ws]),
        Line(f"δ = {delta:g}", gray, [ws[0], ws[-1]], [delta, delta], style="--"),
        Line(f"KL3 ≤ δ  ⇔  w ∈ [l_δ, u_δ] = [{l:.3f}, {u:.3f}]", red, [l, l, u, u],
             [0.0, delta, delta, 0.0]),
        Line(f"KL3 ≤ δ  ⇔  w ∈ [l_δ, u_δ] = [{l:.3f}, {u:.3f}]", red, [l, l, u, u],
             [-0.045, -0.05, -0.05, -0.045]),
        Line(f"ratio clip, ε = 1 − l_δ = {eps:.3f}:  w ∈ [{1 - eps:.3f}, {1 + eps:.3f}]", green,
             [1 - eps, 1 - eps, 1 + eps, 1 + eps], [-0.02, -0.025, -0.025, -0.02]),
    ]
    panel = Panel(f"KL3 ≤ {delta:g} is an asymmetric ratio range (Theorem 4.2)", "kl3", lines)
    return draw([panel], out, "ratio w = π_θ / π_old", cols=1)


# ----------------------------------------------------------------------------

def main(argv=None):
    parser = Parser(prog="python scripts/theory.py", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=2000, help="random states per event and surrogate")
    parser.add_argument("--eta", type=float, default=1e-3,
                        help="policy-gradient step size (first order: small)")
    parser.add_argument("--delta", type=float, default=0.07,
                        help="KL3 threshold; eps follows from the premise")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--figure", default=FIGURE, help="where to write Figure 1, and a .png beside it "
                        f"(default: {FIGURE}; docs/figure1-kl3.svg is the docs' copy; '' = skip)")
    args = parser.parse_args(argv)
    for name, rule in (("states", ">=1"), ("eta", ">0"), ("delta", ">0")):  # (--eta 0 would divide by 0)
        if not RANGES[rule][0](value := getattr(args, name)):
            parser.error(f"--{name} must be {RANGES[rule][1]} (got {value})")
    l, u = kl3_ratio_range(args.delta)
    print(f"delta {args.delta:g}: KL3 range [l, u] = [{l:.4f}, {u:.4f}]; X-: eps = u - 1 = {u - 1:.4f}, "
          f"X+: eps = 1 - l = {1 - l:.4f}; eta {args.eta:g}; {args.states} random states per row\n")
    print("sign agreement of Delta H = H(ATR step) - H(ratio step) with Theorem 5.2, "
          "on states where the premise holds")
    print(f"{'surrogate':9} {'event':5} {'premise':>7} | {'printed Cov':>11} {'pi-weighted':>11} | "
          f"{'printed Cov':>11} | {'Thm 5.1':>8} {'1st order':>9}")
    print(f"{'':9} {'':5} {'':>7} | {'vanilla PG':>11} {'vanilla PG':>11} | {'natural PG':>11}"
          f" | {'max err':>8} {'rel err':>9}")
    for surrogate in SURROGATES:
        for event in EVENTS:
            try:
                r = agreement(args.states, args.eta, args.delta, args.seed, event, surrogate)
            except ValueError as e:  # no state satisfied the premise
                parser.error(str(e))
            print(f"{surrogate:9} {event:5} {r['premise']:7d} | {r['printed_vanilla']:11.1%} "
                  f"{r['weighted_vanilla']:11.1%} | {r['printed_natural']:11.1%} | {r['thm51_max_err']:8.1e} "
                  f"{r['rel_err_median']:9.1e}")
    print("\nprinted Cov = eta Cov(A 1_X, log pi) (Theorem 5.2); "
          "pi-weighted = eta Cov(pi (A 1_X - E[A 1_X]), log pi),\n"
          "the first-order term of Theorem 5.1's vanilla step (Eq. 30 drops pi(a)); "
          "Thm 5.1 max err: |measured\n"
          "Delta theta - formula|; 1st order rel err: median |Delta H - pi-weighted| / |pi-weighted|.")
    try:
        if args.figure:
            print(f"wrote {figure1(args.figure, args.delta)}")
    except SystemExit:  # plot.draw's, without matplotlib
        print("figure 1 not drawn: it needs matplotlib (pip install matplotlib); the numbers above do not")


if __name__ == "__main__":
    main()
