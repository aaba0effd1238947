"""Sweeps: grids of runs from a spec, their manifest, launching and status (protocol/ decides what a sweep trains
next; reports/ writes its report)."""
