"""docs/exercises.md: its table is well formed (the classroom kit reads it), every pytest command it gives
selects tests, the table's checks are the sections' commands, and its code runs."""
import ast
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import function_spans as FS  # noqa: E402  (scripts/function_spans.py)
import make_assignment as MA  # noqa: E402  (scripts/make_assignment.py)

DOC = (ROOT / "docs/exercises.md").read_text()
COMMANDS = re.findall(r"^python -m pytest .*$", DOC, flags=re.M)
EXERCISES = MA.load_exercises(ROOT)


def test_the_doc_has_an_exercise_per_section():
    assert len(re.findall(r"^## \d+\. ", DOC, flags=re.M)) == len(EXERCISES) >= 11 and len(COMMANDS) >= 11
    assert sorted(EXERCISES) == list(range(1, len(EXERCISES) + 1))


def test_the_docs_count_the_exercises_right():
    """The exercises' number in words, where the docs give it ("eleven" stood for twelve)."""
    words = {11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen"}
    count = words[len(EXERCISES)]
    assert f"\n\n{count.capitalize()} exercises for a course" in DOC
    assert f"[docs/exercises.md](exercises.md): {count} of them" in (ROOT / "docs/teaching.md").read_text()


class Selected:
    """A pytest plugin that counts the tests a collection selects."""
    items = 0

    def pytest_collection_finish(self, session):
        self.items = len(session.items)


@pytest.mark.parametrize("command", COMMANDS)
def test_pytest_command_selects_tests(command, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the commands are written for the repo root
    selected = Selected()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *shlex.split(command)[3:]],
                       plugins=[selected])
    assert code == 0 and selected.items > 0, f"{command}: {capsys.readouterr().out[-2000:]}"


def test_python_snippets_run():
    for code in re.findall(r"```python\n(.*?)```", DOC, flags=re.S):
        exec(compile(code, "docs/exercises.md", "exec"), {})


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_table_row_matches_its_section(number):
    """The table's checks are exactly the section's commands; its functions exist; its contract is stated."""
    ex = EXERCISES[number]
    section_commands = re.findall(r"^python -m pytest .*$", ex.section, flags=re.M)
    assert [shlex.split(c) for c in section_commands] == [shlex.split(c) for c in ex.commands()]
    assert ex.checks and all((ROOT / file).is_file() for file, _ in ex.checks)
    assert ex.title and ex.breaks
    if not ex.functions:
        assert "**Contract.**" in ex.section  # a written exercise says so
        return
    assert ex.contract and any("Checked" in bullet for bullet in ex.contract)
    for path, name in ex.functions:
        source = (ROOT / path).read_text()
        blank = MA.blank_function(source, ex, name, path)
        node = FS.function_node(ast.parse(blank), name)
        raised = node.body[-1]
        assert isinstance(raised, ast.Raise) and f"exercise {number}: " in ast.unparse(raised), name
        assert ast.get_docstring(node) == ast.get_docstring(FS.function_node(ast.parse(source), name))
        signature = FS.function_node(ast.parse(source), name).args
        assert ast.unparse(node.args) == ast.unparse(signature)  # the signature stays
        assert FS.paste_function(blank, source, name, path) == source  # blank, then paste back: the same file


def test_builds_on_lists_the_calls_and_the_course_order_follows_it():
    """`builds on` names at least every exercise whose function an exercise's function calls by name (the
    rest, runs that train, by hand), and the course order of the **Order.** paragraph has every exercise
    once, after what it builds on (a student copy's order is this one, filtered)."""
    owner = {name: n for n, ex in EXERCISES.items() for _, name in ex.functions}
    for n, ex in EXERCISES.items():
        for path, name in ex.functions:
            node = FS.function_node(ast.parse((ROOT / path).read_text()), name)
            called = {c.func.id if isinstance(c.func, ast.Name) else c.func.attr for c in ast.walk(node)
                      if isinstance(c, ast.Call) and isinstance(c.func, (ast.Name, ast.Attribute))}
            needs = {owner[f] for f in called if f in owner and owner[f] != n}
            assert needs <= set(ex.builds_on), f"exercise {n}: {name} calls exercises {sorted(needs)}"
    # "(every method: ...)" names the exercises that write a --clip method, all of them
    method_writers = {n for n, ex in EXERCISES.items() for path, _ in ex.functions if path == "nanoatr/methods.py"}
    for n, ex in EXERCISES.items():
        assert set(ex.every_method) in (set(), method_writers), f"exercise {n}: every method {ex.every_method}"
    order = [n for session in MA.course_order(ROOT) for n in session]
    assert sorted(order) == sorted(EXERCISES)
    for n, ex in EXERCISES.items():
        assert all(order.index(m) < order.index(n) for m in ex.builds_on), f"exercise {n} comes before {ex.builds_on}"
