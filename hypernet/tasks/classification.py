"""Tasks: what the one train loop trains, built from the config.

A task bundles a weight source (identity, hypernetwork, meta-learner), the target
network, an objective and the data; each is a
:class:`~hypernet.tasks.protocol.Task` (re-exported here), the only interface
the loop (:mod:`hypernet.training.loop`) talks to. :func:`build_task` builds the one
``config.task`` names.
"""
from __future__ import annotations

from typing import Dict

import tensorflow as tf

from hypernet import data as data_lib
from hypernet.core import functional
from hypernet.hypernetworks import source as sources
from hypernet.numerics import accel
from hypernet.tasks import targets, objectives
from hypernet.tasks.protocol import (  # pylint: disable=unused-import
    TASK_INTERFACE, TASKS, Task, TaskAdapter, as_task, missing_members)
from hypernet.data import pipeline


@TASKS.register("classification")
class ClassificationTask(Task):
  """Image classification with any weight source (plain or hypernetwork).

  Batches are ``{"image": float32 [B, H, W, C], "label": int32 [B]}`` (eval batches add
  ``"weight"``, float32 [B], 0 for padding).

  Args:
    config: the experiment config.
    data: an :class:`~hypernet.data.base.ImageClassificationData` to use instead of
      loading ``config.data`` (benchmarks, tests).
  """

  def __init__(self, config, data=None):
    self.config = config
    self.data = data if data is not None else data_lib.load_classification(config.data)
    self.target = targets.make_target(config.model, self.data.image_shape, self.data.num_classes)
    self.source = sources.build_weight_source(config, self.target)
    # Weight / activity regularizers and add_loss terms of the target: added to the
    # objective (computed on the weights actually used) and logged.
    self.has_losses = has_losses(self.target, self.data.image_shape)
    self.metric_names = ["loss", "accuracy"] + (
        ["regularization_loss"] if self.has_losses else [])

  @property
  def trainable_variables(self):
    return self.source.trainable_variables

  def trackables(self) -> Dict[str, object]:
    return self.source.trackables()

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    return pipeline.train_dataset(self.data, global_batch_size, seed, start_step,
                                  input_context=input_context,
                                  augment_shift=self.config.data.augment_shift,
                                  augment_flip=self.config.data.augment_flip,
                                  augment_rotation=self.config.data.augment_rotation,
                                  augment_scale=self.config.data.augment_scale,
                                  augment_shear=self.config.data.augment_shear)

  def eval_dataset(self, global_batch_size, input_context=None):
    return pipeline.eval_dataset(self.data, global_batch_size, "test", input_context)

  def _forward(self, batch, training):
    weights = self.source.weights()
    return functional.functional_call(
        self.target, weights, batch["image"], training=training, return_state=True,
        return_losses=True,
        accelerate=accel.CONFIG_VALUES[self.config.get("accelerate", "default")])

  def train_loss(self, batch, global_batch_size):
    logits, state, losses = self._forward(batch, training=True)
    per_example, sums = objectives.classification(logits, batch["label"])
    loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    loss = add_regularization(loss, losses, sums)
    return loss, sums, state

  def eval_sums(self, batch):
    logits, _, losses = self._forward(batch, training=False)
    _, sums = objectives.classification(logits, batch["label"], batch.get("weight"))
    add_regularization(None, losses, sums)
    return sums

  def apply_state(self, state):
    if state:
      functional.assign_state(self.target, state)

  def describe(self) -> Dict[str, float]:
    """Parameter counts and compression ratio, for logs and summaries."""
    counts = self.source.parameter_counts()
    counts["compression_ratio"] = counts["generated"] / max(counts["source"], 1) \
        if counts["source"] else 0.0
    return counts


