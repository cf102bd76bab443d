"""Problems and tasks: files of problems (one loader for the training set and every benchmark);
the tasks, which problems, which warm-start policy and which reward go together (TASKS, train.py's
--task); the embedded tasks' keys (arith_key, countdown_key: a problem up to the order of its numbers); and
the order a run draws them in (Shard: a step's prompts, sampling seeds and minibatch rows).

A row's prompt is ``prompt`` (text or chat messages: TRL, DAPO, verl), else ``problem`` / ``question``;
its gold is the ``answer`` column (``reward_model.ground_truth`` in a row with a ``reward_model``), kept
as written; its other columns are ``Problem.fields``. Formats, columns, errors: docs/library.md#data"""
from __future__ import annotations

import codecs
import dataclasses
import datetime
import functools
import itertools
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch

from nanoatr.rewards import countdown_reward, math_reward, one_line
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
    """A problem file we cannot use; the message is one line: ``file:row: what is wrong``."""


@dataclass(frozen=True)
class Problem:
    question: str  # the problem text (a chat's: its last user message as given)
    answer: str | None  # gold answer as written in the file, converted with str(); None: the file has none
    messages: list[dict] | None = None  # the chat when the prompt is one (TRL's conversational, DAPO)
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


def load_problems(path: str | Path, limit: int | None = None, dedupe: bool = True,
                  answer_field: str | None = None, need_answer: bool = True) -> list[Problem]:
    """Read problems from a ``.jsonl``, ``.json`` or ``.parquet`` file, in file order.

    ``limit`` caps the number of problems returned (counted after deduplication); reading stops as soon
    as it is reached. ``answer_field`` names the gold answer's column (None: the default, ``answer`` or
    ``reward_model.ground_truth``). A row without it is an error, unless the caller needs no gold
    (``need_answer=False``) and named no column: its answer is then None."""
    path = Path(path)
    problems = (_parse_row(row, where, answer_field, need_answer) for where, row in _rows(path))
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
    out = []
    for where, row in _rows(path):
        problem = _parse_row(row, where)  # the question and the answer, checked as for any problem file
        if "solution" not in row:
            raise DataError(f"{where}: no 'solution' (an SFT row needs problem, solution and answer)")
        out.append(Solved(problem.question, _text(row["solution"], where, "solution"), problem.answer, where))
    if not out:
        raise DataError(f"{path}: no rows found (the file is empty)")
    return out


def _unique(problems: Iterable[Problem]) -> Iterator[Problem]:
    seen: set[tuple[str, str | None]] = set()
    for p in problems:
        if (key := _key(p)) not in seen:
            seen.add(key)
            yield p


def _key(p: Problem) -> tuple[str, str | None]:
    return json.dumps(p.messages, sort_keys=True) if p.messages else p.question, p.answer


def not_held_out(file: str, problems: list[Problem], evaluated: list[Problem], task: str) -> str | None:
    """A line saying how many of `file`'s problems `evaluated` are training `problems` (the same prompt and
    answer, or where the task's key reads them the same key: arith_key, countdown_key), or None for none."""
    def keys(p: Problem) -> set:
        try:
            return {_key(p), {"math": arith_key, "countdown": countdown_key}[task](p)}
        except (ValueError, TypeError):  # not the task's kind of problem, or no answer
            return {_key(p)}
    trained = set().union(*map(keys, problems))
    shared = sum(bool(keys(p) & trained) for p in evaluated)
    return f"--eval-data {file}: {shared} of its {len(evaluated)} problems evaluated are training problems " \
        "(--data's, up to the order of their numbers): its scores are not held out" if shared else None


# Some AIME 2025 copies were written with single backslashes: a JSON decoder read "\frac" as form feed +
# "rac". Undone where the result never occurs in real text: \f and \b always; \t and \r before a lowercase
# letter (\triangle, \times, \right); "\n" + letter (\neq) cannot be told from a line break: left alone.
_BROKEN_ESCAPES = re.compile(r"[\f\b]|[\t\r](?=[a-z])")
_UNESCAPE = {"\f": "\\f", "\b": "\\b", "\t": "\\t", "\r": "\\r"}


