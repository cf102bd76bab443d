"""What a resume may change: every flag refused, recorded or free, and config.json's record of changes."""
import dataclasses
import json
import types
import typing
from pathlib import Path

from nanoatr.machinery.checkpoint import KEPT, LATEST, MANIFEST, STATE, _sha256, warn
from nanoatr.machinery.flags import RECORDED, ConfigError, Refused, flag
from nanoatr.data import located


# ----------------------------------------------------------------------------
# Resuming: what each flag given on --resume does, and the record of what changed

def resume_rules(config) -> dict:
    """What a resume does with each field of a command's config given again with another value: its
    `resume=` (flags.arg), Refused("why"), RECORDED or FREE. A field declared without one is a TypeError."""
    if unruled := [f.name for f in dataclasses.fields(config) if "resume" not in f.metadata]:
        raise TypeError(f"{config.__name__}'s {', '.join(unruled)}: no resume= (flags.py: Refused, RECORDED "
                        "or FREE)")
    return {f.name: f.metadata["resume"] for f in dataclasses.fields(config)}


def named_checkpoint(resume: str) -> tuple[str, Path | None]:
    """--resume RUN, or RUN/checkpoint or RUN/checkpoint-stepN (TRL's resume_from_checkpoint): (the run
    folder, the checkpoint named, or None)."""
    named = Path(resume) if Path(resume).name else Path(resume).resolve()  # ".": its name
    if (named.name == LATEST or KEPT.match(named.name)) and (named.parent / "config.json").is_file():
        if not named.is_dir():
            there = sorted(p.name for p in named.parent.iterdir() if p.name == LATEST or KEPT.match(p.name))
            raise ConfigError(f"--resume {resume}: no such checkpoint ({named.parent} holds "
                              f"{', '.join(there) or 'none'})")
        return str(named.parent), named
    return resume, None


def resumed_config(cfg, given: set, hparams: dict | None = None, at_step: int | None = None):
    """(config, change): the run's settings as it last ran (cfg.resume/config.json with its recorded changes;
    at_step: as it stood then, a branch's) with the flags given now on top, and this resume's change, {field:
    {"from": a, "to": b}} for each RECORDED flag (resume_rules) given with a value other than the run's ({}
    when none). A Refused flag (or a method hyper-parameter in `hparams`) given with another value is a
    ConfigError naming it, the saved value and why; a path naming the run's own files is the run's value,
    however spelled."""
    saved_file = Path(cfg.resume) / "config.json"
    if (Path(cfg.resume) / MANIFEST).is_file() or (Path(cfg.resume) / STATE).is_file():  # a checkpoint
        holder = Path(cfg.resume).resolve().parent  # a copy's: no run folder; a symbolic link's: its target's
        there = f"of the run folder {holder}: --resume takes the run folder (--resume {holder})" if (
            holder / "config.json").is_file() else "that no run folder holds: --resume takes a run folder"
        raise ConfigError(f"--resume {cfg.resume} is a checkpoint {there}, and goes on from its newest "
                          "usable checkpoint")
    if not saved_file.is_file():
        raise ConfigError(f"--resume {cfg.resume}: no config.json there: not a run folder, or one whose "
                          "start never finished (start it again, without --resume)")
    try:
        saved = json.loads(saved_file.read_text())
        run = type(cfg)(**checked_settings(type(cfg), settings_now(saved, saved_file, at_step), saved_file))
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, AttributeError) as e:
        raise ConfigError(f"{saved_file} is not a run's config.json ({type(e).__name__}: {e})") from None
    found = dataclasses.replace(run, **{k: paths(k, getattr(run, k), lambda p: from_start(p, run.workdir))
                                        for k in PATH_FIELDS if hasattr(run, k)})
    check_files(found, saved.get("sha256"), saved_file)
    names, rules = [f.name for f in dataclasses.fields(cfg) if f.name in given], resume_rules(type(cfg))
    # a path flag given again naming the files the run's own value names (`found`: from_start's): no change
    differ = [k for k in names if getattr(cfg, k) != getattr(run, k) and not (k in PATH_FIELDS and
              paths(k, getattr(cfg, k), real_path) == paths(k, getattr(found, k), real_path))]
    refused = [(as_given(k, getattr(cfg, k)), k) for k in differ if isinstance(rules[k], Refused)]
    refused += [(as_given(k, v), "hparams") for k, v in sorted((hparams or {}).items())
                if v is not None and (run.hparams or {}).get(k) != v]
    if refused:
        given_flag, k = refused[0]
        raise ConfigError(f"{given_flag} cannot change on --resume ({saved_file} has \"{k}\": "
                          f"{json.dumps(getattr(run, k))}): {rules[k].why}")
    change = {k: {"from": getattr(run, k), "to": getattr(cfg, k)} for k in differ if rules[k] == RECORDED}
    kept = [k for k in names if k in differ or k not in PATH_FIELDS]  # the run's own files: as it names them
    return dataclasses.replace(found, **{k: getattr(cfg, k) for k in kept}), change


# What a resumed run's config.json may lack: flags added since the runs in results/, which ran with the
# default; any other missing field is refused. A new flag goes here (tests/test_start.py checks results/).
ADDED_LATER = {"task", "revision", "sampler", "dynamic_sampling", "base_name", "threads", "reward",
               "reward_weights", "answer_field", "mask_truncated", "overlong_buffer", "overlong_penalty",
               "lr_scheduler", "warmup_steps", "warmup_ratio", "keep_checkpoints", "report_to",
               "wandb_project", "workdir", "correct_reward",
               "adam_beta1", "adam_beta2", "log_completions"}


