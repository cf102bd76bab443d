"""Configuration: one dataclass per command; its command-line flags are generated from the fields.

A field's `help` metadata is its --help text; `--some-field` maps to `some_field`. The trainer writes
the resolved dataclass to the run directory, so the logged config is the one that ran.
"""
import argparse
import dataclasses
import sys
import typing
from dataclasses import field


class ConfigError(ValueError):
    """A bad flag value; the message names the flag."""


def arg(default, help: str, **kw):
    """A config field with its --help text (lists need a default_factory)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_fields(parser: argparse.ArgumentParser, cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("cli") is False:
            continue
        tp, default = hints[f.name], (f.default_factory() if callable(f.default_factory) else f.default)
        kw = dict(help=f.metadata.get("help", "") + (f" (default: {default})" if default is not None else ""),
                  dest=f.name, default=argparse.SUPPRESS)
        if "choices" in f.metadata:
            kw["choices"] = f.metadata["choices"]
        args = typing.get_args(tp)
        base = next((a for a in args if a is not type(None)), tp) if args and type(None) in args else tp
        if base is bool:
            parser.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, **kw)
        elif typing.get_origin(base) is list:
            parser.add_argument(flag(f.name), nargs="+", type=typing.get_args(base)[0], metavar="X", **kw)
        else:
            parser.add_argument(flag(f.name), type=base, metavar=f.name.upper() if "choices" not in kw else None, **kw)


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, not after a usage block of every flag."""

    def error(self, message):
        die(f"{message} (see --help)")


def parse(cls, argv=None, description: str = "", extra=None):
    """Parse argv into cls; `extra(parser)` may add flags that are not fields (returned separately).

    Flags not given keep the dataclass default; `given` lists the fields the user set explicitly
    (presets fill in only the others).
    """
    parser = Parser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fields(parser, cls)
    if extra:
        extra(parser)
    ns = vars(parser.parse_args(argv))
    names = {f.name for f in dataclasses.fields(cls)}
    cfg = cls(**{k: v for k, v in ns.items() if k in names})
    return cfg, {k: v for k, v in ns.items() if k not in names}, set(ns) & names


def die(message: str, code: int = 2):
    """One clear line and a non-zero exit: how every command reports bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)