def repair_latex_escapes(text: str) -> str:
    """Put back LaTeX commands that a JSON decoder turned into control characters."""
    return _BROKEN_ESCAPES.sub(lambda m: _UNESCAPE[m.group()], text)


# ---------------------------------------------------------------------------
# The order a run reads its problems in: a step's prompts, their sampling seeds, its minibatch rows

@dataclass(frozen=True)
class Shard:
    """A GRPO step's data, this rank's share: which problems it samples, in which chunks with which seeds,
    and its rows of each minibatch. Every seed is a function of the run's seed and the step, not the rank:
    a resumed run goes on as if never stopped, N ranks train as one (docs/library.md#data)."""
    seed: int
    prompts_per_step: int
    chunk: int        # prompts sampled together (--rollout-batch, or the rank's whole share)
    group_size: int
    rank: int = 0
    world: int = 1

    @property
    def share(self) -> int:
        """Prompts per step on this rank."""
        return self.prompts_per_step // self.world

    def problems(self, n_problems: int, step: int, round: int, n: int) -> list[int]:
        """This rank's first n problems of sampling round `round` of a step (round r > 0: its own draw), of
        a fresh seeded shuffle every pass over the data (a function of the step: resumable)."""
        seed, first = self.seed + (round << 20), step * self.prompts_per_step + self.rank * self.share
        return [shuffle(n_problems, seed, i // n_problems)[i % n_problems] for i in range(first, first + n)]

    def chunks(self, step: int, round: int, n: int) -> list[tuple[slice, int]]:
        """This rank's first n prompts of a round, cut into chunks: (their indices, the chunk's seed)."""
        first = round * (self.prompts_per_step // self.chunk) + (self.rank * self.share) // self.chunk
        return [(slice(c * self.chunk, min(n, (c + 1) * self.chunk)), self.chunk_seed(step, first + c))
                for c in range(math.ceil(n / self.chunk))]

    def minibatches(self, step: int, epochs: int, minibatches: int) -> list[torch.Tensor]:
        """This rank's row indices of each minibatch, epoch after epoch: every minibatch takes the same
        number of rows of every rollout chunk, shuffled per chunk (seeded by the chunk, wherever it was)."""
        G, C, first = self.group_size, self.chunk, (self.rank * self.share) // self.chunk
        per_chunk = C * G // minibatches
        out = []
        for epoch in range(epochs):
            perms = [c * C * G + torch.randperm(C * G, generator=torch.Generator().manual_seed(
                self.chunk_seed(step, first + c, salt=1 + epoch))) for c in range(self.share // C)]
            out += [torch.cat([p[m * per_chunk:(m + 1) * per_chunk] for p in perms])
                    for m in range(minibatches)]
        return out

    def chunk_seed(self, step: int, chunk: int, salt: int = 0) -> int:
        """A chunk's sampling seed (salt 0), or its shuffle's in epoch salt - 1 (epoch 0: the sampling's)."""
        return (self.seed * 1_000_003 + step + (chunk + (max(salt - 1, 0) << 16)) * 0x9E3779B1) % (1 << 32)

    def noise(self, step: int) -> torch.Generator:
        """The random picks of a step's loss (clip-cov), this rank's own."""
        return torch.Generator().manual_seed((self.seed * 31 + step + self.rank * 0x9E3779B1) % (1 << 32))


@functools.lru_cache(maxsize=2)  # a step's prompts span at most two passes
def shuffle(n_problems: int, seed: int, epoch: int) -> list[int]:
    return random.Random(seed * 7919 + epoch).sample(range(n_problems), n_problems)


# ---------------------------------------------------------------------------
# reading rows, telling the format


def _rows(path: Path) -> Iterator[tuple[str, object]]:
    """(``file:row`` for messages, decoded row), lazily. The file is looked at here, at once (a parquet
    file opened), so that a missing file, a missing pyarrow or a file that is not parquet is reported before
    the first row is asked for (with limit=0 too)."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if path.suffix == ".parquet":
        return _parquet_rows(path, _open_parquet(path))
    if path.suffix == ".json":  # one JSON list of rows ('[' first), or JSON lines (datasets' to_json)
        with open(path, "rb") as f:
            if f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"["):
                return _json_list_rows(path)
    return _jsonl_rows(path)  # .jsonl, any other name, and a .json of JSON lines


def _jsonl_rows(path: Path) -> Iterator[tuple[str, object]]:
    """(``file:line``, row) of each non-blank line."""
    with open(path, "rb") as f:  # bytes, so a bad encoding is reported with its line number too
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            yield where, _loads(line.rstrip(), where)  # rstrip: an error at the end points into the line


def _json_list_rows(path: Path) -> Iterator[tuple[str, object]]:
    """(``file[i]``, row) of a file holding one JSON list; read whole: cheap enough for benchmark files."""
    try:
        rows = _loads(path.read_text(encoding="utf-8-sig"), path, lines=True)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    yield from ((f"{path}[{i}]", row) for i, row in enumerate(rows))


MAX_DEPTH = 64  # lists and dicts in a row nest at most this deep (each reward function copies the row)


def _loads(text: str, where, lines: bool = False):
    """The JSON value of `text` (a row; with `lines`, a list of rows, and bad JSON's line named). What Python
    cannot take (a number of too many digits, a lone surrogate, nesting past MAX_DEPTH): a DataError too."""
    depth = 0
    try:
        value = json.loads(text)
        if re.search(r"\\u[dD][89a-fA-F]", text):  # a surrogate's escape: half of a pair, or alone
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as e:
        line = f":{e.lineno}" * lines
        raise DataError(f"{where}{line}: invalid JSON: {e.msg} (column {e.colno})") from None
    except UnicodeEncodeError as e:
        raise DataError(f"{where}: a lone surrogate \\u{ord(e.object[e.start]):x} is no character") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise DataError(f"{where}: a number Python cannot read ({str(e).split(';')[0]})") from None
    except RecursionError:  # nested past json's own limit
        value, depth = [], MAX_DEPTH + 1
    level = value if lines else [value]
    while level and depth <= MAX_DEPTH:  # level by level (no recursion): depth counts the lists and dicts
        level = [v for x in level if isinstance(x, (dict, list))
                 for v in (x.values() if isinstance(x, dict) else x)]
        depth += bool(level)
    if depth > MAX_DEPTH:
        raise DataError(f"{where}: lists and dicts nested more than {MAX_DEPTH} deep")
    return value


def _open_parquet(path: Path):
    """The pyarrow ParquetFile of `path` (its metadata read, no rows yet)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: a parquet file needs pyarrow: pip install pyarrow") from None
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # not parquet, truncated: pyarrow's own exception types
        raise DataError(f"{path}: not a readable parquet file ({one_line(e)})") from None


PARQUET_BATCH = 1024  # rows decoded at a time: a `limit` of a few rows reads one batch of a row group


def _parquet_rows(path: Path, parquet) -> Iterator[tuple[str, dict]]:
    """(``file:N``, row) of the N-th row (from 1), every value as JSON would hold it (_plain)."""
    try:
        rows = (row for batch in _batches(path, parquet) for row in batch.to_pylist())
        for n, row in enumerate(rows, 1):
            where = f"{path}:{n}"
            yield where, {column: _plain(value, where, column) for column, value in row.items()}
    finally:
        parquet.close()


def _batches(path: Path, parquet):
    """The file's record batches; a file that breaks while read is a DataError."""
    try:
        yield from parquet.iter_batches(batch_size=PARQUET_BATCH)
    except Exception as e:  # a corrupt page, an unsupported type
        raise DataError(f"{path}: not a readable parquet file ({one_line(e)})") from None


def _plain(value: object, where: str, column: str) -> object:
    """A parquet value as its JSON line would hold it: lists and structs (tuples of a map too) as lists and
    dicts, a date or time as ISO 8601 text. Bytes, decimals, durations: a DataError naming the column."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, where, column) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, where, column) for k, v in value.items()}
    if isinstance(value, (datetime.date, datetime.time)):  # a datetime is a date
        return value.isoformat()
    raise DataError(f"{where}: column {column!r} holds a value of type {type(value).__name__}, which a JSON "
                    "row cannot: write the column as text or numbers")


# ---------------------------------------------------------------------------
# a row -> a Problem


def _parse_row(row: object, where: str, answer_field: str | None = None,
               need_answer: bool = True) -> Problem:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object per row, found {type(row).__name__}")
    question, messages, prompt_columns = _prompt(row, where)
    answer = _gold(row, where, answer_field, need_answer)
    fields = {k: v for k, v in row.items() if k not in prompt_columns}
    return Problem(question, answer, messages, fields)


def _prompt(row: dict, where: str) -> tuple[str, list[dict] | None, tuple[str, ...]]:
    """The question, the chat (None for a text prompt) and the columns they are read from."""
    if "prompt" in row:
        if isinstance(row["prompt"], str):  # TRL's standard format; some verl files
            return _text(row["prompt"], where, "prompt"), None, ("prompt",)
        return *_chat(row["prompt"], where), ("prompt",)  # TRL's conversational format; DAPO
    key = next((k for k in ("problem", "question") if k in row), None)
    if key is None:
        raise DataError(f"{where}: cannot tell the format: found columns {list(row)}; expected 'prompt' "
                        "(text or chat messages: TRL, DAPO, verl) or 'problem'/'question'")
    # "problem" wins, but an empty one falls back to "question" when both exist
    return _text(row.get("problem") or row.get("question"), where, key), None, ("problem", "question")


def _chat(prompt: object, where: str) -> tuple[str, list[dict]]:
    """The last user message and the whole chat, each content as text (_content), LaTeX escapes repaired
    in both."""
    ok = isinstance(prompt, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and _content(m.get("content")) is not None
        for m in prompt
    )
    messages = [{**m, "content": repair_latex_escapes(_content(m["content"]))} for m in prompt] if ok else []
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise DataError(f"{where}: 'prompt' must be text or a list of chat messages with text 'role' and "
                        f"'content', one of them from the user; found {prompt!r:.60}")
    return _text(users[-1], where, "prompt"), messages


def _content(content: object) -> str | None:
    """A message's content as text: text as is, a list of parts [{"type": "text", "text": ...}, ...] (TRL's
    and transformers' multimodal shape) as its texts joined, as a chat template renders them; None for
    anything else (an image part, say), which a text model cannot be given."""
    if isinstance(content, str):
        return content
    parts = isinstance(content, list) and content and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content)
    return "".join(p["text"] for p in content) if parts else None


def _gold(row: dict, where: str, answer_field: str | None, need_answer: bool) -> str | None:
    """The answer from the named column (or the default one), as text; None when there is none and none is
    needed or named."""
    name = answer_field or ("reward_model.ground_truth" if "reward_model" in row else "answer")
    value, absent = _column(row, name)
    if absent is not None:
        if answer_field is None and not need_answer:
            return None
        hint = "" if answer_field else "; --answer-field names the answer's column"
        raise DataError(f"{where}: missing answer: {absent}{hint}")
    # bool is an int subclass, but a true/false gold is a broken row, not the number 1
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: the answer {name!r} must be a string or a number, found "
                        f"{type(value).__name__}")
    answer = repair_latex_escapes(str(value))
    if not answer.strip():
        raise DataError(f"{where}: empty answer {name!r}")
    return answer


def _column(row: dict, name: str) -> tuple[object, str | None]:
    """(the value of column `name`, None), a dotted name reaching into structs: reward_model.ground_truth
    is the key ground_truth of the column reward_model (a column whose own name has the dot is taken
    first). Without such a value, or with null or NaN (pandas' missing value, written so to parquet):
    (None, why, naming what was found)."""
    value, walked = row, []
    for key in [name] if name in row else name.split("."):
        inside = repr(".".join(walked))
        if not isinstance(value, dict):
            kind = "null" if value is None else f"not a struct (found {type(value).__name__})"
            return None, f"no {name!r}: {inside} is {kind}"
        if key not in value:
            return None, f"no {name!r}: " + (f"{inside} has keys {list(value)}" if walked else
                                             f"found columns {list(value)}")
        value = value[key]
        walked.append(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, f"{name!r} is {'NaN, a missing value' if value is not None else 'null'}"
    return value, None


def _text(value: object, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: '{key}' must be non-empty text, found {value!r:.40}")
    return repair_latex_escapes(value)
