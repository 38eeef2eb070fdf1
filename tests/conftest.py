"""Shared test fixtures.

The CPU is split into two logical devices before TensorFlow initialises, so that
distribution tests can run two replicas on one CPU (MirroredStrategy over
/cpu:0 and /cpu:1). Single-device code is unaffected: it runs on /cpu:0.
"""
import os
import pathlib

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
import tensorflow as tf

_cpus = tf.config.list_physical_devices("CPU")
try:
  tf.config.set_logical_device_configuration(
      _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
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
