"""The targets' convention shared by the data (`synthetics`) and the loss (`models`), which import
nothing from each other."""

IGNORE_INDEX = -100
"""Target value of positions that are not scored (PyTorch's cross-entropy default)."""
