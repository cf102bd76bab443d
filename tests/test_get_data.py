"""data/get_paper_data.py, offline: small fixture files in each dataset's real format (parquet or jsonl,
the hub's columns and types), laid out as the hub serves them, read through --from-dir.

Run: python -m pytest tests/test_get_data.py -q
"""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "data"))
import get_paper_data as gpd  # noqa: E402  (data/get_paper_data.py)

from nanoatr.data import load_problems  # noqa: E402

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402
from conftest import jsonl, strict_file  # noqa: E402
from hub_fixtures import DAPO_TEMPLATE as TEMPLATE, dapo_row, omr_row  # noqa: E402

def solved(answer, worked="We add the two numbers and simplify the result step by step"):
    return f"<think>\nLet me think. Maybe {answer}? Yes.\n</think>\n{worked}, so the answer is $\\boxed{{{answer}}}$."


OMR_ROWS = [  # shard 0, then shard 1
    [omr_row("P1: 1+1?", solved("2"), "2"),
     omr_row("P1: 1+1?", solved("2", "Another solution of the same problem, longer than twenty"), "2"),  # repeat
     omr_row("P2: 2+2?", solved("5"), "4"),  # the box disagrees with expected_answer
     omr_row("P3: prove it", solved("3"), "3", kind="converted_proof"),
     omr_row("P4: 3+3?", "<think>6</think>\nThe answer is 6.", "6"),  # no box
     omr_row("P5: 4+4?", solved("8"), "8")],
    [omr_row("P6: $\\frac{1}{2}+\\frac12$?", solved("1"), "1"),
     omr_row("P7: 5+5?", solved("10"), "10"),
     omr_row("P8: 6+6?", "<think>\nno box here\n</think>", "12"),  # thinking only
     omr_row("P9: 7+7?", solved("14"), "14")],
]


def write_parquet(path: Path, rows: list[dict]):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def hub_copy(root: Path, aime25_lines=None, amc_rows=None) -> Path:
    """DIR/REPO/PATH, each file in its real format."""
    dapo = [dapo_row("In triangle $ABC$ find $a+b$.", "34", "9a9b6eb4")] * 5 + \
           [dapo_row("Find $x$.", "-3", "1c2d")] * 5 + [dapo_row("In triangle $ABC$ find $a+b$.", "34", "9a9b6eb4")]
    write_parquet(root / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet", dapo)
    write_parquet(root / "HuggingFaceH4/aime_2024/data/train-00000-of-00001.parquet",
                  [{"id": 60, "problem": "Every morning Aya walks.", "solution": "...", "answer": "204",
                    "url": "https://aops/1", "year": "2024"},
                   {"id": 61, "problem": "Find the number.", "solution": "...", "answer": "025", "url": "u", "year": "2024"}])
    path = root / "math-ai/aime25/test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    # the upstream file's bug: \frac written with one backslash, decoded as a form feed
    lines = aime25_lines or ['{"problem": "Find the sum of all integer bases $b>9$.", "answer": "70", "id": "0"}',
                             '{"problem": "Area of $\\frac{1}{2}$ of $\\triangle ABC$.", "answer": "588", "id": "1"}']
    path.write_text("\n".join(lines) + "\n")
    write_parquet(root / "math-ai/amc23/data/test-00000-of-00001.parquet",
                  amc_rows or [{"id": 0, "question": "Cities $A$ and $B$?", "answer": 27.0, "url": "u"},
                               {"id": 1, "question": "Positive reals $x$, $y$?", "answer": 36.0, "url": "u"}])
    for i, shard in enumerate(OMR_ROWS):
        write_parquet(root / f"nvidia/OpenMathReasoning/data/cot-{i:05d}-of-00002.parquet", shard)
    return root


def run(capsys, *args):
    try:
        gpd.main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def hub(tmp_path):
    return hub_copy(tmp_path / "hub")


def test_every_dataset_from_its_real_format(capsys, hub, tmp_path):
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "--from-dir", str(hub), "--out", str(out), "--sft-size", "3", "--sft-heldout", "1")
    assert code == 0, err
    dapo = load_problems(out / "dapo-math-17k.jsonl", dedupe=False)
    assert [p.answer for p in dapo] == ["34", "-3"]  # 11 rows, each distinct prompt once
    assert dapo[0].messages == [{"content": TEMPLATE.format("In triangle $ABC$ find $a+b$."), "role": "user"}]
    assert [(p.question, p.answer) for p in load_problems(out / "aime24.jsonl")] == \
        [("Every morning Aya walks.", "204"), ("Find the number.", "025")]
    assert load_problems(out / "aime25.jsonl")[1].question == r"Area of $\frac{1}{2}$ of $\triangle ABC$."
    assert "\f" not in (out / "aime25.jsonl").read_text()  # repaired in the file itself
    amc = jsonl(out / "amc23.jsonl")
    assert amc == [{"problem": "Cities $A$ and $B$?", "answer": 27.0}, {"problem": "Positive reals $x$, $y$?",
                                                                         "answer": 36.0}]
    held = jsonl(out / "omr-heldout.jsonl")
    sft = jsonl(out / "omr-sft.jsonl")
    # P1 once; P2 (wrong box), P3 (proof), P4 (no box) skipped; the second shard read after the first
    assert [r["problem"] for r in held] == ["P1: 1+1?"]
    assert [r["problem"] for r in sft] == ["P5: 4+4?", "P6: $\\frac{1}{2}+\\frac12$?", "P7: 5+5?"]
    assert sft[0] == {"problem": "P5: 4+4?", "solution": solved("8"), "answer": "8"}
    assert stdout.splitlines()[-1] == (
        f"wrote 6 files: {out}/dapo-math-17k.jsonl (2), {out}/aime24.jsonl (2), {out}/aime25.jsonl (2), "
        f"{out}/amc23.jsonl (2), {out}/omr-sft.jsonl (3), {out}/omr-heldout.jsonl (1)")
    assert "dapo-math-17k: 2 prompts (11 rows: 9 repeats dropped)" in stdout
    assert "openmathreasoning: 3 SFT + 1 held-out problems from the first 8 rows" in stdout
    record = strict_file(out / "sources.json")
    assert record["aime25"]["repo"] == "math-ai/aime25" and record["openmathreasoning"]["written"] == \
        {"omr-sft.jsonl": 3, "omr-heldout.jsonl": 1}


