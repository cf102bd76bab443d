"""The classroom kit end to end (docs/teaching.md): a student copy of every exercise holds no answer and
has a fresh history; the grader, with its own tests, gives 0 with the bodies blank, every exercise failing
on its own blank (red), and full marks once the reference bodies are pasted back (green); a copy holds
tracked files only, links no file it lacks, names only its own exercises; the kit refuses to write inside
this checkout; the rubric adds up; and `pip install -e .` makes `import nanoatr` work from any folder.

    python -m pytest tests/test_classroom.py -q        (about 40 s on one core: two grader runs)
"""
import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import grade as GRADE  # noqa: E402  (scripts/grade.py)
import function_spans as FS  # noqa: E402  (scripts/function_spans.py)
import make_assignment as MA  # noqa: E402  (scripts/make_assignment.py)
from conftest import strict_file  # noqa: E402

EXERCISES = MA.load_exercises(ROOT)


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """A student copy of every exercise, and its grader bundle."""
    base = tmp_path_factory.mktemp("kit")
    MA.main(["--exercises", "all", "--out", str(base / "hw")])
    return base / "hw", base / "hw-grader"


def run_grader(grader: Path, student: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, str(grader / "grade.py"), str(student), "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return strict_file(out)


def reference_lines(path: str, name: str) -> list[str]:
    """The lines of the reference body that appear nowhere else in the repository (so must not leak)."""
    source = (ROOT / path).read_text()
    first, end, _ = FS.body_span(source, name, path)
    lines = source.splitlines()
    elsewhere = "\n".join(lines[:first] + lines[end:])
    for f in MA.source_files(ROOT):
        if f != path and f.endswith((".py", ".md", ".txt", ".json", ".toml")):
            elsewhere += "\n" + (ROOT / f).read_text(errors="replace")
    return [line.strip() for line in lines[first:end]
            if len(line.strip()) >= 12 and not line.strip().startswith("#") and line.strip() not in elsewhere]


@pytest.mark.skipif(shutil.which("git") is None, reason="the student copy's history needs git")
def test_the_student_copy_holds_no_answer(kit):
    student, grader = kit

    def git(*args):
        return subprocess.run(["git", *args], cwd=student, capture_output=True, text=True, check=True).stdout

    assert len(git("log", "--all", "--oneline").splitlines()) == 1 and git("status", "--porcelain") == ""
    history = git("log", "-p", "--all")
    for f in MA.TEACHER_ONLY:
        assert not (student / f).exists() and (grader / "reference" / f).exists()
    assert not (student / "results.json").exists() and (grader / "reference/tests/test_advantages.py").is_file()
    assert subprocess.run(["git", "check-ignore", "-q", "results.json"], cwd=student).returncode == 0, \
        "results.json (written by python scripts/grade.py) is not ignored in a student copy"
    for n, ex in EXERCISES.items():
        assert re.search(rf"^## {n}\. ", (student / "EXERCISES.md").read_text(), re.M)
        assert f"## {n}. {ex.title}" in (student / "ANSWERS.md").read_text()
        for path, name in ex.functions:
            leaks = reference_lines(path, name)
            assert leaks, f"{path}::{name}: no line of its body to look for"
            text = (student / path).read_text()
            for line in leaks:
                assert line not in text and line not in history, f"{path}::{name} leaks {line!r}"
            assert f'raise NotImplementedError("exercise {n}: {ex.title}")' in text
            assert f"# TODO(exercise {n}): {ex.title}." in text


def test_the_student_copy_links_only_what_it_holds(kit):
    """docs/teaching.md is left out, so is the README's teacher-only link to it; every relative link resolves."""
    student = kit[0]
    for md in student.rglob("*.md"):
        text = md.read_text()
        assert "teacher-only" not in text, md
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            path = target.split("#")[0]
            if path and not re.match(r"[a-z]+:", path):
                assert (md.parent / path).exists(), f"{md.relative_to(student)} links {target}, which the copy lacks"
    assert "teaching.md" not in (student / "README.md").read_text()
    assert "teaching.md" in (ROOT / "README.md").read_text()  # the checkout's README keeps it


def test_the_student_order_names_only_its_exercises():
    """The **Order.** and **Notation.** paragraphs of EXERCISES.md: the assignment's exercises, nothing else."""
    for numbers in ([1, 4, 7], [1, 2], [2, 5, 9, 11], [6]):
        head = MA.student_text(EXERCISES, numbers, ROOT)[0].split("\n---\n")[0] + "\n\n"
        order = re.search(r"^\*\*Order\.\*\*.*?\n\n", head, re.M | re.S).group(0)
        notation = re.search(r"^\*\*Notation\.\*\*.*?\n\n", head, re.M | re.S).group(0)
        named = {int(n) for n in re.findall(r"\b\d+\b", order + notation)}
        assert named <= set(numbers), (numbers, order + notation)
    order = MA.student_order(EXERCISES, [1, 2], ROOT)
    assert "2 builds on 1" in order and "A good order: 1 → 2." in order
    assert "A good order: 7 → 1 → 4." in MA.student_order(EXERCISES, [1, 4, 7], ROOT)


def mini_checkout(root: Path) -> Path:
    """A git checkout holding what a copy of exercise 1 needs (the table, methods.py, .gitignore), committed,
    then what `pip install .` and a TA leave lying around: build/lib/nanoatr/methods.py and notes.txt."""
    for f in (MA.DOC, "nanoatr/methods.py", ".gitignore"):
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, root / f)
    MA.git_commit(root, "mini")
    (root / "build/lib/nanoatr").mkdir(parents=True)
    shutil.copy2(ROOT / "nanoatr/methods.py", root / "build/lib/nanoatr/methods.py")
    (root / "notes.txt").write_text("grading notes\n")
    return root


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_copy_holds_tracked_files_only_and_says_what_it_left_out(tmp_path, monkeypatch, capsys):
    """A non-editable `pip install .` leaves every answer in build/lib/: ignored, and never copied (nor is an
    untracked file git does not ignore, which is named). The printed command grades from inside the copy."""
    root = mini_checkout(tmp_path / "nanoatr")
    assert MA.untracked_files(root) == ["notes.txt"]
    monkeypatch.setattr(MA, "ROOT", root)
    monkeypatch.chdir(tmp_path)
    MA.main(["--exercises", "1", "--out", "hw1", "--grader", "staff/hw1-grader"])  # a bundle in a new folder
    out = capsys.readouterr().out
    for copy in (tmp_path / "hw1", tmp_path / "staff/hw1-grader/reference"):
        assert (copy / "nanoatr/methods.py").is_file()
        assert not (copy / "build").exists() and not (copy / "notes.txt").exists(), copy
    assert "left out 1 untracked file" in out and "notes.txt" in out
    cd, grade = re.search(r"to grade a copy: cd (\S+) && python (\S+)\)", out).groups()
    assert (tmp_path / cd / grade).resolve() == (tmp_path / "staff/hw1-grader/grade.py").resolve()


