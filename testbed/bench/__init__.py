"""Benchmarks with same-run baselines (`testbed bench ...`)."""
