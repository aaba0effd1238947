import os

import pytest

from .slurm_cluster import ClusterUnavailable, SlurmCluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running single-node Slurm cluster (tests/sweeps/slurm_cluster.py), its $SLURM_CONF set for this
    process and the processes it starts; skipped with the reason where none can start (e.g. not root)."""
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except ClusterUnavailable as e:
        pytest.skip(f"no Slurm test cluster: {e}")
    previous = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        cluster.stop()
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
