"""Flags from dataclasses into argparse: one `error:` line for a bad flag, TRL's names told ours.
A command declares its flags as a dataclass (machinery/cli.py's groups and `arg`)."""
import argparse
import dataclasses
import difflib
import re
import sys
import typing

from nanoatr.machinery.cli import SECTIONS, die, flag, in_reading_order
from nanoatr.machinery.trl_names import TRL_NAMES, CommandLine, hint  # noqa: F401 (TRL_NAMES: re-exported)

# Flags that moved out of a command: an unknown flag that is one of them is told where it went.
MOVED = {"--runs": "eval.py --runs (Table 2 over seeds) is now python scripts/runs_table.py RUN_DIR..."}


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, not after a usage block of every flag, and takes every
    flag only in full: a typo or a shortened flag (--delt, --prompt for --prompt-template) is an error that
    names the flag meant, never silently another flag."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)
        self.argv, self.field_defaults = [], {}  # for TRL hints: the words parsed, the fields' defaults

    def parse_known_args(self, args=None, namespace=None):
        self.argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        unknown = message.split()[2:] if message.startswith("unrecognized arguments:") else []
        trl = dict(self.trl_flags(unknown))
        trl_text = f"; {'; '.join(trl.values())} (docs/real-scale.md maps TRL's and verl's names)" \
            if trl else ""
        moved = [MOVED[word.split("=")[0]] for word in unknown if word.split("=")[0] in MOVED]
        hints = "".join(f"; {word}: did you mean {meant}?" for word, meant in self.meant_flags(unknown)
                        if word not in trl and word not in MOVED)
        die(f"{message} (see --help){trl_text}{''.join(f'; {m}' for m in moved)}{hints}")

    def meant_flags(self, words):
        """(word, 'flag or flag') for each unknown --word of `words` that names_meant() finds a flag for."""
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        for word in words:
            name = word.split("=")[0]
            if name.startswith("--") and name not in flags and (meant := names_meant(name, flags)):
                yield name, " or ".join(meant)

    def trl_flags(self, words):
        """(flag, hint) for each of `words` that is a TRL name of one of this command's flags (trl_names)."""
        line = CommandLine(self.argv, self.field_defaults)
        for word in words:
            if (told := hint(word, line, self._option_string_actions)) is not None:
                yield word.split("=")[0], told


def names_meant(word: str, names: list[str]) -> list[str]:
    """The names a mistyped `word` may have meant: those it begins, when there are 1 to 3 of them, or else the
    one nearest spelling (difflib's ratio >= 0.75); [] when nothing is close."""
    longer = [n for n in names if n.startswith(word)]
    return longer if 0 < len(longer) <= 3 else difflib.get_close_matches(word, names, n=1, cutoff=0.75)


def add_fields(parser: argparse.ArgumentParser, cls):
    """One flag per field, in --help sections (SECTIONS' order, then any other in the order met)."""
    fields = [f for f in in_reading_order(cls) if f.metadata.get("cli") is not False]
    named = [f.metadata.get("section") or "options" for f in fields]
    order = sorted(dict.fromkeys(named), key=lambda s: SECTIONS.index(s) if s in SECTIONS else len(SECTIONS))
    sections = {name: parser.add_argument_group(name) for name in order}
    hints = typing.get_type_hints(cls)
    for f, section in sorted(zip(fields, named), key=lambda pair: order.index(pair[1])):
        add_flag(sections[section], f, hints[f.name])


def add_flag(group, f: dataclasses.Field, tp):
    """The argparse flag of one field: its type, default shown in the help, choices and list behaviour."""
    default = f.default_factory() if callable(f.default_factory) else f.default
    kw = dict(help=f.metadata.get("help", "") + (f" (default: {default})" if default is not None else ""),
              dest=f.name, default=argparse.SUPPRESS)
    if "choices" in f.metadata:  # a function is called now: --clip's choices include methods registered later
        choices = f.metadata["choices"]
        kw["choices"] = choices() if callable(choices) else choices
    args = typing.get_args(tp)
    base = next((a for a in args if a is not type(None)), tp) if args and type(None) in args else tp
    if base is bool:
        group.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, **kw)
    elif typing.get_origin(base) is list and f.metadata.get("repeat"):  # one value a flag: --stop A --stop B
        group.add_argument(flag(f.name), action="append", type=typing.get_args(base)[0], metavar="X", **kw)
    elif typing.get_origin(base) is list:  # --eval-data a b, or --eval-data a --eval-data b: both kept
        group.add_argument(flag(f.name), action="extend", nargs=f.metadata.get("nargs", "+"),
                           type=typing.get_args(base)[0], metavar="X", **kw)
    else:
        metavar = f.name.upper() if "choices" not in kw else None
        group.add_argument(flag(f.name), type=base, metavar=metavar, **kw)


def parse(cls, argv=None, description: str = "", add_flags=None, epilog: str = "",
          usage: str = "%(prog)s [flags]"):
    """Parse argv into cls; `add_flags(parser)` may add flags that are not fields (returned separately). Flags
    not given keep the dataclass default; `given`: the fields the user set (presets fill in the others)."""
    parser = Parser(description=description, epilog=epilog, usage=usage,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fields(parser, cls)
    parser.field_defaults = {f.name: f.default_factory() if callable(f.default_factory) else f.default
                             for f in dataclasses.fields(cls)}
    if add_flags:
        add_flags(parser)
    ns = vars(parser.parse_args(argv))
    for action in parser._actions:  # Python keeps bytes that are no UTF-8 as surrogates, which no file takes
        values = ns.get(action.dest) if isinstance(ns.get(action.dest), list) else [ns.get(action.dest)]
        if any(isinstance(v, str) and re.search("[\ud800-\udfff]", v) for v in values):
            die(f"{(action.option_strings or [action.metavar])[0]}: not UTF-8 text (bytes that decode to no "
                "character on the command line)")
    names = {f.name for f in dataclasses.fields(cls)}
    cfg = cls(**{k: v for k, v in ns.items() if k in names})
    return cfg, {k: v for k, v in ns.items() if k not in names}, set(ns) & names
