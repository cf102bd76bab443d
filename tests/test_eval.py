"""eval.py end to end on a tiny random model: rows, table numbers, --skip-done, one-line errors."""
import contextlib
import dataclasses
import io
import json
from pathlib import Path

import pytest

import eval as eval_cli
from nanoatr.data import TASKS
from nanoatr.evaluate import scores_line, summarize, verdicts_by_problem
from conftest import error_line, jsonl
from tiny import make_model_dir

ROOT = Path(__file__).resolve().parent.parent
K, N = 2, 3
PROBLEMS = {"alpha": [("12+34", "46"), ("5*6", "30"), ("70-8", "62")], "beta": [("9+9", "18"), ("11*3", "33")]}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    files, tmp_path = [], tmp_path_factory.mktemp("data")
    for name, rows in PROBLEMS.items():
        f = tmp_path / f"{name}.jsonl"
        f.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in rows))
        files.append(str(f))
    return files


@pytest.fixture(scope="module", autouse=True)
def mixed_verdicts():
    """A random model is never right; grade by completion length so the table has non-trivial numbers. The
    reward of a right one, 1e39, is past float32's range: its total is inf, which --out writes null."""
    with pytest.MonkeyPatch.context() as mp:
        def even_length(completions, **kwargs):
            return [1e39 if len(c) % 2 == 0 else 0.0 for c in completions]
        mp.setitem(TASKS, "math", dataclasses.replace(TASKS["math"], reward=even_length))
        yield


def run(model_dir, data, out, *more):
    eval_cli.main(["--model", str(model_dir), "--data", *data, "--k", str(K), "--n", str(N), "--out", str(out),
                   "--max-new-tokens", "6", "--batch-size", "4", *more])


@pytest.fixture(scope="module")
def full_run(model_dir, data, tmp_path_factory):
    """One complete evaluation: (output file, what it printed, its stderr: no terminal, as in a pipe)."""
    out = tmp_path_factory.mktemp("full") / "new/folder/out.jsonl"  # its folders are made
    printed, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(err):
        run(model_dir, data, out)
    return out, printed.getvalue(), err.getvalue()


def test_rows_and_table(model_dir, full_run):
    out, printed, err = full_run
    rows = jsonl(out)[1:]  # after the settings line
    assert len(rows) == N * sum(map(len, PROBLEMS.values()))
    fields = {"benchmark", "problem_id", "sample", "completion", "gold", "correct", "length", "truncated"}
    assert all(fields <= r.keys() for r in rows)
    for name, problems in PROBLEMS.items():
        mine = [r for r in rows if r["benchmark"] == name]
        assert sorted((r["problem_id"], r["sample"]) for r in mine) == [(i, j) for i in range(len(problems))
                                                                        for j in range(N)]
        assert all(r["gold"] == problems[r["problem_id"]][1] for r in mine)
        assert all(r["correct"] == (len(r["completion"]) % 2 == 0) for r in mine)
        assert all(r["reward"] == (None if r["correct"] else 0.0) for r in mine)

    summaries = [summarize(verdicts_by_problem(r for r in rows if r["benchmark"] == name), [K]) for name in PROBLEMS]
    expected = [s[key] for s in summaries for key in (f"mean@{K}", f"pass@{K}")]
    expected += [sum(s[f"mean@{K}"] for s in summaries) / 2, sum(s[f"pass@{K}"] for s in summaries) / 2]
    settings = jsonl(out)[0]["settings"]  # the first line: the model; sampling as used (no generation_config:
    assert settings["model"] == str(model_dir.resolve()) and settings["adapter"] is None  # the defaults)
    assert [settings[k] for k in ("temperature", "top_k", "top_p", "max_new_tokens", "seed", "stop")] == \
        [1.0, 0, 1.0, 6, 0, []]
    lines = printed.splitlines()
    assert lines[0].split() == ["Model", "alpha", "beta", "Average"]
    assert lines[1].split() == [f"Mean@{K}", "(%)", f"Pass@{K}", "(%)"] * 3
    assert lines[2].split() == [model_dir.name] + [f"{v:.2f}" for v in expected]
    name = eval_cli.model_name  # the row's name: a model's folder, or a kept checkpoint's run (its --out too)
    assert name("runs/kl3-x/checkpoint") == name("runs/kl3-x/checkpoint-step000040") == "kl3-x"
    assert name("models/Qwen3-1.7B") == "Qwen3-1.7B"
    assert eval_cli.default_out("runs/kl3-x/checkpoint-step000040/").name.startswith("kl3-x-")
    # `python eval.py ... 2>&1 | tee log`: tqdm draws only on a terminal, so no bar in the table's stream
    assert "\r" not in err and "compl/s" not in err and "compl]" not in err
    # the layout by hand: each column its widest entry + 2 wide; a name wider than its two columns is cut
    cells = ["12.50", "50.00", "100.00", "100.00", "56.25", "75.00"]
    assert eval_cli.grid("Model", ["a", "b" * 30], 8, [("m", cells)]).splitlines() == [
        "Model  a" + " " * 23 + "b" * 22 + "  Average", " " * 7 + "  Mean@8 (%)  Pass@8 (%)" * 3,
        "m      " + "".join(" " * (12 - len(c)) + c for c in cells)]


