"""Signs that cannot rot: every file or folder of the repository that the README, docs/, the studies' notes
and the code name exists, and every dotted `module.name` they name is defined there. A file moved or a name
moved breaks no reader's path silently (a moved scripts/stats.py was still named under its old home in
docs/results.md; `runs.from_start` outlived nanoatr/runs.py by two redesigns, in a --help string)."""
import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results/README.md",
        *sorted(ROOT.glob("results/*/MACHINES.md"))]  # not results/*/table.md: a report as it was written
CODE = sorted([*ROOT.glob("*.py"), *ROOT.glob("nanoatr/**/*.py"),
               *(p for folder in ("scripts", "bench", "data") for p in ROOT.glob(f"{folder}/*.py"))])

# A repository path: a top-level folder, then names; not inside another path, not a glob or a placeholder. A
# path under /, ./ or ~/ is someone's machine, not the repository.
PATH = re.compile(r"(?<![\w./~$<>-])((?:nanoatr|scripts|bench|data|tests|docs|results|\.ci)(?:/[\w.-]+)+/?)"
                  r"(?![\w<{$-]|\*(?!\*))")  # a glob's '*' ends no path; markdown's bold '**' does
NOT_IN_THE_REPOSITORY = {
    "data/paper/": "written by data/get_paper_data.py, from the hub",
    "data/x.jsonl": "an example name (docs/real-scale.md)",
    "nanoatr/stats.py": "history: where scripts/stats.py was before it moved (docs/results.md says so)",
    "data/dapo-math-17k.parquet": "a file of the hub's dataset repository (data/get_paper_data.py)",
    "data/x.parquet": "an example name (data/get_paper_data.py)",
    **{path: "history: a tool removed on 2026-12-02 (issue 56), `git show a64b28a:PATH` has it" for path in (
        "bench/attention.py", "bench/sft_packing.py", "scripts/countdown_breakdown.py")},
    **{path: "history: a bench removed on 2026-12-02 (issue 56), `git show dc96213:PATH` has it" for path in (
        "bench/contention.py", "bench/checkpoint_hash.py", "bench/step.py", "bench/gpu_rollout.py")},
    "bench/verifier_compare.py": "history: removed on 2026-12-02 with its figure in docs/library.md (Shapes)",
}

# A dotted reference (`loss.check_finite`, `machinery.session.Session.steps`) whose first name is a module of
# the project (nanoatr's modules and packages, the machinery's, the commands, scripts/ and bench/) names
# what that module defines, read with ast: what it only imports is not its own (train.py imports
# check_finite from loss.py), but a package's __init__.py exports what it imports. A name on one of the
# module's classes is an object's (`session.steps`: a Session's). Read where a reader reads: a document's
# lines, the code's strings (docstrings, --help, messages) and comments.
MODULES: dict[str, list[Path]] = {}  # bench/loss.py beside nanoatr/loss.py: either may be meant
for _path in [*ROOT.glob("nanoatr/**/*.py"), *ROOT.glob("*.py"), *ROOT.glob("scripts/*.py"),
              *ROOT.glob("bench/*.py")]:
    MODULES.setdefault(_path.parent.name if _path.stem == "__init__" else _path.stem, []).append(_path)
# Modules that were and are no more (git log --diff-filter=DR): a stale reference still carries their names
GONE = {"advantages", "cli", "config", "latex_parse", "metrics", "parser", "reference", "reward_flags",
        "runs", "synthetic", "train_config"}
FILE_ENDINGS = {"py", "md", "json", "jsonl", "txt", "csv", "svg", "png", "parquet", "safetensors", "log",
                "old"}
REFERENCE = re.compile(r"(?<![\w./@-])([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)")
NOT_A_REFERENCE = {  # a variable named like a module, or another tool's keys
    "rewards.view": "a tensor's method (docs/exercises.md)", "loss.item": "a tensor's (docs/exercises.md)",
    "rewards.append": "a list's (docs/from-trl.md)",
    "data.": "verl's configuration keys (docs/real-scale.md)",
}


def named_paths(text: str) -> list[str]:
    return [m.group(1).rstrip(".") for m in PATH.finditer(text)]


