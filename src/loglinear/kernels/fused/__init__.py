"""Fused Triton kernels of log-linear attention (the `impl="triton"` path).

They run on CUDA tensors, and on CPU tensors under TRITON_INTERPRET=1 (how the tests run them).
Importing this package needs the `triton` package (`pip install loglinear[triton]`).
"""
