"""docs/exercises.md: every pytest command it gives selects tests, and its code runs."""
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs/exercises.md").read_text()
COMMANDS = re.findall(r"^python -m pytest .*$", DOC, flags=re.M)


def test_the_doc_has_an_exercise_per_section():
    assert len(re.findall(r"^## \d+\. ", DOC, flags=re.M)) >= 6 and len(COMMANDS) >= 6


class Selected:
    """A pytest plugin that counts the tests a collection selects."""
    items = 0

    def pytest_collection_finish(self, session):
        self.items = len(session.items)


@pytest.mark.parametrize("command", COMMANDS)
def test_pytest_command_selects_tests(command, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the commands are written for the repo root
    selected = Selected()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *shlex.split(command)[3:]], plugins=[selected])
    assert code == 0 and selected.items > 0, f"{command}: {capsys.readouterr().out[-2000:]}"


def test_python_snippets_run():
    for code in re.findall(r"```python\n(.*?)```", DOC, flags=re.S):
        exec(compile(code, "docs/exercises.md", "exec"), {})
