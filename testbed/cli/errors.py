"""The command line's own error (one line on stderr, exit status 2), importable without the
commands it is raised in."""


class CliError(RuntimeError):
    pass
