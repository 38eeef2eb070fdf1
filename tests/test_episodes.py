"""Tests for hypernet.data.episodes: N-way K-shot episodes as a tf.data pipeline."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from hypernet.data import episodes as ep
from hypernet.data import omniglot


def _id_data(counts, label_values=None, shape=(2, 3, 1)):
  """Images whose every pixel is the example's index, so ids survive the pipeline."""
  label_values = list(range(len(counts))) if label_values is None else label_values
  labels = np.concatenate([[v] * c for v, c in zip(label_values, counts)])
  labels = np.random.default_rng(0).permutation(labels)  # classes interleaved
  images = np.broadcast_to(np.arange(len(labels), dtype=np.float32)[:, None, None, None],
                           (len(labels),) + shape).copy()
  return images, labels


def _ids(x):
  """[..., H, W, C] id images -> [...] int ids (checking each image is constant)."""
  flat = x.reshape(x.shape[:-3] + (-1,))
  assert np.all(flat == flat[..., :1])
  return flat[..., 0].astype(np.int64)


def _batches(ds, n):
  return [{k: v.numpy() for k, v in b.items()} for b in ds.take(n)]


def test_class_indexed_groups_examples_by_label():
  images, labels = _id_data([3, 5, 2], label_values=[7, -1, 40])
  data = ep.class_indexed(images, labels)
  np.testing.assert_array_equal(data.class_labels, [-1, 7, 40])
  np.testing.assert_array_equal(data.class_counts, [5, 3, 2])
  assert data.class_indices.shape == (3, 5) and data.class_indices.dtype == np.int32
  for c, label in enumerate(data.class_labels):
    row = data.class_indices[c]
    np.testing.assert_array_equal(row[:data.class_counts[c]], np.flatnonzero(labels == label))
    assert np.all(row[data.class_counts[c]:] == -1)
  assert data.images.dtype == np.float32
  assert ep.class_indexed(images.astype(np.float64), labels).images.dtype == np.float32


def test_shapes_dtypes_balance_distinct_classes_and_disjoint_sets():
  counts = [20, 23, 21, 30, 20, 25, 22, 40]
  label_values = [3, 11, 12, 50, 51, 52, 90, 1000]
  images, labels = _id_data(counts, label_values)
  n, k, q, t = 5, 3, 4, 6
  ds = ep.episode_dataset((images, labels), num_ways=n, num_shots=k, num_queries=q,
                          meta_batch_size=t, seed=1, num_steps=4, return_classes=True)
  spec = ds.element_spec
  assert spec["support_x"].shape == (t, n * k, 2, 3, 1)
  assert spec["support_x"].dtype == tf.float32 and spec["support_y"].dtype == tf.int32
  assert spec["query_x"].shape == (t, n * q, 2, 3, 1) and spec["query_y"].shape == (t, n * q)
  batches = _batches(ds, 10)
  assert len(batches) == 4
  for b in batches:
    for i in range(t):
      sy, qy, classes = b["support_y"][i], b["query_y"][i], b["classes"][i]
      assert collections.Counter(sy.tolist()) == {c: k for c in range(n)}
      assert collections.Counter(qy.tolist()) == {c: q for c in range(n)}
      assert len(set(classes.tolist())) == n and set(classes) <= set(label_values)
      sid, qid = _ids(b["support_x"][i]), _ids(b["query_x"][i])
      # Without replacement: all n*(k+q) examples distinct, so support ∩ query = ∅.
      assert len(set(sid.tolist()) | set(qid.tolist())) == n * (k + q)
      # Relabelling is consistent: label j means source class classes[j].
      np.testing.assert_array_equal(labels[sid], classes[sy])
      np.testing.assert_array_equal(labels[qid], classes[qy])


