"""The `testbed` command: the parser and `main` (app), one function per sub-command (commands,
fib), and the interactive prompt (interactive). docs/design.md "Command line" is the contract."""

from testbed.cli.app import main

__all__ = ["main"]
