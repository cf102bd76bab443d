"""nanoatr.data on the data a TRL user brings: TRL's standard (prompt text) and conversational (prompt chat)
formats in jsonl, json and parquet files, --answer-field (dotted names into structs), Problem.fields as a
reward function's keyword arguments, the one-line errors, and train.py / eval.py reading such a file."""
import datetime
import decimal
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eval as eval_cli
import train
from nanoatr import data
from nanoatr.data import Problem, load_problems
from conftest import error_line, jsonl, strict_file
from test_data import error, write  # error: the one line a bad file gives, naming the file

ROOT = Path(__file__).resolve().parent.parent


def parquet(path: Path, rows: list[dict], **kw) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, **kw)
    return path


def chat(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def test_standard_jsonl_with_answer_field_solution_keeps_completion_in_fields(tmp_path):
    """TRL's standard format: prompt text; an SFT pair's completion is kept (ignored for RL) in fields."""
    rows = [{"prompt": "1+1=", "completion": " 2", "solution": 2, "id": "a"},
            {"prompt": "2+3=", "completion": " 5", "solution": "5", "id": "b"}]
    problems = load_problems(write(tmp_path, rows, "std.jsonl"), answer_field="solution")
    assert problems == [Problem("1+1=", "2"), Problem("2+3=", "5")]
    assert [p.messages for p in problems] == [None, None]
    assert problems[0].fields == {"completion": " 2", "solution": 2, "id": "a"}  # every column but the prompt


def test_conversational_parquet_chat_kept_fields_json_able(tmp_path):
    """TRL's conversational format in parquet: the chat in messages, question = its last user message, and
    every other column as its jsonl line would hold it (structs as dicts, lists as lists, a timestamp as
    ISO 8601 text)."""
    when = datetime.datetime(2025, 3, 1, 12, 30, 5)
    rows = [{"prompt": chat("Be brief.", "What is 6*7?"), "answer": "42", "meta": {"level": 3, "tags": ["x"]},
             "tests": [1, 2], "made": when},
            {"prompt": [{"role": "user", "content": "First?"}, {"role": "assistant", "content": "Ok."},
                        {"role": "user", "content": "What is 2*2?"}], "answer": "4", "meta": None,
             "tests": [], "made": None}]
    path = parquet(tmp_path / "conv.parquet", rows)
    first, second = load_problems(path)
    assert (first.question, first.answer) == ("What is 6*7?", "42")
    assert first.messages == chat("Be brief.", "What is 6*7?")
    assert first.fields == {"answer": "42", "meta": {"level": 3, "tags": ["x"]}, "tests": [1, 2],
                            "made": "2025-03-01T12:30:05"}
    assert second.question == "What is 2*2?" and len(second.messages) == 3
    assert second.fields == {"answer": "4", "meta": None, "tests": [], "made": None}
    json.dumps(first.fields)  # a reward function's keyword arguments stay JSON-able
    # the same rows as JSON lines give the same problems and fields
    as_lines = [{**r, "made": r["made"] and r["made"].isoformat()} for r in rows]
    again = load_problems(write(tmp_path, as_lines, "conv.jsonl"))
    assert again == [first, second] and [p.fields for p in again] == [first.fields, second.fields]


def test_content_as_a_list_of_text_parts_is_its_text(tmp_path):
    """Some TRL datasets give a message's content as parts, [{"type": "text", "text": ...}]: the text parts
    joined as a chat template renders them (Qwen3's renders a non-text content as ''); a non-text part is an
    error (a text model cannot be given it), as is a list of no parts."""
    def text(*texts):
        return [{"type": "text", "text": t} for t in texts]
    parts = [{"role": "system", "content": text("Be brief.")},
             {"role": "user", "content": text("What is ", "6*7?")}]
    for path in (parquet(tmp_path / "parts.parquet", [{"prompt": parts, "answer": "42"}]),
                 write(tmp_path, [{"prompt": parts, "answer": "42"}], "parts.jsonl")):
        (problem,) = load_problems(path)
        assert problem.question == "What is 6*7?" and problem.messages == chat("Be brief.", "What is 6*7?")
    refused = ":1: 'prompt' must be text or a list of chat messages with text 'role' and 'content'"
    for content in ([{"type": "image", "image": "x.png"}, *text("Q?")], []):
        row = {"prompt": [{"role": "user", "content": content}], "answer": "1"}
        path = write(tmp_path, [row], "bad.jsonl")
        assert error(path).startswith(f"{path}{refused}")


def test_dapo_parquet_reads_as_the_jsonl_did(tmp_path):
    """DAPO/verl rows (chat prompt + reward_model.ground_truth) in parquet: the default answer column."""
    row = {"data_source": "math_dapo", "prompt": [{"content": "Solve 1+1.", "role": "user"}],
           "ability": "MATH", "reward_model": {"ground_truth": "2", "style": "rule"}, "extra_info": {"index": 0}}
    path = parquet(tmp_path / "dapo.parquet", [row] * 3)
    problems = load_problems(path)
    assert problems == [Problem("Solve 1+1.", "2", [{"content": "Solve 1+1.", "role": "user"}])]
    assert problems[0].fields == {k: v for k, v in row.items() if k != "prompt"}
    assert len(load_problems(path, dedupe=False)) == 3


def test_dotted_answer_field_reaches_into_a_struct(tmp_path):
    rows = [{"prompt": "Q1", "meta": {"gold": {"value": 7}}, "a.b": "flat"}]
    path = parquet(tmp_path / "n.parquet", rows)
    assert load_problems(path, answer_field="meta.gold.value")[0].answer == "7"
    assert load_problems(path, answer_field="a.b")[0].answer == "flat"  # a column named with a dot, as such
    assert error(path, answer_field="meta.gold.text") == \
        f"{path}:1: missing answer: no 'meta.gold.text': 'meta.gold' has keys ['value']"
    assert error(path, answer_field="meta.gold.value.x") == \
        f"{path}:1: missing answer: no 'meta.gold.value.x': 'meta.gold.value' is not a struct (found int)"


def test_missing_answer_column_names_file_row_column_and_columns_found(tmp_path):
    rows = [{"prompt": "Q1", "solution": "1"}, {"prompt": "Q2", "answer": "2", "id": 5}]
    path = write(tmp_path, rows, "m.jsonl")
    assert error(path, answer_field="solution") == \
        f"{path}:2: missing answer: no 'solution': found columns ['prompt', 'answer', 'id']"
    assert error(path) == (f"{path}:1: missing answer: no 'answer': found columns ['prompt', 'solution']; "
                           "--answer-field names the answer's column")
    pq_path = parquet(tmp_path / "m.parquet", [{"prompt": "Q1", "solution": None}])
    assert error(pq_path, answer_field="solution") == f"{pq_path}:1: missing answer: 'solution' is null"


def test_without_a_needed_answer_the_answer_is_none_and_dedupe_goes_by_prompt(tmp_path):
    """A reward function that needs no gold: need_answer=False. Rows repeat by prompt alone; a chat is told
    apart from another with the same last user message by its other messages."""
    rows = [{"prompt": chat("S1", "Q"), "tests": [1]}, {"prompt": chat("S1", "Q"), "tests": [1]},
            {"prompt": chat("S2", "Q"), "tests": [2]}, {"prompt": "Q", "answer": "3"}]
    path = write(tmp_path, rows, "free.jsonl")
    problems = load_problems(path, need_answer=False)
    assert [(p.question, p.answer, p.fields.get("tests")) for p in problems] == \
        [("Q", None, [1]), ("Q", None, [2]), ("Q", "3", None)]
    assert len(load_problems(path, need_answer=False, dedupe=False)) == 4
    assert "missing answer" in error(path)  # needed: the first row has none
    assert "missing answer: no 'gold'" in error(path, answer_field="gold", need_answer=False)  # named: needed


def test_json_file_as_a_list_or_as_json_lines(tmp_path):
    """A .json file: one list of rows, or JSON lines (what datasets' to_json writes by default)."""
    rows = [{"prompt": "Q1", "answer": 1}, {"prompt": chat("S", "Q2"), "answer": 2}]
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(rows, indent=1))
    expected = [Problem("Q1", "1"), Problem("Q2", "2", chat("S", "Q2"))]
    assert load_problems(listed) == load_problems(write(tmp_path, rows, "lines.json")) == expected


