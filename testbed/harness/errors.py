"""The harness's errors: raised before or while a transport's processes start."""


class BaselineError(RuntimeError):
    """The kernel baseline cannot run (a tool is missing, a server did not start, ...)."""
