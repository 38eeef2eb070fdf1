"""Digits and IDX loaders, step-indexed training pipeline, padded eval pipeline."""
import gzip
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from hypernet.data import digits, idx, pipeline
from hypernet.data.base import ImageClassificationData


def test_the_embedded_digits_are_scikit_learns_in_its_order():
  """hypernet/data/digits.npz holds scikit-learn's ``load_digits()`` (1.9.1) as uint8:
  its SHA-256 over images then labels, its class counts and two of its images (0 and
  1796, scikit-learn's ``digits.images[i]``) as printed by scikit-learn."""
  import hashlib  # pylint: disable=g-import-not-at-top
  images, labels = digits.digits_arrays()
  assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
  assert labels.shape == (1797,) and labels.dtype == np.int32
  assert hashlib.sha256(images.tobytes() + labels.astype(np.uint8).tobytes()).hexdigest() == (
      "87ff0c9e40dc7e2c0e34e7257799c2e3f3aec1a016363bb11cad869ec428a826")
  np.testing.assert_array_equal(np.bincount(labels),
                                [178, 182, 177, 183, 181, 182, 181, 179, 174, 180])
  np.testing.assert_array_equal(images[0, 1], [0, 0, 13, 15, 10, 15, 5, 0])
  assert labels[0] == 0 and labels[-1] == 8
  images[0] = 99                                 # A copy: the next call is unchanged.
  assert digits.digits_arrays()[0][0, 0, 0] == 0


def test_digits_split_is_stratified_and_disjoint():
  d = digits.load_digits()
  assert len(d.x_train) + len(d.x_test) == 1797
  assert d.x_test.shape[1:] == (8, 8, 1)
  assert d.x_train.dtype == np.uint8 and d.x_train.max() == 16
  counts = np.bincount(d.y_test, minlength=10)
  assert counts.min() >= 35 and counts.max() <= 37  # ~20% of each class (174..183)
  # No image of the test set appears (by index) in train: the split is a partition.
  flat_train = {x.tobytes() + bytes([y]) for x, y in zip(d.x_train, d.y_train)}
  dup = sum(x.tobytes() + bytes([y]) in flat_train for x, y in zip(d.x_test, d.y_test))
  assert dup == 0


def test_fashion_mnist_idx(data_dir):
  d = idx.load_idx_dataset("fashion_mnist", str(data_dir / "fashion-mnist"))
  assert d.x_train.shape == (60000, 28, 28, 1) and d.x_test.shape == (10000, 28, 28, 1)
  assert d.num_classes == 10 and np.bincount(d.y_test).tolist() == [1000] * 10
  # First training label of Fashion-MNIST is 9 (ankle boot), first test label 9 too.
  assert d.y_train[0] == 9 and d.y_test[0] == 9


def test_idx_errors_name_the_file(tmp_path, data_dir):
  with pytest.raises(FileNotFoundError, match=r"config.data.data_dir.*apt-get install dataset-fashion-mnist"):
    idx.load_idx_dataset("fashion_mnist", str(tmp_path))
  src = data_dir / "fashion-mnist"
  for f in os.listdir(src):
    if f.endswith(".gz"):
      shutil.copy(src / f, tmp_path / f)
  # Truncate the test labels: header promises 10000 labels.
  path = tmp_path / "t10k-labels-idx1-ubyte.gz"
  raw = gzip.open(path).read()
  with gzip.open(path, "wb") as f:
    f.write(raw[:5000])
  with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte.gz is truncated"):
    idx.load_idx_dataset("fashion_mnist", str(tmp_path))


def _toy(n=10):
  x = np.arange(n, dtype=np.uint8).reshape(n, 1, 1, 1)
  return ImageClassificationData("toy", x, np.zeros(n, np.int32), x[:3], np.zeros(3, np.int32), 1)


def _ids(batch):
  return batch["image"].numpy().ravel().round().astype(int).tolist()