def test_parquet_limit_reads_only_the_batches_it_needs(tmp_path, monkeypatch):
    rows = [{"prompt": f"Q{i}", "answer": str(i)} for i in range(20)]
    path = parquet(tmp_path / "big.parquet", rows, row_group_size=4)
    pulled = []
    iter_batches = pq.ParquetFile.iter_batches

    def counting(self, *a, **kw):
        for batch in iter_batches(self, *a, **kw):
            pulled.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    monkeypatch.setattr(data, "PARQUET_BATCH", 2)
    assert [p.question for p in load_problems(path, limit=3)] == ["Q0", "Q1", "Q2"]
    assert pulled == [2, 2]  # two batches of two rows give the three rows asked for
    pulled.clear()
    assert len(load_problems(path)) == 20 and sum(pulled) == 20


def test_parquet_value_json_cannot_hold_is_one_line_naming_row_and_column(tmp_path):
    rows = [{"prompt": "Q1", "answer": "1", "blob": None}, {"prompt": "Q2", "answer": "2", "blob": b"\x00"}]
    path = parquet(tmp_path / "b.parquet", rows)
    assert [p.question for p in load_problems(path, limit=1)] == ["Q1"]  # row 2 is never converted
    assert error(path) == (f"{path}:2: column 'blob' holds a value of type bytes, which a JSON row cannot: "
                           "write the column as text or numbers")
    path = parquet(tmp_path / "d.parquet", [{"prompt": "Q1", "answer": decimal.Decimal("1.5")}])
    assert "column 'answer' holds a value of type Decimal" in error(path)


