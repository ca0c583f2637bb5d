"""Scenario files: what a run is asked to do, checked completely before anything is built."""
