"""The autograder of a student copy (scripts/make_assignment.py): per exercise, tests passed / total and a
score, printed and written as JSON (Gradescope's results.json format, details under "extra_data").

    python ../hw1-grader/grade.py                 # official: run inside the student's repository
    python hw1-grader/grade.py STUDENT_DIR --json results.json
    python scripts/grade.py                       # in a student copy: a self-check with your own tests/

Official grading uses a grader bundle, the folder of this script when it holds assignment.json and
reference/ (make_assignment.py writes it beside the student copy), or --reference CHECKOUT:
  - the tests come from the reference: the student's tests/ is replaced, and pytest configuration
    outside tests/ (conftest.py, pytest.ini, tox.ini, setup.cfg) is removed from the copy graded;
  - each exercise is graded on its own: in the copy that grades exercise N, the other exercises'
    functions are the reference's, so an unfinished exercise costs its own points only;
  - only the exercise's checks (the table of docs/exercises.md) run, with a time limit;
  - files changed outside the exercises' functions are listed, not scored: read those diffs.
The self-check (no bundle, no --reference) runs the student's own tests on the student's files as they
are, one pytest run per exercise, so each exercise is reported on its own. It agrees with the official
grade except where an exercise's check runs another exercise that is still blank (the "builds on"
column of docs/exercises.md), or where the student's tests differ from the reference's.
Score: 10 points an exercise times the share of its tests that passed. A written exercise (no
function: 6) runs its check but scores 0 of 0: it is graded by hand (docs/teaching.md).
Each run is a fresh pytest in a copy of the repository, forked from this process after torch is
imported once (Linux; elsewhere, or with --no-fork, a new interpreter each).
"""
import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_assignment as MA  # noqa: E402  (scripts/make_assignment.py, or its copy in a bundle)
from function_spans import paste_function, without_functions  # noqa: E402  (and scripts/function_spans.py)

POINTS = 10.0
STRAY_CONFIG = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg")  # at the root of the copy graded
PRELOAD = ("torch", "torch._dynamo", "numpy", "sympy", "tokenizers", "transformers", "safetensors", "tqdm")


# ----------------------------------------------------------------------------
# One pytest run, in its own process (forked, or a new interpreter with --child)

class Recorder:
    """A pytest plugin: keeps the tests that `selections` ({exercise: [(file, -k expression)]}) name,
    records which exercise each belongs to and every test's outcome, saved to `out` after each test (so
    a run stopped by the time limit keeps what finished)."""

    def __init__(self, selections: dict, out: str):
        from _pytest.mark import KeywordMatcher
        from _pytest.mark.expression import Expression
        self.matcher = KeywordMatcher.from_item
        self.rules = [(ex, file, Expression.compile(k) if k else None)
                      for ex, checks in selections.items() for file, k in checks]
        self.selected = {ex: [] for ex in selections}
        self.outcomes, self.errors, self.out, self.exit = {}, [], Path(out), None

    def save(self):
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"exit": self.exit, "selected": self.selected, "outcomes": self.outcomes,
                                   "errors": self.errors}))
        os.replace(tmp, self.out)

    def pytest_collection_modifyitems(self, session, config, items):
        keep, drop = [], []
        for item in items:
            path = item.nodeid.split("::")[0]
            owners = [ex for ex, file, expr in self.rules
                      if path == file and (expr is None or expr.evaluate(self.matcher(item)))]
            for ex in dict.fromkeys(owners):
                self.selected[ex].append(item.nodeid)
            (keep if owners else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
        self.save()

    @staticmethod
    def message(report) -> str:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        # hypothesis: the example first
        errors = [line for line in lines if "Error" in line or "Exception" in line]
        where = re.search(r'File "([^"]+)", line (\d+)', text)  # a module that does not import: say where
        at = f" ({os.path.relpath(where.group(1))}:{where.group(2)})" if where and errors and \
            where.group(1).startswith(os.getcwd()) else ""
        return ((errors or lines or [report.outcome])[0] + at)[:300]

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"{report.nodeid or 'collection'}: {self.message(report)}")

    def pytest_runtest_logreport(self, report):
        outcome = self.outcomes.setdefault(report.nodeid, ["passed", ""])
        if report.failed and outcome[0] != "failed":
            outcome[:] = ["failed", self.message(report)]
        elif report.skipped and outcome[0] == "passed":
            outcome[:] = ["skipped", self.message(report)]
        if report.when == "teardown":
            self.save()


