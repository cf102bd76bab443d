"""Section 5 on a tabular softmax policy (nanoatr.theory): Theorem 5.1 exactly, Theorem 5.2's sign."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import theory  # noqa: E402  (scripts/theory.py)
from nanoatr.divergence import kl3_ratio_range
from conftest import error_line

STATES = 400  # ~150-200 of them satisfy each premise


def test_premise_ties_eps_to_the_kl3_range():
    l, u = kl3_ratio_range(0.07)
    assert theory.premise_eps("X-", 0.07) == pytest.approx(u - 1) == pytest.approx(0.4222, abs=1e-4)
    assert theory.premise_eps("X+", 0.07) == pytest.approx(1 - l) == pytest.approx(0.3290, abs=1e-4)


@pytest.mark.parametrize("surrogate", theory.SURROGATES)
@pytest.mark.parametrize("event", theory.EVENTS)
def test_theorem_51_logit_difference_is_exact(event, surrogate):
    r = theory.agreement(100, eta=0.1, event=event, surrogate=surrogate)  # exact: any step size
    assert r["premise"] > 10 and r["thm51_max_err"] < 1e-12


@pytest.mark.parametrize("surrogate", theory.SURROGATES)
@pytest.mark.parametrize("event", theory.EVENTS)
def test_theorem_52_entropy_sign_agrees(event, surrogate):
    r = theory.agreement(STATES, eta=1e-3, event=event, surrogate=surrogate)
    assert r["premise"] > 100
    # the printed Cov(A 1_X, log pi) is the first-order Delta H of the natural-gradient step ...
    assert r["printed_natural"] > 0.95
    # ... and Theorem 5.1's vanilla step gives Cov(pi (A 1_X - E[A 1_X]), log pi)
    assert r["weighted_vanilla"] > 0.95
    assert r["rel_err_median"] < 1e-2  # eta = 1e-3 is first-order territory
    if (event, surrogate) == ("X-", "paper"):  # Eq. 30 drops pi(a): with the vanilla step the printed
        assert r["printed_vanilla"] < 0.99     # covariance gets some signs wrong


def test_empty_event_has_nothing_to_predict():
    state = theory.State(torch.zeros(4, dtype=torch.float64), torch.full((4,), -1.3862943611198906,
                         dtype=torch.float64), torch.ones(4, dtype=torch.float64))  # w = 1 everywhere
    assert theory.check_state(state, "X-", 0.07, "paper", 1e-3) is None


def test_nanoatr_surrogate_is_the_trainers_loss():
    """With PPO's min, the events keep only the tokens the trainer's methods.clip / kl3 treat differently."""
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        s = theory.random_state(gen)
        for event in theory.EVENTS:
            eps = theory.premise_eps(event, 0.07)
            a = theory.pg_step(s, "kl3", eps, 0.07, "nanoatr", 1.0)
            b = theory.pg_step(s, "ratio", eps, 0.07, "nanoatr", 1.0)
            differs = not torch.allclose(a, b, atol=1e-14)
            assert differs == bool(theory.event_indicator(s, event, 0.07, "nanoatr").any())


def test_figure1_svg(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from test_plot import lines_of
    lines = {gid.split("|")[0] for gid in lines_of(theory.figure1(tmp_path / "fig1.svg"))}
    assert {"KL3(w) = w − 1 − log w", "δ = 0.07", "KL3 ≤ δ  ⇔  w ∈ [l_δ, u_δ] = [0.671, 1.422]"} <= lines
    assert any(label.startswith("ratio clip, ε = 1 − l_δ = 0.329") for label in lines)
    monkeypatch.setattr(theory, "draw", lambda panels, out, xlabel, cols: (panels, cols))
    [panel], cols = theory.figure1(tmp_path / "f.svg")  # one panel, one column; both ranges under the axis:
    brackets = [ln.ys for ln in panel.lines if min(ln.ys) < 0]  # ends level, above the flat middle
    assert cols == 1 and len(brackets) == 2 and all(0 > y[0] == y[3] > y[1] == y[2] for y in brackets)


def test_main_without_matplotlib_prints_the_numbers_and_one_line(tmp_path, monkeypatch, capsys):
    """Exercise 9 asks students to run the script; matplotlib is optional (requirements-dev.txt)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.chdir(tmp_path)
    theory.main(["--states", "60"])
    out = capsys.readouterr().out
    r = theory.agreement(60, eta=1e-3, delta=0.07, seed=0)  # the documented defaults; X-, "paper" first
    assert (f"paper     X-    {r['premise']:7d} | {r['printed_vanilla']:11.1%} {r['weighted_vanilla']:11.1%} | "
            f"{r['printed_natural']:11.1%} | {r['thm51_max_err']:8.1e} {r['rel_err_median']:9.1e}\n") in out
    assert "; eta 0.001; 60 random states per row" in out and "nanoatr   X+" in out
    for argv, message in [(["--eta", "0"], "--eta must be > 0"), (["--states", "1"], "no state satisfied")]:
        assert message in error_line(capsys, theory.main, argv)  # not a ZeroDivisionError, a traceback
    assert [line for line in out.splitlines() if "matplotlib" in line] == \
        ["figure 1 not drawn: it needs matplotlib (pip install matplotlib); the numbers above do not"]
    assert not any(tmp_path.rglob("*.svg"))


def test_default_figure_is_not_a_tracked_file(tmp_path, monkeypatch, capsys):
    """A student's run writes under runs/ (ignored); the docs' figure changes only when asked for by path
    (--figure PATH; '' skips it)."""
    assert theory.FIGURE.startswith("runs/")
    if shutil.which("git") and (ROOT / ".git").exists():
        assert subprocess.run(["git", "check-ignore", "-q", theory.FIGURE], cwd=ROOT).returncode == 0
    from test_plot import HAS_MATPLOTLIB
    if not HAS_MATPLOTLIB:
        return
    docs = (ROOT / "docs/figure1-kl3.svg").read_bytes()
    monkeypatch.chdir(tmp_path)
    theory.main(["--states", "60"])
    assert (tmp_path / theory.FIGURE).is_file() and (tmp_path / theory.FIGURE).with_suffix(".png").is_file()
    assert (ROOT / "docs/figure1-kl3.svg").read_bytes() == docs
    assert f"wrote {theory.FIGURE}" in capsys.readouterr().out
    theory.main(["--states", "60", "--figure", "f.svg"])
    theory.main(["--states", "60", "--figure", ""])
    assert "paper     X-" in capsys.readouterr().out and sorted(p.name for p in tmp_path.glob("*.svg")) == ["f.svg"]
