"""Problems and tasks: jsonl files of problems (one loader for the training set and every benchmark);
the tasks, which problems, which warm-start policy and which reward go together (TASKS, train.py's
--task); and the embedded tasks' keys (arith_key, countdown_key: a problem up to the order of its numbers).

The format is told from each row's fields:

- DAPO-Math-17k / verl: ``prompt`` is a list of chat messages and the gold is
  ``reward_model.ground_truth``. ``Problem.question`` is the last user message as
  given (template included) and ``Problem.messages`` keeps the whole chat.
- AIME / AMC style: text from ``problem`` (else ``question``), gold from ``answer``.
  Golds stay as written: AIME's zero-padded ``"025"`` stays ``"025"`` and AMC's JSON
  float ``27.0`` becomes ``"27.0"``; equivalence is the verifier's job, not ours.

Extra fields (``solution``, ``id``, ``url``, ...) are ignored. A ``.json`` file holding
one list of rows is read too. Parquet is not: convert DAPO-Math-17k once with
``pandas.read_parquet(p).to_json(out, orient="records", lines=True)``.

DAPO files repeat every prompt (x100 in the training set, x32 in its AIME
validation set), so identical (question, answer) rows are dropped by default;
call ``dedupe`` yourself (with ``dedupe=False`` here) when you want to log how many.
Every error is a ``DataError``: one line naming the file and the line.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from nanoatr.rewards import countdown_reward, math_reward
from nanoatr.verifier.countdown import parse_answer


@dataclass(frozen=True)
class Task:
    """An embedded task: its warm-start policy, its problems, and the reward of a completion."""
    model: str                            # the model directory (warm-start policy and tokenizer)
    data: str                             # training problems
    eval_data: tuple[str, ...]            # held-out problems, never trained on
    reward: Callable                      # its reward function (nanoatr/rewards.py: TRL's shape)
    max_new_tokens: int                   # the completion budget its warm-start was made for


# --task NAME, whose reward is the default of --reward. "math" grades final answers with the verifier: the
# embedded arithmetic task, and any --model / --data of yours (DAPO-Math-17k, AIME, AMC) with the same
# reward. "countdown" (reach a target from four numbers; data/make_countdown.py) is where the trust region
# visibly acts; it is evaluated on its held-out split and on a transfer split whose targets are drawn another
# way (make_countdown.make_transfer).
TASKS = {
    "math": Task("data/tiny-qwen3", "data/arith/train.jsonl", ("data/arith/heldout.jsonl",),
                 math_reward, 48),
    "countdown": Task("data/tiny-qwen3-countdown", "data/countdown/rl.jsonl",
                      ("data/countdown/heldout.jsonl", "data/countdown/transfer.jsonl"),
                      countdown_reward, 96),
}

REPOSITORY = Path(__file__).resolve().parent.parent


def located(path: str) -> str:
    """A task's file as written when it is there from the current directory, else the repository's own
    (a command started from another folder)."""
    return path if Path(path).exists() or not (REPOSITORY / path).exists() else str(REPOSITORY / path)


def task_defaults(cfg, given: set):
    """The --task's model, problem files and completion budget, for every such field not given on the
    command line. A config with --eval-data (train.py) takes the task's training file as --data and its
    held-out files as --eval-data; one without (eval.py) takes the held-out files as --data."""
    task = TASKS[cfg.task]
    held_out = [located(f) for f in task.eval_data]
    files = {"data": located(task.data), "eval_data": held_out} if hasattr(cfg, "eval_data") else \
        {"data": held_out}
    values = {"model": located(task.model), "max_new_tokens": task.max_new_tokens, **files}
    return dataclasses.replace(cfg, **{k: v for k, v in values.items() if k not in given})


class DataError(ValueError):
    """A problem file we cannot use; the message is one line: ``file:line: what is wrong``."""


@dataclass(frozen=True)
class Problem:
    question: str  # the problem text (DAPO rows: the user message content as given)
    answer: str  # gold answer as written in the file, converted with str()
    messages: list[dict] | None = None  # the chat when the file provides one (DAPO/verl), else None
    # the row's other columns (every one but the prompt's), as read: a reward function's keyword arguments
    fields: dict = field(default_factory=dict, compare=False, hash=False, repr=False)


# The embedded tasks' keys: a problem up to what cannot make it a different problem. Two problems with one
# key are one problem (the same numbers in another order), so no evaluation split of an embedded task
# shares a key with its training or RL split, nor with another evaluation split (tests/test_splits.py).

def arith_key(problem: Problem) -> tuple[tuple[int, ...], int]:
    """The arithmetic task's key (data/make_default.py: '63*15', '75-72-61'): its numbers as a sorted
    multiset and the answer. '63*15' and '15*63' share one; so do '75-72-61' and '75-61-72'."""
    return tuple(sorted(int(n) for n in re.findall(r"\d+", problem.question))), int(problem.answer)


def countdown_key(problem: Problem) -> tuple[tuple[int, ...], int]:
    """The Countdown task's key (data/make_countdown.py: '3,8,5,2:19'): its numbers as a sorted multiset
    and the target. '3,8,5,2:19' and '2,3,5,8:19' share one; '3,8,5,2:20' is another problem."""
    parsed = parse_answer(problem.answer)
    if parsed is None:
        raise ValueError(f"not a Countdown problem: {problem.answer!r:.60}")
    numbers, target = parsed
    return tuple(sorted(numbers)), target


def load_problems(path: str | Path, limit: int | None = None, dedupe: bool = True) -> list[Problem]:
    """Read problems from a ``.jsonl`` (or ``.json`` list) file, in file order.

    ``limit`` caps the number of problems returned (counted after deduplication), and
    reading stops as soon as it is reached, so a prefix of a huge file is cheap.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    path = Path(path)
    if not path.is_file():  # checked here, not in the lazy reader, so limit=0 still reports it
        raise DataError(f"{path}: file not found")
    problems = (_parse_row(row, where) for where, row in _rows(path))
    if dedupe:
        problems = _unique(problems)
    problems = list(itertools.islice(problems, limit))  # lazy: stops reading at the limit
    if not problems and limit != 0:
        raise DataError(f"{path}: no problems found (the file is empty)")
    return problems