def test_written_part_and_usable_rows():
    assert gpd.written_part("<think>\nhmm\n</think>\n\nSo $\\boxed{2}$.") == "So $\\boxed{2}$."
    assert gpd.written_part("No thinking: $\\boxed{2}$.") == "No thinking: $\\boxed{2}$."
    good = omr_row("Q", solved("2"), "2")
    assert gpd.usable(good)
    assert not gpd.usable({**good, "expected_answer": ""})
    assert not gpd.usable({**good, "generated_solution": None})
    assert not gpd.usable({**good, "generated_solution": "<think>x</think>\n$\\boxed{2}$"})  # a box, nothing worked
    assert not gpd.usable({**good, "problem_type": "no_answer_extracted"})
    assert gpd.usable({k: v for k, v in good.items() if k != "problem_type"})  # a copy without that column


def test_fewer_usable_rows_than_asked_is_said(capsys, hub, tmp_path):
    code, stdout, _ = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "o"), "--datasets",
                          "openmathreasoning", "--sft-size", "100", "--sft-heldout", "2")
    assert code == 0
    assert "openmathreasoning: 3 SFT + 2 held-out problems (only 3 of --sft-size 100 found) from the first 10 rows" \
        in stdout


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("case", ["NaN answer", "no problem", "null answer"])
def test_a_row_without_problem_or_answer_names_file_and_row(capsys, tmp_path, case):
    rows = [{"id": 0, "question": "Q0", "answer": 1.0, "url": "u"},
            {"id": 1, "question": "Q1", "answer": 2.0, "url": "u"},
            {"id": 2, "question": "" if case == "no problem" else "Q2",
             "answer": None if case == "null answer" else (float("nan") if case == "NaN answer" else 3.0), "url": "u"}]
    hub = hub_copy(tmp_path / "hub", amc_rows=rows)
    code, _, err = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "o"), "--datasets", "amc23")
    line = one_error(err)
    assert code == 2 and f"math-ai/amc23/data/test-00000-of-00001.parquet:3: no " in line
    assert not (tmp_path / "o" / "amc23.jsonl").exists()


def test_jsonl_row_and_missing_column_errors(capsys, tmp_path):
    hub = hub_copy(tmp_path / "hub", aime25_lines=['{"problem": "A", "answer": "1"}', '{"problem": "B"}'])
    code, _, err = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "o"), "--datasets", "aime25")
    assert code == 2 and one_error(err).endswith("math-ai/aime25/test.jsonl:2: expected a JSON object with problem, answer")
    write_parquet(hub / "HuggingFaceH4/aime_2024/data/train-00000-of-00001.parquet", [{"id": 1, "question": "Q"}])
    code, _, err = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "o"), "--datasets", "aime24")
    assert "train-00000-of-00001.parquet: no column 'problem' (it has id, question)" in one_error(err)


def test_no_network_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what an unreachable hub gives, without waiting for its retries
    import huggingface_hub.constants as constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code, _, err = run(capsys, "--out", str(tmp_path / "o"), "--datasets", "aime25")
    line = one_error(err)
    assert code == 2 and "cannot read math-ai/aime25 (revision main) from the Hugging Face hub" in line
    assert "--from-dir DIR" in line and not (tmp_path / "o" / "aime25.jsonl").exists()


