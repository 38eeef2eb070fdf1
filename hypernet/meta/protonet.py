"""Prototypical Networks (Snell, Swersky, Zemel 2017) as a learner.

The target's *body* (every layer before its Dense head; for conv4 on 28x28 images the
flattened output of the last block, ``D = 64`` features) embeds a task's support and
query sets. Class ``c``'s prototype is the mean embedding of its support examples
(Eq. 1), and a query ``x`` is classified by a softmax over negative squared Euclidean
distances to the prototypes (Eq. 2):

    p_c = 1/|S_c| sum_{(x_i, y_i) in S_c} f(x_i)                    (Eq. 1, [D])
    p(y = c | x) = softmax_c(-||f(x) - p_c||^2)                      (Eq. 2)

The learner writes these into the target's head for each task, so the query pass is the
target's own forward pass (every learner's, :mod:`hypernet.meta.meta_batch`):

    head/kernel[:, c] = 2 p_c,    head/bias[c] = -||p_c||^2
    logits_c(x) = 2 f(x).p_c - ||p_c||^2 = -||f(x) - p_c||^2 + ||f(x)||^2

The ``||f(x)||^2`` term is the same for every class, so the softmax, the loss, its
gradient and the argmax are exactly Eq. 2's (Snell et al. 2017 Sec. 2.4 write the
squared-Euclidean ProtoNet as this linear model); :meth:`PrototypicalNetwork.distance_logits`
gives Eq. 2's logits themselves. Meta-training learns the body by the query loss
through the embeddings of both sets (no inner gradient: first order by nature, the
gradient exact); the head's own variables are never read and not trained. Only the
squared Euclidean distance is offered: the cosine distance is not a linear head of
``f(x)`` (its ``1/||f(x)||`` scales the logits per query).

The head must have at least as many outputs as an episode has ways; classes an episode
lacks are masked as the support-conditioned hypernetwork masks them
(:func:`prototype_head`). :class:`hypernet.meta.support_hypernet.SupportHypernetwork`
generates its head from the same prototypes (:func:`class_prototypes`,
:func:`dense_head`).

A :class:`hypernet.meta.learner.Learner` (``config.meta.learner = "protonet"``).
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import anil
from hypernet.meta import learner as learner_lib

Weights = Dict[str, tf.Tensor]


class DenseHead(NamedTuple):
  """A target split at its Dense head (:func:`dense_head`).

  Attributes:
    split: the :class:`~hypernet.meta.anil.HeadSplit` (body and head models).
    paths: the head's two target paths ``[kernel, bias]`` as selected.
    kernel_path: the ``[D, N]`` kernel's path.
    bias_path: the ``[N]`` bias's path.
    dim: ``D``, the body's features.
    num_ways: ``N``, the head's outputs: the most classes an episode may have.
    dtype: the kernel's dtype.
  """
  split: anil.HeadSplit
  paths: List[str]
  kernel_path: str
  bias_path: str
  dim: int
  num_ways: int
  dtype: tf.DType


def dense_head(model: keras.Model, head="head/*", body: Optional[keras.Model] = None,
               head_model: Optional[keras.Model] = None) -> DenseHead:
  """``model`` split into a body and its Dense head selected by the patterns ``head``.

  Raises:
    ValueError: a pattern of ``head`` matches no trainable weight; ``head`` selects not
      exactly one kernel ``[D, N]`` and one bias ``[N]``; the split's errors
      (:class:`~hypernet.meta.anil.HeadSplit`).
  """
  paths = functional.select_paths(model, head, trainable=True)
  split = anil.HeadSplit(model, paths, body, head_model)
  variables = functional.variable_paths(model)
  kernels = [p for p in paths if len(variables[p].shape) == 2]
  biases = [p for p in paths if len(variables[p].shape) == 1]
  if len(kernels) != 1 or len(biases) != 1 or len(paths) != 2:
    raise ValueError(
        f"The head {paths} must be one Dense layer: one kernel [D, N] and "
        "one bias [N] (set head= to its two paths).")
  dim, num_ways = (int(d) for d in variables[kernels[0]].shape)
  if tuple(variables[biases[0]].shape) != (num_ways,):
    raise ValueError(f"Head bias {biases[0]} has shape "
                     f"{tuple(variables[biases[0]].shape)}, expected ({num_ways},).")
  return DenseHead(split, paths, kernels[0], biases[0], dim, num_ways,
                   tf.as_dtype(variables[kernels[0]].dtype))


def class_prototypes(features: tf.Tensor, labels: tf.Tensor, num_ways: int
                     ) -> Tuple[tf.Tensor, tf.Tensor]:
  """Each class's mean support embedding (Snell et al. 2017, Eq. 1).

  Args:
    features: ``[n*K, D]`` float support embeddings.
    labels: ``[n*K]`` int class ids ``0..n-1`` (``n <= num_ways``); every one must occur.
    num_ways: ``N``, the classes to return (``n..N-1`` absent: zero prototypes).

  Returns:
    ``(prototypes [N, D]`` in ``features``' dtype, ``present [N]`` bool: classes
    ``0..n-1``).

  Raises:
    InvalidArgumentError: a class below the largest label has no support example.
  """
  labels = tf.cast(labels, tf.int32)
  sums = tf.math.unsorted_segment_sum(features, labels, num_ways)
  counts = tf.math.unsorted_segment_sum(tf.ones_like(labels, features.dtype), labels,
                                        num_ways)
  present = counts > 0                                     # classes 0..n-1
  used = tf.range(num_ways) <= tf.reduce_max(labels)
  tf.debugging.assert_equal(
      tf.logical_or(present, tf.logical_not(used)), tf.ones_like(present),
      message="A class of the episode has no support example: the labels must be "
      "0..n-1 (n <= the head's N outputs), each with K >= 1 support examples.")
  return sums / tf.maximum(counts, 1)[:, None], present


def prototype_head(rows: tf.Tensor, bias: tf.Tensor, present: tf.Tensor
                   ) -> Tuple[tf.Tensor, tf.Tensor]:
  """A Dense head's ``(kernel [D, N], bias [N])`` from per-class ``rows [N, D]`` and
  ``bias [N]``, the classes an episode lacks (``present`` false) masked: a zero row and
  a bias of half the dtype's lowest value, so their softmax probability is exactly 0
  and they never win the argmax (a head sized for more ways than the episode's)."""
  rows = tf.where(present[:, None], rows, tf.zeros_like(rows))
  bias = tf.where(present, bias,
                  tf.fill(tf.shape(bias), tf.constant(0.5 * rows.dtype.min, rows.dtype)))
  return tf.transpose(rows), bias


def squared_euclidean_logits(queries: tf.Tensor, prototypes: tf.Tensor) -> tf.Tensor:
  """``-||queries[i] - prototypes[c]||^2``: ``[Q, D]``, ``[N, D]`` -> ``[Q, N]``
  (Snell et al. 2017, Eq. 2's logits)."""
  diff = queries[:, None, :] - prototypes[None, :, :]
  return -tf.reduce_sum(tf.square(diff), axis=-1)


@learner_lib.LEARNERS.register("protonet")
class PrototypicalNetwork(learner_lib.Learner):
  """Prototypical Networks: the head written per task from the support prototypes.

  Args:
    model: the built target network, a ``keras.Sequential`` whose head (``head``
      patterns) is one ``Dense`` layer mapping ``[batch, D]`` embeddings to ``[batch, N]``
      logits (conv4's ``head``; ``N`` >= the ways of any episode), or give ``body`` /
      ``head_model`` as :class:`~hypernet.meta.anil.ANIL`. Inputs in the target's dtype.
    loss_fn: the classification loss (``"sparse_softmax_cross_entropy"``).
    head: path patterns of the head's kernel ``[D, N]`` and bias ``[N]`` (default
      ``"head/*"``): overwritten per task, never trained.
    inner_training: the body's ``training=`` flag on the support set (BatchNorm batch
      statistics; ``options["inner_training"]`` of :meth:`adapt` wins).
    body: as :class:`~hypernet.meta.anil.ANIL`.
    head_model: as :class:`~hypernet.meta.anil.ANIL`.
    name: module name.

  Raises:
    ValueError: a head that is not one ``[D, N]`` kernel and one ``[N]`` bias; the
      split's errors (:class:`~hypernet.meta.anil.HeadSplit`).
  """

  config_exclude = ("model", "loss_fn", "name", "inner_training", "body", "head_model")
  before_metrics = False   # The target's own head is never used.
  first_order = True       # No inner gradient.
  min_inner_steps = 0

  def __init__(self, model: keras.Model, loss_fn, *, head="head/*",
               inner_training: Optional[bool] = True,
               body: Optional[keras.Model] = None, head_model: Optional[keras.Model] = None,
               name: Optional[str] = None):
    super().__init__(model, loss_fn, name=name)
    self.inner_training = inner_training
    layout = dense_head(model, head, body, head_model)
    self.split, self.num_ways = layout.split, layout.num_ways
    self._body, self._head = self.split.body, self.split.head   # Checkpointed.
    self.kernel_path, self.bias_path = layout.kernel_path, layout.bias_path
    self.generated_paths = [self.kernel_path, self.bias_path]
    # The head's variable dtype: under a mixed policy the body's features come in the
    # compute dtype (bfloat16 / float16), the head is written in float32.
    self.head_dtype = layout.dtype

  @property
  def body(self) -> keras.Model:
    """The embedding ``f``: inputs -> ``[batch, D]``."""
    return self.split.body

  @property
  def untrained_paths(self):
    """The head's paths: their variables are never read (not meta-trained)."""
    return list(self.generated_paths)

  def initial_weights(self, weights: Optional[Weights] = None) -> Dict[str, tf.Tensor]:
    """``weights`` as tensors plus the head's paths read from their variables (replaced
    in :meth:`adapt`)."""
    return learner_lib.initial_weights(self._model, weights, self.generated_paths)

  def generate_head(self, features: tf.Tensor, labels: tf.Tensor) -> Weights:
    """The head of the module doc from support embeddings.

    Args:
      features: ``[n*K, D]`` support embeddings (the body's output; a mixed policy's
        compute dtype is cast to the head's).
      labels: ``[n*K]`` int class ids ``0..n-1`` (``n <= N``); every one must occur.

    Returns:
      ``{kernel path: [D, N] (2 p_c), bias path: [N] (-||p_c||^2)}`` in the head
      variables' dtype, classes ``n..N-1`` masked (:func:`prototype_head`).

    Raises:
      InvalidArgumentError: a class below the largest label has no support example.
    """
    features = tf.cast(features, self.head_dtype)
    protos, present = class_prototypes(features, labels, self.num_ways)
    kernel, bias = prototype_head(2.0 * protos, -tf.reduce_sum(tf.square(protos), -1),
                                  present)
    return {self.kernel_path: kernel, self.bias_path: bias}

  def _embed_support(self, support_x, init, state, options):
    training = options.get("inner_training")
    training = self.inner_training if training is None else training
    return self.split.run_body(init, support_x, training, dict(state or {}))

  def adapt(self, support_x, support_y, weights: Optional[Weights] = None,
            state: Optional[Weights] = None, **options
            ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """The support set embedded and the head written from its prototypes (options as
    :meth:`hypernet.meta.learner.Learner.adapt`; ``inner_steps`` and ``first_order``
    are ignored: there is no inner loop).

    Returns:
      ``(fast_weights, state)`` keyed by target paths: the initial weights with the
      head of :meth:`generate_head`; the state after the support pass.
    """
    init = self.initial_weights(weights)
    features, body_state = self._embed_support(support_x, init, state, options)
    fast = dict(init)
    fast.update(self.generate_head(features, support_y))
    new_state = dict(state or {})
    new_state.update(body_state)
    return fast, new_state

  def distance_logits(self, support_x, support_y, query_x,
                      weights: Optional[Weights] = None, state: Optional[Weights] = None,
                      training: Optional[bool] = None) -> tf.Tensor:
    """Eq. 2's logits ``-||f(x) - p_c||^2`` themselves (the target's logits at the fast
    weights differ by ``||f(x)||^2`` per query; the same softmax).

    Args:
      support_x: ``[n*K, ...]`` support inputs in the target's input dtype.
      support_y: ``[n*K]`` int labels ``0..n-1``, each occurring.
      query_x: ``[Q, ...]`` query inputs.
      weights: as :meth:`adapt`.
      state: as :meth:`adapt`.
      training: the body's ``training=`` flag on both sets (default ``inner_training``).

    Raises:
      InvalidArgumentError: a class below the largest label has no support example.

    Returns:
      ``[Q, n]`` logits in the head's dtype.
    """
    options = {"inner_training": training}
    init = self.initial_weights(weights)
    features, body_state = self._embed_support(support_x, init, state, options)
    query_state = dict(state or {})
    query_state.update(body_state)
    queries, _ = self._embed_support(query_x, init, query_state, options)
    num = tf.reduce_max(tf.cast(support_y, tf.int32)) + 1
    protos, _ = class_prototypes(tf.cast(features, self.head_dtype), support_y, num)
    return squared_euclidean_logits(tf.cast(queries, self.head_dtype), protos)
