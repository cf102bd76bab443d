r"""The paper's data in one command: training prompts, the three benchmarks and the SFT solutions, from
the Hugging Face hub, written as the jsonl files nanoatr/data.py reads.

    python data/get_paper_data.py                          # everything into data/paper/ (downloads ~1 GB)
    python data/get_paper_data.py --datasets aime24 aime25 amc23
    python data/get_paper_data.py --from-dir ~/hub-files   # files brought in by other means: DIR/REPO/PATH
                                                           # (a .parquet may be there as .jsonl, same rows)

Writes, in --out (data/paper/):
    dapo-math-17k.jsonl   the RL prompts: DAPO-Math-17k's rows as served (verl format: its "Answer:"
                          instruction, reward_model.ground_truth), each distinct prompt once (the hub
                          file repeats every one 100 times: 1,791,700 rows, 17,917 prompts)
    aime24.jsonl  aime25.jsonl  amc23.jsonl
                          the benchmarks of Table 2, {"problem", "answer"} per line, answers as served
                          (AMC's are JSON floats, 27.0: the verifier takes 27 for them)
    omr-sft.jsonl  omr-heldout.jsonl
                          OpenMathReasoning (CoT split) for the formatting SFT, {"problem", "solution",
                          "answer"}: the first --sft-size problems (one solution each, in the hub's
                          order) whose solution has a worked part and a \boxed{} final answer that the
                          verifier accepts against expected_answer; omr-heldout.jsonl holds the first
                          --sft-heldout such problems, never among the SFT ones (sft.py's --eval-data).
                          "solution" is generated_solution as served: a <think> block, then the written
                          solution; sft.py keeps the block or (--no-thinking) trains on the written part
    sources.json          each file's dataset, the commit it was read at, its rows and counts

Sources assumed (dataset id: files read; columns). Revision "main", resolved to its commit when the
run starts and recorded in sources.json; --source NAME=REPO@REVISION pins another (or another copy):
    dapo-math-17k       BytedTsinghua-SIA/DAPO-Math-17k: data/dapo-math-17k.parquet; data_source,
                        prompt (chat list), ability, reward_model {ground_truth, style}, extra_info
    aime24              HuggingFaceH4/aime_2024: data/train-*.parquet; id, problem, solution,
                        answer, url, year
    aime25              math-ai/aime25: test.jsonl; problem, answer (its \frac / \triangle stored as
                        form feed / tab are repaired, nanoatr.data.repair_latex_escapes)
    amc23               math-ai/amc23: *test-*.parquet; id, question, answer, url
    openmathreasoning   nvidia/OpenMathReasoning: data/cot-*.parquet, read shard by shard until enough
                        rows are found; expected_answer, problem_type, problem, generated_solution, ...
                        (unsloth/OpenMathReasoning-mini has the same columns in one 100 MB file:
                        --source openmathreasoning=unsloth/OpenMathReasoning-mini)

Downloads go through huggingface_hub's cache (~/.cache/huggingface), so a run cut short downloads
nothing twice when started again; each output file is written to a temp file and renamed over the old
one only when complete, so an interrupted run leaves the previous files as they were. Parquet files
need pyarrow (optional, like matplotlib: one line says how to install it). Bad input is one `error:`
line: a row without a problem or an answer (its file and row, counted from 1), a file without the
columns above, an unknown dataset, a hub that cannot be reached.
"""
import fnmatch
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from anywhere without installing

from nanoatr.machinery.flags import arg, die, parse  # noqa: E402
from nanoatr.data import DataError, load_problems, repair_latex_escapes  # noqa: E402
from nanoatr.verifier import verify  # noqa: E402


@dataclass(frozen=True)
class Source:
    repo: str       # the hub dataset id
    files: str      # its data files (fnmatch pattern over the paths in the repository), read in name order
    revision: str = "main"


SOURCES = {
    "dapo-math-17k": Source("BytedTsinghua-SIA/DAPO-Math-17k", "data/dapo-math-17k.parquet"),
    "aime24": Source("HuggingFaceH4/aime_2024", "data/train-*.parquet"),
    "aime25": Source("math-ai/aime25", "test.jsonl"),
    "amc23": Source("math-ai/amc23", "*test-*.parquet"),
    "openmathreasoning": Source("nvidia/OpenMathReasoning", "data/cot-*.parquet"),
}


