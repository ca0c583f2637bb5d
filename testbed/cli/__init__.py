"""The `testbed` command: the parser and one function per sub-command (docs/design.md "Command line")."""

from testbed.cli.commands import main

__all__ = ["main"]