def child(spec: dict) -> None:
    """Run pytest on spec["tree"] for spec["selections"]; write what happened to spec["out"]."""
    tree = Path(spec["tree"])
    os.chdir(tree)
    sys.path.insert(0, str(tree))
    sys.dont_write_bytecode = True
    for name in [m for m in sys.modules if m == "nanoatr" or m.startswith("nanoatr.")]:
        del sys.modules[name]  # never the parent's (it imports none): belt and braces
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # no third-party plugins: the same run everywhere
    log = open(spec["log"], "w")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    import pytest
    selections = {int(ex): [tuple(c) for c in checks] for ex, checks in spec["selections"].items()}
    recorder = Recorder(selections, spec["out"])
    files = sorted({file for checks in selections.values() for file, _ in checks})
    args = [*files, "-q", "-p", "no:cacheprovider", "--rootdir", str(tree), "-c", spec["ini"], "--tb=short"]
    code = pytest.main(args + (["--collect-only"] if spec.get("collect_only") else []), plugins=[recorder])
    recorder.exit = int(code)
    recorder.save()
    sys.stdout.flush()
    sys.stderr.flush()


def run_child(spec: dict, timeout: float, fork: bool) -> dict:
    """Run `child(spec)` with a time limit; returns its record (outcomes of the tests that finished)."""
    t0 = time.perf_counter()
    timed_out = False
    if fork:
        sys.stdout.flush()
        sys.stderr.flush()
        proc = multiprocessing.get_context("fork").Process(target=child, args=(spec,))
        proc.start()
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            timed_out = True
    else:
        spec_path = Path(spec["out"]).with_suffix(".spec.json")
        spec_path.write_text(json.dumps(spec))
        try:
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path)],
                           timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            timed_out = True
    out = Path(spec["out"])
    record = json.loads(out.read_text()) if out.is_file() else \
        {"exit": None, "selected": {}, "outcomes": {}, "errors": []}
    if timed_out:
        record["errors"].append(f"stopped after {timeout:.0f} s (--timeout)")
    elif record["exit"] is None:
        log = (Path(spec["log"]).read_text(errors="replace").strip().splitlines()
               if Path(spec["log"]).is_file() else [])
        record["errors"].append("the test process died: " + (log[-1] if log else "no output"))
    record["seconds"] = time.perf_counter() - t0
    return record


# ----------------------------------------------------------------------------
# The copies graded

def ignore(directory, names):
    return [n for n in names if n in MA.SKIP_DIRS or n.endswith((".egg-info", ".pyc"))]


def target_files(exercises: dict, numbers: list) -> dict:
    """{path: [function names]} of the exercises' functions."""
    out = {}
    for n in numbers:
        for path, name in exercises[n].functions:
            out.setdefault(path, []).append(name)
    return out


def isolated_sources(student: Path, reference: Path, exercises: dict, n: int) -> dict:
    """The files of the copy that grades exercise n: the student's, with the functions of every other
    exercise of the table put back to the reference's. {path: text or None (the student has no such file)}."""
    files = {}
    for path in target_files(exercises, list(exercises)):
        source = student / path
        files[path] = source.read_text() if source.is_file() else None
    for m in exercises:
        if m == n:
            continue
        for path, name in exercises[m].functions:
            ref = (reference / path).read_text()
            try:
                files[path] = (paste_function(files[path], ref, name, path) if files[path] is not None
                               else ref)
            except (SyntaxError, LookupError):
                pass  # the student's file does not parse: it stays broken, for every exercise in it
    return files


