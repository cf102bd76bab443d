"""Make a student copy of nanoatr for a course: the chosen exercises' functions blanked, their text
beside them, a fresh git history; and a grader bundle for the teaching staff.

    python scripts/make_assignment.py --exercises 1,4,7 --out ../hw1   # ../hw1/ for students,
                                                                       # ../hw1-grader/ for TAs
    python scripts/make_assignment.py --list                            # the exercises and
                                                                        # what each one blanks
    python scripts/make_assignment.py --paste-reference ../hw1          # put this checkout's bodies
                                                                        # back into it

The exercises are the table at the top of docs/exercises.md (number, title, the functions to write as
file::name, the pytest commands that check them); scripts/grade.py and tests/test_classroom.py read
the same table. In the student copy each function keeps its signature and docstring; its body becomes
a TODO block with the exercise's contract (the "**Contract**" list of its section) and
`raise NotImplementedError("exercise N: <title>")`. EXERCISES.md holds the chosen sections, ANSWERS.md
their questions. Every other file git tracks is copied unchanged (so everything that does not call a
blanked function runs), except the teachers' files (TEACHER_ONLY) and the teacher-only blocks of the
markdown files (between <!-- teacher-only --> and <!-- /teacher-only -->). Untracked files are left out
(a `pip install .` leaves every answer in build/lib/), and named. The copy is a new git repository with
one commit: `git log -p` shows no answer. Both folders must be outside this checkout: inside it, a
`git add -A` would commit the answers.

The grader bundle (default: <out>-grader/, never given to students) holds grade.py, this script,
function_spans.py, assignment.json and reference/, a copy of this checkout's tracked files: the tests the
grader runs and the reference bodies it puts back into the other exercises while grading one
(docs/teaching.md).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from function_spans import body_span, paste_function  # noqa: E402  (scripts/function_spans.py)

ROOT = Path(__file__).resolve().parent.parent
DOC = "docs/exercises.md"
TEACHER_ONLY = ("docs/teaching.md", "tests/test_classroom.py")   # never in a student copy
SKIP_DIRS = {".git", "runs", "__pycache__", ".pytest_cache", ".hypothesis", ".benchmarks", ".venv", ".whl",
             "build", "dist"}
# in markdown
TEACHER_BLOCK = re.compile(r"^<!-- teacher-only.*?-->\n.*?^<!-- /teacher-only -->\n", re.M | re.S)
STUDENT_FILES = ("EXERCISES.md", "ANSWERS.md", "assignment.json")  # what make_student_copy adds


class Exercise(NamedTuple):
    number: int
    title: str                            # the one line of its NotImplementedError
    functions: tuple                      # ((path, function name), ...); empty for a written exercise
    checks: tuple                         # ((test file, -k expression or None), ...)
    builds_on: tuple                      # the exercises whose functions its own call or its checks run
    every_method: tuple                   # its checks run every --clip method: the exercises that write one
    breaks: str                           # what else stops working while it is blank
    contract: list                        # the bullets of its "**Contract**" list (markdown, one string each)
    section: str                          # its section of docs/exercises.md

    def commands(self) -> list[str]:
        return [f"python -m pytest {file}" + (f" -k {shlex.quote(k)}" if k else "")
                for file, k in self.checks]


# ----------------------------------------------------------------------------
# The table of docs/exercises.md

def parse_check(command: str) -> tuple:
    """'tests/test_loss.py -k "kl2 and not compiled"' -> ('tests/test_loss.py', 'kl2 and not compiled')."""
    args = shlex.split(command)
    if len(args) == 1:
        return args[0], None
    if len(args) == 3 and args[1] == "-k":
        return args[0], args[2]
    raise ValueError(f"{DOC}: a check is 'FILE' or 'FILE -k EXPRESSION', not {command!r}")


def load_exercises(root: Path = ROOT) -> dict:
    """{number: Exercise} from the table and sections of docs/exercises.md under `root`."""
    text = (Path(root) / DOC).read_text()
    sections = {int(m.group(1)): m
                for m in re.finditer(r"^## (\d+)\. .*?(?=^## |^---|^### |\Z)", text, re.M | re.S)}
    exercises = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")] if line.startswith("| ") else []
        if len(cells) != 6 or not cells[0].isdigit():
            continue
        number = int(cells[0])
        functions = tuple(tuple(f.split("::")) for f in re.findall(r"`([^`]+::[^`]+)`", cells[2]))
        checks = tuple(parse_check(c) for c in re.findall(r"`([^`]+)`", cells[3]))
        needs, _, every_method = cells[4].partition("(")  # "3, 8" or "— (every method: 1, 2, 3, 5, 11)"
        builds_on = tuple(int(n) for n in re.findall(r"\d+", needs))
        every_method = tuple(int(n) for n in re.findall(r"\d+", every_method))
        if number not in sections:
            raise ValueError(f"{DOC}: exercise {number} is in the table but has no '## {number}. ' section")
        section = sections[number].group(0).rstrip() + "\n"
        exercises[number] = Exercise(number, cells[1], functions, checks, builds_on, every_method, cells[5],
                                     contract_of(section), section)
    if not exercises:
        raise ValueError(f"{DOC}: no exercise table found")
    return exercises


def contract_of(section: str) -> list:
    """The bullets of the section's **Contract** list, each joined onto one line (nested ones
    keep 2 spaces)."""
    m = re.search(r"^\*\*Contract\*\*\n(.*?)(?:\n\n|\Z)", section, re.M | re.S)
    bullets = []
    for line in (m.group(1).splitlines() if m else []):
        if re.match(r"^ {0,2}- ", line):
            bullets.append(line.rstrip())
        elif bullets:
            bullets[-1] += " " + line.strip()
    return bullets


def choose(exercises: dict, spec: str) -> list:
    """'1,4,7' or 'all' -> [1, 4, 7], checked against the table."""
    if spec == "all":
        return sorted(exercises)
    try:
        numbers = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--exercises: a list of numbers like 1,4,7 or 'all' (got {spec!r})") from None
    unknown = [n for n in numbers if n not in exercises]
    if unknown or not numbers:
        raise ValueError(f"--exercises: no exercise {unknown[0] if unknown else spec!r} "
                         f"(there are {', '.join(map(str, sorted(exercises)))})")
    return numbers


def course_order(root: Path = ROOT) -> list:
    """The course order of docs/exercises.md's **Order.** paragraph, as sessions: [[7, 8], [1, 2], ...]."""
    m = re.search(r"^\*\*Order\.\*\*.*?course order[^:]*: ([\d, →]+)\.", (Path(root) / DOC).read_text(),
                  re.M | re.S)
    if not m:
        raise ValueError(f"{DOC}: no course order ('A course order ...: 7, 8 → 1, 2 → ...') "
                         "in its **Order.** paragraph")
    return [[int(n) for n in session.split(",")] for session in m.group(1).split("→")]


