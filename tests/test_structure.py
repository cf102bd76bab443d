"""The shape of the house as a reader feels it: functions short enough to read at once, lines short enough
to read without scrolling, each library module's job named in the first line of its docstring, no import
cycles, nothing imported only for a help string; and `import nanoatr` loads nothing, every library module is
used by a command, and a new --clip method is added in three steps."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import train
from conftest import CORE_TESTS
from nanoatr import loss, methods
from nanoatr.machinery import flags
from nanoatr.machinery.flags import TrainConfig, hparam_flags, parse, resolve

ROOT = Path(__file__).resolve().parent.parent
# The core a student reads: nanoatr's modules and its packages (the verifier, the model), each package one
# unit; and the run machinery behind it (nanoatr/machinery/), each of its modules a unit of its own.
CORE = {p.stem: p for p in (ROOT / "nanoatr").glob("*.py") if p.stem != "__init__"}
CORE |= {p.name: p / "__init__.py" for p in (ROOT / "nanoatr").iterdir()
         if (p / "__init__.py").is_file() and p.name != "machinery"}
MACHINERY = {f"machinery.{p.stem}": p for p in (ROOT / "nanoatr/machinery").glob("*.py") if p.stem != "__init__"}
LIBRARY = CORE | MACHINERY
CORE_FILES = sorted(f for f in (ROOT / "nanoatr").rglob("*.py") if "machinery" not in f.parts)
FILES = sorted((ROOT / "nanoatr").rglob("*.py"))
COMMANDS = [ROOT / name for name in ("train.py", "grpo.py", "eval.py", "sample.py", "sft.py")]
# The tools around them: scripts (sweep and its report, figures, the classroom kit), benchmarks, data builders
TOOLS = sorted(path for folder in ("scripts", "bench", "data") for path in (ROOT / folder).glob("*.py"))
# The only imports allowed inside functions: optional packages, slow to import, each needed by some runs only
# (peft: LoRA; pyarrow: a .parquet problem file; wandb and torch.utils.tensorboard, which needs the
# tensorboard package: --report-to).
OPTIONAL = {"peft", "pyarrow", "wandb", "torch.utils.tensorboard"}
# And the core, in the flag module alone: a command reads its flags before torch loads (--help and a bad flag
# answer at once: test_flags.py), so machinery/flags.py imports the core only in the checks that follow.
LATE_CORE = {"machinery/flags.py"}

# The core is the card's "about a dozen readable modules", the twelve it names: the model (model/, Qwen3),
# LoRA, the tokenizer, data, the rollout with its KV cache, scoring, the loss with its group advantages, the
# methods, the divergences, the rewards, the verifier and the evaluation. A thirteenth job belongs in the
# machinery or in one of these (issue 45).
MAX_CORE_UNITS = 12
# The core's lines: 5,479 when the machinery moved out (issue 45), of which ~3k are the reading path the
# README lists in order and the rest (data formats, tokenizer, LoRA, the verifier) read when needed. The cap
# left ~4% for the next issues; 5,257 when issue 56's third pass cut it: past it, an addition replaces lines.
MAX_CORE_LINES = 5_257
# The whole library, core and machinery: 8.2k lines when issue 45 asked for no growth (8.3k at most); +90
# in the machinery for resuming from a chosen checkpoint into a new folder (issue 49: folder.branch_run).
# 8,506 after flags.py's merge; 8,388 when issue 56 moved what only tools and tests use beside them
# (scripts/plot.py, runs_table.py, sweep.py, data/make_default.py) and dropped plumbing; 8,193 by its third.
MAX_LIBRARY_LINES = 8_193
# The suite and the whole house (every .py of the repository, tests included), counted as the library is. Issue
# 56 found the house grown by accretion (29.4k -> 32.6k lines in one turn; tests 15.2k) and set 31,000 as the
# goal; these caps are the counts as its third pass landed (benches, tools and tests consolidated: 15,155 and
# 32,444 before the second), lowered as code leaves, never raised to fit a feature (14,525: issue 57's sixth pass).
MAX_TEST_LINES = 14_525
MAX_PYTHON_LINES = 30_805
# A function is read at once when it fits an editor window without scrolling: about 60 lines on a laptop.
# Counted from `def` to its last line, docstring and comments included. When the cap was set (issue 39) the
# 509 functions had a median of 8 lines and a 99th percentile of 52; the two over 60 (eval.py's main at 85,
# rollout.decode at 64) were split into named steps (print_runs_table, append_samples, print_summary;
# prefill). The tools (scripts/, bench/, data/) came under the cap later, their six over 60 split the same
# way: grade.py's grade (85), make_countdown.py's main (69), and in bench/ gpu_smoke.train_steps (91),
# rollout.py's main (90), step.one_step (65), trl_step.bench_model (75).
MAX_FUNCTION_LINES = 60
# Functions that read best long, each with its reason ("path:name"). None today.
LONG_FUNCTIONS: dict[str, str] = {}
# A line is read without scrolling at 110 characters: two files side by side on a laptop screen, and the
# width the modules rewritten last (config, runs, session, checkpoint) already kept. 100 would have rewrapped
# 1035 lines that read fine; at 110, 152 lines were rewrapped when the cap was set (issue 39).
MAX_LINE_CHARS = 110
# The job in a few words: the first line of a library module's docstring opens with its job, a phrase of at
# most eight words ended by ":" or "." ("Crash-safe checkpoints of a run: written, validated, ...").
# Eight: "train.py's flags and its run around the loop" is the longest that still reads as one job.
MAX_JOB_WORDS = 8


def imports(path: Path) -> tuple[set[str], list[str]]:
    """(library units imported at module level, anything imported inside a function or class)."""
    tree = ast.parse(path.read_text())
    top, nested = set(), []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        if isinstance(node, ast.ImportFrom) and node.level:  # from .x import y: relative to the file's package
            package = path.parent.relative_to(ROOT).parts
            names = [".".join(filter(None, [*package[:len(package) - node.level + 1], node.module]))]
        if node.col_offset > 0:
            nested += names
        for name in names:
            parts = name.split(".")
            if parts[0] != "nanoatr":
                continue
            if parts[1:2] == ["machinery"]:
                mods = [f"machinery.{parts[2]}"] if len(parts) > 2 else [f"machinery.{a.name}" for a in node.names]
            else:
                mods = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            top |= {m for m in mods if m in LIBRARY}
    return top, nested


def unit_of(path: Path) -> str:
    """The library unit a file belongs to: its module, its package (model, verifier), or machinery.<module>."""
    if path.parent.name == "machinery":
        return f"machinery.{path.stem}"
    return path.stem if path.parent.name == "nanoatr" else path.parent.name


def test_importing_the_package_loads_no_module():
    out = subprocess.run([sys.executable, "-c", "import nanoatr, sys; print(sorted(m for m in sys.modules "
                          "if m.startswith('nanoatr')))"], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "['nanoatr']"


def lines(files) -> int:
    return sum(len(f.read_text().splitlines()) for f in files)


def test_about_a_dozen_units_in_front_and_no_tool_code_or_main_in_the_library():
    assert len(CORE) <= MAX_CORE_UNITS, sorted(CORE)
    assert lines(CORE_FILES) <= MAX_CORE_LINES, f"the core has {lines(CORE_FILES)} lines"
    assert lines(FILES) <= MAX_LIBRARY_LINES, f"the library has {lines(FILES)} lines"
    assert not {"sweep", "theory", "plot", "metrics"} & set(LIBRARY), "tools live in scripts/"
    for path in FILES:
        tree = ast.parse(path.read_text())
        assert not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), \
            f"{path.relative_to(ROOT)} has a main(): a command belongs at the top level"


def python_files() -> list[Path]:
    """Every .py file of the repository: not the virtual environment, build outputs or hidden folders."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "dist", "__pycache__")]
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return found