@pytest.mark.parametrize("where", ["out", "grader"])
def test_a_copy_inside_this_checkout_is_refused(where, tmp_path, capsys):
    """Inside the checkout, `git add -A` would commit the answers and pytest would collect the copies' tests."""
    inside = ROOT / "runs" / f"hw-refused-{os.getpid()}"
    args = ["--exercises", "1", "--out", str(inside) if where == "out" else str(tmp_path / "hw1")]
    if where == "grader":
        args += ["--grader", str(inside)]
    with pytest.raises(SystemExit) as stop:
        MA.main(args)
    assert stop.value.code == 2 and not inside.exists() and not (tmp_path / "hw1").exists()
    assert f"--{where} {inside} is inside this checkout" in capsys.readouterr().err


def test_pytest_collects_the_tests_folder_only():
    """A run folder, student copy or grader bundle lying in the checkout is never collected."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]


def test_the_rubric_adds_up():
    """docs/teaching.md: each exercise's `Rubric (N):` line, whose points in parentheses add up to N: 5 for
    the written part of a coded exercise, 10 for a written exercise; and the Gradescope paragraph adds the
    grader's points to them."""
    text = (ROOT / "docs/teaching.md").read_text()
    sections = dict(re.findall(r"^### (\d+)\. .*?\n(.*?)(?=^##|\Z)", text.split("## Per exercise")[1], re.M | re.S))
    assert sorted(map(int, sections)) == sorted(EXERCISES)
    for n, section in sections.items():
        rubrics = re.findall(r"^- Rubric \((\d+)\): (.*?)(?=^- |^\S|\Z)", section, re.M | re.S)
        assert len(rubrics) == 1, f"exercise {n}: {len(rubrics)} 'Rubric (N):' lines"
        total, body = int(rubrics[0][0]), rubrics[0][1]
        assert total == (5 if EXERCISES[int(n)].functions else 10), f"exercise {n}: Rubric ({total})"
        assert sum(map(int, re.findall(r"\((\d+)\)", body))) == total, f"exercise {n}: the points do not add up"
    gradescope = " ".join(text.split("**Gradescope.**")[1].split("**Checked in CI.**")[0].split())
    assert f"out of {GRADE.POINTS + 5:.0f} ({GRADE.POINTS:.0f} autograded + 5 by hand)" in gradescope