# ----------------------------------------------------------------------------
# Exercises' bodies blanked (the spans: scripts/function_spans.py)

def todo_block(ex: Exercise, indent: int) -> str:
    """The comment block and the raise that replace a body."""
    pad = " " * indent
    out = [f"{pad}# TODO(exercise {ex.number}): {ex.title}. EXERCISES.md, section {ex.number}.",
           f"{pad}# The contract (the tests check this, and only this):"]
    for bullet in ex.contract:
        nested = bullet.startswith("  ")
        text = bullet.strip()[2:]
        lead = "#     - " if nested else "#   - "
        out += textwrap.wrap(text, width=max(40, 104 - indent), initial_indent=pad + lead,
                             subsequent_indent=pad + "#" + " " * (len(lead) - 1), break_on_hyphens=False)
    for command in ex.commands():
        out.append(f"{pad}# Check: {command}")
    out.append(f"{pad}raise NotImplementedError("
               f"{json.dumps(f'exercise {ex.number}: {ex.title}', ensure_ascii=False)})")
    return "\n".join(out) + "\n"


def blank_function(source: str, ex: Exercise, name: str, path: str = "") -> str:
    """`source` with function `name`'s body (below its docstring) replaced by exercise `ex`'s TODO block."""
    first, end, indent = body_span(source, name, path)
    lines = source.splitlines(keepends=True)
    return "".join(lines[:first]) + todo_block(ex, indent) + "".join(lines[end:])


# ----------------------------------------------------------------------------
# Copies

