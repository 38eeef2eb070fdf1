"""N-way K-shot episodes for few-shot classification, as a tf.data pipeline.

An *episode* (task) of N-way K-shot classification (Vinyals et al. 2016, "Matching
Networks for One Shot Learning"; Finn et al. 2017, "Model-Agnostic Meta-Learning", Sec.
5.2) draws N classes, relabels them 0..N-1 in random order, and draws K labelled
examples per class for the *support set* (what the inner loop adapts on) and Q others per
class for the *query set* (what the outer loss is measured on). A *meta-batch* stacks T
episodes.

Episode ``i`` is a pure function of ``(seed, i)`` (and the data): every draw uses
stateless random ops keyed by ``[seed, i]``. Meta-batch ``s`` holds episodes
``s*T .. s*T + T-1``, so a run resumed at step ``s`` rebuilds its pipeline with
``start_step=s`` and sees exactly the meta-batches it would have seen, without
``Dataset.skip`` (:func:`meta_batch_dataset`).

Typical use::

  data = class_indexed(train.images, train.labels)        # any [num, H, W, C] + labels
  ds = episode_dataset(data, num_ways=5, num_shots=1, num_queries=15,
                       meta_batch_size=32, seed=0, start_step=step)
  for batch in ds:  # batch["support_x"]: [32, 5, 28, 28, 1] ...
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

Episode = Dict[str, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class ClassIndexed:
  """Images indexed by class, the form :func:`episode_dataset` samples from.

  Build it with :func:`class_indexed`.

  Attributes:
    images: [num, H, W, C] float32.
    class_indices: [num_classes, max_count] int32: row ``c`` lists the indices into
      ``images`` of class ``c``'s examples, padded with -1.
    class_counts: [num_classes] int32, the number of examples of each class.
    class_labels: [num_classes] int64, the source label of each class (sorted).
  """
  images: np.ndarray
  class_indices: np.ndarray
  class_counts: np.ndarray
  class_labels: np.ndarray

  @property
  def num_classes(self) -> int:
    return len(self.class_labels)


def class_indexed(images, labels) -> ClassIndexed:
  """Turns a plain classification split ``(x, y)`` into the class-indexed form.

  Args:
    images: [num, H, W, C] floating array (cast to float32), e.g. scaled to [0, 1].
    labels: [num] integer class labels (any values; classes are the distinct labels).

  Returns:
    :class:`ClassIndexed`, classes in increasing label order.

  Raises:
    TypeError: ``images`` is not floating point or ``labels`` not integer.
    ValueError: ``images`` is not rank 4, ``labels`` not rank 1, or their lengths differ.
  """
  images = np.asarray(images)
  labels = np.asarray(labels)
  if not np.issubdtype(images.dtype, np.floating):
    raise TypeError(f"images must be floating point (e.g. float32 in [0, 1]), got dtype "
                    f"{images.dtype}; scale integer pixels first, e.g. x / 255.")
  if images.ndim != 4:
    raise ValueError(f"images must be [num, H, W, C], got shape {images.shape}; add a "
                     "channel axis for grey images (x[..., None]).")
  if not np.issubdtype(labels.dtype, np.integer):
    raise TypeError(f"labels must be integers, got dtype {labels.dtype}.")
  if labels.ndim != 1 or len(labels) != len(images):
    raise ValueError(f"labels must be [num] with num = len(images) = {len(images)}, got "
                     f"shape {labels.shape}.")
  if len(labels) == 0:
    raise ValueError("images and labels are empty.")
  class_labels, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
  order = np.argsort(inverse, kind="stable")  # examples grouped by class, in source order
  starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
  table = np.full((len(class_labels), counts.max()), -1, np.int32)
  rank = np.arange(len(labels)) - np.repeat(starts, counts)  # position within its class
  table[inverse[order], rank] = order
  return ClassIndexed(images=images.astype(np.float32, copy=False), class_indices=table,
                      class_counts=counts.astype(np.int32),
                      class_labels=class_labels.astype(np.int64))


def _check_int(name: str, value, minimum: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")
  return int(value)


def _check_seed(seed) -> int:
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
      not -2**63 <= seed < 2**63:
    raise ValueError(f"seed must be an int (int64), got {seed!r}.")
  return int(seed)


def _palette_codes(images: np.ndarray):
  """``(codes, palette)`` with ``palette[codes] == images`` exactly, or ``None``.

  Images in [0, 1] that hold 8-bit grey levels (Omniglot, MNIST, Fashion-MNIST, digits:
  at most one float value per ``round(255 x)``) are stored as uint8 codes into a float32
  palette of 256 entries: a quarter of the memory, the same float values after the
  gather, bit for bit. Anything else (not float32, normalised, signed, finer levels, a
  negative zero beside a positive one) gives ``None``.
  """
  if images.dtype != np.float32 or images.size == 0 or not images.min() >= 0 or \
      not images.max() <= 1:
    return None
  codes = np.empty(images.shape, np.uint8)
  palette = np.zeros(256, np.float32)
  step = 1024  # In slices: the float temporaries stay small beside the images.
  for i in range(0, len(images), step):
    codes[i:i + step] = np.rint(images[i:i + step] * np.float32(255))
    palette[codes[i:i + step].ravel()] = images[i:i + step].ravel()
  for i in range(0, len(images), step):  # Bit patterns: -0.0 is not 0.0 here.
    if not np.array_equal(palette[codes[i:i + step]].view(np.uint32),
                          images[i:i + step].view(np.uint32)):
      return None
  return codes, palette


def _images_tensor(images: np.ndarray):
  """``images`` as what the episode function gathers from: a non-trainable variable.

  A ``tf.constant`` captured by a ``tf.data`` function is copied into the dataset's
  serialised graph when the pipeline is optimised and kept there as a second copy (and
  ``tf.constant`` of a numpy array held a further transient copy): on the Omniglot subset
  (58 MB of images) the pipeline's steady memory was 27 MB and its build-time peak 72 MB
  higher than with a variable, whose handle is captured instead. Under a multi-replica
  strategy a variable would be mirrored (a copy per replica), so the constant is kept
  there.
  """
  strategy = tf.distribute.get_strategy()
  if tf.distribute.has_strategy() and strategy.num_replicas_in_sync > 1:
    return tf.constant(images)
  with tf.init_scope():
    return tf.Variable(images, trainable=False, name="episode_images")


def _image_gather(images: np.ndarray) -> Callable[[tf.Tensor], tf.Tensor]:
  """``ids -> images[ids]`` (float32), from 8-bit palette codes where they are exact
  (:func:`_palette_codes`; the Omniglot subset's images: 15 MB instead of 58 MB)."""
  coded = _palette_codes(images)
  if coded is None:
    store = _images_tensor(images)
    return lambda ids: tf.gather(store, ids)
  store = _images_tensor(coded[0])
  palette = tf.constant(coded[1])
  return lambda ids: tf.gather(palette, tf.cast(tf.gather(store, ids), tf.int32))


def make_episode_fn(data: Union[ClassIndexed, Tuple[np.ndarray, np.ndarray]], *,
                    num_ways: int, num_shots: int, num_queries: int, seed: int = 0,
                    shuffle: bool = True, return_classes: bool = False,
                    class_groups=None,
                    augment: Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = None
                    ) -> Callable[[tf.Tensor], Episode]:
  """Returns ``episode_fn(index) -> episode``, one N-way K-shot episode per index.

  Episode ``index`` draws ``num_ways`` distinct classes uniformly, relabels them 0..N-1 in
  the order drawn (a uniformly random relabelling), then draws without replacement
  ``num_shots + num_queries`` examples of each, the first ``num_shots`` for the support
  set and the rest for the query set (so the two are disjoint). All draws are stateless
  random ops keyed by ``[seed, index]``: the episode depends on nothing else.

  Args:
    data: :class:`ClassIndexed`, or a pair ``(images, labels)`` for :func:`class_indexed`.
    num_ways: N, the classes per episode.
    num_shots: K, the support examples per class.
    num_queries: Q, the query examples per class.
    seed: an int; episodes with different seeds are independent.
    shuffle: shuffle the examples within the support set and within the query set (so
      position carries no label information). ``False`` keeps class-major order:
      ``support_y = [0]*K + [1]*K + ...``, ``query_y = [0]*Q + [1]*Q + ...``.
    return_classes: also return ``"classes"``.
    class_groups: optional ``[num_classes]`` int group id of each class (e.g. its
      Omniglot alphabet: :func:`hypernet.data.omniglot.alphabet_groups`). Then all N
      classes of an episode come from one group: a class is drawn uniformly among the
      classes of groups with at least N classes, and the other N - 1 uniformly from its
      group (Lake et al. 2015's one-shot runs are within-alphabet).
    augment: optional ``(images [B, H, W, C] float32, seed int64 [2]) -> images``, a
      stateless random distortion applied to the support and the query images (each
      drawing its own; e.g. :func:`few_shot_augment`). Meta-training only: the
      distortions are per drawing, so a class's examples differ by more than the drawer.

  Returns:
    A function, usable eagerly and in ``tf.data`` / ``tf.function``, from a scalar int
    index to a dict: ``support_x`` [N*K, H, W, C] float32, ``support_y`` [N*K] int32 in
    0..N-1, ``query_x`` [N*Q, H, W, C] float32, ``query_y`` [N*Q] int32 and, with
    ``return_classes``, ``classes`` [N] int64: the source label of episode class j.

  Raises:
    ValueError: ``num_ways`` exceeds the number of classes; ``num_shots + num_queries``
      exceeds the examples of the smallest class; a count < 1; a bad seed;
      ``class_groups`` of the wrong length or with no group of N classes. The errors of
      :func:`class_indexed`.
  """
  if not isinstance(data, ClassIndexed):
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
      raise TypeError("data must be a ClassIndexed (see class_indexed) or a pair "
                      f"(images, labels); got {type(data).__name__}.")
    data = class_indexed(*data)
  n = _check_int("num_ways", num_ways, 1)
  k = _check_int("num_shots", num_shots, 1)
  q = _check_int("num_queries", num_queries, 1)
  seed = _check_seed(seed)
  if n > data.num_classes:
    raise ValueError(f"num_ways={n} exceeds the number of classes in the data "
                     f"({data.num_classes}); lower num_ways or use a split with more classes.")
  smallest = int(np.argmin(data.class_counts))
  if k + q > data.class_counts[smallest]:
    raise ValueError(
        f"num_shots + num_queries = {k} + {q} = {k + q} exceeds the examples of the "
        f"smallest class (label {data.class_labels[smallest]}: "
        f"{data.class_counts[smallest]} examples); lower num_shots or num_queries, or drop "
        "the small classes.")
  if class_groups is not None:
    class_groups = np.asarray(class_groups)
    if class_groups.shape != (data.num_classes,) or \
        not np.issubdtype(class_groups.dtype, np.integer):
      raise ValueError(f"class_groups must be [num_classes] = [{data.num_classes}] ints, "
                       f"got shape {class_groups.shape}, dtype {class_groups.dtype}.")
    _, group_index, group_sizes = np.unique(class_groups, return_inverse=True,
                                            return_counts=True)
    eligible = group_sizes[group_index] >= n
    if not eligible.any():
      raise ValueError(
          f"No class group has num_ways={n} classes (largest: {group_sizes.max()}); lower "
          "num_ways or turn off within-group sampling (config.meta.within_alphabet).")
    groups_t = tf.constant(group_index.astype(np.int32))
    eligible_t = tf.constant(eligible)
  gather_images = _image_gather(data.images)
  table = tf.constant(data.class_indices)
  counts = tf.constant(data.class_counts)
  source_labels = tf.constant(data.class_labels)
  num_classes, max_count = data.class_indices.shape

  @tf.autograph.experimental.do_not_convert  # Plain TensorFlow: traced as written.
  def episode_fn(index) -> Episode:
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64)])
    keys = tf.random.experimental.stateless_split(key, num=4)
    # N distinct classes: the N largest of C iid uniforms, in decreasing order (random).
    u = tf.random.stateless_uniform([num_classes], keys[0])
    if class_groups is not None:  # the group of a uniformly drawn eligible class
      group = tf.gather(groups_t, tf.argmax(tf.where(eligible_t, u, -1.0)))
      u = tf.where(tf.equal(groups_t, group),
                   tf.random.stateless_uniform(
                       [num_classes], tf.random.experimental.stateless_fold_in(keys[0], 1)),
                   -1.0)
    classes = tf.math.top_k(u, n).indices
    # K+Q distinct examples of each: the K+Q largest uniforms among its valid slots.
    u = tf.random.stateless_uniform([n, max_count], keys[1])
    valid = tf.range(max_count)[None, :] < tf.gather(counts, classes)[:, None]
    slots = tf.math.top_k(tf.where(valid, u, -1.0), k + q).indices  # [N, K+Q]
    ids = tf.gather(tf.gather(table, classes), slots, batch_dims=1)  # [N, K+Q]
    support_ids = tf.reshape(ids[:, :k], [n * k])
    query_ids = tf.reshape(ids[:, k:], [n * q])
    support_y = tf.repeat(tf.range(n, dtype=tf.int32), k)
    query_y = tf.repeat(tf.range(n, dtype=tf.int32), q)
    if shuffle:
      perm = tf.argsort(tf.random.stateless_uniform([n * k], keys[2]))
      support_ids, support_y = tf.gather(support_ids, perm), tf.gather(support_y, perm)
      perm = tf.argsort(tf.random.stateless_uniform([n * q], keys[3]))
      query_ids, query_y = tf.gather(query_ids, perm), tf.gather(query_y, perm)
    support_x, query_x = gather_images(support_ids), gather_images(query_ids)
    if augment is not None:
      aug = tf.random.experimental.stateless_split(
          tf.random.experimental.stateless_fold_in(key, 7), num=2)
      support_x, query_x = augment(support_x, aug[0]), augment(query_x, aug[1])
    out = {"support_x": support_x, "support_y": support_y,
           "query_x": query_x, "query_y": query_y}
    if return_classes:
      out["classes"] = tf.gather(source_labels, classes)
    return out

  return episode_fn