def test_sampling_is_uniform_over_classes_and_labels():
  images, labels = _id_data([10] * 10)
  ds = ep.episode_dataset((images, labels), num_ways=5, num_shots=1, num_queries=1,
                          meta_batch_size=400, seed=0, return_classes=True)
  classes = next(iter(ds))["classes"].numpy()  # [400, 5]
  # Each class is in an episode with probability 1/2: 200 ± 10 (binomial sd), 5 sd slack.
  per_class = np.bincount(classes.ravel(), minlength=10)
  assert np.all(np.abs(per_class - 200) < 50), per_class
  # Each class gets each relabelled slot with probability 1/10: 40 ± 6 per (class, slot).
  per_slot = np.stack([np.bincount(classes[:, j], minlength=10) for j in range(5)])
  assert np.all(np.abs(per_slot - 40) < 30), per_slot
  # Within a class, every example is drawn: 400*5 draws, each example ~ 200/10 = 20 times.
  b = next(iter(ep.episode_dataset((images, labels), num_ways=5, num_shots=2, num_queries=3,
                                   meta_batch_size=400, seed=0)))
  ids = np.concatenate([_ids(b["support_x"].numpy()).ravel(),
                        _ids(b["query_x"].numpy()).ravel()])
  per_example = np.bincount(ids, minlength=100)
  assert per_example.min() > 50 and per_example.max() < 150, per_example  # mean 100


def test_deterministic_by_seed_and_index():
  images, labels = _id_data([8] * 12)
  kw = dict(num_ways=4, num_shots=2, num_queries=3, meta_batch_size=3, return_classes=True)
  a = _batches(ep.episode_dataset((images, labels), seed=5, num_steps=6, **kw), 6)
  b = _batches(ep.episode_dataset((images, labels), seed=5, num_steps=6, **kw), 6)
  for x, y in zip(a, b):
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])
  # Resume at step 4: the same meta-batches 4, 5, without Dataset.skip.
  resumed = _batches(ep.episode_dataset((images, labels), seed=5, start_step=4, **kw), 2)
  for x, y in zip(resumed, a[4:]):
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])
  # Episode s*T + t is slot t of meta-batch s, and the same from an eager call.
  episode_fn = ep.make_episode_fn((images, labels), num_ways=4, num_shots=2, num_queries=3,
                                  seed=5, return_classes=True)
  e = episode_fn(tf.constant(2 * 3 + 1, tf.int64))
  for key in e:
    np.testing.assert_array_equal(e[key].numpy(), a[2][key][1])
  # Different seeds and different indices give different episodes.
  c = _batches(ep.episode_dataset((images, labels), seed=6, num_steps=1, **kw), 1)[0]
  assert not np.array_equal(_ids(c["support_x"]), _ids(a[0]["support_x"]))
  assert not np.array_equal(_ids(a[0]["support_x"][0]), _ids(a[0]["support_x"][1]))


def test_unshuffled_order_is_class_major():
  images, labels = _id_data([6] * 5)
  b = _batches(ep.episode_dataset((images, labels), num_ways=3, num_shots=2, num_queries=1,
                                  meta_batch_size=2, shuffle=False, num_steps=1), 1)[0]
  np.testing.assert_array_equal(b["support_y"], [[0, 0, 1, 1, 2, 2]] * 2)
  np.testing.assert_array_equal(b["query_y"], [[0, 1, 2]] * 2)
  # Shuffled order is a permutation of that, not that.
  s = _batches(ep.episode_dataset((images, labels), num_ways=3, num_shots=2, num_queries=1,
                                  meta_batch_size=8, num_steps=1), 1)[0]
  assert any(not np.array_equal(y, [0, 0, 1, 1, 2, 2]) for y in s["support_y"])


def test_episodes_over_omniglot(data_dir):
  data = omniglot.load_omniglot(data_dir / "omniglot" / "images_background_small1.zip")
  indexed = ep.class_indexed(data.images, data.labels)
  assert indexed.num_classes == 136 and set(indexed.class_counts.tolist()) == {20}
  b = next(iter(ep.episode_dataset(indexed, num_ways=20, num_shots=1, num_queries=5,
                                   meta_batch_size=2, seed=0, return_classes=True)))
  assert b["support_x"].shape == (2, 20, 28, 28, 1)
  assert b["query_x"].shape == (2, 100, 28, 28, 1)
  # Each query image is one of the 20 drawings of its source character, and no query
  # image equals a support image (drawings differ).
  for i in range(2):
    for x, y in zip(b["query_x"][i].numpy(), b["query_y"][i].numpy()):
      own = data.images[data.labels == b["classes"][i][y].numpy()]
      assert np.any(np.all(own == x, axis=(1, 2, 3)))
    support = b["support_x"][i].numpy().reshape(20, -1)
    query = b["query_x"][i].numpy().reshape(100, -1)
    assert not np.any(np.all(support[:, None] == query[None], axis=-1))