@dataclass(frozen=True)
class Solved:
    """A supervised example: a question, its worked solution (what the model is trained to write) and the
    final answer (the held-out check grades against it)."""
    question: str
    solution: str
    answer: str
    where: str = field(default="", compare=False)  # file:line, for messages about this row


def load_solutions(path: str | Path) -> list[Solved]:
    """SFT rows {"problem" (or "question"), "solution", "answer"} from a .jsonl (or .json list) file, in
    order, every row kept (a second solution of a question is more data, not a repeat). A row without a
    question, a solution or an answer is a DataError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    out = []
    for where, row in _rows(path):
        problem = _parse_row(row, where)  # the question and the answer, checked as for any problem file
        if "solution" not in row:
            raise DataError(f"{where}: no 'solution' (an SFT row needs problem, solution and answer)")
        out.append(Solved(problem.question, _text(row["solution"], where, "solution"), problem.answer, where))
    if not out:
        raise DataError(f"{path}: no rows found (the file is empty)")
    return out


def dedupe(problems: list[Problem]) -> tuple[list[Problem], int]:
    """Drop repeated (question, answer) pairs, keeping the first of each in order.

    Returns the unique problems and how many rows were dropped (for the caller to log).
    """
    unique = list(_unique(problems))
    return unique, len(problems) - len(unique)


def _unique(problems: Iterable[Problem]) -> Iterator[Problem]:
    seen: set[tuple[str, str]] = set()
    for p in problems:
        if (p.question, p.answer) not in seen:
            seen.add((p.question, p.answer))
            yield p


def save_problems(path: str | Path, problems: list[Problem]) -> None:
    """Write problems as jsonl rows ``{"problem": ..., "answer": ...}`` (chat messages are not kept)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps({"problem": p.question, "answer": p.answer}, ensure_ascii=False) + "\n")