def build_tree(student: Path, dest: Path, reference: Path | None, files: dict) -> Path:
    """A copy of the student's repository to run tests in: `files` written over it, and with a
    reference, its tests/ and no pytest configuration of the student's."""
    shutil.copytree(student, dest, ignore=ignore, symlinks=False)
    for path, text in files.items():
        if text is not None:
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_text(text)
    if reference is not None:
        shutil.rmtree(dest / "tests", ignore_errors=True)
        shutil.copytree(reference / "tests", dest / "tests", ignore=ignore)
        for name in STRAY_CONFIG:
            (dest / name).unlink(missing_ok=True)
    return dest


def changed_outside(student: Path, reference: Path, exercises: dict, numbers: list) -> list:
    """Files of the student's repository that differ from the copy handed out, outside the exercises'
    functions: ["nanoatr/loss.py (changed)", "notes.py (added)", ...]."""
    targets = target_files(exercises, numbers)
    handed = [f for f in MA.source_files(reference) if f not in MA.TEACHER_ONLY]
    out = []
    for f in handed:
        mine, ref = student / f, reference / f
        if not mine.is_file():
            out.append(f"{f} (deleted)")
        elif f in targets:
            try:
                a = without_functions(mine.read_text(), targets[f], f)
                b = without_functions(ref.read_text(), targets[f], f)
            except (SyntaxError, UnicodeDecodeError):
                a, b = None, ""
            if a != b:
                out.append(f"{f} (changed)")
        elif mine.read_bytes() != MA.handed_out(f, ref.read_bytes()):
            out.append(f"{f} (changed)")
    known = set(handed) | set(MA.STUDENT_FILES) | {"results.json"}
    for f in MA.source_files(student, untracked=True):
        if f not in known:
            out.append(f"{f} (added)")
    return out


# ----------------------------------------------------------------------------

def exercises_to_grade(student: Path, exercises: dict, numbers: list | None) -> tuple[list, list]:
    """(the exercises to grade: `numbers`, or by default the assignment's; every exercise assigned)."""
    meta = student / "assignment.json"
    given = json.loads(meta.read_text())["exercises"] if meta.is_file() else []
    if numbers is None and not meta.is_file():
        raise ValueError(f"{student}: no assignment.json; say which exercises with --exercises")
    numbers = given if numbers is None else numbers
    unknown = [n for n in numbers if n not in exercises]
    if unknown:
        raise ValueError(f"no exercise {unknown[0]} in {MA.DOC}")
    return numbers, sorted(set(numbers) | set(given))


def preload():
    """Import the heavy packages once; every forked test run starts with them (no tensor op runs here)."""
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass


def group_runs(student: Path, reference: Path | None, exercises: dict, numbers: list) -> dict:
    """The test runs to make: {key: (files written over the copy, the exercises it grades)}."""
    # Official: one test run per distinct set of target files (the exercises whose copies are the same
    # share a run; in the worst case one run per exercise). Self-check: one run per exercise, on the
    # student's files as they are, so that a module one exercise's check cannot import, or a time-out,
    # costs that exercise only.
    groups = {}
    for n in numbers:
        files = isolated_sources(student, reference, exercises, n) if reference else {}
        key = json.dumps(files, sort_keys=True) if reference else f"exercise {n}"
        groups.setdefault(key, (files, []))[1].append(n)
    return groups


def run_groups(groups: dict, student: Path, reference: Path | None, exercises: dict, work: Path,
               timeout: float, fork: bool, keep: bool) -> dict:
    """Each test run in its own copy of the student's repository: {exercise: the record of its run}."""
    records = {}
    for i, (files, members) in enumerate(groups.values()):
        tree = build_tree(student, work / f"copy{i}", reference, files)
        spec = {"tree": str(tree), "ini": str(work / "pytest.ini"), "out": str(work / f"run{i}.json"),
                "log": str(work / f"run{i}.log"),
                "selections": {n: list(exercises[n].checks) for n in members}}
        record = run_child(spec, timeout * len(members), fork)
        for n in members:
            records[n] = record
        if not keep:
            shutil.rmtree(tree, ignore_errors=True)
    return records


