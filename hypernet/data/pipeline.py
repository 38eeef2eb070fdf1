"""``tf.data`` input pipelines for in-memory image classification data.

The training stream is *step-indexed*: batch ``s`` is a pure function of
``(seed, s)``. Sample position ``p = s * B + i`` belongs to epoch ``p // N`` and is image
``perm_e[p % N]`` where ``perm_e`` is a stateless shuffle seeded by ``(seed, e)``. So a
run resumed at step ``s`` sees exactly the batches an uninterrupted run would have seen,
without saving iterator state (a shuffle buffer) in checkpoints, and every replica can
build its own slice of the global batch (:func:`train_dataset` with ``input_context``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from hypernet.data.base import ImageClassificationData


def _replica_layout(global_batch_size: int, input_context) -> tuple:
  """``(per_replica_batch, local_replicas, first_slot)`` for this input pipeline.

  With ``distribute_datasets_from_function`` each pipeline's consecutive elements go to
  its local replicas in turn, so a pipeline emits ``local_replicas`` elements per step:
  the slices ``first_slot .. first_slot + local_replicas - 1`` of the global batch.
  """
  if input_context is None:
    return global_batch_size, 1, 0
  n = input_context.num_replicas_in_sync
  if global_batch_size % n:
    raise ValueError(f"config.batch_size={global_batch_size} must be divisible by the "
                     f"number of replicas ({n}).")
  local = n // input_context.num_input_pipelines
  return global_batch_size // n, local, input_context.input_pipeline_id * local


def _rows(draw, b, first, total):
  """Rows ``first .. first + b - 1`` of a draw for ``total`` images (default: ``b``)."""
  if total is None:
    return draw([b])
  return draw([total])[first:first + b]


def random_shift(images: tf.Tensor, max_shift: int, seed: tf.Tensor, first: int = 0,
                 total=None) -> tf.Tensor:
  """Translates each image by an integer offset in ``[-max_shift, max_shift]`` per axis.

  Vacated pixels are 0. Stateless: the offsets are a function of ``seed`` (int64 [2]).

  Args:
    images: ``[B, H, W, C]`` float32.
    max_shift: largest shift in pixels (0 returns ``images``).
    seed: the stateless seed, shape ``[2]``.
    first, total: ``images`` are rows ``first ..`` of a batch of ``total`` images (a
      replica's slice of the global batch): the offsets are drawn for all ``total`` and
      sliced, so each image's shift does not depend on how the batch was split.
  """
  if max_shift <= 0:
    return images
  b, h, w = tf.shape(images)[0], images.shape[1], images.shape[2]
  p = max_shift
  padded = tf.pad(images, [[0, 0], [p, p], [p, p], [0, 0]])
  offsets = _rows(lambda n: tf.random.stateless_uniform(n + [2], seed, 0, 2 * p + 1,
                                                        dtype=tf.int32), b, first, total)
  rows = offsets[:, :1] + tf.range(h)[None]
  cols = offsets[:, 1:] + tf.range(w)[None]
  out = tf.gather(padded, rows, axis=1, batch_dims=1)
  return tf.gather(out, cols, axis=2, batch_dims=1)


def affine_transforms(seed: tf.Tensor, num: tf.Tensor, height: int, width: int, *,
                      rotation: float = 0.0, scale: float = 0.0,
                      shear: float = 0.0) -> tf.Tensor:
  """Random affine distortions about the image centre, as rows of ``[num, 8]`` float32.

  The distortions of Koch, Zemel, Salakhutdinov 2015 ("Siamese Neural Networks for
  One-shot Image Recognition", Sec. 4.3: rotation, shear and per-axis scale; their
  translation is :func:`random_shift`): with ``u`` uniform in ``[-1, 1]`` per image and
  parameter, angle ``t = u1 * rotation`` degrees, shear ``k = u2 * shear``, scales
  ``sx = 1 + u3 * scale``, ``sy = 1 + u4 * scale``,
  ``A = [[cos t, -sin t], [sin t, cos t]] @ [[1, k], [0, 1]] @ diag(sx, sy)``; the output
  pixel at ``p`` (x = column, y = row) samples the input at ``c + A (p - c)``, ``c`` the
  image centre. Row format: ``[a0, a1, a2, b0, b1, b2, 0, 0]`` of
  ``keras.ops.image.affine_transform`` (input x = a0 x + a1 y + a2, y = b0 x + b1 y + b2).

  Args:
    seed: stateless seed, int [2].
    num: the number of images (scalar int).
    height, width: image size in pixels.
    rotation: largest angle in degrees (>= 0).
    scale: largest relative scale change per axis (in ``[0, 1)``).
    shear: largest shear factor (>= 0).
  """
  u = tf.random.stateless_uniform(tf.stack([num, 4]), seed, -1.0, 1.0)
  t = u[:, 0] * (rotation * np.pi / 180.0)
  k = u[:, 1] * shear
  sx, sy = 1.0 + u[:, 2] * scale, 1.0 + u[:, 3] * scale
  cos, sin = tf.cos(t), tf.sin(t)
  # R @ Sh @ S = [[cos sx, (cos k - sin) sy], [sin sx, (sin k + cos) sy]].
  a0, a1 = cos * sx, (cos * k - sin) * sy
  b0, b1 = sin * sx, (sin * k + cos) * sy
  cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
  a2 = cx - a0 * cx - a1 * cy
  b2 = cy - b0 * cx - b1 * cy
  zero = tf.zeros_like(a0)
  return tf.stack([a0, a1, a2, b0, b1, b2, zero, zero], axis=1)


def random_affine(images: tf.Tensor, seed: tf.Tensor, *, rotation: float = 0.0,
                  scale: float = 0.0, shear: float = 0.0, first: int = 0,
                  total=None) -> tf.Tensor:
  """Distorts each image by its own random affine map (:func:`affine_transforms`),
  bilinear, vacated pixels 0. Stateless (``seed`` int64 [2]); all three 0 returns
  ``images``.

  Args:
    images: ``[B, H, W, C]`` float32.
    seed, rotation, scale, shear: see :func:`affine_transforms`.
    first, total: as in :func:`random_shift` (the maps are drawn for all ``total``
      images and rows ``first .. first + B - 1`` kept).

  Returns:
    ``[B, H, W, C]`` float32.
  """
  if not (rotation or scale or shear):
    return images
  import keras  # pylint: disable=g-import-not-at-top
  h, w = images.shape[1], images.shape[2]
  rows = _rows(lambda n: affine_transforms(seed, n[0], h, w, rotation=rotation, scale=scale,
                                           shear=shear),
              tf.shape(images)[0], first, total)
  return keras.ops.image.affine_transform(images, rows, interpolation="bilinear",
                                          fill_mode="constant", fill_value=0,
                                          data_format="channels_last")


def random_flip(images: tf.Tensor, seed: tf.Tensor, first: int = 0, total=None) -> tf.Tensor:
  """Flips each image left-right with probability 1/2 (stateless, ``seed`` int64 [2]);
  ``first``, ``total`` as in :func:`random_shift`."""
  flip = _rows(lambda n: tf.random.stateless_uniform(n + [1, 1, 1], seed),
               tf.shape(images)[0], first, total) < 0.5
  return tf.where(flip, tf.reverse(images, [2]), images)


def train_dataset(data: ImageClassificationData, global_batch_size: int, seed: int,
                  start_step: int = 0, num_steps: Optional[int] = None,
                  input_context: Optional[tf.distribute.InputContext] = None,
                  augment_shift: int = 0, augment_flip: bool = False,
                  augment_rotation: float = 0.0, augment_scale: float = 0.0,
                  augment_shear: float = 0.0) -> tf.data.Dataset:
  """Shuffled training batches ``{"image": float32 [b, H, W, C] in [0, 1], "label": int32 [b]}``.

  Args:
    data: the in-memory data.
    global_batch_size: examples per step summed over all replicas.
    seed: shuffle seed; batch ``s`` depends only on ``(seed, s)``.
    start_step: first step to produce (resume point).
    num_steps: number of batches (``None``: endless).
    augment_shift: random translation of up to this many pixels (0: none).
    augment_flip: random left-right flips.
    augment_rotation, augment_scale, augment_shear: each image's own random affine map
      (:func:`random_affine`; Koch et al. 2015 Sec. 4.3), drawn before the shift and
      the flip; all 0 (the default): none.
    input_context: from ``strategy.distribute_datasets_from_function``; each input
      pipeline then yields its contiguous slice of each global batch.

  Raises:
    ValueError: ``global_batch_size`` not positive or not divisible by the replicas.
  """
  if global_batch_size <= 0:
    raise ValueError(f"config.batch_size must be positive, got {global_batch_size}.")
  batch, local, first_slot = _replica_layout(global_batch_size, input_context)
  n = len(data.x_train)
  images = tf.constant(data.x_train)
  labels = tf.constant(data.y_train, tf.int32)
  scale = tf.constant(data.pixel_scale, tf.float32)
  seed = int(seed)

  def indices(k):
    step, slot = k // local, first_slot + k % local
    pos = step * global_batch_size + slot * batch + tf.range(batch, dtype=tf.int64)
    epoch, within = pos // n, pos % n
    first = epoch[0]
    perm_a = tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), first]))
    perm_b = tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), first + 1]))
    return tf.where(epoch == first, tf.gather(perm_a, within), tf.gather(perm_b, within))

  @tf.autograph.experimental.do_not_convert  # Traced as written (~0.1 s a pipeline).
  def load(k):
    idx = indices(k)
    x = tf.cast(tf.gather(images, idx), tf.float32) * scale
    # Augmentation is drawn per global step for the whole global batch and sliced, so
    # that it does not depend on the number of replicas.
    step, first = k // local, tf.cast((first_slot + k % local) * batch, tf.int32)
    aug_seed = tf.stack([tf.constant(seed, tf.int64) + 1_000_003, step])
    # Its own stream (aug_seed + 2): adding it leaves the shifts and flips as they were.
    x = random_affine(x, aug_seed + 2, rotation=augment_rotation, scale=augment_scale,
                      shear=augment_shear, first=first, total=global_batch_size)
    x = random_shift(x, augment_shift, aug_seed, first, global_batch_size)
    if augment_flip:
      x = random_flip(x, aug_seed + 1, first, global_batch_size)
    return {"image": x, "label": tf.gather(labels, idx)}

  stop = np.iinfo(np.int64).max // local if num_steps is None else start_step + num_steps
  ds = tf.data.Dataset.range(start_step * local, stop * local).map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return _with_options(ds).prefetch(tf.data.AUTOTUNE)


def eval_dataset(data: ImageClassificationData, global_batch_size: int, split: str = "test",
                 input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
  """One pass over a split in order, padded to whole global batches.

  Yields ``{"image", "label", "weight"}`` where ``weight`` is float32 1 for real
  examples and 0 for padding, so metric sums over replicas count each example once and
  every replica runs the same number of steps.
  """
  x = getattr(data, f"x_{split}")
  y = getattr(data, f"y_{split}")
  n = len(x)
  num_batches = -(-n // global_batch_size)
  pad = num_batches * global_batch_size - n
  x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
  y = np.concatenate([y, np.zeros((pad,), y.dtype)])
  w = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
  batch, local, first_slot = _replica_layout(global_batch_size, input_context)
  slots = first_slot + np.arange(local)
  order = (np.arange(num_batches)[:, None, None] * global_batch_size
           + slots[None, :, None] * batch + np.arange(batch)[None, None, :]).ravel()
  ds = tf.data.Dataset.from_tensor_slices(
      {"image": x[order], "label": y[order].astype(np.int32), "weight": w[order]})
  scale = float(data.pixel_scale)
  to_float = lambda b: dict(b, image=tf.cast(b["image"], tf.float32) * scale)
  ds = ds.batch(batch).map(
      tf.autograph.experimental.do_not_convert(to_float),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return _with_options(ds).prefetch(tf.data.AUTOTUNE)


def _with_options(ds: tf.data.Dataset) -> tf.data.Dataset:
  options = tf.data.Options()
  # Each pipeline already reads its own slice: no further auto-sharding by workers.
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
  options.deterministic = True
  return ds.with_options(options)
