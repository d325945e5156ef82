"""What every command shares: the argument parser's one-line errors, number arguments, the failure line a user
can act on, and the settings a command runs with (the environment's, changed by its flags)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from pipelines.core.settings import Settings


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that says where the help is (not the whole usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} -h`\n")


def fail(command: str, message: str) -> int:
    """A problem the user can fix: one line on stderr naming the command, exit status 2."""
    print(f"kerneltraj {command}: {message}", file=sys.stderr)
    return 2


def at_least(least: float, kind: type = int):
    """argparse type: a number of `kind` no smaller than `least`."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if not value >= least:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"{text} is less than {least:g}")
        return value
    return parse


def settings_from_args(args: argparse.Namespace) -> Settings:
    s = Settings.from_env_with(getattr(args, "state_dir", None), getattr(args, "warehouse", None))
    changes: dict[str, Any] = {}
    for flag, field in (("version", "release_version"), ("mode", "grader_mode"),
                        ("revalidation_mode", "revalidation_mode"), ("workers", "workers"), ("profile", "profile"),
                        ("timeout_s", "timeout_s"), ("retries", "retries")):
        if getattr(args, flag, None) is not None:
            changes[field] = getattr(args, flag)
    if getattr(args, "device_records", None):
        from pipelines.grading.device_run import records_folder

        changes["device_records"] = str(records_folder(args.device_records))
    if getattr(args, "inputs", None):
        changes["inputs"] = tuple(str(Path(p).resolve()) for p in args.inputs)
    return dataclasses.replace(s, **changes)