def test_without_pyarrow_one_line_says_how_to_install_it(capsys, monkeypatch, hub, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as if it were not installed
    code, _, err = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "o"), "--datasets", "aime24")
    assert code == 2 and one_error(err).endswith("is parquet, which needs pyarrow: pip install pyarrow")
    code, _, err = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "o"), "--datasets", "aime25")
    assert code == 0  # a jsonl source needs nothing more


def test_an_interrupted_run_leaves_the_previous_files(capsys, monkeypatch, hub, tmp_path):
    out = tmp_path / "o"
    assert run(capsys, "--from-dir", str(hub), "--out", str(out), "--sft-size", "3", "--sft-heldout", "1")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = gpd.usable

    def interrupted(row):  # Ctrl-C while the SFT rows are selected, after the other files were rewritten
        if row["problem"].startswith("P6"):
            raise KeyboardInterrupt
        return real(row)

    monkeypatch.setattr(gpd, "usable", interrupted)
    code, _, err = run(capsys, "--from-dir", str(hub), "--out", str(out), "--sft-size", "3", "--sft-heldout", "1")
    assert code == 130 and one_error(err).startswith("error: interrupted")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no temp file left, nothing half-written


def test_a_flat_folder_lists_its_files_and_the_expected_layout(capsys, hub, tmp_path):
    """The files straight in DIR (not DIR/REPO/PATH): the line names what is there and where it should be;
    --source, which names another repository, cannot fix a layout and is not offered."""
    flat = tmp_path / "flat"
    (flat / "more").mkdir(parents=True)
    parquet = hub / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet"
    (flat / "dapo-math-17k.parquet").write_bytes(parquet.read_bytes())
    for name in ("a.txt", "b.txt", "c.txt", "more/d.txt", "more/e.txt"):
        (flat / name).write_text("")
    code, _, err = run(capsys, "--from-dir", str(flat), "--out", str(tmp_path / "o"), "--datasets", "dapo-math-17k")
    line = one_error(err)
    assert code == 2 and line.startswith(f"error: {flat}/BytedTsinghua-SIA/DAPO-Math-17k: no data file matches "
                                         "'data/dapo-math-17k.parquet' (nor 'data/dapo-math-17k.jsonl')")
    expected = flat / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet"
    assert f"expects the hub's files as DIR/REPO/PATH: {expected};" in line
    assert line.endswith(f"files under {flat}: a.txt, b.txt, c.txt, dapo-math-17k.parquet, more/d.txt, ...")
    assert "--source" not in line


@pytest.mark.parametrize("argv, said", [
    (["--from-dir", "{hub}", "--datasets", "aime23"], "invalid choice: 'aime23'"),
    (["--from-dir", "{hub}", "--source", "aime23=x/y"],
     "error: --source aime23=x/y: expected NAME=REPO[@REVISION]"),
    (["--from-dir", "{hub}", "--datasets", "aime24", "--source", "aime24=someone/aime"],  # a copy, no files
     "someone/aime: no data file matches 'data/train-*.parquet'"),
    (["--from-dir", "{tmp}/nowhere"], "error: --from-dir {tmp}/nowhere: no such directory"),
    (["--from-dir", "{tmp}/empty", "--datasets", "aime25"], "{tmp}/empty holds no file"),
], ids=["unknown dataset", "bad source", "no files", "no folder", "empty folder"])
def test_a_bad_dataset_source_or_folder_is_one_line(capsys, hub, tmp_path, argv, said):
    (tmp_path / "empty").mkdir()
    argv = [a.format(hub=hub, tmp=tmp_path) for a in argv]
    code, _, err = run(capsys, *argv, "--out", str(tmp_path / "o"))
    assert code == 2 and said.format(tmp=tmp_path) in one_error(err)
    if argv[1].endswith("nowhere"):  # refused before --out is made
        assert not (tmp_path / "o").exists()


def test_a_dapo_jsonl_in_the_documented_layout_is_read_as_the_parquet(capsys, hub, tmp_path):
    """DIR/BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.jsonl, the parquet's rows as JSON lines (what
    pandas' to_json(orient='records', lines=True) writes): the same output file as from the parquet."""
    code, _, err = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "from-parquet"), "--datasets",
                       "dapo-math-17k")
    assert code == 0, err
    folder = hub / "BytedTsinghua-SIA/DAPO-Math-17k/data"
    rows = pq.read_table(folder / "dapo-math-17k.parquet").to_pylist()
    (folder / "dapo-math-17k.parquet").unlink()
    (folder / "dapo-math-17k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, stdout, err = run(capsys, "--from-dir", str(hub), "--out", str(tmp_path / "from-jsonl"), "--datasets",
                            "dapo-math-17k")
    assert code == 0, err
    assert "dapo-math-17k: 2 prompts (11 rows: 9 repeats dropped)" in stdout
    assert (tmp_path / "from-jsonl/dapo-math-17k.jsonl").read_bytes() == \
        (tmp_path / "from-parquet/dapo-math-17k.jsonl").read_bytes()