@pytest.mark.parametrize("kind", ["ink", "mnist", "digits", "fine", "signed", "signed_zero"])
def test_episode_images_are_the_source_floats_bit_for_bit(kind):
  """8-bit grey levels are held as uint8 codes into a float32 palette (a quarter of the
  memory); the episodes must still carry exactly the source's float32 values, and data
  that is not 8-bit must be held as floats."""
  rng = np.random.default_rng(1)
  levels = rng.integers(0, 256, (40, 4, 4, 1))
  images = {"ink": 1.0 - levels.astype(np.float32) / 255.0,   # Omniglot's formula
            "mnist": levels.astype(np.float32) * np.float32(1 / 255),
            "digits": (levels % 17).astype(np.float32) / np.float32(16),
            "fine": rng.random((40, 4, 4, 1), dtype=np.float32),
            "signed": rng.normal(size=(40, 4, 4, 1)).astype(np.float32),
            # -0.0 == 0.0, but the bits differ: one class of each.
            "signed_zero": np.where(np.arange(40)[:, None, None, None] < 10, np.float32(-0.0),
                                    np.float32(0.0)) * np.ones((1, 4, 4, 1), np.float32)}[kind]
  coded = ep._palette_codes(images)
  assert (coded is not None) == (kind in ("ink", "mnist", "digits"))
  if coded is not None:
    assert coded[0].dtype == np.uint8 and coded[1].dtype == np.float32
    np.testing.assert_array_equal(coded[1][coded[0]], images)
  labels = np.repeat(np.arange(4), 10)
  fn = ep.make_episode_fn((images, labels), num_ways=3, num_shots=2, num_queries=3, seed=5)
  for i in range(3):
    e = fn(tf.constant(i, tf.int64))
    for x in ("support_x", "query_x"):
      got = e[x].numpy()
      assert got.dtype == np.float32
      # Each episode image is one of the source images, bit for bit.
      bits = lambda a: a.view(np.uint32).reshape(a.shape[0], -1)
      matches = (bits(got)[:, None] == bits(images)[None]).all(-1)
      assert matches.any(axis=1).all()


def test_meta_batch_dataset_indices():
  ds = ep.meta_batch_dataset(lambda i: {"i": i}, meta_batch_size=4, start_step=2,
                             num_steps=3)
  np.testing.assert_array_equal([b["i"].numpy() for b in ds],
                                [[8, 9, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19]])
  endless = ep.meta_batch_dataset(lambda i: {"i": i}, meta_batch_size=2, start_step=5)
  np.testing.assert_array_equal([b["i"].numpy() for b in endless.take(2)], [[10, 11], [12, 13]])


def test_validation_errors_name_the_argument():
  images, labels = _id_data([20, 5, 20])
  kw = dict(num_ways=3, num_shots=1, num_queries=1, meta_batch_size=2)
  with pytest.raises(ValueError, match=r"num_ways=4 exceeds the number of classes in the data \(3\)"):
    ep.episode_dataset((images, labels), **dict(kw, num_ways=4))
  with pytest.raises(ValueError, match=r"num_shots \+ num_queries = 1 \+ 5 = 6 .*label 1: 5"):
    ep.episode_dataset((images, labels), **dict(kw, num_queries=5))
  for name, value in (("num_ways", 0), ("num_shots", 0), ("num_queries", 0),
                      ("meta_batch_size", 0), ("start_step", -1), ("num_steps", 0),
                      ("seed", "zero")):
    with pytest.raises(ValueError, match=name):
      ep.episode_dataset((images, labels), **dict(kw, **{name: value}))
  with pytest.raises(TypeError, match="images must be floating"):
    ep.class_indexed(images.astype(np.uint8), labels)
  with pytest.raises(ValueError, match=r"\[num, H, W, C\]"):
    ep.class_indexed(images[..., 0], labels)
  with pytest.raises(ValueError, match="labels must be"):
    ep.class_indexed(images, labels[:-1])
  with pytest.raises(TypeError, match="labels must be integers"):
    ep.class_indexed(images, labels.astype(np.float32))
  with pytest.raises(TypeError, match="ClassIndexed"):
    ep.episode_dataset(images, **kw)