# Some AIME 2025 copies were written with single backslashes, so a JSON decoder read
# "\frac" as form feed + "rac" and "\triangle" as tab + "riangle". We undo the escapes
# whose result never occurs in real problem text: \f and \b always; \t and \r only
# before a lowercase letter, as in \triangle, \times, \theta, \right, \rho (a genuine tab
# or CR is followed by space, a digit, a capital or a newline). "\n" + letter (\neq, \nu)
# cannot be told from a real line break, so it is left alone.
_BROKEN_ESCAPES = re.compile(r"[\f\b]|[\t\r](?=[a-z])")
_UNESCAPE = {"\f": "\\f", "\b": "\\b", "\t": "\\t", "\r": "\\r"}


def repair_latex_escapes(text: str) -> str:
    """Put back LaTeX commands that a JSON decoder turned into control characters."""
    return _BROKEN_ESCAPES.sub(lambda m: _UNESCAPE[m.group()], text)


# ---------------------------------------------------------------------------
# reading rows, telling the format


def _rows(path: Path) -> Iterator[tuple[str, object]]:
    """Yield (``file:line`` for messages, decoded row), skipping blank lines."""
    if path.suffix == ".json":  # one JSON list of rows; cheap enough for benchmark-sized files
        try:
            rows = json.loads(path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(rows, list):
            raise DataError(f"{path}: a .json file must hold a list of rows, found {type(rows).__name__}")
        yield from ((f"{path}[{i}]", row) for i, row in enumerate(rows))
        return
    with open(path, "rb") as f:  # bytes, so a bad encoding is reported with its line number too
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                yield where, json.loads(line.rstrip())  # rstrip: an error at the end points into the line
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None


def _parse_row(row: object, where: str) -> Problem:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object per row, found {type(row).__name__}")
    if "prompt" in row and "reward_model" in row:
        return _parse_dapo(row, where)
    text_key = next((k for k in ("problem", "question") if k in row), None)
    if text_key is None or "answer" not in row:
        if text_key is not None:
            raise DataError(f"{where}: missing answer: found '{text_key}' but no 'answer' field")
        raise DataError(
            f"{where}: cannot tell the format: found fields {list(row)}; expected 'problem'/'question'"
            " + 'answer', or DAPO 'prompt' + 'reward_model.ground_truth'"
        )
    # "problem" wins, but an empty one falls back to "question" when both exist
    text = row.get("problem") or row.get("question")
    fields = {k: v for k, v in row.items() if k not in ("problem", "question")}
    return Problem(_text(text, where, text_key), _answer(row["answer"], where), fields=fields)


def _parse_dapo(row: dict, where: str) -> Problem:
    reward_model = row["reward_model"]
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise DataError(f"{where}: missing answer: DAPO row has no 'reward_model.ground_truth'")
    answer = _answer(reward_model["ground_truth"], where)
    fields = {k: v for k, v in row.items() if k != "prompt"}
    prompt = row["prompt"]
    if isinstance(prompt, str):  # some verl files store the prompt as plain text
        return Problem(_text(prompt, where, "prompt"), answer, fields=fields)
    ok = isinstance(prompt, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt
    )
    users = [m["content"] for m in prompt if m["role"] == "user"] if ok else []
    if not users:
        raise DataError(f"{where}: DAPO 'prompt' must be a list of chat messages with 'role' and 'content',"
                        " one of them from the user")
    messages = [{**m, "content": repair_latex_escapes(m["content"])} for m in prompt]
    return Problem(_text(users[-1], where, "prompt"), answer, messages, fields)


def _text(value: object, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: '{key}' must be non-empty text, found {value!r:.40}")
    return repair_latex_escapes(value)


def _answer(value: object, where: str) -> str:
    if value is None:
        raise DataError(f"{where}: missing answer (it is null)")
    # bool is an int subclass, but a true/false gold is a broken row, not the number 1
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: the answer must be a string or a number, found {type(value).__name__}")
    answer = repair_latex_escapes(str(value))
    if not answer.strip():
        raise DataError(f"{where}: empty answer")
    return answer