def test_grader_red_then_green_for_every_exercise(kit, tmp_path):
    """Blank: each exercise's tests all fail, each on its own NotImplementedError (the others hold the
    reference while it is graded), even with the student's tests and pytest hooks rigged. Reference
    pasted back: every test passes, exercise 12's too with another CPU's rounding planted in its answer
    (plant_rounding)."""
    student = tmp_path / "hw"
    shutil.copytree(kit[0], student, symlinks=True)
    (student / "tests/test_advantages.py").write_text("def test_nothing():\n    pass\n")  # a rigged test file
    (student / "conftest.py").write_text("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
                                         "def pytest_runtest_makereport(item, call):\n"
                                         "    (yield).get_result().outcome = 'passed'\n")  # a rigged hook
    red = run_grader(kit[1], student, tmp_path / "red.json")
    assert red["score"] == 0 and red["extra_data"]["complete"] == 0
    assert red["extra_data"]["changed_outside"] == ["tests/test_advantages.py (changed)", "conftest.py (added)"]
    for r in red["extra_data"]["exercises"]:
        n = r["number"]
        assert 0 < r["seconds"] < 330, r  # its own run's time: stopped at --timeout 300
        if r["written"]:
            assert r["passed"] == r["total"] > 0 and r["max_score"] == 0, r
            continue
        assert r["passed"] == 0 < r["total"] and not r["errors"], r
        assert all(f"NotImplementedError: exercise {n}: " in why for _, why in r["failed"]), r["failed"]

    assert MA.paste_reference(student) == sorted({p for ex in EXERCISES.values() for p, _ in ex.functions})
    for path in {p for ex in EXERCISES.values() for p, _ in ex.functions}:
        assert (student / path).read_bytes() == (ROOT / path).read_bytes(), path
    plant_rounding(student / "grpo.py")
    green = run_grader(kit[1], student, tmp_path / "green.json")
    graded = [ex for ex in EXERCISES.values() if ex.functions]
    assert green["score"] == 10 * len(graded) and green["extra_data"]["complete"] == len(graded)
    assert all(r["passed"] == r["total"] > 0 for r in green["extra_data"]["exercises"]), green["output"]
    assert [t["status"] for t in green["tests"]] == ["passed"] * len(EXERCISES)  # Gradescope's format


def test_every_test_module_collects_while_every_exercise_is_blank(kit):
    """No test module runs an exercise's function at import: in the copy where every exercise is blank, the
    whole tests/ folder collects. (test_loss.py called kl3_ratio_range(0.07) in a parametrize list: while
    exercise 4 was blank, the checks of 1, 2, 5, 6, 8 and 11, and test_structure.py, did not collect.)"""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests"], cwd=kit[0], capture_output=True, text=True, timeout=900)
    errors = [line for line in proc.stdout.splitlines() if line.startswith(("ERROR", "E   "))]
    assert proc.returncode == 0, "\n".join(errors[:20]) or proc.stdout[-3000:] + proc.stderr[-3000:]


def scores(results: dict) -> dict:
    """{exercise: (score, tests passed, tests)} of a grader's results.json."""
    return {r["number"]: (r["score"], r["passed"], r["total"]) for r in results["extra_data"]["exercises"]}


