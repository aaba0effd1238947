"""Packed runs: several runs of a sweep trained together as one model, each run's folder as it ends alone
(docs/runs.md, "Packed runs"). `train_pack` (train.py) is the loop; compatibility.py says which runs can share
a pack."""