@dataclass
class GetDataConfig:
    datasets: list[str] = arg(list(SOURCES), "which to write", choices=list(SOURCES))
    out: str = arg(str(HERE / "paper"), "output directory")
    sft_size: int = arg(10_000, "OpenMathReasoning problems for the SFT (one solution each)", range=">=1")
    sft_heldout: int = arg(64, "more OpenMathReasoning problems, held out: the SFT's periodic accuracy",
                           range=">=0")
    source: list[str] = arg([], "NAME=REPO[@REVISION]: read a dataset from another hub "
                            "repository or revision")
    from_dir: str | None = arg(None, "read the files from DIR/REPO/PATH instead of the hub (brought in by "
                               "other means, or a test's fixtures)")


# ----------------------------------------------------------------------------
# Files: the hub (through its cache) or a local copy laid out as REPO/PATH


class Files:
    """The data files of a Source: `names(source)` lists them (and resolves the commit), `path(name)`
    brings one onto this machine. Shards are fetched only when read, so a subset costs one shard."""

    def __init__(self, from_dir: str | None):
        self.root = Path(from_dir) if from_dir else None
        self.commit: dict[str, str | None] = {}

    def names(self, src: Source) -> list[str]:
        """The data files of `src`, in name order: those matching its pattern, else (a copy brought in by
        other means) those matching its .jsonl twin, read as the parquet's rows would be."""
        if self.root is not None:
            base = self.root / src.repo
            listed = [p.relative_to(base).as_posix() for p in sorted(base.rglob("*")) if p.is_file()]
            self.commit[src.repo] = None  # a local copy: no commit to record
        else:
            api = self._api()
            try:
                sha = api.dataset_info(src.repo, revision=src.revision).sha
                listed = api.list_repo_files(src.repo, repo_type="dataset", revision=sha)
            except Exception as e:  # httpx, huggingface_hub and OS errors alike: the user needs one line
                raise DataError(hub_problem(src, e)) from None
            self.commit[src.repo] = sha
        for pattern in dict.fromkeys([src.files, jsonl_twin(src.files)]):
            names = sorted(n for n in listed if fnmatch.fnmatch(n, pattern))
            if names:
                return names
        if self.root is not None:
            raise DataError(self.layout_problem(src))
        shown = ", ".join(listed[:5]) + (", ..." if len(listed) > 5 else "")
        raise DataError(f"{src.repo}@{src.revision}: no data file matches {src.files!r} "
                        f"(files there: {shown}); pin another with --source")

    def layout_problem(self, src: Source) -> str:
        """Why a local copy has no file for `src`: where the file was expected (DIR/REPO/PATH) and a few of
        the files that are there, under DIR/REPO when it holds any, else under DIR."""
        base, twin = self.root / src.repo, jsonl_twin(src.files)
        nor = f" (nor {twin!r})" if twin != src.files else ""
        under = base if some_files(base) else self.root
        found = some_files(under)
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        there = f"files under {under}: {shown}" if found else f"{under} holds no file"
        return (f"{base}: no data file matches {src.files!r}{nor}; --from-dir expects the hub's files as "
                f"DIR/REPO/PATH: {base / src.files}; {there}")

    def path(self, src: Source, name: str) -> Path:
        if self.root is not None:
            return self.root / src.repo / name
        from huggingface_hub import hf_hub_download
        try:
            return Path(hf_hub_download(src.repo, name, repo_type="dataset", revision=self.commit[src.repo]))
        except Exception as e:
            raise DataError(hub_problem(src, e, name)) from None

    @staticmethod
    def _api():
        from huggingface_hub import HfApi
        from huggingface_hub.utils import logging
        logging.set_verbosity_error()  # its retry warnings would bury the one line we print
        return HfApi()


def jsonl_twin(pattern: str) -> str:
    """A parquet pattern's .jsonl counterpart (data/x.parquet -> data/x.jsonl); other patterns as they are."""
    return pattern[:-len(".parquet")] + ".jsonl" if pattern.endswith(".parquet") else pattern