def test_train_stream_is_step_indexed_and_covers_each_epoch():
  data = _toy(10)
  full = [_ids(b) for b in pipeline.train_dataset(data, 4, seed=7, num_steps=10)]
  # Each epoch (10 consecutive positions) is a permutation of the 10 images.
  flat = sum(full, [])
  for e in range(4):
    assert sorted(flat[10 * e: 10 * e + 10]) == list(range(10))
  # Resuming at step 6 yields exactly the same batches as the uninterrupted stream.
  resumed = [_ids(b) for b in pipeline.train_dataset(data, 4, seed=7, start_step=6, num_steps=4)]
  assert resumed == full[6:]
  other_seed = [_ids(b) for b in pipeline.train_dataset(data, 4, seed=8, num_steps=10)]
  assert other_seed != full


class _Ctx:
  def __init__(self, replicas, pipelines, pid):
    self.num_replicas_in_sync, self.num_input_pipelines, self.input_pipeline_id = replicas, pipelines, pid


def test_replica_slices_compose_the_global_batch():
  data = _toy(10)
  full = [_ids(b) for b in pipeline.train_dataset(data, 4, seed=1, num_steps=3)]
  # One pipeline, two local replicas: elements alternate replica 0, replica 1.
  one = [_ids(b) for b in pipeline.train_dataset(data, 4, 1, num_steps=3, input_context=_Ctx(2, 1, 0))]
  assert [one[2 * s] + one[2 * s + 1] for s in range(3)] == full
  # Two workers with one replica each.
  w0 = [_ids(b) for b in pipeline.train_dataset(data, 4, 1, num_steps=3, input_context=_Ctx(2, 2, 0))]
  w1 = [_ids(b) for b in pipeline.train_dataset(data, 4, 1, num_steps=3, input_context=_Ctx(2, 2, 1))]
  assert [a + b for a, b in zip(w0, w1)] == full
  with pytest.raises(ValueError, match="batch_size=5 must be divisible"):
    pipeline.train_dataset(data, 5, 1, input_context=_Ctx(2, 1, 0))


def test_training_images_get_their_own_affine_map_whatever_the_replica_split():
  """data.augment_rotation / scale / shear on classification batches: each image is
  random_affine's map of itself (rows of one draw for the global batch), a replica's
  slice equals its rows of the one-pipeline batch, and the shifts do not change."""
  rng = np.random.default_rng(0)
  x = (rng.random((12, 9, 9, 1)) * 16).astype(np.uint8)
  data = ImageClassificationData("toy", x, np.arange(12, dtype=np.int32) % 3, x[:3],
                                 np.zeros(3, np.int32), 3, pixel_scale=1 / 16)
  kw = dict(augment_rotation=20.0, augment_scale=0.2, augment_shear=0.3)
  plain = [b["image"].numpy() for b in pipeline.train_dataset(data, 4, 1, num_steps=3)]
  full = [b for b in pipeline.train_dataset(data, 4, 1, num_steps=3, **kw)]
  for step, (a, b) in enumerate(zip(plain, full)):
    assert not np.allclose(a, b["image"].numpy())
    seed = tf.constant([1 + 1_000_003 + 2, step + 2], tf.int64)
    want = pipeline.random_affine(tf.constant(a), seed, rotation=20.0, scale=0.2, shear=0.3)
    np.testing.assert_allclose(b["image"].numpy(), want.numpy(), atol=1e-6)
  for ctx in (_Ctx(2, 1, 0), _Ctx(2, 2, 0)):
    part = [b["image"].numpy() for b in pipeline.train_dataset(
        data, 4, 1, num_steps=3, input_context=ctx, **kw)]
    if ctx.num_input_pipelines == 1:
      part = [part[2 * s] for s in range(3)]
    for s in range(3):
      np.testing.assert_array_equal(part[s], full[s]["image"].numpy()[:2])
  shifted = [b["image"].numpy() for b in pipeline.train_dataset(
      data, 4, 1, num_steps=3, augment_shift=1)]
  both = [b["image"].numpy() for b in pipeline.train_dataset(
      data, 4, 1, num_steps=3, augment_shift=1, augment_rotation=0.0)]
  np.testing.assert_array_equal(np.stack(shifted), np.stack(both))