def reference_tests(reference: Path, exercises: dict, numbers: list, work: Path, timeout: float,
                    fork: bool) -> dict:
    """The tests each exercise's checks select in the reference, collected, not run: {"n": [test ids]}."""
    tree = build_tree(reference, work / "reference", None, {})
    spec = {"tree": str(tree), "ini": str(work / "pytest.ini"), "out": str(work / "reference.json"),
            "log": str(work / "reference.log"), "collect_only": True,
            "selections": {m: list(exercises[m].checks) for m in numbers}}
    return run_child(spec, timeout, fork)["selected"]


def score_exercises(numbers: list, exercises: dict, records: dict, reference: Path | None, work: Path,
                    timeout: float, fork: bool) -> list:
    """Each exercise's tests passed, score and failures, from the records of the test runs."""
    expected = None
    results = []
    for n in numbers:
        ex, record = exercises[n], records[n]
        ids = record["selected"].get(str(n), [])
        own = {file for file, _ in ex.checks}  # errors of a shared run: those of this exercise's files
        errors = [e for e in record["errors"] if e.split(":")[0] in own or not e.startswith("tests/")]
        if not ids and not errors:
            errors.append(f"no test ran (pytest exit {record['exit']}; --keep keeps its log)")
        # a module that does not import, a time-out: count the tests it should have run
        if not ids or errors:
            if expected is None and reference is not None:
                expected = reference_tests(reference, exercises, numbers, work, timeout, fork)
            ids = list(dict.fromkeys(ids + (expected or {}).get(str(n), []))) or [f"{n}: no test ran"]
        outcome = {i: record["outcomes"].get(i, ["not run", ""]) for i in ids}
        passed = sum(o[0] == "passed" for o in outcome.values())
        written = not ex.functions
        max_score = 0.0 if written else POINTS
        results.append({"number": n, "title": ex.title, "passed": passed, "total": len(ids),
                        "score": round(max_score * passed / len(ids), 2), "max_score": max_score,
                        "written": written, "seconds": round(record["seconds"], 1),
                        "failed": [[i, o[0] + (": " + o[1] if o[1] and o[1] != o[0] else "")]
                                   for i, o in outcome.items() if o[0] != "passed"],
                        "errors": errors})
    return results


def grade(student: Path, numbers: list | None = None, reference: Path | None = None, timeout: float = 300,
          fork: bool | None = None, keep: bool = False, say=print) -> dict:
    """Grade the student repository; returns the results (Gradescope's format)."""
    student = student.resolve()
    exercises = MA.load_exercises(reference or student)
    numbers, assigned = exercises_to_grade(student, exercises, numbers)
    fork = (("fork" in multiprocessing.get_all_start_methods() and sys.platform.startswith("linux"))
            if fork is None else fork)
    if fork:
        preload()
    groups = group_runs(student, reference, exercises, numbers)
    work = Path(tempfile.mkdtemp(prefix="nanoatr-grade-"))
    (work / "pytest.ini").write_text("[pytest]\n")
    say(f"grading {student} (exercises {', '.join(map(str, numbers))}; tests from "
        f"{(reference or student) / 'tests'}{'' if reference else ', your own: a self-check'}; "
        f"{len(groups)} test run{'s' if len(groups) > 1 else ''})", flush=True)
    try:
        records = run_groups(groups, student, reference, exercises, work, timeout, fork, keep)
        results = score_exercises(numbers, exercises, records, reference, work, timeout, fork)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    outside = changed_outside(student, reference, exercises, assigned) if reference else []
    return report(results, outside, student, reference, work if keep else None, say)


