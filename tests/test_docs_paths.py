"""Every file or folder of the repository that the README, docs/, the studies' notes and the code's own
docstrings and comments name exists: a file moved or renamed breaks no reader's path silently (a moved
scripts/stats.py was still named under its old home in docs/results.md, and a nanoatr/runs.py split in two
long ago in machinery/cli.py). A path under /, ./ or ~/ is someone's machine, not the repository."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results/README.md",
        *sorted(ROOT.glob("results/*/MACHINES.md"))]  # not results/*/table.md: a report as it was written
CODE = sorted([*ROOT.glob("*.py"), *ROOT.glob("nanoatr/**/*.py"),
               *(p for folder in ("scripts", "bench", "data") for p in ROOT.glob(f"{folder}/*.py"))])
# a repository path: a top-level folder, then names; not inside another path, not a glob or a placeholder
PATH = re.compile(r"(?<![\w./~$<>-])((?:nanoatr|scripts|bench|data|tests|docs|results|\.ci)(?:/[\w.-]+)+/?)"
                  r"(?![\w<{$-]|\*(?!\*))")  # a glob's '*' ends no path; markdown's bold '**' does
NOT_IN_THE_REPOSITORY = {
    "data/paper/": "written by data/get_paper_data.py, from the hub",
    "data/x.jsonl": "an example name (docs/real-scale.md)",
    "nanoatr/stats.py": "history: where scripts/stats.py was before it moved (docs/results.md says so)",
    "data/dapo-math-17k.parquet": "a file of the hub's dataset repository (data/get_paper_data.py)",
    "data/x.parquet": "an example name (data/get_paper_data.py)",
}


def named_paths(text: str) -> list[str]:
    return [m.group(1).rstrip(".") for m in PATH.finditer(text)]


def test_the_pattern_finds_paths_and_skips_other_machines_and_globs():
    line = ("read **nanoatr/loss.py**, `scripts/stats.py`'s t_quantile, [x](data/countdown/), "
            "/tmp/chain/data/aime24.jsonl, ~/nanoatr/scripts/grade.py, results/default-seeds/kl3-s*, "
            "results/<name>/, $OUT/data/x.jsonl, ./data/y.jsonl, and train.py.")
    # the glob gives its folder, results/default-seeds, which must exist
    assert named_paths(line) == ["nanoatr/loss.py", "scripts/stats.py", "data/countdown/", "results/default-seeds"]


@pytest.mark.parametrize("doc", DOCS + CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_document_or_the_code_names_exists(doc):
    missing = [f"{doc.relative_to(ROOT)}:{i}: {path}"
               for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
               for path in named_paths(line)
               if not (ROOT / path).exists() and not any(path.startswith(p) for p in NOT_IN_THE_REPOSITORY)]
    assert not missing, "named but not in the repository (moved? renamed?):\n" + "\n".join(missing)
