"""The shape of the house: what `import nanoatr` loads, no import cycles, every library module used by
train.py / eval.py / sample.py / sft.py, and a new --clip method added in three steps."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import train
from nanoatr import loss, methods
from nanoatr.config import parse
from nanoatr.session import TrainConfig, hparam_flags, resolve

ROOT = Path(__file__).resolve().parent.parent
# The library's units: its modules, and the verifier package (one job, five files)
LIBRARY = {p.stem: p for p in (ROOT / "nanoatr").glob("*.py") if p.stem != "__init__"}
LIBRARY |= {p.name: p / "__init__.py" for p in (ROOT / "nanoatr").iterdir() if (p / "__init__.py").is_file()}
FILES = sorted((ROOT / "nanoatr").rglob("*.py"))
OPTIONAL = {"peft"}  # the only imports allowed inside functions (slow to import; only LoRA runs need it)


def imports(path: Path) -> tuple[set[str], list[str]]:
    """(library modules imported at module level, anything imported inside a function or class)."""
    tree = ast.parse(path.read_text())
    top, nested = set(), []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        if isinstance(node, ast.ImportFrom) and node.level:  # from .x import y: relative to the package
            names = [".".join(filter(None, ["nanoatr", node.module]))]
        if node.col_offset > 0:
            nested += names
        for name in names:
            parts = name.split(".")
            if parts[0] == "nanoatr":
                mods = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
                top |= {m for m in mods if m in LIBRARY}
    return top, nested


def test_importing_the_package_loads_no_module():
    out = subprocess.run([sys.executable, "-c", "import nanoatr, sys; print(sorted(m for m in sys.modules "
                          "if m.startswith('nanoatr')))"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['nanoatr']"


def test_no_tool_code_and_about_a_dozen_modules():
    assert not {"sweep", "theory", "plot", "metrics", "train_config"} & set(LIBRARY)
    assert 10 <= len(LIBRARY) <= 17, sorted(LIBRARY)  # 17: runs.py and decoding.py split off (issues 39, 35)
    for path in FILES:
        tree = ast.parse(path.read_text())
        name = path.relative_to(ROOT)
        assert not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), f"{name} has a main()"
        assert ast.get_docstring(tree) or path.name == "__init__.py" and path.parent.name == "nanoatr", \
            f"{name} needs a docstring saying what it is for"
        assert len(path.read_text().splitlines()) <= 550, f"{name}: split it, it is too long to read"


def test_no_import_cycles_and_function_local_imports_only_for_optional_packages():
    for path in FILES:
        nested = imports(path)[1]
        assert {n.split(".")[0] for n in nested} <= OPTIONAL, f"{path.relative_to(ROOT)} imports inside a function: {nested}"
    graph = {name: set() for name in LIBRARY}
    for path in FILES:  # a package's files count as the package
        unit = path.stem if path.parent.name == "nanoatr" else path.parent.name
        if unit in graph:
            graph[unit] |= imports(path)[0] - {unit}

    def visit(node, path):
        for nxt in graph[node]:
            assert nxt not in path, "import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt])
            visit(nxt, path + [nxt])
    for name in graph:
        visit(name, [name])


def is_main_guard(node) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)


def test_a_command_runs_its_main_only_after_everything_it_defines():
    """`if __name__ == "__main__": main()` is a file's last statement: one placed above a function main calls
    passes every test that imports the file and fails the command itself (sft.py did: NameError: encode)."""
    files = [*ROOT.glob("*.py"), *ROOT.glob("scripts/*.py"), *ROOT.glob("data/*.py"), *ROOT.glob("bench/*.py"),
             ROOT / "tests/hub_fixtures.py"]
    bodies = {f.relative_to(ROOT): ast.parse(f.read_text()).body for f in files}
    late = [f for f, body in bodies.items() if any(map(is_main_guard, body)) and not is_main_guard(body[-1])]
    assert not late, f"definitions after the __main__ guard: {late}"


def test_sft_runs_as_a_command(tmp_path):
    """sft.py as the docs run it (a subprocess), two steps on the arithmetic warm-start's own examples."""
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(f'{{"problem": "{a}+{b}", "solution": "{a}+{b}={a + b}. \\\\boxed{{{a + b}}}", '
                            f'"answer": "{a + b}"}}\n' for a in range(3, 9) for b in range(2, 6)))
    out = subprocess.run([sys.executable, "sft.py", "--model", "data/tiny-qwen3", "--data", str(data), "--steps", "2",
                          "--batch-size", "4", "--max-len", "48", "--out-dir", str(tmp_path), "--name", "s"],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "s/model/config.json").is_file()