def self_check(student: Path, out: Path, *args) -> tuple[dict, str]:
    """`python scripts/grade.py ARGS` run in the student's copy: (its results.json, what it printed)."""
    proc = subprocess.run([sys.executable, "scripts/grade.py", *args, "--json", str(out)], cwd=student,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return strict_file(out), proc.stdout


def test_the_self_check_agrees_with_the_grader_on_a_partly_solved_copy(tmp_path):
    """The guide's example assignment (1, 4, 7) with only 7 solved: the student's self-check (`python
    scripts/grade.py` in the copy: its own tests, one pytest run per exercise) and the official grader give
    each exercise the same score, 7 full, 1 and 4 zero. (The self-check ran all three in one pytest run,
    which test_loss.py, not importable while 4 was blank, stopped: 0/30, 7's 23 tests "not run".)"""
    MA.main(["--exercises", "1,4,7", "--out", str(tmp_path / "hw1")])
    student, grader = tmp_path / "hw1", tmp_path / "hw1-grader"
    assert MA.paste_reference(student, [7]) == ["nanoatr/loss.py"]
    official = run_grader(grader, student, tmp_path / "official.json")
    mine, printed = self_check(student, tmp_path / "self.json")
    assert not mine["extra_data"]["isolated"] and "a self-check" in printed
    assert scores(mine) == scores(official), printed
    assert {n: score for n, (score, _, _) in scores(official).items()} == {1: 0, 4: 0, 7: 10}
    for results in (official, mine):
        for r in results["extra_data"]["exercises"]:
            assert r["total"] > 0 and not r["errors"], r
            assert all(f"NotImplementedError: exercise {r['number']}: " in why for _, why in r["failed"]), r

    # each exercise on its own: a test module of exercise 1 that does not import costs exercise 1 only
    tests = student / "tests/test_loss.py"
    tests.write_text('raise RuntimeError("a test module that does not import")\n' + tests.read_text())
    broken, printed = self_check(student, tmp_path / "broken.json", "--exercises", "1,7")
    one, seven = broken["extra_data"]["exercises"]
    assert seven["score"] == 10 and seven["passed"] == seven["total"] > 0, printed
    assert one["score"] == 0 and "a test module that does not import" in one["errors"][0], printed


PLANTED = """    loss.backward()
    g = torch.Generator().manual_seed(0)
    for p in model.parameters():  # planted: another CPU's summation order, 64 units of rounding
        eps = torch.finfo(p.grad.dtype).eps
        p.grad += p.grad * 64 * eps * torch.randn(p.grad.shape, generator=g, dtype=p.grad.dtype).sign()
"""


def plant_rounding(grpo: Path) -> None:
    """A correct answer gets full marks whatever the CPU's rounding. Exercise 12 (grpo.py::update) is graded
    by tests/test_grpo.py, which compares it with train.py's step. The reference answer with a rounding
    difference planted in every gradient (64 units of the dtype's rounding, random signs: about what
    train.py's and grpo.py's own summation orders differ by, 54 measured in float64, and what another CPU's
    kernels give) must still score 10 of 10 in the green grading above. While the comparison ran in
    float32, this plant scored 6.67 (a weight tolerance of 1e-5 after SGD steps at lr 30), as the unplanted
    reference did on an Intel CPU: 106.67/110."""
    source = grpo.read_text()
    assert source.count("    loss.backward()\n") == 1
    grpo.write_text(source.replace("    loss.backward()\n", PLANTED))


@pytest.mark.skipif(find_spec("setuptools") is None, reason="pip install -e . without network needs setuptools")
def test_pip_install_editable_then_import_from_anywhere(tmp_path):
    """What a notebook in another folder does: after `pip install -e .`, `import nanoatr.methods` works and
    the package's requirements are requirements.txt's. Into a throwaway venv that sees the packages of the
    environment running the tests (a .pth file naming its site-packages): `--system-site-packages` would
    give the base interpreter's instead, which from inside a venv may lack what the build needs."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "running-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--disable-pip-version-check", "-e", str(ROOT)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "notebooks"
    elsewhere.mkdir()
    out = subprocess.run([str(python), "-c", "import json, importlib.metadata as md, nanoatr.methods\n"
                          "print(json.dumps([nanoatr.methods.__file__, md.requires('nanoatr')]))"],
                         cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    where, requires = json.loads(out.stdout)
    assert Path(where).resolve() == (ROOT / "nanoatr/methods.py").resolve()
    from packaging.requirements import Requirement

    def spec(lines):
        return sorted((r.name, str(r.specifier)) for r in map(Requirement, lines))
    pinned = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert spec(requires) == spec([p for p in pinned if p])


def test_pip_install_non_editable_ships_every_module(tmp_path):
    """`pip install .` (not -e) installs what setuptools finds: every module of nanoatr, subpackages
    included. With `packages = ["nanoatr"]` the wheel held nanoatr/*.py only, and `from nanoatr.model import
    Qwen3` failed after a plain install. Built from a copy of what the build reads, so no build/ is left
    in this checkout."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "nanoatr", src / "nanoatr", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(ROOT / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(src)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").glob("nanoatr-*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("nanoatr/")}
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "nanoatr").rglob("*.py")}
    assert modules - shipped == set(), f"{wheel.name} lacks {sorted(modules - shipped)}"