def few_shot_augment(*, shift: int = 0, rotation: float = 0.0, scale: float = 0.0,
                     shear: float = 0.0, flip: bool = False
                     ) -> Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]]:
  """The ``augment`` of :func:`make_episode_fn` from distortion sizes, or ``None`` if all
  are 0 / False.

  Each image gets its own random affine map (``rotation`` degrees, ``scale``, ``shear``:
  :func:`hypernet.data.pipeline.random_affine`, Koch et al. 2015 Sec. 4.3), then an
  integer translation of up to ``shift`` pixels per axis
  (:func:`hypernet.data.pipeline.random_shift`), then with ``flip`` a left-right flip
  with probability 1/2. Vacated pixels are 0 (background for ink-is-1 images).
  """
  from hypernet.data import pipeline  # pylint: disable=g-import-not-at-top
  if not (shift or rotation or scale or shear or flip):
    return None

  def augment(images: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    keys = tf.random.experimental.stateless_split(seed, num=3)
    images = pipeline.random_affine(images, keys[0], rotation=rotation, scale=scale,
                                    shear=shear)
    images = pipeline.random_shift(images, int(shift), keys[1])
    return pipeline.random_flip(images, keys[2]) if flip else images

  return augment


def meta_batch_dataset(task_fn: Callable[[tf.Tensor], Dict[str, tf.Tensor]], *,
                       meta_batch_size: int, start_step: int = 0,
                       num_steps: Optional[int] = None) -> tf.data.Dataset:
  """A tf.data pipeline of meta-batches of tasks indexed by integers.

  Element ``s`` (counting from ``start_step``) is ``task_fn`` applied to task indices
  ``s*T .. s*T + T-1`` and stacked, T = ``meta_batch_size``. Built from
  ``Dataset.range`` / ``Dataset.counter``, mapped in parallel with deterministic order,
  batched with static shapes and prefetched: resuming at step ``s`` costs nothing.

  Args:
    task_fn: scalar int64 index -> dict of tensors (one task); plain TensorFlow, traced
      without AutoGraph.
    meta_batch_size: T, the tasks per meta-batch.
    start_step: the first meta-batch.
    num_steps: the number of meta-batches; ``None`` for an endless stream.

  Returns:
    A ``tf.data.Dataset`` of dicts whose tensors have a leading axis of size T.

  Raises:
    ValueError: ``meta_batch_size`` < 1, ``start_step`` < 0 or ``num_steps`` < 1.
  """
  t = _check_int("meta_batch_size", meta_batch_size, 1)
  start = _check_int("start_step", start_step, 0)
  if num_steps is None:
    indices = tf.data.Dataset.counter(start=start * t, dtype=tf.int64)
  else:
    indices = tf.data.Dataset.range(start * t,
                                    (start + _check_int("num_steps", num_steps, 1)) * t)
  task_fn = tf.autograph.experimental.do_not_convert(task_fn)
  return (indices.map(task_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .batch(t, drop_remainder=True)
          .prefetch(tf.data.AUTOTUNE))


def episode_dataset(data: Union[ClassIndexed, Tuple[np.ndarray, np.ndarray]], *,
                    num_ways: int, num_shots: int, num_queries: int, meta_batch_size: int,
                    seed: int = 0, start_step: int = 0, num_steps: Optional[int] = None,
                    shuffle: bool = True, return_classes: bool = False) -> tf.data.Dataset:
  """A tf.data pipeline of meta-batches of N-way K-shot episodes.

  Meta-batch ``s`` holds episodes ``s*T .. s*T + T-1`` of :func:`make_episode_fn`, each
  a function of ``(seed, episode index)`` only.

  Args:
    data: :class:`ClassIndexed` or ``(images, labels)``; see :func:`class_indexed`.
    num_ways, num_shots, num_queries, seed, shuffle, return_classes: see
      :func:`make_episode_fn`.
    meta_batch_size, start_step, num_steps: see :func:`meta_batch_dataset`.

  Returns:
    A ``tf.data.Dataset`` of dicts: ``support_x`` [T, N*K, H, W, C] float32,
    ``support_y`` [T, N*K] int32 (0..N-1 per episode), ``query_x`` [T, N*Q, H, W, C]
    float32, ``query_y`` [T, N*Q] int32, and with ``return_classes`` ``classes`` [T, N]
    int64 (source labels of the episode's classes).

  Raises:
    ValueError, TypeError: as :func:`make_episode_fn` and :func:`meta_batch_dataset`.
  """
  fn = make_episode_fn(data, num_ways=num_ways, num_shots=num_shots, num_queries=num_queries,
                       seed=seed, shuffle=shuffle, return_classes=return_classes)
  return meta_batch_dataset(fn, meta_batch_size=meta_batch_size, start_step=start_step,
                            num_steps=num_steps)