def report(results: list, outside: list, student: Path, reference, kept, say) -> dict:
    graded = [r for r in results if not r["written"]]
    total, max_total = sum(r["score"] for r in graded), sum(r["max_score"] for r in graded)
    complete = sum(r["passed"] == r["total"] for r in graded)
    width = max(len(r["title"]) for r in results)
    for r in results:
        points = "written: graded by hand" if r["written"] else f"{r['score']:4.1f}/{r['max_score']:.0f}"
        say(f"exercise {r['number']:2}  {r['title']:{width}}  {r['passed']:3}/{r['total']:<3} tests passed  "
            f"{points}")
        reasons = {}
        for test, why in r["failed"]:
            reasons.setdefault(why, []).append(test.split("::")[-1])
        for why, tests in list(reasons.items())[:3]:
            say(f"    {len(tests)} {why}" + (f" ({tests[0]})" if len(tests) == 1 else f" (e.g. {tests[0]})"))
        if len(reasons) > 3:
            say(f"    ... and {sum(len(t) for t in list(reasons.values())[3:])} more failed")
        for error in r["errors"][:2]:
            say(f"    error: {error}")
    summary = f"score {total:.1f} / {max_total:.0f}; exercises complete: {complete} of {len(graded)}"
    say(summary)
    if outside:
        say("changed outside the exercises' functions (not scored; read these diffs): " + ", ".join(outside))
    if kept:
        say(f"kept the copies graded and the pytest logs in {kept}")
    return {"score": round(total, 2), "output": summary,
            "tests": [{"name": f"exercise {r['number']}: {r['title']}", "number": str(r["number"]),
                       "score": r["score"], "max_score": r["max_score"],
                       "status": "passed" if r["passed"] == r["total"] else "failed",
                       "output": (f"{r['passed']}/{r['total']} tests passed" +
                                  (" (a written exercise: graded by hand)" if r["written"] else "") +
                                  "".join(f"\nfailed {t}: {w}" for t, w in r["failed"]) +
                                  "".join(f"\nerror: {e}" for e in r["errors"]))} for r in results],
            "extra_data": {"exercises": results, "complete": complete, "graded": len(graded),
                           "changed_outside": outside, "student": str(student),
                           "tests_from": str((reference or student) / "tests"),
                           "isolated": reference is not None}}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(json.loads(Path(argv[1]).read_text()))
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="grade.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("student", nargs="?", type=Path, default=Path("."),
                        help="the student's repository (default: the current folder)")
    parser.add_argument("--reference", type=Path,
                        help="the instructor's checkout: its tests and reference bodies (default: the bundle "
                             "this script is in, if any; else a self-check with the student's own tests)")
    parser.add_argument("--exercises", help="grade these, e.g. 1,4,7 (default: the assignment's)")
    parser.add_argument("--json", type=Path, default=Path("results.json"),
                        help="where to write the results (default: results.json)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds allowed per exercise (default: 300)")
    parser.add_argument("--no-fork", action="store_true", help="a new interpreter per test run (slower)")
    parser.add_argument("--keep", action="store_true", help="keep the copies graded and the pytest logs")
    args = parser.parse_args(argv)
    bundle = HERE if (HERE / "assignment.json").is_file() and (HERE / "reference").is_dir() else None
    reference = args.reference.resolve() if args.reference else (bundle / "reference" if bundle else None)
    if not (args.student / "assignment.json").is_file() and args.exercises is None:
        parser.error(f"{args.student.resolve()} is not a student copy (no assignment.json): give its path")
    try:
        numbers = None
        if args.exercises:
            numbers = MA.choose(MA.load_exercises(reference or args.student), args.exercises)
        elif bundle and reference == bundle / "reference":
            numbers = json.loads((bundle / "assignment.json").read_text())["exercises"]
        results = grade(args.student, numbers, reference, args.timeout, fork=False if args.no_fork else None,
                        keep=args.keep)
    except (ValueError, LookupError, OSError) as e:
        parser.error(str(e))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