@TASKS.register("multitask_classification")
class MultiTaskClassificationTask(ClassificationTask):
  """Multi-task classification with a conditional hypernetwork, one forward pass per batch.

  There are ``T = config.hypernet.num_conditions`` tasks. Each (per-replica) batch of
  ``B`` examples is cut into ``T`` contiguous groups of ``B / T``; group ``t`` is task
  ``t``. The hypernetwork generates all ``T`` weight sets from the task ids ``0..T-1`` in
  one call, and the target runs on them in one batched pass
  (:func:`hypernet.hypernetworks.batched.batched_functional_call`). With
  ``config.multitask.label_shift`` task ``t`` relabels class ``y`` as
  ``(y + t) mod num_classes`` -- the tasks then conflict, so only task-specific weights
  can solve them all (a label-permuted variant of the multi-task setting of von Oswald
  et al. 2020); without it every task is the plain data set. Each task is exactly as hard
  as the single task, so the mean accuracy is comparable with direct training.

  Metrics: ``loss``, ``accuracy`` (over all tasks) and ``accuracy/task<t>``. BatchNorm
  moving statistics of the target are averaged over tasks
  (:func:`hypernet.hypernetworks.batched.reduce_state`).

  Raises:
    ValueError: the weight source is not a conditional hypernetwork, or
      ``config.batch_size`` / ``config.eval_batch_size`` is not a multiple of ``T``.
  """

  def __init__(self, config):
    super().__init__(config)
    from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
    self._batched = batched
    self.num_tasks = int(config.hypernet.num_conditions)
    if not isinstance(self.source, sources.HypernetworkSource) or self.num_tasks < 1:
      raise ValueError("config.task='multitask_classification' needs a conditional "
                       "hypernetwork: set config.hypernet.kind (mlp | chunked | static) and "
                       "config.hypernet.num_conditions >= 1 (the number of tasks).")
    for name in ("batch_size", "eval_batch_size"):
      if config[name] % self.num_tasks:
        raise ValueError(f"config.{name}={config[name]} must be a multiple of the number of "
                         f"tasks config.hypernet.num_conditions={self.num_tasks}.")
    self.label_shift = bool(config.multitask.label_shift)
    self.metric_names = ["loss", "accuracy"] + [f"accuracy/task{t}" for t in range(self.num_tasks)] \
        + (["regularization_loss"] if self.has_losses else [])

  def _multitask_forward(self, batch, training):
    t = self.num_tasks
    x, y = batch["image"], tf.cast(batch["label"], tf.int32)
    per_task = tf.shape(x)[0] // t
    task = tf.repeat(tf.range(t), per_task)
    if self.label_shift:
      y = (y + task) % self.data.num_classes
    weights = self.source.weights(tf.range(t))                       # {path: [T, ...]}
    xs = tf.reshape(x, tf.concat([[t, per_task], tf.shape(x)[1:]], 0))
    logits, state, losses = self._batched.batched_functional_call(
        self.target, weights, xs, training=training, return_state=True, return_losses=True)
    logits = tf.reshape(logits, [-1, self.data.num_classes])
    # Each task's network is penalised as a single target would be; the data term is the
    # mean over tasks, so the penalty is too.
    losses = [tf.reduce_mean(l, 0) for l in losses]
    return logits, y, task, self._batched.reduce_state(state), losses

  def _sums(self, logits, y, task, weight):
    per_example, sums = objectives.classification(logits, y, weight)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32)
    w = tf.ones_like(correct) if weight is None else weight
    for k in range(self.num_tasks):
      mask = w * tf.cast(tf.equal(task, k), tf.float32)
      sums[f"accuracy/task{k}"] = (tf.reduce_sum(correct * mask), tf.reduce_sum(mask))
    return per_example, sums

  def train_loss(self, batch, global_batch_size):
    logits, y, task, state, losses = self._multitask_forward(batch, training=True)
    per_example, sums = self._sums(logits, y, task, None)
    loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    loss = add_regularization(loss, losses, sums)
    return loss, sums, state

  def eval_sums(self, batch):
    logits, y, task, _, losses = self._multitask_forward(batch, training=False)
    sums = self._sums(logits, y, task, batch.get("weight"))[1]
    add_regularization(None, losses, sums)
    return sums


def has_losses(target, input_shape) -> bool:
  """Whether ``target`` has losses of its own (weight / activity regularizers,
  ``add_loss``): one functional call on a zero batch ``[1, *input_shape]`` tells."""
  x = tf.zeros((1,) + tuple(input_shape), target.inputs[0].dtype if getattr(
      target, "inputs", None) else tf.float32)
  _, losses = functional.functional_call(target, None, x, training=True, return_losses=True)
  return bool(losses)


def add_regularization(loss, losses, sums):
  """Adds the target's own losses to this replica's ``loss`` and logs them.

  Args:
    loss: this replica's share of the global mean data loss (scalar), or ``None``
      (evaluation: only log).
    losses: list of scalar tensors from ``functional_call(..., return_losses=True)``:
      penalties of the weights actually used (generated or direct), activity
      regularizers, ``add_loss`` terms.
    sums: the metric sums ``{name: (sum, count)}``; gets ``regularization_loss`` (the
      penalty's value, averaged over replicas and steps by the loop) when there are losses.

  Returns:
    ``loss + penalty / num_replicas`` (``tf.nn.scale_regularization_loss``, so the
    cross-replica sum of the gradients has the penalty once), or ``loss`` unchanged.
  """
  if not losses:
    return loss
  penalty = tf.add_n([tf.cast(l, tf.float32) for l in losses])
  sums["regularization_loss"] = (penalty, tf.constant(1.0))
  if loss is None:
    return None
  return loss + tf.cast(tf.nn.scale_regularization_loss(penalty), loss.dtype)