def some_files(root: Path, most: int = 5) -> list[str]:
    """Files under `root` (relative to it, folders walked in name order), a few more than `most` at most:
    the walk stops there, as DIR may be a large folder. [] when there is no such folder."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        found += [Path(folder, f).relative_to(root).as_posix() for f in sorted(files)]
        if len(found) > most:
            break
    return found


def hub_problem(src: Source, e: Exception, name: str = "") -> str:
    first = (str(e).strip().splitlines() or [""])[0][:160]
    return (f"cannot read {src.repo}{'/' + name if name else ''} (revision {src.revision}) "
            f"from the Hugging Face hub: {type(e).__name__}: {first}. No network? Bring the files in by "
            "other means and pass --from-dir DIR (laid out as DIR/REPO/PATH)")


def rows(path: Path, columns: list[str]) -> Iterator[tuple[str, dict]]:
    """(FILE:ROW, row) of a .parquet or .jsonl file, rows counted from 1; a file without one of
    `columns` is a DataError naming it."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(f"{path} is parquet, which needs pyarrow: pip install pyarrow") from None
        try:
            f = pq.ParquetFile(path)
        except Exception as e:  # not parquet, truncated
            raise DataError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
        missing = [c for c in columns if c not in f.schema_arrow.names]
        if missing:
            raise DataError(f"{path}: no column {missing[0]!r} (it has {', '.join(f.schema_arrow.names)})")
        n = 0
        for batch in f.iter_batches(batch_size=4096, columns=columns):
            for row in batch.to_pylist():
                n += 1
                yield f"{path}:{n}", row
        return
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n}: invalid JSON: {e.msg} (column {e.colno})") from None
            if not isinstance(row, dict) or any(c not in row for c in columns):
                raise DataError(f"{path}:{n}: expected a JSON object with {', '.join(columns)}")
            yield f"{path}:{n}", row


# ----------------------------------------------------------------------------
# The datasets: hub rows -> our rows


