"""Mean@k and Pass@k (nanoatr.evaluate): pass@k against brute force, Mean@k by hand."""
import itertools
import math

import pytest

from nanoatr.evaluate import mean_at_k, mean_pass_at_k, pass_at_k, summarize, verdicts_by_problem


def brute_pass_at_k(n, c, k):
    # samples 0..c-1 are the correct ones; count the k-subsets that hold at least one
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_of_all_subsets():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_special_values_and_large_n():
    assert pass_at_k(16, 4, 1) == pytest.approx(4 / 16)  # pass@1 is the plain accuracy
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)  # C(2000, 1000) would overflow a float
    assert math.isfinite(pass_at_k(10_000, 3, 64))


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


VERDICTS = [
    [True, False, False, False],  # 1/4
    [True, True, True, True],  # 4/4
    [False, False, False, False],  # 0/4
    [False, True, False, True],  # 2/4
]


def test_mean_and_pass_at_k_by_hand():
    # mean: (0.25 + 1 + 0 + 0.5) / 4 = 0.4375
    assert mean_at_k(VERDICTS) == pytest.approx(0.4375)
    # pass@2 per problem: 1 - C(3,2)/C(4,2) = 0.5; 1; 0; 1 - C(2,2)/C(4,2) = 5/6
    assert mean_pass_at_k(VERDICTS, 2) == pytest.approx((0.5 + 1 + 0 + 5 / 6) / 4)
    assert mean_pass_at_k(VERDICTS, 4) == pytest.approx(0.75)


def test_summarize_several_k_in_percent_or_fraction():
    out = summarize(VERDICTS, [1, 4])
    assert out == pytest.approx({"mean@1": 43.75, "pass@1": 43.75, "mean@4": 43.75, "pass@4": 75.0})
    assert summarize(VERDICTS, [4], percent=False)["pass@4"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="@8 needs at least 8 samples per problem; problem 0 has 4"):
        summarize(VERDICTS, [8])
    with pytest.raises(ValueError):
        mean_at_k([])


def test_problems_may_have_different_sample_counts():
    assert mean_at_k([[True], [True, False, False, False]]) == pytest.approx((1 + 0.25) / 2)


def test_verdicts_by_problem_groups_and_sorts():
    rows = [
        {"problem_id": 1, "sample": 1, "correct": True},
        {"problem_id": 0, "sample": 0, "correct": False, "completion": "..."},
        {"problem_id": 1, "sample": 0, "correct": False},
        {"problem_id": 0, "sample": 1, "correct": True},
    ]
    assert verdicts_by_problem(rows) == [[False, True], [False, True]]
    with pytest.raises(ValueError, match="repeated sample 0 of problem 1"):
        verdicts_by_problem(rows + [{"problem_id": 1, "sample": 0, "correct": True}])