def test_within_group_episodes_draw_every_class_from_one_eligible_group():
  # 4 groups of 6, 6, 2, 6 classes; 3-way episodes: group 2 (2 classes) is never drawn.
  images, labels = _id_data([4] * 20)
  groups = np.array([0] * 6 + [1] * 6 + [2] * 2 + [3] * 6)
  fn = ep.make_episode_fn((images, labels), num_ways=3, num_shots=1, num_queries=1,
                          seed=0, return_classes=True, class_groups=groups)
  drawn = collections.Counter()
  for i in range(300):
    classes = fn(i)["classes"].numpy()
    (group,) = set(groups[classes])  # all three from one group
    drawn[group] += 1
    assert len(set(classes)) == 3
  # Groups are drawn in proportion to their eligible classes: 1/3 each (100 ± 8 sd).
  assert drawn[2] == 0 and all(abs(drawn[g] - 100) < 40 for g in (0, 1, 3)), drawn
  # Without groups the same episode index draws across groups.
  plain = ep.make_episode_fn((images, labels), num_ways=3, num_shots=1, num_queries=1,
                             seed=0, return_classes=True)
  assert any(len(set(groups[plain(i)["classes"].numpy()])) > 1 for i in range(20))
  with pytest.raises(ValueError, match="No class group has num_ways=7"):
    ep.make_episode_fn((images, labels), num_ways=7, num_shots=1, num_queries=1,
                       class_groups=groups)
  with pytest.raises(ValueError, match=r"class_groups must be \[num_classes\] = \[20\]"):
    ep.make_episode_fn((images, labels), num_ways=3, num_shots=1, num_queries=1,
                       class_groups=groups[:5])


def test_alphabet_groups_separate_alphabets_and_rotations():
  names = ["Greek/character01/rot0", "Greek/character02/rot0", "Greek/character01/rot90",
           "Latin/character01/rot0", "Latin/character05/rot90"]
  assert omniglot.alphabet_groups(names).tolist() == [0, 0, 1, 2, 3]
  assert omniglot.alphabet_groups(["Latin/character01", "Greek/character02",
                                   "Latin/character03"]).tolist() == [1, 0, 1]


def test_augmented_episodes_keep_classes_and_labels_and_distort_each_image():
  """``augment`` changes the pixels only: the same classes, drawings and labels as the
  plain episode; every image gets its own distortion (support and query differ)."""
  rng = np.random.default_rng(0)
  images = np.zeros((60, 12, 12, 1), np.float32)
  images[:, 3:9, 5:7, 0] = 1.0                      # a vertical bar in every image
  images += rng.random(images.shape).astype(np.float32) * 0.01
  labels = np.repeat(np.arange(6), 10)
  plain = ep.make_episode_fn((images, labels), num_ways=3, num_shots=2, num_queries=3,
                             seed=4, return_classes=True)
  aug = ep.make_episode_fn((images, labels), num_ways=3, num_shots=2, num_queries=3,
                           seed=4, return_classes=True,
                           augment=ep.few_shot_augment(rotation=20.0, scale=0.2, shift=1))
  for index in (0, 5):
    a, b = plain(index), aug(index)
    for key in ("support_y", "query_y", "classes"):
      np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
    for key in ("support_x", "query_x"):
      x, y = a[key].numpy(), b[key].numpy()
      assert x.shape == y.shape and y.dtype == np.float32
      # Every image is moved, and differently from the others of its set.
      assert np.all(np.abs(x - y).reshape(len(x), -1).max(axis=1) > 0.1)
      diffs = (y - x).reshape(len(x), -1)
      assert len({tuple(np.round(d, 3)) for d in diffs}) == len(x)
    np.testing.assert_array_equal(b["support_x"].numpy(), aug(index)["support_x"].numpy())
  assert ep.few_shot_augment() is None
