"""The README's two commands on a fresh machine: `make train` and `make test` each make the virtual
environment where there is none, install their requirements, then train the embedded default or run the
suite; and CI (.ci/run) runs exactly the README's test command. Read with `make -n` (what make would run),
in a copy with no .venv, so nothing is installed here."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def planned(target: str, folder: Path, *args: str) -> list[str]:
    """The commands `make TARGET` would run in `folder` (given the Makefile and the requirements first)."""
    for f in ("Makefile", "requirements.txt", "requirements-dev.txt"):
        if not (folder / f).exists():
            shutil.copy2(ROOT / f, folder / f)
    out = subprocess.run(["make", "-n", target, *args], cwd=folder, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_make_train_sets_up_then_trains_the_embedded_default(tmp_path):
    venv, install, stamp, train = planned("train", tmp_path)
    assert venv == "python3 -m venv .venv" and stamp == "touch .venv/.train"
    assert install == ".venv/bin/python -m pip install -q -r requirements.txt"
    assert train == ".venv/bin/python train.py --clip kl3 --delta 0.07"
    assert planned("train", tmp_path, "ARGS=--steps 5")[-1] == ".venv/bin/python train.py --steps 5"


def test_make_test_sets_up_then_runs_the_suite_and_test_core_the_cores_tests_alone(tmp_path):
    venv, install, stamp, test = planned("test", tmp_path)
    assert venv == "python3 -m venv .venv" and stamp == "touch .venv/.test .venv/.train"
    assert install == ".venv/bin/python -m pip install -q -r requirements-dev.txt"
    assert test == ".venv/bin/python -m pytest -q -n auto --dist loadfile"
    assert planned("test-core", tmp_path)[-1] == ".venv/bin/python -m pytest -q -m core"


def test_an_environment_is_made_once_and_installed_again_when_its_requirements_change(tmp_path):
    planned("test", tmp_path)
    (tmp_path / ".venv/bin").mkdir(parents=True)
    for f in (".venv/bin/python", ".venv/.train", ".venv/.test"):
        (tmp_path / f).touch()
        os.utime(tmp_path / f, (2e9, 2e9))  # made after the requirements files
    assert planned("test", tmp_path) == [".venv/bin/python -m pytest -q -n auto --dist loadfile"]  # set up already: nothing to install
    os.utime(tmp_path / "requirements-dev.txt", (3e9, 3e9))  # then edited
    assert planned("test", tmp_path)[0] == ".venv/bin/python -m pip install -q -r requirements-dev.txt"


def test_ci_runs_the_readmes_test_command_in_a_fresh_environment():
    readme = (ROOT / "README.md").read_text()
    two = readme.split("## Two commands")[1].split("\n## ")[0]
    commands = re.findall(r"^(make \w+)", "\n".join(re.findall(r"```bash\n(.*?)```", two, re.S)), re.M)
    assert commands == ["make train", "make test"], commands
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    recipe = re.search(r"^test: (\S+)\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)
    setup, command = (part.replace("$(VENV)", ".venv") for part in recipe.groups())
    assert ci[-3:] == ["rm -rf .venv", f"make {setup}", command]
