"""Tasks: what the one train loop trains, built from the config.

A task bundles a weight source (identity, hypernetwork, meta-learner), the target
network, an objective and the data. The train loop in :mod:`hypernet.train_lib` only
talks to this interface, so no algorithm needs a train loop of its own:

* ``trainable_variables`` -- what the outer optimiser updates;
* ``trackables()`` -- what a checkpoint holds (besides step and optimiser);
* ``train_dataset(global_batch_size, seed, start_step, input_context)`` /
  ``eval_dataset(global_batch_size, input_context)`` -- ``tf.data`` pipelines;
* ``train_loss(batch, global_batch_size)`` -> ``(loss, metric_sums, state)`` where
  ``loss`` is this replica's share of the global mean loss (scaled by the global batch
  size, ``tf.nn.compute_average_loss``) and ``state`` is the new non-trainable state;
* ``eval_sums(batch)`` -> metric sums ``{name: (sum, count)}``;
* ``apply_state(state)`` -- writes non-trainable state (BatchNorm statistics).
"""
from __future__ import annotations

from typing import Dict

import tensorflow as tf

from hypernet import data as data_lib
from hypernet import functional, models, objectives, sources
from hypernet.data import pipeline


class ClassificationTask:
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
    self.target = models.make_target(config.model, self.data.image_shape, self.data.num_classes)
    self.source = sources.build_weight_source(config, self.target)

  @property
  def trainable_variables(self):
    return self.source.trainable_variables

  def trackables(self) -> Dict[str, object]:
    return self.source.trackables()

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    return pipeline.train_dataset(self.data, global_batch_size, seed, start_step,
                                  input_context=input_context,
                                  augment_shift=self.config.data.augment_shift,
                                  augment_flip=self.config.data.augment_flip)

  def eval_dataset(self, global_batch_size, input_context=None):
    return pipeline.eval_dataset(self.data, global_batch_size, "test", input_context)

  def _forward(self, batch, training):
    weights = self.source.weights()
    return functional.functional_call(self.target, weights, batch["image"], training=training,
                                      return_state=True)

  def train_loss(self, batch, global_batch_size):
    logits, state = self._forward(batch, training=True)
    per_example, sums = objectives.classification(logits, batch["label"])
    loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    return loss, sums, state

  def eval_sums(self, batch):
    logits, _ = self._forward(batch, training=False)
    _, sums = objectives.classification(logits, batch["label"], batch.get("weight"))
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


def build_task(config):
  """Builds the task named by ``config.task`` (call inside the strategy scope).

  Raises:
    ValueError: an unknown ``config.task`` (lists the known ones).
  """
  if config.task == "classification":
    return ClassificationTask(config)
  from hypernet import meta_tasks  # pylint: disable=g-import-not-at-top
  if config.task in meta_tasks.TASKS:  # few_shot, sinusoid
    return meta_tasks.MetaLearningTask(config)
  raise ValueError(f"config.task={config.task!r} is unknown; known: "
                   f"{['classification'] + list(meta_tasks.TASKS)}.")