def test_every_library_module_is_used_by_a_command():
    reached, todo = set(), []
    for command in ("train.py", "eval.py", "sample.py", "sft.py"):
        todo += imports(ROOT / command)[0]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += imports(LIBRARY[name])[0]
    assert reached == set(LIBRARY), f"not imported by train/eval/sample/sft: {sorted(set(LIBRARY) - reached)}"


# ----------------------------------------------------------------------------
# Adding a method: a function with its defaults, one line in METHODS

def toy(t: methods.Tokens, toy_width: float = 0.3, eps: float = 0.2):
    """Toy: a ratio clip to [1 - eps, 1 + toy_width] (a new knob, toy_width, with no rule of its own)."""
    return (*methods.ratio_clip(t.ratio, t.advantages, 1 - eps, 1 + toy_width), {})


@pytest.fixture
def with_toy(monkeypatch):
    monkeypatch.setitem(methods.METHODS, "toy", toy)
    yield "toy"


def resolved(*argv):
    cfg, extra, _ = parse(TrainConfig, list(argv), "", hparam_flags)
    return resolve(cfg, extra)


def test_a_registered_method_is_a_clip_choice_with_flags_and_errors(with_toy, capsys):
    assert methods.defaults("toy") == {"toy_width": 0.3, "eps": 0.2}
    assert resolved("--clip", "toy").hparams == {"toy_width": 0.3, "eps": 0.2}
    assert resolved("--clip", "toy", "--toy-width", "0.5").hparams["toy_width"] == 0.5
    with pytest.raises(ValueError, match=r"--toy-width must be a finite number \(got nan\)"):
        resolved("--clip", "toy", "--toy-width", "nan")
    with pytest.raises(ValueError, match=r"--eps must be in \(0, 1\)"):  # a known knob keeps its rule
        resolved("--clip", "toy", "--eps", "1.5")
    with pytest.raises(ValueError, match="--toy-width does not apply to --clip kl3"):
        resolved("--clip", "kl3", "--toy-width", "0.5")
    with pytest.raises(SystemExit):
        train.main(["--help"])
    out = capsys.readouterr().out
    assert "toy" in out and "--toy-width" in out and "toy=0.3" in out


def test_the_generic_method_tests_pass_on_it(with_toy):
    # imported here, not at the top: a test_loss.py that cannot import fails this test only, not the module
    from test_loss import (inputs, test_compiled_equals_eager, test_micro_batches_add_up_to_the_big_batch,
                           test_on_policy_every_method_is_plain_policy_gradient,
                           test_padding_gets_no_loss_and_no_gradient_whatever_it_holds)
    test_on_policy_every_method_is_plain_policy_gradient("toy")
    test_padding_gets_no_loss_and_no_gradient_whatever_it_holds("toy")
    test_compiled_equals_eager("toy")
    for agg in loss.AGGREGATIONS:
        test_micro_batches_add_up_to_the_big_batch(agg, "toy")
    logp, old, adv, mask, _ = inputs("toy")
    _, m = loss.policy_loss("toy", logp, old, adv, mask, num_sequences=4, num_tokens=float(mask.sum()),
                            max_new_tokens=6, compile=False, toy_width=0.01)
    assert m["clip_frac_high"] > 0  # the knob reaches the method


def test_a_knob_without_a_default_is_a_clear_error(monkeypatch):
    def broken(t, knob):
        return toy(t)
    monkeypatch.setitem(methods.METHODS, "broken", broken)
    with pytest.raises(TypeError, match="'knob' needs a default"):
        methods.defaults("broken")


def test_help_is_grouped_and_the_preset_comes_last(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    out = capsys.readouterr().out
    heads = ["model and data:", "method:", "rollout:", "optimisation:", "evaluation:", "run:",
             "method hyper-parameters", "--preset paper (Appendix B"]
    where = [out.index(h) for h in heads]
    assert where == sorted(where), "groups out of order"
    assert out.index("--lr LR") > out.index("optimisation:") and out.index("--delta X") > out.index("method hyper")