def test_the_suite_and_the_house_stop_growing():
    assert lines(sorted((ROOT / "tests").glob("*.py"))) <= MAX_TEST_LINES, "tests/ grew: sharper, not bigger"
    assert lines(python_files()) <= MAX_PYTHON_LINES, f"the house has {lines(python_files())} lines of Python"


def test_the_core_tests_are_files_and_test_the_core():
    """conftest.CORE_TESTS, what `make test-core` runs: each a file of tests/ that imports the core."""
    for name in CORE_TESTS:
        path = ROOT / "tests" / name
        assert path.is_file(), f"CORE_TESTS names {name}: no such file"
        assert imports(path)[0] & set(CORE), f"{name} imports nothing of the core: not a core test"


def test_the_core_imports_nothing_from_the_machinery():
    """The core reads on its own, and so does grpo.py, the first file a student reads: what the core needs
    of a run (a device plan, how ranks gather rows) is passed in by the commands, which import both."""
    reach = {f"{f.relative_to(ROOT)}": sorted(imports(f)[0] & set(MACHINERY)) for f in [*CORE_FILES, ROOT / "grpo.py"]}
    assert not {f: m for f, m in reach.items() if m}, "the core imports the machinery"


def test_the_import_check_sees_every_way_of_importing(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("from nanoatr.machinery import flags, session\nfrom nanoatr.machinery.folder import RunFolder\n"
                    "import nanoatr.machinery.checkpoint\nfrom nanoatr import loss\n")
    assert imports(path)[0] == {"machinery.flags", "machinery.session", "machinery.folder",
                                "machinery.checkpoint", "loss"}


def functions(path: Path):
    """(name, first line, number of lines) of every function and method in a file, nested ones too."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def test_every_function_is_short_enough_to_read_at_once():
    long = [f"{path.relative_to(ROOT)}:{line} {name} ({n} lines)" for path in FILES + COMMANDS + TOOLS
            for name, line, n in functions(path)
            if n > MAX_FUNCTION_LINES and f"{path.relative_to(ROOT)}:{name}" not in LONG_FUNCTIONS]
    assert not long, f"over {MAX_FUNCTION_LINES} lines: split out a named step: {long}"


def test_every_line_reads_without_scrolling():
    wide = [f"{path.relative_to(ROOT)}:{i} ({len(line)} chars)" for path in FILES + COMMANDS + TOOLS
            for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > MAX_LINE_CHARS]
    assert not wide, f"over {MAX_LINE_CHARS} characters: rewrap: {wide}"


def test_no_command_takes_a_shortened_flag():
    """argparse takes a unique prefix of a flag by default (--delt for --delta): a typo then runs as
    another flag, and a script written with a prefix breaks once a new flag begins the same way. Every
    parser is machinery/flags.py's Parser (prefixes off, a typo named in its error line: test_flags.py) or says
    allow_abbrev=False."""
    loose = []
    for path in FILES + COMMANDS + TOOLS:
        for node in ast.walk(ast.parse(path.read_text())):
            named = isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
            strict = named == "ArgumentParser" and any(
                k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords)
            if named == "ArgumentParser" and not strict:
                loose.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not loose, f"ArgumentParser without allow_abbrev=False: {loose}"


JOB_END = re.compile(r":\s|:$|\.\s|\.$")  # a colon or a full stop ends it (the "." of "train.py" does not)


def job(doc: str) -> str:
    """The job a docstring names: its first line up to the first colon or full stop (without one, the whole
    line)."""
    return JOB_END.split(doc.splitlines()[0] if doc else "")[0]


def test_a_job_is_the_first_line_up_to_a_colon_or_a_full_stop():
    assert job("Crash-safe checkpoints of a run: written, validated.\n\nMore.") == \
        "Crash-safe checkpoints of a run"
    assert job("train.py's flags and its run around the loop: TrainConfig") == \
        "train.py's flags and its run around the loop"
    assert job("Evaluation.") == "Evaluation"
    assert job("Several processes (torchrun), one device each, each rank's share\nof a step.") == \
        "Several processes (torchrun), one device each, each rank's share"
    assert job("") == ""


def test_every_library_module_names_its_job_in_a_few_words():
    for path in FILES:
        name, doc = path.relative_to(ROOT), ast.get_docstring(ast.parse(path.read_text())) or ""
        assert job(doc), f"{name} needs a docstring whose first line names its job"
        words = len(job(doc).split())
        assert words <= MAX_JOB_WORDS, \
            f"{name}: the docstring's first line should open with its job in <= {MAX_JOB_WORDS} words " \
            f"ended by ':' or '.' (got {words}: {job(doc)!r})"
    for path in COMMANDS:
        assert ast.get_docstring(ast.parse(path.read_text())), f"{path.name} needs a docstring"


def test_no_import_cycles_and_function_local_imports_only_for_optional_packages():
    for path in FILES:
        late = str(path.relative_to(ROOT / "nanoatr")) in LATE_CORE
        nested = [n for n in imports(path)[1] if not (late and n.split(".")[:2] != ["nanoatr", "machinery"])]
        assert all(n in OPTIONAL or n.split(".")[0] in OPTIONAL for n in nested), \
            f"{path.relative_to(ROOT)} imports inside a function: {nested}"
    graph = {name: set() for name in LIBRARY}
    for path in FILES:  # a package's files count as the package
        unit = unit_of(path)
        if unit in graph:
            graph[unit] |= imports(path)[0] - {unit}

    def visit(node, path):
        for nxt in graph[node]:
            assert nxt not in path, "import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt])
            visit(nxt, path + [nxt])
    for name in graph:
        visit(name, [name])


def library_names(tree: ast.Module) -> dict[str, int]:
    """The names a file binds by importing from the library (a module or a name in one) -> import line."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] == "nanoatr":
                names |= {(a.asname or a.name): node.lineno for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name.split(".")[0]): node.lineno for a in node.names
                      if a.name.split(".")[0] == "nanoatr"}
    return names


