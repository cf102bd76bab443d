"""Our verifier against math-verify on the project's labelled cases, per category and tier.

    python bench/verifier_compare.py [--cases tests/data/verifier_cases.jsonl] [--show all|wrong|none]

Each case is {"category", "tier", "completion", "gold", "label"}. Accuracy is agreement with the label.
math-verify is NOT a requirement of nanoatr: install it somewhere else to compare, e.g.

    python -m venv --system-site-packages /tmp/venv-mv && /tmp/venv-mv/bin/pip install math-verify
    /tmp/venv-mv/bin/python bench/verifier_compare.py

Without it the script says so in one line and prints our figures alone. math-verify is called as
its README shows, ``verify(parse(gold), parse(completion))``, with the bare gold wrapped in
``\\boxed{}`` so that its extractor finds it (a bare "3/4" or "Tuesday" is otherwise not extracted).
Also printed: our slowest case (a single call, cache cleared) and false positives per tier.
"""
import argparse
import collections
import json
import os
import sys
import time
import warnings

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from nanoatr.verifier import canonical, verify  # noqa: E402

try:  # optional: only for this comparison
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from math_verify import parse as mv_parse
        from math_verify import verify as mv_verify
except ImportError:
    mv_parse = mv_verify = None


def math_verify(completion: str, gold: str):
    try:
        return bool(mv_verify(mv_parse("\\boxed{" + gold + "}"), mv_parse(completion)))
    except Exception:  # a crash counts as "not verified", as it would in a reward function
        return False


def ours(completion: str, gold: str):
    canonical.cache_clear()  # time each case from scratch
    start = time.perf_counter()
    result = verify(completion, gold)
    return result, time.perf_counter() - start


def table(rows, key):
    """{group: [n, ours correct, mv correct, ours false positives, mv false positives]}"""
    out = collections.OrderedDict()
    for r in rows:
        t = out.setdefault(r[key], [0, 0, 0, 0, 0])
        t[0] += 1
        t[1] += r["ours"] == r["label"]
        t[3] += r["ours"] and not r["label"]
        if r["mv"] is not None:
            t[2] += r["mv"] == r["label"]
            t[4] += r["mv"] and not r["label"]
    return out


def print_table(title, t, have_mv):
    print(f"\n{title:<26} {'n':>4} {'ours':>7} {'math-verify':>12} {'FP ours':>8} {'FP mv':>6}")
    total = [0] * 5
    for name, (n, a, b, fa, fb) in t.items():
        mv = f"{b / n:12.1%}" if have_mv else f"{'-':>12}"
        print(f"{name:<26} {n:>4} {a / n:7.1%} {mv} {fa:>8} {fb if have_mv else '-':>6}")
        total = [x + y for x, y in zip(total, (n, a, b, fa, fb))]
    n, a, b, fa, fb = total
    mv = f"{b / n:12.1%}" if have_mv else f"{'-':>12}"
    print(f"{'all':<26} {n:>4} {a / n:7.1%} {mv} {fa:>8} {fb if have_mv else '-':>6}")


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=os.path.join(ROOT, "tests", "data", "verifier_cases.jsonl"))
    ap.add_argument("--show", choices=["all", "wrong", "none"], default="wrong",
                    help="list disagreements: cases either verifier gets wrong (default), every case, none")
    args = ap.parse_args(argv)
    with open(args.cases) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if mv_verify is None:
        print("math-verify is not installed: printing our accuracy only (see this script's docstring)")
    verify("\\boxed{1}", "1")  # import-time work outside the timings
    for r in rows:
        r["ours"], r["seconds"] = ours(r["completion"], r["gold"])
        r["mv"] = math_verify(r["completion"], r["gold"]) if mv_verify else None

    have_mv = mv_verify is not None
    print_table("tier", table(rows, "tier"), have_mv)
    print_table("category", table(rows, "category"), have_mv)
    slowest = max(rows, key=lambda r: r["seconds"])
    print(f"\nslowest case (ours): {slowest['seconds'] * 1e3:.1f} ms "
          f"(id {slowest.get('id')}, {slowest['category']})")

    if args.show != "none":
        print("\ndisagreements (label / ours / math-verify):")
        for r in rows:
            wrong = r["ours"] != r["label"] or (have_mv and r["mv"] != r["label"])
            if args.show == "all" or wrong:
                tail = r["completion"][-90:].replace("\n", "\\n")
                print(f"  [{r.get('id')}] {r['category']:<22} label={r['label']!s:<5} ours={r['ours']!s:<5} "
                      f"mv={r['mv']!s:<5} gold={r['gold']!r}  ...{tail!r}")


if __name__ == "__main__":
    main()
