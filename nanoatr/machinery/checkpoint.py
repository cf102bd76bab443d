"""Crash-safe checkpoints of a run: written (save), validated (check, latest), repaired after a crash
(recover) and loaded (load_state); the durable writes (write_bytes, replace_bytes) serve folder.py too.
Their layout and what they guarantee: docs/library.md#checkpoints"""
import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

import torch
from safetensors import SafetensorError
from tqdm import tqdm

from nanoatr import lora
from nanoatr.tokenizer import TOKENIZER_FILES

LATEST, NEW, MANIFEST, STATE = "checkpoint", ".checkpoint-new", "manifest.json", "trainer_state.pt"
LEFTOVER = ".checkpoint-"  # NEW and the trash of a deletion: removed by recover() and save()
KEPT = re.compile(r"checkpoint-step(\d+)$")


class CheckpointError(ValueError):
    """A run folder, log or checkpoint that cannot be used or written; the message is one line for the
    user."""


def warn(message: str):
    """A line on stderr; above the progress bar while one runs (tqdm.write), not glued to its end."""
    tqdm.write(message, file=sys.stderr)


def reason(e: BaseException) -> str | None:
    """An OSError in a phrase ("disk full"), also as torch.save (RuntimeError) or safetensors report it;
    else None."""
    if isinstance(e, SafetensorError) and (code := re.search(r"(?:os error|code:) (\d+)", str(e))):
        e = OSError(int(code[1]), os.strerror(int(code[1])))
    e = e.__context__ if isinstance(e, RuntimeError) and isinstance(e.__context__, OSError) else e
    if isinstance(e, OSError):
        return "disk full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e)).lower()


def _sha256(path) -> str | None:
    """What sha256sum prints, None if unreadable."""
    h = hashlib.sha256()
    with contextlib.suppress(OSError), open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
        return h.hexdigest()


