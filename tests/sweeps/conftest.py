import os

import pytest

from .slurm_cluster import ClusterUnavailable, SlurmCluster

ASK = "LOGLINEAR_SLURM_TESTS"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running single-node Slurm cluster (tests/sweeps/slurm_cluster.py), its $SLURM_CONF set for this
    process and the processes it starts. The tests run only when asked ($LOGLINEAR_SLURM_TESTS=1, as root,
    with Slurm and munge installed); asked, a cluster that cannot start fails them."""
    if os.environ.get(ASK) != "1":
        pytest.skip(f"real-Slurm tests run with {ASK}=1 (root; apt-get install slurm-wlm munge)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except ClusterUnavailable as e:
        pytest.fail(f"{ASK}=1 but no Slurm test cluster can start: {e}")
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