def test_parquet_without_pyarrow_is_one_line_saying_what_to_install(tmp_path, monkeypatch):
    path = parquet(tmp_path / "p.parquet", [{"prompt": "Q", "answer": "1"}])
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as if it were not installed
    assert error(path) == f"{path}: a parquet file needs pyarrow: pip install pyarrow"
    assert error(path, limit=0) == f"{path}: a parquet file needs pyarrow: pip install pyarrow"


def test_not_a_parquet_file_and_empty_parquet(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text('{"prompt": "Q", "answer": "1"}\n')
    assert error(bad).startswith(f"{bad}: not a readable parquet file (ArrowInvalid: ")
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), empty)
    assert error(empty) == f"{empty}: no problems found (the file is empty)"


# ----------------------------------------------------------------------------
# train.py and eval.py on such a file

TINY = ["--model", str(ROOT / "data/tiny-qwen3"), "--prompts-per-step", "4", "--group-size", "4",
        "--max-new-tokens", "24", "--no-compile", "--steps", "1"]


def arith_rows(n: int) -> list[dict]:
    return [json.loads(line) for line in (ROOT / "data/arith/train.jsonl").open()][:n]


def test_train_on_a_conversational_parquet_runs_as_on_the_jsonl(tmp_path):
    """The embedded arithmetic rows, as a conversational parquet with the gold in `solution`: the chat
    template renders a one-message chat as it renders the question, so the step is the jsonl's, number
    for number (rewards included: the golds were read from `solution`)."""
    rows = arith_rows(16)
    plain = write(tmp_path, rows, "plain.jsonl")
    conv = parquet(tmp_path / "conv.parquet", [
        {"prompt": [{"role": "user", "content": r["problem"]}], "solution": r["answer"], "id": i}
        for i, r in enumerate(rows)])
    out = tmp_path / "runs"
    train.main([*TINY, "--data", str(plain), "--eval-data", "--out-dir", str(out), "--name", "jsonl"])
    train.main([*TINY, "--data", str(conv), "--answer-field", "solution", "--eval-data", str(conv),
                "--eval-limit", "2", "--eval-k", "1", "--out-dir", str(out), "--name", "parquet"])
    steps = {}
    for name in ("jsonl", "parquet"):
        lines = jsonl(out / name / "metrics.jsonl")
        steps[name] = {k: v for r in lines if "loss" in r for k, v in r.items()
                       if not k.startswith(("time", "tokens_per_s"))}  # timings differ
    assert steps["parquet"] == steps["jsonl"] and steps["jsonl"]["reward_mean"] > 0
    assert strict_file(out / "parquet/config.json")["answer_field"] == "solution"


def test_train_and_eval_bad_answer_field_is_one_line(tmp_path, capsys):
    conv = parquet(tmp_path / "c.parquet", [{"prompt": chat("S", "1+1"), "solution": "2"}])
    argv = [*TINY, "--data", str(conv), "--eval-data", "--out-dir", str(tmp_path), "--name", "r"]
    assert error_line(capsys, train.main, [*argv, "--answer-field", "gold"]) == \
        f"error: {conv}:1: missing answer: no 'gold': found columns ['prompt', 'solution']"
    assert not (tmp_path / "r").exists()
    argv = ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(conv), "--out", str(tmp_path / "e.jsonl")]
    assert error_line(capsys, eval_cli.main, [*argv, "--answer-field", ""]) == \
        "error: --answer-field: empty column name"
    assert error_line(capsys, eval_cli.main, argv) == (f"error: {conv}:1: missing answer: no 'answer': found "
                                                       "columns ['prompt', 'solution']; --answer-field names "
                                                       "the answer's column")
    eval_cli.main(["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(conv), "--answer-field",
                   "solution", "--k", "1", "--max-new-tokens", "8", "--out", str(tmp_path / "e.jsonl")])
    rows = jsonl(tmp_path / "e.jsonl")
    assert [r["gold"] for r in rows if "gold" in r] == ["2"]