def _fsync(path, directory: bool = False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def replace_bytes(path: Path, data: bytes):
    """Write a whole file atomically: a temp file, fsynced, renamed over it, the directory fsynced."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write_bytes(tmp, data)
        os.replace(tmp, path)
        _fsync(path.parent, directory=True)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write {path} ({reason(e)})") from None


def read_tokenizer_files(model_dir) -> dict[str, bytes]:
    """The tokenizer files of a model directory, read once at start; every save writes them from memory."""
    files = [Path(model_dir) / name for name in TOKENIZER_FILES]
    return {f.name: f.read_bytes() for f in files if f.is_file()}


# ----------------------------------------------------------------------------
# Checkpoints

def save(run_dir, model, tokenizer_files: dict[str, bytes], state: dict, keep: int = 2) -> Path:
    """Write a checkpoint of state["step"] and make it run_dir/checkpoint; keep the newest `keep` in all.

    model: our Qwen3, or under LoRA the PeftModel around it (its adapter alone is written).
    tokenizer_files: read_tokenizer_files(...) of the run's start, never a checkpoint a save may delete."""
    run_dir, step = Path(run_dir), int(state["step"])
    new, cur = run_dir / NEW, run_dir / LATEST
    if bad := nonfinite({"weights": model.state_dict(), **state}):  # a diverged run's: never a checkpoint
        raise CheckpointError(f"step {step} was not saved: {bad} holds a NaN or an inf (the run diverged); "
                              f"{run_dir} keeps its earlier checkpoints as they were")
    recover(run_dir)  # finishes a swap cut short, removes leftovers
    try:
        new.mkdir(parents=True)
        if hasattr(model, "peft_config"):
            lora.save_adapter(model, new)
        else:
            model.save_pretrained(new)
        for name, data in tokenizer_files.items():
            write_bytes(new / name, data)
        with open(new / STATE, "wb") as f:  # a file: torch's "unexpected pos" then has the OSError as context
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        for f in (files := [f for f in sorted(new.iterdir()) if f.is_file()]):
            _fsync(f)  # those written by save_pretrained / peft
        manifest = {"step": step, "files": {f.name: f.stat().st_size for f in files},
                    "sha256": {f.name: _sha256(f) for f in files}}
        write_bytes(new / MANIFEST, json.dumps(manifest).encode())
        _fsync(new, directory=True)
        problem = check(new, hashes=False)[1]  # hashes: just read from these very files
        if problem:  # a writer that failed without an error
            raise CheckpointError(problem)
    except BaseException as e:
        shutil.rmtree(new, ignore_errors=True)
        if (why := f"it is unusable: {e}" if isinstance(e, CheckpointError) else reason(e)) is None:
            raise  # Ctrl-C, or a bug: as it is
        previous = f"the previous checkpoint {cur} is intact" if cur.is_dir() else \
            "no earlier checkpoint exists"
        raise CheckpointError(f"{why} while writing checkpoint {new} (step {step}): {previous}") from None
    try:
        _install(run_dir)
    except OSError as e:  # .checkpoint-new/ is complete: recover() puts it in place
        raise CheckpointError(f"{reason(e)} while moving checkpoint {new} (step {step}) into place: "
                              f"{run_dir} keeps a complete checkpoint (--resume {run_dir} continues from "
                              "it)") from None
    try:
        older = _older(run_dir)
        newer, kept = [p for s, p in older if s >= step], [p for s, p in older if s < step]
        for path in newer + kept[keep - 1:]:
            _trash(path)
    except OSError as e:
        warn(f"warning: could not remove an old checkpoint in {run_dir} ({reason(e)})")
    return cur


def _install(run_dir: Path):
    """The swap: checkpoint/ -> checkpoint-stepN/ (an unusable one is deleted), .checkpoint-new/ ->
    checkpoint/."""
    new, cur = run_dir / NEW, run_dir / LATEST
    if cur.is_dir():
        previous = check(cur, load=False)[0]
        if previous is None:  # unusable (latest() fell back past it): not kept
            _trash(cur)
        else:
            older = run_dir / f"checkpoint-step{previous:06d}"
            if older.exists():
                _trash(older)
            os.rename(cur, older)
            _fsync(run_dir, directory=True)
    os.rename(new, cur)
    _fsync(run_dir, directory=True)


def _older(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of the checkpoints kept beside checkpoint/, newest first (none in a missing folder)."""
    kept = [(int(m[1]), p) for p in run_dir.glob("*") if (m := KEPT.match(p.name)) and p.is_dir()]
    return sorted(kept, reverse=True)


def _trash(path: Path):
    """Delete a directory so that a crash midway never leaves a half-deleted one under its real name."""
    trash = path.with_name(f"{LEFTOVER}trash-{path.name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(path, trash)
    _fsync(path.parent, directory=True)
    shutil.rmtree(trash)


def recover(run_dir):
    """Repair a run folder after a crash; call it holding the lock (folder.lock_run and save do): a complete
    .checkpoint-new/ (a save killed after writing it) is swapped in if checkpoint/ is older or unusable, and
    leftovers are removed. An older checkpoint is latest()'s fallback; the next save prunes old ones."""
    run_dir = Path(run_dir)
    try:
        if (run_dir / NEW).is_dir():
            step, problem = check(run_dir / NEW)
            current = check(run_dir / LATEST)[0]  # None if unusable: as latest() checks (SHA-256s too)
            if problem is None and (current is None or step > current):
                _install(run_dir)
        for path in run_dir.glob(f"{LEFTOVER}*"):
            shutil.rmtree(path)
    except OSError as e:
        raise CheckpointError(f"cannot repair run folder {run_dir} ({reason(e)})") from None


def latest(run_dir) -> Path | None:
    """The newest usable checkpoint of a run (checkpoint/, then older ones), or None if it has none.

    Reads only. An unusable one is skipped with a warning; CheckpointError if none is usable."""
    run_dir, bad = Path(run_dir), []
    for path in [p for p in [run_dir / LATEST] + [p for _, p in _older(run_dir)] if p.is_dir()]:
        problem = check(path)[1]
        if problem is None:
            for b, why in bad:
                warn(f"warning: checkpoint {b} is unusable ({why}); falling back to {path}")
            return path
        bad.append((path, problem))
    if bad:
        raise CheckpointError(f"{run_dir} has no usable checkpoint: {bad[0][0]}: {bad[0][1]}")
    return None


def check(path, load: bool = True, hashes: bool | None = None) -> tuple[int | None, str | None]:
    """(step, None) for a complete checkpoint directory, else (None, what is wrong in one phrase).

    Checks sizes, safetensors headers, the JSON config, the tokenizer, (load, or no manifest) that
    trainer_state.pt unpickles, and (hashes, by default load) each file's SHA-256 (docs/library.md)."""
    path = Path(path)
    manifest, digests = None, {}
    if (path / MANIFEST).is_file():
        try:
            manifest = json.loads((path / MANIFEST).read_bytes())
            sizes, step = dict(manifest["files"]), int(manifest["step"])
            digests = dict(manifest.get("sha256", {}))
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            return None, f"{MANIFEST} is unreadable"
        for name, size in sizes.items():
            if not (path / name).is_file():
                return None, f"{name} is missing"
            if (actual := (path / name).stat().st_size) != size:
                return None, f"{name} has {actual} bytes instead of {size}"
    config = "adapter_config.json" if (path / "adapter_config.json").is_file() else "config.json"
    try:
        json.loads((path / config).read_bytes())
    except (OSError, ValueError):
        return None, f"{config} is missing or not valid JSON"
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        return None, "no *.safetensors weights"
    for f in weights:
        if problem := _safetensors_problem(f):
            return None, problem
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return None, "no tokenizer (tokenizer.json / tokenizer_config.json)"
    if not (path / STATE).is_file():
        return None, f"{STATE} is missing"
    if load or manifest is None:
        try:
            state = torch.load(path / STATE, map_location="cpu", weights_only=True, mmap=True)
            saved = int(state["step"])
        except Exception as e:  # unpickling raises anything
            first = str(e).splitlines()[0][:80] if str(e) else ""
            return None, f"{STATE} does not load ({type(e).__name__}: {first})"
        if manifest is not None and saved != step:
            return None, f"{STATE} holds step {saved} but {MANIFEST} says {step}"
        step = saved
    # Last: the slow check, and the others name a damage more precisely.
    for name in digests if (load if hashes is None else hashes) else ():
        if _sha256(path / name) != digests[name]:
            return None, f"{name} does not match its SHA-256 in {MANIFEST} (changed since the save)"
    return step, None


def _safetensors_problem(f: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the data its offsets span."""
    size = f.stat().st_size
    try:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if size < 8 or n > size - 8:
                raise ValueError
            header = json.loads(fh.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return f"{f.name} has no valid safetensors header (truncated?)"
    if 8 + n + end != size:
        return f"{f.name} has {size} bytes but its header says {8 + n + end} (truncated?)"
    return None


def load_state(path) -> dict:
    # weights_only=True: tensors and plain Python values only (a pickle that would run code is refused).
    state = torch.load(Path(path) / STATE, map_location="cpu", weights_only=True)
    if bad := nonfinite(state):
        raise CheckpointError(f"{Path(path) / STATE}: {bad} holds a NaN or an inf (a run that diverged): "
                              "it cannot be resumed from")
    return state


def nonfinite(tree, name: str = "") -> str | None:
    """The first tensor in nested dicts and lists ('optimizer.state.0.exp_avg') holding a NaN or an inf; None
    when there is none."""
    if torch.is_tensor(tree):
        return name if tree.is_floating_point() and not bool(tree.isfinite().all()) else None
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    return next((found for k, v in items if (found := nonfinite(v, f"{name}.{k}" if name else str(k)))), None)