def git(repo: Path, *args, env: dict | None = None, check: bool = False) -> str | None:
    """`git ARGS` run in repo: its output; None where it fails (not a checkout, no git) unless `check`."""
    try:
        return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        if check:
            raise
        return None


def _git_files(root: Path, *args) -> list | None:
    """`git ls-files -z ARGS` in root (existing files only), or None where root is not a git checkout."""
    out = git(root, "ls-files", "-z", *args)
    return None if out is None else sorted({f for f in out.split("\0") if f and (Path(root) / f).is_file()})


def source_files(root: Path = ROOT, untracked: bool = False) -> list:
    """The repository's files (relative paths): what git tracks (and with `untracked`, the untracked files it
    does not ignore too: what a student added). A student copy is made of tracked files only, so that a build
    folder (build/lib/ holds every answer after `pip install .`) or a TA's scratch file never reaches it."""
    root = Path(root)
    files = _git_files(root, "--cached", *(["--others", "--exclude-standard"] if untracked else []))
    if files:
        return files
    files = []  # not a git checkout (a grader bundle's reference/): every file outside SKIP_DIRS
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        files += [str(Path(dirpath, f).relative_to(root)) for f in filenames if not f.endswith(".pyc")]
    return sorted(files)


def untracked_files(root: Path = ROOT) -> list:
    """The untracked files git does not ignore: what a student copy and a grader bundle leave out."""
    return _git_files(Path(root), "--others", "--exclude-standard") or []


def handed_out(path: str, data: bytes) -> bytes:
    """A file as a student copy holds it: a markdown file loses its teacher-only blocks (a link to
    docs/teaching.md, which the copy leaves out); every other file is unchanged."""
    if not path.endswith(".md"):
        return data
    return TEACHER_BLOCK.sub("", data.decode()).encode()


def copy_files(root: Path, out: Path, files: list) -> None:
    for f in files:
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / f, out / f)


