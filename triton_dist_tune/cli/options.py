"""The options a user may give before the command as well as after it: ``triton-dist-tune --cache-dir X list`` means
``triton-dist-tune list --cache-dir X``. Given on both sides, the one after the command wins (as a later option does
within one command). Given before a command that does not take it, it is refused by name (a usage error, exit 2)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LeadingOption:
    """An option the main parser takes before the command, stored apart (``dest`` prefixed ``leading_``) and
    merged into the command's own ``dest`` once parsed; ``commands``: those that take it as it means here."""

    flag: str
    dest: str
    help: str
    flag_only: bool = False
    commands: set[str] = field(default_factory=set)
    #: the commands that take ``flag`` with another meaning (``campaign --json FILE``): only after the command
    otherwise: set[str] = field(default_factory=set)

    @property
    def leading_dest(self) -> str:
        """Where the main parser stores the value given before the command."""
        return f"leading_{self.dest}"


def leading_options() -> tuple[LeadingOption, ...]:
    """The options accepted before the command: ``--cache-dir`` and ``--json`` (each taken by most commands, but not
    all: ``logs`` reads no cache folder, and ``campaign``'s ``--json FILE`` names a file)."""
    return (LeadingOption("--cache-dir", "cache_dir", "the cache folder, for the commands that read it (the same as "
                          "after the command; given on both sides, the one after wins)"),
            LeadingOption("--json", "json", "print JSON for scripts, for the commands that can (the same as after "
                          "the command)", flag_only=True))


def add_leading(main: argparse.ArgumentParser, options: tuple[LeadingOption, ...]) -> None:
    """Add ``options`` to the main parser, before the command."""
    for option in options:
        if option.flag_only:
            main.add_argument(option.flag, dest=option.leading_dest, action="store_true", help=option.help)
        else:
            main.add_argument(option.flag, dest=option.leading_dest, metavar=option.dest.upper(), help=option.help)


def merge_leading(main: argparse.ArgumentParser, args: argparse.Namespace,
                  options: tuple[LeadingOption, ...]) -> argparse.Namespace:
    """Each of ``options`` given before the command, put where the command reads it unless the command's own (after
    it) was given; refused (``main.error``: usage, one line, exit 2) before a command that does not take it."""
    for option in options:
        given = getattr(args, option.leading_dest, None)
        if hasattr(args, option.leading_dest):
            delattr(args, option.leading_dest)
        if given in (None, False):
            continue
        if args.command not in option.commands:
            takers = ", ".join(sorted(option.commands))
            other = (f"'{args.command} {option.flag}' means another thing: give it after the command; "
                     if args.command in option.otherwise else "")
            main.error(f"{option.flag} before the command is not an option of '{args.command}' ({other}it is of "
                       f"{takers})")
        if getattr(args, option.dest, None) in (None, False):
            setattr(args, option.dest, given)
    return args
