"""Tests for nanoatr.data: every benchmark format, dedup, errors, the AIME25 escape repair. The rows below
copy the real files' shapes (problem texts shortened)."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from hub_fixtures import DAPO_TEMPLATE as TEMPLATE, dapo_row
from nanoatr.data import DataError, Problem, load_problems, repair_latex_escapes
from tiny import make_default


def write(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def error(path, **kw):
    with pytest.raises(DataError) as e:
        load_problems(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_aime24_zero_padding_amc23_float_answers_question_field_int_answer_and_extra_fields(tmp_path):
    rows = [{"id": 68, "problem": "Find $x$.", "solution": "...", "answer": "025", "url": "u",
             "question": "Find $x$."},
            {"id": 0, "problem": "Cities?", "answer": 27.0, "url": "u", "question": "Cities?"},
            {"problem": "Neg?", "answer": -1.0}, {"question": "Q1", "answer": 70, "id": "x"},
            {"problem": "", "question": "Q2", "answer": "5"}]
    assert load_problems(write(tmp_path, rows)) == [
        Problem("Find $x$.", "025"), Problem("Cities?", "27.0"), Problem("Neg?", "-1.0"), Problem("Q1", "70"),
        Problem("Q2", "5")]


def test_dapo_format_keeps_messages_and_dedupes(tmp_path):
    rows = [dapo_row("P1", "45")] * 32 + [dapo_row("P2", "-3")] * 32 + [dapo_row("P1", "45")]
    path = write(tmp_path, rows)
    problems = load_problems(path)
    assert [p.answer for p in problems] == ["45", "-3"]
    assert problems[0].question == TEMPLATE.format("P1")
    assert problems[0].messages == [{"content": TEMPLATE.format("P1"), "role": "user"}]
    everything = load_problems(path, dedupe=False)
    assert len(everything) == 65 and [everything[0], everything[32]] == problems


def test_limit_counts_unique_problems_and_stops_reading(tmp_path):
    rows = [{"problem": "A", "answer": "1"}] * 3 + [{"problem": "B", "answer": "2"}, "{broken"]
    path = write(tmp_path, rows)
    assert [p.question for p in load_problems(path, limit=2)] == ["A", "B"]  # never reaches the broken line
    assert len(load_problems(path, limit=2, dedupe=False)) == 2
    assert load_problems(path, limit=0) == []


GOOD = '{"problem": "A", "answer": "1"}'
HOSTILE = [  # what json reads but Python cannot take as text and numbers, and its error line
    ('{"problem": "\\ud800 B", "answer": "2"}', "a lone surrogate \\ud800 is no character"),
    ('{"problem": "B", "answer": "2", "\\uDC00": 1}', "a lone surrogate \\udc00 is no character"),
    ('{"problem": "B", "answer": ' + "9" * 5000 + "}", "a number Python cannot read (Exceeds the limit (4300 "
     "digits) for integer string conversion: value has 5000 digits)"),
    ('{"problem": "B", "answer": "2", "x": ' + "[" * 5000 + "]" * 5000 + "}",
     "lists and dicts nested more than 64 deep"),  # past json's own recursion limit
    ('{"problem": "B", "answer": "2", "x": ' + '{"a": ' * 64 + "1" + "}" * 64 + "}",
     "lists and dicts nested more than 64 deep"),  # json reads it; copying it would recurse past the limit
]


@pytest.mark.parametrize("text, expected", HOSTILE)
def test_what_python_cannot_take_from_json_is_one_line_naming_the_file_and_line(tmp_path, text, expected):
    assert error(write(tmp_path, [GOOD, text])) == f"{tmp_path / 'data.jsonl'}:2: {expected}"
    listed = tmp_path / "list.json"
    listed.write_text(f"[{GOOD}, {text}]")
    assert error(listed) == f"{listed}: {expected}"


def test_a_surrogate_pair_and_a_row_nested_64_deep_are_read(tmp_path):
    deep = '{"problem": "B", "answer": "2", "x": ' + '{"a": ' * 63 + "1" + "}" * 63 + "}"  # the row is one
    rows = load_problems(write(tmp_path, ['{"problem": "\\ud83d\\ude00 A", "answer": "1"}', deep]))
    assert rows[0].question == "\U0001f600 A" and rows[1].fields["x"]["a"]["a"]["a"] is not None


def test_error_messages_name_file_and_line_counting_blank_lines(tmp_path):
    assert error(tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: file not found"
    assert error(tmp_path / "nope.jsonl", limit=0).endswith("file not found")
    path = write(tmp_path, [{"problem": "A", "answer": "1"}, {"problem": "B", "answer": "2"}, {"foo": 1, "bar": 2}])
    assert error(path) == (
        f"{path}:3: cannot tell the format: found columns ['foo', 'bar']; expected 'prompt' (text or chat "
        "messages: TRL, DAPO, verl) or 'problem'/'question'"
    )
    assert all("empty" in error(write(tmp_path, rows, "empty.jsonl")) for rows in ([], ["", "  "]))
    path = write(tmp_path, [{"problem": "A", "answer": "1"}, "", "   ", '{"problem": "B", "answer": '])
    assert error(path) == f"{path}:4: invalid JSON: Expecting value (column 27)"  # blank lines are counted


@pytest.mark.parametrize("row, expected", [
    ({"problem": "A"}, ":1: missing answer: no 'answer': found columns ['problem']; --answer-field names "
                       "the answer's column"),
    ({"problem": "A", "answer": None}, ":1: missing answer: 'answer' is null; --answer-field names"),
    ({"problem": "A", "answer": float("nan")}, ":1: missing answer: 'answer' is NaN, a missing value"),
    ({"problem": "A", "answer": "  "}, ":1: empty answer 'answer'"),
    ({"problem": "A", "answer": True}, ":1: the answer 'answer' must be a string or a number, found bool"),
    ({"problem": "  ", "answer": "1"}, ":1: 'problem' must be non-empty text"),
    ({"prompt": [], "reward_model": {"ground_truth": "1"}},
     ":1: 'prompt' must be text or a list of chat messages with text 'role' and 'content', one of them "
     "from the user; found []"),
    ({"prompt": [{"role": "system", "content": "S"}], "answer": "1"},
     ":1: 'prompt' must be text or a list"),  # no user message
    ({"prompt": None, "answer": "1"}, ":1: 'prompt' must be text or a list of chat messages"),
    ({"prompt": [{"role": "user", "content": "A"}], "reward_model": {}},
     ":1: missing answer: no 'reward_model.ground_truth': 'reward_model' has keys []"),
    ({"prompt": "A", "reward_model": None},
     ":1: missing answer: no 'reward_model.ground_truth': 'reward_model' is null"),
    ({"prompt": "A", "reward_model": "7"},
     ":1: missing answer: no 'reward_model.ground_truth': 'reward_model' is not a struct (found str)"),
    ([1, 2], ":1: expected a JSON object per row, found list"),
])
def test_bad_rows(tmp_path, row, expected):
    path = write(tmp_path, [row])
    assert error(path).startswith(f"{path}{expected}")


def test_repair_form_feed_and_tab_escapes():
    # what json.loads makes of the broken AIME25 rows: "\frac" -> form feed + "rac"
    broken = json.loads(r'{"p": "$\frac{1}{2}$ in $\triangle ABC$, $a \times b$, $\right)$"}')["p"]
    assert "\x0c" in broken and "\t" in broken
    assert repair_latex_escapes(broken) == r"$\frac{1}{2}$ in $\triangle ABC$, $a \times b$, $\right)$"
    # real whitespace is kept: a tab before a space/capital/digit, CRLF, newline + letter
    assert repair_latex_escapes("a\t1\tB\t x\r\ny\nneq") == "a\t1\tB\t x\r\ny\nneq"


def test_loader_repairs_question_answer_and_messages(tmp_path):
    path = tmp_path / "aime25.jsonl"
    # written by hand with single backslashes, as the upstream file was
    path.write_text('{"problem": "Find $\\frac{1}{2}$ of $\\triangle$.", "answer": "\\frac{3}{4}"}\n'
                    '{"prompt": [{"role": "user", "content": "$\\frac12$"}], "reward_model": {"ground_truth": "1"}}\n')
    first, second = load_problems(path)
    assert first == Problem(r"Find $\frac{1}{2}$ of $\triangle$.", r"\frac{3}{4}")
    assert second.question == second.messages[0]["content"] == r"$\frac12$"


text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1).filter(str.strip)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(text, text), min_size=1, max_size=5))
def test_save_load_round_trip(tmp_path_factory, pairs):
    path = tmp_path_factory.mktemp("rt") / "sub" / "p.jsonl"
    problems = [Problem(q, a) for q, a in pairs]
    make_default.save_problems(path, problems)
    assert load_problems(path, dedupe=False) == problems
