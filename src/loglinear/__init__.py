"""loglinear: an experiment suite for Log-Linear Attention (recall and state tracking).

Subpackages, in import order (each imports only those before it):
``loglinear.kernels`` (functional ops), ``loglinear.models`` (layers, backbone, LightningModule),
``loglinear.synthetics`` (tasks, DataModule), ``loglinear.sweeps`` (runs, sweeps, reports).
"""

__version__ = "0.1.0"