def help_text(tree: ast.Module) -> set[int]:
    """The ids of every node inside help text: the help of config.arg(default, help, ...) and of
    config.override(group, name, default, help), any help= / description= / epilog= argument, and the value
    of a constant named ..._HELP."""
    roots = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            roots += [k.value for k in node.keywords if k.arg in ("help", "description", "epilog")]
            where = {"arg": 1, "override": 3}.get(getattr(node.func, "id", getattr(node.func, "attr", None)))
            if where is not None and len(node.args) > where:
                roots.append(node.args[where])
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).endswith("_HELP"):
            roots.append(node.value)
    return {id(n) for root in roots for n in ast.walk(root)}


def help_only_imports(source: str) -> list[tuple[str, int]]:
    """(name, import line) of each name a file imports from the library and uses in help text only."""
    tree = ast.parse(source)
    in_help = help_text(tree)
    found = []
    for name, line in library_names(tree).items():
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
        if uses and all(id(n) in in_help for n in uses):
            found.append((name, line))
    return found


def test_nothing_is_imported_from_the_library_only_for_a_help_string():
    """A library name used only in help text makes a dependency for a sentence (config.py imported rollout and
    loss for their help strings: the import pointed from the general to the specific). Say it in words."""
    found = [f"{path.relative_to(ROOT)}:{line} {name}" for path in FILES + COMMANDS
             for name, line in help_only_imports(path.read_text())]
    assert not found, f"imported only for help text: {found}"


