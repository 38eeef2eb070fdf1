"""Shared test fixtures.

The CPU is split into two logical devices before TensorFlow initialises, so that
distribution tests can run two replicas on one CPU (MirroredStrategy over
/cpu:0 and /cpu:1). Single-device code is unaffected: it runs on /cpu:0.
"""
import os
import pathlib
import shutil
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest


def _split_the_cpu():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  cpus = tf.config.list_physical_devices("CPU")
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
  except RuntimeError:  # Already initialised (e.g. imported twice); keep what is there.
    pass


REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def shared_data_dir() -> pathlib.Path:
  """Test data: $HYPERNET_TEST_DATA, else ../shared/data beside the checkout."""
  env = os.environ.get("HYPERNET_TEST_DATA")
  return pathlib.Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  d = shared_data_dir()
  if not d.is_dir():
    pytest.fail(f"Test data folder {d} is missing: put the project's shared/data beside "
                "the checkout or set HYPERNET_TEST_DATA.")
  return d


# -- The disk cache of decoded data (hypernet.data.omniglot.disk_cache_dir): one folder per
# run, made by the controlling process before pytest-xdist starts its workers (which, and
# every process a test starts, inherit the variable), removed at the end; the user's
# ~/.cache is never read or written. pytest-xdist's controlling process runs no test: it
# does not pay TensorFlow's import (~5 s before the workers start). Every process that
# runs tests splits the CPU here, before any test module imports TensorFlow.
def pytest_configure(config):
  worker = hasattr(config, "workerinput")
  if not worker:
    config.hypernet_cache = tempfile.mkdtemp(prefix="hypernet-test-cache-")
    os.environ["HYPERNET_CACHE_DIR"] = config.hypernet_cache
    # One OpenBLAS thread per process (unless the caller set it): with one pytest-xdist
    # worker per core, numpy's second BLAS thread only spins beside the other worker
    # (the continual, MNIST, hypernetwork and support-target test files: 167-177 ->
    # 157-160 CPU-s, 98-101 -> 91-94 s, two runs each). Set before the workers start:
    # they and every process a test starts inherit it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
  if worker or not getattr(config.option, "numprocesses", None):
    _split_the_cpu()


def pytest_unconfigure(config):
  if getattr(config, "hypernet_cache", None):
    shutil.rmtree(config.hypernet_cache, ignore_errors=True)


# -- The compatibility subset (tests/supported.py): marker compat_subset. -----------------
def pytest_collection_modifyitems(config, items):
  del config
  import supported  # pylint: disable=g-import-not-at-top
  for item in items:
    if supported.in_subset(item.nodeid):
      item.add_marker(pytest.mark.compat_subset)
  # The slow end-to-end runs first: with two pytest-xdist processes they start at once on
  # both instead of one of them being handed out last and running alone at the end.
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)