@functools.cache
def definitions(path: Path) -> tuple[dict[str, set[str] | None], set[str]]:
    """({each name a module defines: the names on it if it is a class, else None}, the names on all its
    classes: methods, fields, self.x). A package's: its modules and what its __init__.py imports, too."""
    package = path.name == "__init__.py"
    top: dict[str, set[str] | None] = {}
    for node in module_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.ClassDef):
            top[node.name] = on_class(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            top[node.name] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and package:
            top |= {(alias.asname or alias.name).split(".")[0]: None for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            top |= dict.fromkeys(assigned(node))
    on_classes = set().union(*(names for names in top.values() if names is not None))
    for module in path.parent.glob("*.py") if package else []:
        top[module.stem] = None
        on_classes |= definitions(module)[1] if module != path else set()
    return top, on_classes


def module_level(body: list[ast.stmt]):
    """The statements at a module's top level, those under an if, a try or a with included."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            yield from module_level([n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)])


def on_class(node: ast.ClassDef) -> set[str]:
    """The names on a class: its methods and fields, and what its methods set on self."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    names = {n.name for n in node.body if isinstance(n, defs)}
    names |= {name for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign)) for name in assigned(n)}
    stores = [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)]
    return names | {n.attr for n in stores if isinstance(n.value, ast.Name) and n.value.id == "self"}


def assigned(node: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def resolves(path: Path, parts: list[str]) -> bool:
    """Whether a package holds parts[0] as a module (and the rest names something in it), or the module
    defines it (and, if it is a class, parts[1] on it), or parts[0] is on one of the module's classes."""
    for module in (path.parent / f"{parts[0]}.py", path.parent / parts[0] / "__init__.py"):
        if path.name == "__init__.py" and module.is_file():
            return len(parts) == 1 or resolves(module, parts[1:])
    top, on_classes = definitions(path)
    if parts[0] not in top:
        return parts[0] in on_classes
    return len(parts) == 1 or top[parts[0]] is None or parts[1] in top[parts[0]]


def stale_references(text: str) -> list[str]:
    stale = []
    for m in REFERENCE.finditer(text):
        name, parts = m.group(1), m.group(2).split(".")[1:]
        if parts[0] in FILE_ENDINGS or any(m.group(0).startswith(n) for n in NOT_A_REFERENCE):
            continue
        if name in GONE and name not in MODULES:
            stale.append(f"{m.group(0)} (no module {name} any more)")
        elif name in MODULES and not any(resolves(path, parts) for path in MODULES[name]):
            files = ", ".join(str(p.relative_to(ROOT)) for p in MODULES[name])
            stale.append(f"{m.group(0)} (not in {files})")
    return stale


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of what a reader reads: a document's lines; the code's strings and comments."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return list(enumerate(text.splitlines(), 1))
    strings = [(n.lineno + i, line) for n in ast.walk(ast.parse(text))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)
               for i, line in enumerate(n.value.splitlines())]
    return strings + [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
                      if t.type == tokenize.COMMENT]


def test_the_patterns_find_paths_and_references_and_skip_the_rest():
    line = ("read **nanoatr/loss.py**, `scripts/stats.py`'s t_quantile, [x](data/countdown/), "
            "/tmp/chain/data/aime24.jsonl, ~/nanoatr/scripts/grade.py, results/default-seeds/kl3-s*, "
            "results/<name>/, $OUT/data/x.jsonl, ./data/y.jsonl, and train.py.")
    # the glob gives its folder, results/default-seeds, which must exist
    assert named_paths(line) == ["nanoatr/loss.py", "scripts/stats.py", "data/countdown/",
                                 "results/default-seeds"]
    assert stale_references("loss.check_finite, machinery.session.Session.steps, nanoatr.model.Qwen3, "
                            "session.steps, metrics.jsonl, train.py, cfg.lr, course@nanoatr.invalid") == []
    assert stale_references("train.check_finite, runs.from_start, loss.Session, session.Session.nothing") == [
        "train.check_finite (not in train.py)", "runs.from_start (no module runs any more)",
        "loss.Session (not in nanoatr/loss.py, bench/loss.py)",
        "session.Session.nothing (not in nanoatr/machinery/session.py)"]


@pytest.mark.parametrize("doc", DOCS + CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_dotted_name_a_document_or_the_code_names_exists(doc):
    where = doc.relative_to(ROOT)
    lines = enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
    missing = [f"{where}:{i}: {path}" for i, line in lines for path in named_paths(line)
               if not (ROOT / path).exists() and not any(path.startswith(p) for p in NOT_IN_THE_REPOSITORY)]
    missing += [f"{where}:{i}: {ref}" for i, line in prose(doc) for ref in stale_references(line)]
    assert not missing, "named but not in the repository (moved? renamed?):\n" + "\n".join(missing)
