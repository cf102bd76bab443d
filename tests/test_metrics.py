"""Mean@k and Pass@k (nanoatr.evaluate): pass@k against brute force, Mean@k by hand."""
import itertools
import math

import pytest

from nanoatr.evaluate import pass_at_k, summarize, verdicts_by_problem


def brute_pass_at_k(n, c, k):
    # samples 0..c-1 are the correct ones; count the k-subsets that hold at least one
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_of_all_subsets_and_holds_at_large_n():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
    assert pass_at_k(16, 4, 1) == pytest.approx(4 / 16)  # pass@1 is the plain accuracy
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)  # C(2000, 1000) would overflow a float
    assert math.isfinite(pass_at_k(10_000, 3, 64))


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


VERDICTS = [[True, False, False, False], [True] * 4, [False] * 4, [False, True, False, True]]  # 1, 4, 0, 2 of 4


def test_summarize_by_hand():
    """Correct: 1, 4, 0, 2 of 4; Mean (1/4 + 4/4 + 0/4 + 2/4) / 4 = 43.75% at every k; pass@2 per problem
    1 - C(3,2)/C(4,2) = 0.5, 1, 0, 1 - C(2,2)/C(4,2) = 5/6; pass@4: 3 of the 4 problems solved."""
    want = {"mean@1": 43.75, "pass@1": 43.75, "mean@2": 43.75, "pass@2": 100 * (0.5 + 1 + 0 + 5 / 6) / 4,
            "mean@4": 43.75, "pass@4": 75.0}
    got = summarize(VERDICTS, [1, 2, 4])
    assert got.pop("correct") == [1, 4, 0, 2] and got == pytest.approx(want)
    assert summarize([[True], [True, False, False, False]], [1])["mean@1"] == 62.5  # n may differ
    with pytest.raises(ValueError, match="@8 needs at least 8 samples per problem; problem 0 has 4"):
        summarize(VERDICTS, [8])
    with pytest.raises(ValueError):
        summarize([], [1])


def test_verdicts_by_problem_groups_and_sorts():
    rows = [{"problem_id": p, "sample": j, "correct": c} for p, j, c in [(1, 1, True), (0, 0, False), (1, 0, False),
                                                                          (0, 1, True)]]
    assert verdicts_by_problem(rows) == [[False, True], [False, True]]
    with pytest.raises(ValueError, match="repeated sample 0 of problem 1"):
        verdicts_by_problem(rows + [{"problem_id": 1, "sample": 0, "correct": True}])