def test_an_import_used_only_in_help_text_is_found():
    # config.py before issue 39: SAMPLER_HELP came from rollout.py for one help string; SAMPLERS is a value
    source = ("from nanoatr.rollout import SAMPLER_HELP, SAMPLERS\nfrom nanoatr import loss, lora\n"
              "sampler: str = arg(SAMPLERS[0], SAMPLER_HELP, SAMPLING, choices=SAMPLERS)\n"
              "agg: str = arg('dr-grpo', f'one of {loss.AGGREGATIONS}', OPTIM)\n"
              "targets: list = arg(list(lora.TARGETS), 'modules that get LoRA adapters', OPTIM)\n")
    assert help_only_imports(source) == [("SAMPLER_HELP", 1), ("loss", 2)]


def test_help_text_is_found_where_arg_and_argparse_put_it():
    tree = ast.parse("x = arg(1, f'see {a.B}', S)\ny = arg(2, help=f'{c}')\np.add_argument('-x', help=d)\n"
                     "Z_HELP = f'{e}'\nw = arg(g, 'plain', h)\n")
    in_help = help_text(tree)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) in in_help}
    assert names == {"a", "c", "d", "e"}


def is_main_guard(node) -> bool:
    test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
    return "__name__" in test and "__main__" in test


def test_a_command_runs_its_main_only_after_everything_it_defines():
    """`if __name__ == "__main__": main()` is a file's last statement: one placed above a function main calls
    passes every test that imports the file and fails the command itself (sft.py did: NameError: encode)."""
    files = [*ROOT.glob("*.py"), *ROOT.glob("scripts/*.py"), *ROOT.glob("data/*.py"),
             *ROOT.glob("bench/*.py"), ROOT / "tests/hub_fixtures.py"]
    bodies = {f.relative_to(ROOT): ast.parse(f.read_text()).body for f in files}
    late = [f for f, body in bodies.items() if any(map(is_main_guard, body)) and not is_main_guard(body[-1])]
    assert not late, f"definitions after the __main__ guard: {late}"


