import os
import subprocess

import pytest
import torch
from hypothesis import settings

from .small_disk import SmallDisk

# Without a GPU the Triton kernels run on CPU tensors in Triton's interpreter; it is read when triton.jit runs.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# pytest-xdist starts a worker per core: torch's own threads in each would oversubscribe the cores, and the tests'
# sizes gain nothing from them (2 workers on 2 cores: the kernel, model and training tests took 1.6 to 1.9 times
# as long with torch's default threads); so would those of the processes the tests start, which inherit the count
# (the packing benchmark's smoke run took 15 CPU s with torch's default threads beside the other worker, 4 with one)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    torch.set_num_threads(threads)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(threads))

# CI must be reproducible: the same examples every run, no wall-clock deadlines on a slow or shared machine.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True, scope="session")
def selfcheck_cache_in_a_temporary_folder(tmp_path_factory):
    """The fused kernels' self-check stores its verdicts here, not in the user's cache (subprocesses inherit it),
    unless the caller chose a folder (benchmarks/gpu_check.py shares one across its steps, doctor's verdicts first)."""
    if os.environ.get("LOGLINEAR_CACHE_DIR"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOGLINEAR_CACHE_DIR", str(tmp_path_factory.mktemp("loglinear-cache")))
        yield


@pytest.fixture(autouse=True, scope="session")
def glibc_default_allocator():
    """`loglinear train` called in a test process keeps glibc's defaults there (a training process keeps freed
    memory, runs/memory.py), and so do the runs of the subprocesses, except where a test sets it itself."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOGLINEAR_KEEP_FREED_MEMORY", "0")
        yield


def pytest_collection_modifyitems(config, items):
    """`gpu` tests are skipped without a CUDA device; `slow` ones unless the marker expression names them
    (`-m slow`, as CI runs them after the default run)."""
    skip_gpu = None if torch.cuda.is_available() else pytest.mark.skip(reason="needs a CUDA device")
    skip_slow = None if "slow" in (config.option.markexpr or "") else pytest.mark.skip(
        reason="slow: not in the default run; `pytest -m slow` runs them (CI does)")
    for item in items:
        # get_closest_marker, not `"gpu" in item.keywords`: that matches a checkout folder named gpu
        if skip_gpu and item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)
        if skip_slow and item.get_closest_marker("slow"):
            item.add_marker(skip_slow)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs mounted at tmp_path/disk (tests/small_disk.py): a real full disk or read-only folder.
    Mounting needs root; elsewhere the test is skipped."""
    if os.geteuid() != 0:
        pytest.skip("a disk of its own (tmpfs) needs root to mount")
    try:
        disk = SmallDisk(tmp_path / "disk")
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")
    try:
        yield disk
    finally:
        disk.unmount()