def test_resume_samples_only_what_is_missing(capsys, model_dir, data, full_run, tmp_path):
    head, *lines = full_run[0].read_text().splitlines(keepends=True)
    partial = tmp_path / "partial.jsonl"
    kept = [head] + lines[:4] + lines[10:12]  # the settings, and some of each benchmark
    partial.write_text("".join(kept) + lines[12][:15])  # and a line torn by a kill mid-write

    run(model_dir, data, partial, "--skip-done")
    rows = jsonl(partial)[1:]
    triples = [(r["benchmark"], r["problem_id"], r["sample"]) for r in rows]
    assert len(triples) == len(set(triples)) == len(lines)
    assert partial.read_text().startswith("".join(kept))
    assert f"({len(lines) - len(kept) + 1} new)" in capsys.readouterr().out

    run(model_dir, data, partial, "--skip-done")  # nothing left to do
    assert len(jsonl(partial)) == 1 + len(lines)
    assert "(0 new)" in capsys.readouterr().out


@pytest.mark.parametrize("change, out, named", [
    ({"--model": "nope"}, None, "error: "), ({"--data": "bad.jsonl"}, None, "error: "),
    ({"--n": str(K - 1)}, None, "error: "), ({"--adapter": "."}, None, "error: . is not a LoRA adapter"),
    ({}, "", "error: "), ({"--skip-done": None}, '{"not": "a row"}\n{}\n', "error: "),
    ({"--max-new-tokens": "100000000"}, None, "error: --max-new-tokens 100000000 does not fit the model's"),
], ids=["missing model", "bad data line", "k > n", "adapter", "exists", "bad resume file", "budget"])
def test_bad_input_is_one_line(capsys, monkeypatch, model_dir, data, tmp_path, change, out, named):
    """One line each; --max-new-tokens 100000000 was an out-of-memory traceback (the KV cache is sized by
    it)."""
    monkeypatch.chdir(tmp_path)
    Path("bad.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", \n')
    if out is not None:  # --out there already
        Path("o.jsonl").write_text(out)
    args = {"--model": str(model_dir), "--data": data[0], "--k": str(K), "--out": "o.jsonl", **change}
    assert named in error_line(capsys, eval_cli.main, [x for kv in args.items() for x in kv if x is not None])


@pytest.mark.parametrize("flags, named", [
    (["--temperature", "0.5"], "--temperature 1.0 (now 0.5)"), (["--seed", "1"], "--seed 0 (now 1)"),
    (["--top-p", "0.9", "--top-k", "5"], "--top-p 1.0 (now 0.9); --top-k 0 (now 5)"),
    (["--max-new-tokens", "7"], "--max-new-tokens 6 (now 7)"), (["--stop", "="], "--stop [] (now ['='])"),
    (["--system-prompt", "S"], "--system-prompt None (now 'S')"), (["other model"], "--model"),
    (["--sampler", "multinomial"], "--sampler 'inverse-cdf' (now 'multinomial')")])
def test_resume_with_other_settings_is_refused(capsys, model_dir, data, full_run, tmp_path, flags, named):
    """One table never mixes two evaluations: --skip-done names the flags that differ, and samples nothing."""
    out = tmp_path / "o.jsonl"
    out.write_bytes(full_run[0].read_bytes())
    other = make_model_dir(tmp_path / "other", num_hidden_layers=1, tie_word_embeddings=True)
    argv = ["--model", str(other if flags == ["other model"] else model_dir), "--data", *data, "--k", str(K),
            "--n", str(N), "--out", str(out), "--max-new-tokens", "6", "--batch-size", "4", "--skip-done",
            *([] if flags == ["other model"] else flags)]
    if "--max-new-tokens" in flags:
        del argv[argv.index("--max-new-tokens"):argv.index("--max-new-tokens") + 2]
    err = error_line(capsys, eval_cli.main, argv)
    assert err.startswith("error: --skip-done: ") and named in err
    assert out.read_bytes() == full_run[0].read_bytes()


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_unwritable_out_is_one_line_before_the_model_loads(capsys, monkeypatch, model_dir, data, tmp_path, where):
    monkeypatch.setattr(eval_cli.lora, "load_model", lambda *a, **k: pytest.fail("loaded the model first"))
    (tmp_path / "file").write_text("")
    out = tmp_path if where == "a directory" else tmp_path / "file" / "o.jsonl"
    err = error_line(capsys, eval_cli.main, ["--model", str(model_dir), "--data", *data, "--out", str(out)] +
                     (["--skip-done"] if where == "a directory" else []))
    assert err.startswith(f"error: cannot write --out {out}")


@pytest.mark.parametrize("flag, value", [("--k", "0"), ("--n", "-1"), ("--temperature", "-1"), ("--top-p", "0"),
                                         ("--top-p", "1.5"), ("--top-k", "-1"), ("--max-new-tokens", "0"),
                                         ("--batch-size", "0"), ("--seed", "-1"), ("--limit", "-1"),
                                         ("--temperature", "nan")])
def test_every_flag_is_range_checked(capsys, flag, value):
    assert error_line(capsys, eval_cli.main, [flag, value]).startswith(f"error: {flag} must be")


@pytest.mark.parametrize("line", ['{"benchmark": "b", "problem_id": ' + "9" * 5000 + "}", "[" * 5000 + "]" * 5000])
def test_an_out_file_row_json_cannot_read_into_python_is_one_line(tmp_path, capsys, line):
    """--skip-done of an --out file with a row of too many digits or nested past json's limit: one line naming
    the file and line, as any row that is not eval.py's."""
    out = tmp_path / "e.jsonl"
    out.write_text('{"settings": {}}\n' + line + "\n" + '{"settings": {}}\n')
    assert error_line(capsys, eval_cli.read_done, out).startswith(f"error: {out}:2: not an eval.py row")


def test_train_prints_each_evaluated_file():
    one = {"eval/a/mean@8": 10.0, "eval/a/pass@8": 20.0, "eval/mean@8": 10.0, "eval/pass@8": 20.0}
    assert scores_line(one, 8, before=one) == "a Mean@8 10.0% (from 10.0%)  Pass@8 20.0%"  # the file, named
    two = {**one, "eval/b/mean@8": 30.0, "eval/b/pass@8": 40.0, "eval/mean@8": 20.0, "eval/pass@8": 30.0}
    assert scores_line(two, 8) == "a Mean@8 10.0%  Pass@8 20.0%; b Mean@8 30.0%  Pass@8 40.0%"
    assert scores_line(two, 8, before=two) == \
        "a Mean@8 10.0% (from 10.0%)  Pass@8 20.0%; b Mean@8 30.0% (from 30.0%)  Pass@8 40.0%"