def checked_settings(cls, settings: dict, where) -> dict:
    """config.json's settings, none missing (but those ADDED_LATER), each of its field's type; else a
    ConfigError naming the file and the key."""
    if missing := sorted({f.name for f in dataclasses.fields(cls)} - settings.keys() - ADDED_LATER):
        shown = ", ".join(map(json.dumps, missing[:4])) + f" and {len(missing) - 4} more" * bool(missing[4:])
        raise ConfigError(f"{where} lacks {shown}: a resumed run goes on with the settings it ran with, not "
                          "defaults; put them back, or start a new run")
    for k, tp in typing.get_type_hints(cls).items():
        if k in settings and not of_type(settings[k], tp):
            raise ConfigError(f'{where} has "{k}": {json.dumps(settings[k])}, not of its type '
                              f"({getattr(tp, '__name__', tp)}): put the run's value back")
    return settings


def of_type(value, tp) -> bool:
    """A JSON value is of a field's type (int, float (an int too), str, bool, dict, list[...], X | None)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(of_type(value, t) for t in typing.get_args(tp))
    if typing.get_origin(tp) is list:
        return isinstance(value, list) and all(of_type(v, typing.get_args(tp)[0]) for v in value)
    return isinstance(value, (int, float) if tp is float else tp) and (tp is bool or type(value) is not bool)


def check_files(run, recorded: dict | None, where):
    """The run's problem files are those it started with (`recorded`: config.json's "sha256", written at its
    start), or a ConfigError names the one changed; a run from before they were recorded gets a note."""
    if recorded is None:
        warn(f"note: {where} records no SHA-256 of the run's problem files (a run from before they were): "
             "that they are unchanged could not be checked")
    for file, digest in (recorded or {}).items():
        if _sha256(found := from_start(file, run.workdir)) not in (digest, None):  # None: loading names it
            raise ConfigError(f"{found} has changed since the run started (its SHA-256 is not the one "
                              f"{where} records): the run goes on with the problem files it started with; "
                              "put it back, or start a new run")


# The settings that are paths (--reward's FILE.py), a relative one relative to the directory the run was
# started in (workdir). A resume finds them from there, and takes a path given again as the run's own when
# it names the same file (./data/x.jsonl and data/x.jsonl; an absolute path).
PATH_FIELDS = ("model", "data", "eval_data", "reward")


def paths(name: str, value, fn):
    """`value` of field `name` with fn applied to each path it holds: each of a list; of a --reward
    FILE.py:FUNCTION, its FILE.py (a MODULE:FUNCTION holds none)."""
    if isinstance(value, list):
        return [paths(name, v, fn) for v in value]
    if not isinstance(value, str) or not value:
        return value
    if name == "reward":
        source, _, function = value.rpartition(":")
        return f"{fn(source)}:{function}" if source.endswith(".py") else value
    return fn(value)


def from_start(path: str, workdir: str) -> str:
    """A relative path of a resumed run's settings as this process finds it: from the directory the run was
    started in (`workdir`; a run from before it was recorded: as written, else the repository's own, as the
    embedded tasks' files: data.located). As written when that is the same file, or none is there."""
    if Path(path).is_absolute():
        return path
    there = Path(workdir, path) if workdir else Path(located(path))
    return str(there) if there.exists() and there.resolve() != Path(path).resolve() else path


def real_path(path: str) -> str:
    """An existing file's or folder's absolute path, symbolic links resolved; anything else as it is."""
    return str(Path(path).resolve()) if Path(path).exists() else path


def as_given(name: str, value) -> str:
    """A flag as it is typed: --clip clip, --eval-data a.jsonl b.jsonl, --no-thinking, --eval-data (none)."""
    if isinstance(value, bool):
        return flag(name) if value else "--no-" + flag(name)[2:]
    words = value if isinstance(value, list) else [value]
    return " ".join([flag(name), *map(str, words)])


def recorded_changes(saved: dict, where) -> list[dict]:
    """config.json's "changes" ([] if none), checked: a list of {"step": S, field: {"from": a, "to": b}, ...};
    anything else is a ConfigError naming the file `where`."""
    changes = saved.get("changes", [])
    if not isinstance(changes, list) or not all(
            isinstance(c, dict) and isinstance(c.get("step"), int) and
            all(isinstance(v, dict) and v.keys() == {"from", "to"} for k, v in c.items() if k != "step")
            for c in changes):
        raise ConfigError(f'{where}: "changes" is not a list of '
                          '{"step": S, "<flag>": {"from": A, "to": B}}')
    return changes


def settings_now(saved: dict, where, at_step: int | None = None) -> dict:
    """A run's settings as it last ran (at_step: as it stood at that step): those config.json says it started
    with, each change applied (at_step: each recorded at or before it)."""
    records = ("changes", "sha256", "provenance", "branched_from")  # not settings
    settings = {k: v for k, v in saved.items() if k not in records}
    for change in recorded_changes(saved, where):
        if at_step is None or change["step"] <= at_step:
            settings.update({k: v["to"] for k, v in change.items() if k != "step"})
    return settings


def change_text(change: dict, arrow: str = " -> ") -> str:
    """'--steps 32 -> 64, --eval-every 0 -> 8': one recorded change's flags (without its step)."""
    def shown(v):
        return v if isinstance(v, str) else json.dumps(v)
    return ", ".join(f"{flag(k)} {shown(v['from'])}{arrow}{shown(v['to'])}" for k, v in change.items()
                     if k != "step")