def git_commit(repo: Path, message: str) -> str:
    """A fresh repository at `repo` with one commit of everything in it; returns the commit id."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "nanoatr course", "GIT_AUTHOR_EMAIL": "course@nanoatr.invalid",
           "GIT_COMMITTER_NAME": "nanoatr course", "GIT_COMMITTER_EMAIL": "course@nanoatr.invalid"}
    for args in (["init", "-q"], ["checkout", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q",
                  "--no-verify", "-m", message]):
        git(repo, *args, env=env, check=True)
    return git(repo, "rev-parse", "HEAD", env=env, check=True).strip()


def student_order(exercises: dict, numbers: list, root: Path = ROOT) -> str:
    """The **Order.** paragraph of a student copy: the course's order and dependencies among `numbers` only
    (the exercises a copy does not hold have their reference bodies, so nothing waits on them)."""
    def names(ns):
        return ", ".join(map(str, ns[:-1])) + " and " + str(ns[-1]) if len(ns) > 1 else str(ns[0])

    text = ["**Order.** Blank functions raise only when called, so this copy runs everything that does not "
            "call them (the table's last column)."]
    needs = {n: [m for m in exercises[n].builds_on if m in numbers] for n in numbers}
    for n in [n for n in numbers if needs[n]]:
        text.append(f"{n} builds on {names(needs[n])}: until {'it is' if len(needs[n]) == 1 else 'they are'} "
                    f"done, {n}'s checks fail on {'its' if len(needs[n]) == 1 else 'their'} "
                    "NotImplementedError.")
    methods = {n: [m for m in exercises[n].every_method if m in numbers] for n in numbers}
    for n in [n for n in numbers if methods[n]]:
        one = len(methods[n]) == 1
        text.append(f"{n}'s check runs every --clip method: its cases for the methods of {names(methods[n])} "
                    f"fail on {'its' if one else 'their'} NotImplementedError until "
                    f"{'it is' if one else 'they are'} done.")
    if any(needs.values()) or any(methods.values()):
        text.append("(Not when graded: the grader puts the reference into the others while it grades one.)")
    order = [n for session in course_order(root) for n in session if n in numbers]
    order += [n for n in numbers if n not in order]
    if len(order) > 1:
        text.append(f"A good order: {' → '.join(map(str, order))}.")
    return textwrap.fill(" ".join(text), 100) + "\n"


def student_text(exercises: dict, numbers: list, root: Path = ROOT) -> tuple:
    """(EXERCISES.md, ANSWERS.md) of a student copy."""
    doc = (Path(root) / DOC).read_text()
    notation = re.search(r"^\*\*Notation\.\*\*.*?\n\n", doc, re.M | re.S)
    intro = ("Each exercise names functions whose bodies are blank: they raise `NotImplementedError` under "
             "a TODO block that states the contract, the behaviour the tests check. Write the bodies and "
             "run the checks from the repository root; the whole test suite (`python -m pytest`) fails "
             "wherever a blank function is called. `python scripts/grade.py` runs each exercise's checks on "
             "this copy as it is and prints a score per exercise. The official grade runs the same tests "
             "from the teachers' own copy, with the reference in the exercises it is not grading: the two "
             "agree once what an exercise builds on (the order below) is written. Answer the questions in "
             "ANSWERS.md.")
    head = [f"# Exercises {', '.join(map(str, numbers))}\n", textwrap.fill(intro, 100) + "\n",
            "| # | exercise | write | while blank, this also stops working |", "|---|---|---|---|"]
    head += [f"| {n} | {exercises[n].title} | "
             f"{' '.join(f'`{p}::{f}`' for p, f in exercises[n].functions) or 'in words'} | "
             f"{exercises[n].breaks} |"
             for n in numbers]
    head.append("")
    if notation:
        head.append(notation.group(0).rstrip() + "\n")
    head.append(student_order(exercises, numbers, root))
    body = "\n".join(head) + "\n---\n\n" + "\n".join(exercises[n].section for n in numbers)
    answers = ["# Answers\n",
               "Your answers to each exercise's questions, in words (and numbers where asked).\n"]
    for n in numbers:
        q = re.search(r"^\*\*(Questions|Explain)\.?\*\*.*?(?:\n\n|\Z)", exercises[n].section, re.M | re.S)
        quoted = q.group(0).strip().replace("\n", "\n> ") if q else "See EXERCISES.md."
        answers += [f"## {n}. {exercises[n].title}\n", "> " + quoted + "\n", "(your answer)\n"]
    return body, "\n".join(answers)


def make_student_copy(out: Path, numbers: list, root: Path = ROOT) -> str:
    """Write the student repository `out` (must not exist) for exercises `numbers`; returns its commit."""
    root, out = Path(root), Path(out)
    exercises = load_exercises(root)
    files = [f for f in source_files(root) if f not in TEACHER_ONLY]
    out.mkdir(parents=True)
    copy_files(root, out, files)
    for f in files:
        if f.endswith(".md"):
            (out / f).write_bytes(handed_out(f, (out / f).read_bytes()))
    for n in numbers:
        ex = exercises[n]
        for path, name in ex.functions:
            target = out / path
            target.write_text(blank_function(target.read_text(), ex, name, path))
    exercises_md, answers_md = student_text(exercises, numbers, root)
    (out / "EXERCISES.md").write_text(exercises_md)
    (out / "ANSWERS.md").write_text(answers_md)
    (out / "assignment.json").write_text(json.dumps({"exercises": numbers}, indent=1) + "\n")
    if shutil.which("git") is None:
        print(f"warning: no git: {out} is not a repository (run git init; git add -A; git commit there)",
              file=sys.stderr)
        return ""
    return git_commit(out, f"nanoatr: exercises {', '.join(map(str, numbers))}")


def make_grader_bundle(grader: Path, numbers: list, root: Path = ROOT) -> None:
    """The teaching staff's bundle: grade.py, this script and function_spans.py, assignment.json, reference/
    (a copy of `root`)."""
    root, grader = Path(root), Path(grader)
    grader.mkdir(parents=True)
    copy_files(root, grader / "reference", source_files(root))
    for script in ("grade.py", "make_assignment.py", "function_spans.py"):
        shutil.copy2(Path(__file__).resolve().parent / script, grader / script)
    meta = {"exercises": numbers, "reference_commit": (git(root, "rev-parse", "HEAD") or "").strip() or None}
    (grader / "assignment.json").write_text(json.dumps(meta, indent=1) + "\n")
    (grader / "README.md").write_text(
        f"# Grader for exercises {', '.join(map(str, numbers))} "
        "(teaching staff only: reference/ holds the answers)\n\n"
        "In a student's repository:\n\n"
        "    python <this folder>/grade.py     # prints the scores, writes results.json\n\n"
        "See reference/docs/teaching.md.\n")


def paste_reference(student: Path, numbers: list | None = None, root: Path = ROOT) -> list:
    """Put `root`'s definitions of the exercises' functions back into `student`; returns the files written."""
    exercises = load_exercises(root)
    if numbers is None:
        meta = Path(student) / "assignment.json"
        numbers = json.loads(meta.read_text())["exercises"] if meta.is_file() else sorted(exercises)
    written = []
    for n in numbers:
        for path, name in exercises[n].functions:
            target = Path(student) / path
            target.write_text(paste_function(target.read_text(), (Path(root) / path).read_text(), name, path))
            written.append(path)
    return sorted(set(written))


# ----------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python scripts/make_assignment.py",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exercises", default="", help="exercise numbers, e.g. 1,4,7, or 'all'")
    parser.add_argument("--out", type=Path, help="the student repository to write (must not exist; outside "
                                                 "this checkout, e.g. ../hw1)")
    parser.add_argument("--grader", type=Path, help="the grader bundle to write (default: <out>-grader)")
    parser.add_argument("--list", action="store_true", help="list the exercises and stop")
    parser.add_argument("--paste-reference", type=Path, metavar="DIR",
                        help="put this checkout's bodies of DIR's exercises "
                             "(assignment.json, or --exercises) back")
    args = parser.parse_args(argv)
    try:
        exercises = load_exercises(ROOT)
        if args.list:
            for ex in exercises.values():
                write = " ".join(f"{p}::{f}" for p, f in ex.functions) or "(in words)"
                print(f"{ex.number:2}  {ex.title}\n    write: {write}"
                      f"\n    check: {' ; '.join(ex.commands())}\n    while blank: {ex.breaks}")
            return
        if args.paste_reference:
            numbers = choose(exercises, args.exercises) if args.exercises else None
            for path in paste_reference(args.paste_reference, numbers):
                print(f"pasted the reference into {args.paste_reference / path}")
            return
        if not args.out or not args.exercises:
            parser.error("give --exercises and --out (or --list, or --paste-reference DIR)")
        numbers = choose(exercises, args.exercises)
        grader = args.grader or args.out.with_name(args.out.name + "-grader")
        for flag, path in (("--out", args.out), ("--grader", grader)):
            if path.exists():
                parser.error(f"{path} exists; choose another --out / --grader")
            if path.resolve().is_relative_to(ROOT.resolve()):
                parser.error(f"{flag} {path} is inside this checkout ({ROOT}): a `git add -A` would "
                             "commit the answers and pytest would collect its tests; write it outside, "
                             "e.g. --out ../hw1")
        if grader.resolve().is_relative_to(args.out.resolve()):
            parser.error("--grader must not be inside --out: students would get the answers")
    except (ValueError, LookupError) as e:
        parser.error(str(e))
    commit = make_student_copy(args.out, numbers, ROOT)
    make_grader_bundle(grader, numbers, ROOT)
    blanked = [f"{p}::{f}" for n in numbers for p, f in exercises[n].functions]
    print(f"student copy: {args.out} (git commit {commit[:10] or 'none'}; "
          f"exercises {', '.join(map(str, numbers))}; blank: {', '.join(blanked) or 'nothing'})")
    left_out = untracked_files(ROOT)
    if left_out:
        shown = ", ".join(left_out[:5]) + (f" and {len(left_out) - 5} more" if len(left_out) > 5 else "")
        print(f"left out {len(left_out)} untracked file{'s' if len(left_out) > 1 else ''} "
              f"(both copies hold what git tracks; git add what students need): {shown}")
    grade = os.path.relpath(grader.resolve() / "grade.py", args.out.resolve())
    print(f"grader bundle: {grader} (keep it from students; "
          f"to grade a copy: cd {shlex.quote(str(args.out))} && python {shlex.quote(grade)})")


if __name__ == "__main__":
    main()
