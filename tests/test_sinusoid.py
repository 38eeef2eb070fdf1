"""Tests for hypernet.data.sinusoid: the task family of Finn et al. 2017, Sec. 5.1."""
import math

import numpy as np
import pytest
import tensorflow as tf

from hypernet.data import sinusoid as sd


def _batches(ds, n):
  return [{k: v.numpy() for k, v in b.items()} for b in ds.take(n)]


def _expected_y(x, amplitude, phase):
  """A sin(x - phi) in float64 from the float32 values, rounded to float32."""
  return (amplitude.astype(np.float64)[:, None, None] *
          np.sin(x.astype(np.float64) - phase.astype(np.float64)[:, None, None])
          ).astype(np.float32)


def test_shapes_dtypes_and_targets_are_exact():
  ds = sd.sinusoid_dataset(meta_batch_size=4, num_support=5, num_query=7, seed=3,
                           num_steps=3, return_params=True)
  batches = _batches(ds, 10)
  assert len(batches) == 3
  for b in batches:
    assert b["support_x"].shape == (4, 5, 1) and b["support_y"].shape == (4, 5, 1)
    assert b["query_x"].shape == (4, 7, 1) and b["query_y"].shape == (4, 7, 1)
    assert b["amplitude"].shape == (4,) and b["phase"].shape == (4,)
    assert all(v.dtype == np.float32 for v in b.values())
    for s in ("support", "query"):
      np.testing.assert_array_equal(
          b[f"{s}_y"], _expected_y(b[f"{s}_x"], b["amplitude"], b["phase"]))
      # And the plain float32 formula of the paper, to float32 rounding.
      np.testing.assert_allclose(
          b[f"{s}_y"], sd.sinusoid(b[f"{s}_x"], b["amplitude"][:, None, None],
                                   b["phase"][:, None, None]), rtol=0, atol=5e-6)
  # The tf path of the plotting helper agrees too.
  b = batches[0]
  np.testing.assert_allclose(
      sd.sinusoid(tf.constant(b["query_x"]), b["amplitude"][:, None, None],
                  b["phase"][:, None, None]).numpy(), b["query_y"], atol=5e-6)


def test_ranges_and_moments_of_the_task_distribution():
  b = next(iter(sd.sinusoid_dataset(meta_batch_size=4000, num_support=10, num_query=10,
                                     seed=0, return_params=True)))
  a, phi = b["amplitude"].numpy(), b["phase"].numpy()
  xs = np.concatenate([b["support_x"].numpy().ravel(), b["query_x"].numpy().ravel()])
  assert 0.1 <= a.min() and a.max() < 5.0
  assert 0.0 <= phi.min() and phi.max() < math.pi
  assert -5.0 <= xs.min() and xs.max() < 5.0
  # Uniform moments, within 5 standard errors: mean (lo+hi)/2, variance (hi-lo)^2/12.
  for v, lo, hi in ((a, 0.1, 5.0), (phi, 0.0, math.pi), (xs, -5.0, 5.0)):
    se = (hi - lo) / math.sqrt(12 * len(v))
    assert abs(v.mean() - (lo + hi) / 2) < 5 * se
    assert abs(v.var() / ((hi - lo) ** 2 / 12) - 1) < 0.05
  # Amplitude and phase are drawn independently: correlation near 0.
  assert abs(np.corrcoef(a, phi)[0, 1]) < 5 / math.sqrt(len(a))
  # |y| <= A, and the largest |y| of a task comes close to A (20 points over 10 units).
  ys = np.concatenate([b["support_y"].numpy(), b["query_y"].numpy()], axis=1)[..., 0]
  assert np.all(np.abs(ys) <= a[:, None] + 1e-6)
  assert np.median(np.abs(ys).max(axis=1) / a) > 0.9


def test_custom_ranges():
  b = next(iter(sd.sinusoid_dataset(meta_batch_size=500, num_support=3, num_query=2,
                                     amplitude_range=(1.0, 2.0), phase_range=(0.5, 0.6),
                                     x_range=(0.0, 1.0), return_params=True)))
  assert 1.0 <= b["amplitude"].numpy().min() and b["amplitude"].numpy().max() < 2.0
  assert 0.5 <= b["phase"].numpy().min() and b["phase"].numpy().max() < 0.6
  assert 0.0 <= b["support_x"].numpy().min() and b["query_x"].numpy().max() < 1.0


def test_deterministic_by_seed_and_index():
  kw = dict(meta_batch_size=3, num_support=4, num_query=4, return_params=True)
  a = _batches(sd.sinusoid_dataset(seed=7, num_steps=5, **kw), 5)
  b = _batches(sd.sinusoid_dataset(seed=7, num_steps=5, **kw), 5)
  for x, y in zip(a, b):
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])
  # Resuming at step 3 gives meta-batches 3, 4 of the full run (no skip).
  resumed = _batches(sd.sinusoid_dataset(seed=7, start_step=3, **kw), 2)
  for x, y in zip(resumed, a[3:]):
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])
  # Task i of the pipeline is task_fn(i): meta-batch s, slot t is index s*3 + t.
  task_fn = sd.make_sinusoid_task_fn(num_support=4, num_query=4, seed=7, return_params=True)
  task = task_fn(tf.constant(4 * 3 + 2, tf.int64))
  for key in task:
    np.testing.assert_array_equal(task[key].numpy(), a[4][key][2])
  # Another seed, other tasks; tasks within a batch differ.
  c = _batches(sd.sinusoid_dataset(seed=8, num_steps=1, **kw), 1)[0]
  assert not np.any(c["amplitude"] == a[0]["amplitude"])
  assert len(set(a[0]["amplitude"].tolist())) == 3
  # Support and query inputs are different draws.
  assert not np.array_equal(a[0]["support_x"], a[0]["query_x"])


def test_default_has_only_the_meta_batch_keys():
  b = next(iter(sd.sinusoid_dataset(meta_batch_size=2)))
  assert set(b) == {"support_x", "support_y", "query_x", "query_y"}
  assert b["support_x"].shape == (2, 10, 1) and b["query_x"].shape == (2, 10, 1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(meta_batch_size=0), "meta_batch_size"),
    (dict(meta_batch_size=2, num_support=0), "num_support"),
    (dict(meta_batch_size=2, num_query=-1), "num_query"),
    (dict(meta_batch_size=2, seed=1.5), "seed"),
    (dict(meta_batch_size=2, start_step=-1), "start_step"),
    (dict(meta_batch_size=2, num_steps=0), "num_steps"),
    (dict(meta_batch_size=2, amplitude_range=(5.0, 0.1)), "amplitude_range"),
    (dict(meta_batch_size=2, phase_range=(0.0,)), "phase_range"),
    (dict(meta_batch_size=2, x_range=(0.0, float("inf"))), "x_range"),
])
def test_bad_arguments_are_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    sd.sinusoid_dataset(**kwargs)
