"""The suite's benchmarks, each run from the repository root as `python -m benchmarks.NAME`; their figures, and
the targets they are read against, are in benchmarks/RESULTS.md."""
