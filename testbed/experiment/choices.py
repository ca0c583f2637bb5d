"""The experiment options the command line offers as choices, in a module of their own so that
building the parser (every `testbed` start, `--help`, completion) imports none of the runner.

The runner and the executor import them from here."""

DATA_FORMATS = ("csv", "parquet")  # --format: the CSVs always; parquet adds testbed.results' frames
COMPARE_BASELINES = ("mrc", "single-path", "spray-no-failover", "tcp", "mptcp")
"""What `compare` runs beside a scenario that names one transport."""
EXECUTORS = ("local", "slurm")