def test_sft_runs_as_a_command(tmp_path):
    """sft.py as the docs run it (a subprocess), two steps on the arithmetic warm-start's own examples."""
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(f'{{"problem": "{a}+{b}", "solution": "{a}+{b}={a + b}. \\\\boxed{{{a + b}}}", '
                            f'"answer": "{a + b}"}}\n' for a in range(3, 9) for b in range(2, 6)))
    out = subprocess.run([sys.executable, "sft.py", "--model", "data/tiny-qwen3", "--data", str(data),
                          "--steps", "2", "--batch-size", "4", "--max-len", "48", "--out-dir", str(tmp_path),
                          "--name", "s"],
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
    """toy added to methods.py: to METHODS, and to what the flags read of methods.py's source."""
    monkeypatch.setitem(methods.METHODS, "toy", toy)
    monkeypatch.setitem(flags.METHOD_KNOBS, "toy", methods.defaults("toy"))
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
    assert out.index("--lr LR") > out.index("optimisation:")
    assert out.index("--delta X") > out.index("method hyper")


# ----------------------------------------------------------------------------
# The README's map: what to read first, in order, with line counts that are true

READING_ORDER = re.compile(r"^(\S+\.py)\s+(\d+)  ", re.M)


def test_the_readme_reading_order_counts_each_file_as_it_is():
    """The map's first block lists the files a student reads first with their lengths: each count is the
    file's (a change that grows one updates the map), every file there is the core's or grpo/train.py, and
    together they are the ~3k lines the map promises."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("**Read first, in order"):readme.index("**The rest of the core")]
    listed = READING_ORDER.findall(block)
    assert len(listed) >= 8, "the reading order lists the algorithm's files"
    wrong = {f: (int(n), len((ROOT / f).read_text().splitlines())) for f, n in listed
             if int(n) != len((ROOT / f).read_text().splitlines())}
    assert not wrong, f"README map: (listed, actual) lines: {wrong}"
    outside = [f for f, _ in listed if f not in ("grpo.py", "train.py") and "machinery" in f]
    assert not outside, f"the machinery is not on the reading path: {outside}"
    assert sum(int(n) for _, n in listed) <= 3_300, "the reading path is ~3k lines"