def text(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: no {key} (found {value!r:.40})")
    return repair_latex_escapes(value)


def answer(value, where: str):
    """The gold as served (a string or a JSON number), never empty (nor NaN: a missing value in parquet
    written from pandas)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip() or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise DataError(f"{where}: no answer (found {value!r:.40})")
    return repair_latex_escapes(value) if isinstance(value, str) else value


def dapo(read) -> tuple[list[dict], str]:
    """Every distinct (prompt, ground truth) once, in the file's order (DAPO repeats each 100 times)."""
    out, seen, total = [], set(), 0
    for where, row in read(["data_source", "prompt", "ability", "reward_model", "extra_info"]):
        total += 1
        truth = answer((row["reward_model"] or {}).get("ground_truth"), where)
        prompt = row["prompt"]
        if not (isinstance(prompt, list) and any(isinstance(m, dict) and m.get("role") == "user"
                                                 and isinstance(m.get("content"), str) for m in prompt)):
            raise DataError(f"{where}: 'prompt' is not a chat with a user message")
        key = (json.dumps(prompt, sort_keys=True), truth)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out, f"{len(out)} prompts ({total} rows: {total - len(out)} repeats dropped)"


THINK_END = "</think>"


def written_part(solution: str) -> str:
    """The written solution after a reasoning model's <think> block (all of it when there is none)."""
    return solution.rsplit(THINK_END, 1)[-1].strip()


def usable(row: dict) -> bool:
    """An OpenMathReasoning row the formatting SFT can use: a question, an expected answer, and a solution
    whose written part is more than its box and ends in a \\boxed{} answer the verifier accepts."""
    problem, solution, gold = row.get("problem"), row.get("generated_solution"), row.get("expected_answer")
    if not all(isinstance(v, str) and v.strip() for v in (problem, solution, gold)):
        return False
    if row.get("problem_type", "has_answer_extracted") != "has_answer_extracted":  # proofs, no clear answer
        return False
    written = written_part(solution)
    return "\\boxed" in written and len(written) > len(gold) + 20 and verify(written, gold)


def openmathreasoning(read, size: int, heldout: int) -> tuple[list[dict], list[dict], str]:
    """The first heldout + size usable problems, one solution each: held-out first, then the SFT's."""
    chosen, seen, total = [], set(), 0
    for where, row in read(["problem", "generated_solution", "expected_answer"], optional=("problem_type",)):
        total += 1
        if row["problem"] in seen or not usable(row):
            continue
        seen.add(row["problem"])
        chosen.append({"problem": repair_latex_escapes(row["problem"]), "solution": row["generated_solution"],
                       "answer": row["expected_answer"]})
        if len(chosen) == heldout + size:
            break
    held, sft = chosen[:heldout], chosen[heldout:]
    short = f" (only {len(sft)} of --sft-size {size} found)" if len(sft) < size else ""
    return sft, held, f"{len(sft)} SFT + {len(held)} held-out problems{short} from the first {total} rows"


# ----------------------------------------------------------------------------
# Writing


def write_jsonl(path: Path, rows_: list[dict]):
    """All rows or nothing: a temp file beside `path`, checked with the loader train.py uses, then renamed
    over it (an interruption leaves the previous file)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows_:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        load_problems(tmp, limit=1)  # the format nanoatr reads (all rows were checked on the way in)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def get(name: str, src: Source, files: Files, cfg) -> tuple[dict[str, list[dict]], str]:
    """The output files of one dataset ({file name: rows}) and its line of the summary."""
    names = files.names(src)

    def read(columns, optional=()):
        for n in names:  # shard by shard: a subset downloads only what it reads
            path = files.path(src, n)
            present = columns + [c for c in optional if c in peek_columns(path)]
            yield from rows(path, present)

    if name == "dapo-math-17k":
        out, note = dapo(read)
        return {"dapo-math-17k.jsonl": out}, note
    if name == "openmathreasoning":
        sft, held, note = openmathreasoning(read, cfg.sft_size, cfg.sft_heldout)
        return {"omr-sft.jsonl": sft, "omr-heldout.jsonl": held}, note
    key = "question" if name == "amc23" else "problem"  # a benchmark: its text and answer columns
    out = [{"problem": text(row, key, where), "answer": answer(row["answer"], where)}
           for where, row in read([key, "answer"])]
    return {f"{name}.jsonl": out}, f"{len(out)} problems"


def peek_columns(path: Path) -> list[str]:
    """The columns of a parquet file (a jsonl file's rows say theirs: every optional column is asked for)."""
    if path.suffix != ".parquet":
        return []
    import pyarrow.parquet as pq
    return pq.ParquetFile(path).schema_arrow.names


def sources(cfg) -> dict[str, Source]:
    """SOURCES with --source NAME=REPO[@REVISION] applied."""
    out = dict(SOURCES)
    for item in cfg.source:
        name, _, spec = item.partition("=")
        if name not in SOURCES or not spec:
            raise DataError(f"--source {item}: expected NAME=REPO[@REVISION] with NAME one of "
                            f"{', '.join(SOURCES)}")
        repo, _, revision = spec.partition("@")
        out[name] = Source(repo, SOURCES[name].files, revision or "main")
    return out


def main(argv=None):
    cfg, _, _ = parse(GetDataConfig, argv, __doc__)
    if cfg.from_dir is not None and not Path(cfg.from_dir).is_dir():
        why = "not a directory" if Path(cfg.from_dir).exists() else "no such directory"
        die(f"--from-dir {cfg.from_dir}: {why}")
    out_dir = Path(cfg.out)
    try:
        srcs = sources(cfg)
        out_dir.mkdir(parents=True, exist_ok=True)
        files, written, record = Files(cfg.from_dir), [], {}
        for name in dict.fromkeys(cfg.datasets):
            outputs, note = get(name, srcs[name], files, cfg)
            for file, rows_ in outputs.items():
                write_jsonl(out_dir / file, rows_)
                written.append(f"{out_dir / file} ({len(rows_)})")
            src = srcs[name]
            commit = files.commit[src.repo]
            record[name] = {"repo": src.repo, "revision": src.revision, "commit": commit,
                            "local_copy": None if commit else str(files.root / src.repo), "files": src.files,
                            "written": {f: len(r) for f, r in outputs.items()}, "counts": note}
            print(f"{name}: {note} <- {f'{src.repo}@{commit}' if commit else files.root / src.repo}",
                  flush=True)
    except DataError as e:
        die(str(e))
    except KeyboardInterrupt:
        die("interrupted: the files written before are complete, the others as they were", 130)
    previous = (json.loads((out_dir / "sources.json").read_text()) if (out_dir / "sources.json").is_file()
                else {})
    tmp = out_dir / f".sources.json.tmp{os.getpid()}"  # all or nothing, as write_jsonl
    tmp.write_text(json.dumps({**previous, **record}, indent=2) + "\n")
    os.replace(tmp, out_dir / "sources.json")
    print(f"wrote {len(written)} files: " + ", ".join(written))


if __name__ == "__main__":
    main()
