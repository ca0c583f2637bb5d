"""The runner's error type, apart so the command line can catch it without importing the
runner (and matplotlib, pydantic...) on every `testbed` call."""


class RunError(RuntimeError):
    """A run could not be carried out (the fabric or a process failed): one line, why."""
