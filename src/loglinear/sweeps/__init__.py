"""Runs and sweeps: the run configuration, one training run, grids of runs, and their reports."""