def test_eval_pass_pads_with_zero_weight():
  data = _toy(10)
  batches = list(pipeline.eval_dataset(data, 2, "test"))
  assert [_ids(b) for b in batches] == [[0, 1], [2, 0]]
  assert [b["weight"].numpy().tolist() for b in batches] == [[1, 1], [1, 0]]


def test_random_shift_moves_pixels_and_keeps_mass():
  img = np.zeros((64, 5, 5, 1), np.float32)
  img[:, 2, 2, 0] = 1.0
  out = pipeline.random_shift(tf.constant(img), 1, tf.constant([1, 2], tf.int64)).numpy()
  assert np.all(out.sum(axis=(1, 2, 3)) == 1.0)   # a centre pixel never falls off
  rows, cols = np.nonzero(out[..., 0])[1:]
  assert set(rows) == {1, 2, 3} and set(cols) == {1, 2, 3}


def test_random_affine_is_the_documented_map_computed_by_scipy():
  """Each image is resampled (bilinear, zeros outside) at c + A (p - c), A from
  affine_transforms' rows: checked against scipy.ndimage (order 1, zeros outside)."""
  from scipy import ndimage
  x = np.random.default_rng(0).random((4, 12, 10, 1)).astype(np.float32)
  seed = tf.constant([3, 4], tf.int64)
  kw = dict(rotation=30.0, scale=0.2, shear=0.3)
  rows = pipeline.affine_transforms(seed, 4, 12, 10, **kw).numpy()
  out = pipeline.random_affine(tf.constant(x), seed, **kw).numpy()
  for img, row, got in zip(x, rows, out):
    a0, a1, a2, b0, b1, b2, c0, c1 = row.astype(np.float64)
    assert c0 == c1 == 0
    # scipy maps output (row, col) to input matrix @ (row, col) + offset.
    ref = ndimage.affine_transform(img[..., 0].astype(np.float64), [[b1, b0], [a1, a0]],
                                   offset=[b2, a2], order=1, mode="grid-constant", cval=0.0)
    np.testing.assert_allclose(got[..., 0], ref, atol=2e-6)
  assert not np.allclose(out, x)
  np.testing.assert_array_equal(pipeline.random_affine(tf.constant(x), seed).numpy(), x)


def test_affine_transforms_stay_within_the_stated_ranges():
  """A = R(t) Sh(k) diag(sx, sy) about the centre: each part drawn within its bound and
  the centre maps to itself."""
  seed = tf.constant([5, 6], tf.int64)
  n, h, w = 2000, 28, 28
  rot = pipeline.affine_transforms(seed, n, h, w, rotation=10.0).numpy()
  angles = np.degrees(np.arctan2(rot[:, 3], rot[:, 0]))
  np.testing.assert_allclose(rot[:, 0] ** 2 + rot[:, 3] ** 2, 1.0, rtol=1e-5)  # no scale
  assert np.abs(angles).max() <= 10.0 + 1e-4 and np.abs(angles).max() > 9.0
  sc = pipeline.affine_transforms(seed, n, h, w, scale=0.2).numpy()
  for diag in (sc[:, 0], sc[:, 4]):
    assert diag.min() >= 0.8 - 1e-6 and diag.max() <= 1.2 + 1e-6 and np.ptp(diag) > 0.35
  np.testing.assert_allclose(sc[:, [1, 3]], 0.0, atol=1e-7)
  sh = pipeline.affine_transforms(seed, n, h, w, shear=0.3).numpy()
  np.testing.assert_allclose(sh[:, [0, 4]], 1.0, rtol=1e-6)
  assert np.abs(sh[:, 1]).max() <= 0.3 + 1e-6 and np.abs(sh[:, 1]).max() > 0.28
  for rows in (rot, sc, sh):  # the centre (13.5, 13.5) is a fixed point
    cx = cy = (w - 1) / 2
    np.testing.assert_allclose(rows[:, 0] * cx + rows[:, 1] * cy + rows[:, 2], cx, atol=1e-4)
    np.testing.assert_allclose(rows[:, 3] * cx + rows[:, 4] * cy + rows[:, 5], cy, atol=1e-4)
