"""The one training loop: ``train_and_evaluate(config, workdir)``.

Every algorithm (plain training, hypernetworks, meta-learners) is a *task*
(:mod:`hypernet.tasks`) run by this loop:

* models, optimiser and step are built under a ``tf.distribute`` strategy scope (the
  default strategy on one device; ``config.distribution`` picks another, see
  :mod:`hypernet.distribute`), so multi-device and multi-worker training need no other
  loop: the gradients are summed over replicas *before* anything reads them (global
  norm, clipping, NaN guard, loss scaling), and returned state is all-reduced before it
  is written, so R replicas follow the single-device trajectory;
* ``config.jit_compile`` compiles the forward and backward pass with XLA, and
  ``config.dtype_policy`` switches on mixed precision (``mixed_float16`` adds dynamic
  loss scaling);
* steps run in chunks inside one ``tf.function`` (a ``tf.range`` loop over a distributed
  iterator): no Python work per step, one trace per run;
* every ``log_every`` steps: console progress and TensorBoard scalars (loss, accuracy,
  learning rate, steps/s, global gradient norm); every ``eval_every`` steps an
  evaluation; every ``checkpoint_every`` steps a ``tf.train.CheckpointManager`` save;
* a rerun with the same workdir resumes from the latest checkpoint, with the same data
  order (the input pipeline is step-indexed);
* a NaN/inf loss or gradient stops the run with :class:`NonFiniteLossError` naming the
  first bad step, before anything from that step is saved;
* at the end the final evaluation metrics are written to ``workdir/final_metrics.json``.
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict

from absl import logging
import keras
import ml_collections
import tensorflow as tf

from hypernet import distribute, objectives, tasks


class NonFiniteLossError(FloatingPointError):
  """The loss or gradient became NaN/inf; the last good checkpoint is kept."""


def make_optimizer(config: ml_collections.ConfigDict, total_steps: int) -> keras.optimizers.Optimizer:
  """Builds the outer optimiser from ``config`` (= ``config.optim``).

  Fields: ``name`` (adam | adamw | sgd), ``lr``, ``schedule`` (constant | cosine),
  ``warmup_steps``, ``weight_decay`` (adamw), ``momentum`` (sgd), ``grad_clip_norm``
  (global norm, 0 = off).

  Raises:
    ValueError: an unknown ``name`` or ``schedule``, or a non-positive ``lr``.
  """
  if config.lr <= 0:
    raise ValueError(f"config.optim.lr must be positive, got {config.lr}.")
  if config.schedule == "constant":
    lr = config.lr
    if config.warmup_steps:
      lr = keras.optimizers.schedules.CosineDecay(
          0.0, 1, alpha=1.0, warmup_target=config.lr, warmup_steps=config.warmup_steps)
  elif config.schedule == "cosine":
    decay_steps = max(total_steps - config.warmup_steps, 1)
    lr = keras.optimizers.schedules.CosineDecay(
        0.0 if config.warmup_steps else config.lr, decay_steps,
        warmup_target=config.lr if config.warmup_steps else None,
        warmup_steps=config.warmup_steps)
  else:
    raise ValueError(f"config.optim.schedule={config.schedule!r}; use 'constant' or 'cosine'.")
  clip = {"global_clipnorm": config.grad_clip_norm} if config.grad_clip_norm else {}
  if config.name == "adam":
    return keras.optimizers.Adam(lr, **clip)
  if config.name == "adamw":
    return keras.optimizers.AdamW(lr, weight_decay=config.weight_decay, **clip)
  if config.name == "sgd":
    return keras.optimizers.SGD(lr, momentum=config.momentum, **clip)
  raise ValueError(f"config.optim.name={config.name!r}; use 'adam', 'adamw' or 'sgd'.")


def _use_jit(config) -> bool:
  """``config.jit_compile``: ``"auto"`` (XLA on GPU/TPU only), True/False, or the strings
  ``"true"``/``"false"`` (the field is a string, so ``--config.jit_compile=true``)."""
  value = config.jit_compile
  if isinstance(value, str) and value.lower() in ("true", "false"):
    value = value.lower() == "true"
  if value == "auto":
    return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
  if isinstance(value, bool):
    return value
  raise ValueError(f"config.jit_compile must be 'auto', 'true' or 'false', got {value!r}.")


class Trainer:
  """Holds the built task, optimiser, checkpoint and compiled step functions."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str,
               build_task=tasks.build_task):
    """Builds everything under ``config.distribution``'s strategy.

    Args:
      config: the experiment config.
      workdir: the output folder (checkpoints under ``workdir/checkpoints`` on the
        chief; non-chief workers write theirs to a temporary folder).
      build_task: ``config -> task``, called inside the strategy scope (tests pass small
        analytic tasks here).
    """
    self.config = config
    self.workdir = workdir
    self.strategy = distribute.get_strategy(config)
    self.num_replicas = self.strategy.num_replicas_in_sync
    self.is_chief = distribute.is_chief(self.strategy)
    keras.utils.set_random_seed(config.seed)
    policy = config.dtype_policy
    with distribute.dtype_policy(policy), self.strategy.scope():
      self.task = build_task(config)
      self.variables = list(self.task.trainable_variables)
      if not self.variables:
        raise ValueError("The task has no trainable variables: everything is frozen "
                         "(check config.hypernet.train_rest and the generated patterns).")
      self.optimizer = make_optimizer(config.optim, config.num_steps)
      if policy == "mixed_float16":
        self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
      distribute.apply_reduced_gradients(self.optimizer)
      self.optimizer.build(self.variables)
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
    self.checkpoint = tf.train.Checkpoint(step=self.step, optimizer=self.optimizer,
                                          **self.task.trackables())
    self.write_dir = distribute.write_dir(workdir, self.strategy)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, os.path.join(self.write_dir, "checkpoints"),
        max_to_keep=config.checkpoint_keep if self.is_chief else 1)
    self.jit = _use_jit(config)
    self.metric_names = list(getattr(self.task, "metric_names", ("loss", "accuracy")))
    self._train_steps = tf.function(self._train_steps_fn)
    self._eval_step = tf.function(self._eval_step_fn)
    # XLA compiles the forward and backward pass only: the cross-replica sums and the
    # optimiser update (a merge_call on CPU devices) stay outside the XLA cluster.
    self._gradients = tf.function(self._gradients_fn, jit_compile=True) \
        if self.jit else self._gradients_fn

  # -- the compiled step ------------------------------------------------------------
  def _gradients_fn(self, batch):
    """This replica's loss share, metric sums, new state and (scaled) gradients."""
    with tf.GradientTape() as tape:
      loss, sums, state = self.task.train_loss(batch, self.config.batch_size)
      scaled = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
    grads = tape.gradient(scaled, self.variables)
    missing = [getattr(v, "path", v.name) for g, v in zip(grads, self.variables) if g is None]
    if missing:
      raise ValueError(f"No gradient reaches {missing}: they do not affect the loss. Freeze "
                       "them or remove them from the trained weights.")
    return loss, sums, state, grads

  def _replica_step_fn(self, batch):
    """One step on this replica's share of the global batch.

    Returns ``(metric sums, nonfinite)``: sums ``{name: (sum, count)}`` to be summed
    over replicas, including ``grad_norm``, the global norm of the gradient summed over
    replicas (before clipping), counted once per step; ``nonfinite`` is 1.0 when the
    global loss or that gradient is NaN/inf, the same value on every replica.
    """
    loss, sums, state, grads = self._gradients(batch)
    # The applied gradient: the sum of the replicas' shares of the global-mean loss.
    grads, loss = distribute.all_reduce_sum((grads, loss))
    grad_norm = tf.linalg.global_norm([tf.cast(g, tf.float32) for g in grads])
    if self.loss_scaling:  # Overflowing scaled gradients are skipped, not fatal.
      grad_norm = grad_norm / tf.cast(self.optimizer.dynamic_scale, tf.float32)
      finite = tf.math.is_finite(loss)
      counted = tf.cast(tf.math.is_finite(grad_norm), tf.float32)
      grad_norm = tf.where(counted > 0, grad_norm, 0.0)
    else:
      finite = tf.math.is_finite(loss) & tf.math.is_finite(grad_norm)
      counted = tf.constant(1.0)
    self.optimizer.apply(grads, self.variables)
    self.task.apply_state(distribute.all_reduce_state(state))
    sums = dict(sums)
    share = counted / self.num_replicas
    sums["grad_norm"] = (grad_norm * share, share)
    return sums, 1.0 - tf.cast(finite, tf.float32)

  def _train_steps_fn(self, iterator, num_steps):
    zero = tf.constant(0.0)
    totals = {k: (zero, zero) for k in self.metric_names + ["grad_norm"]}
    first_bad = tf.constant(-1, tf.int64)
    for i in tf.range(num_steps):
      sums, nonfinite = self.strategy.run(self._replica_step_fn, args=(next(iterator),))
      reduce = lambda t: self.strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None)
      sums = tf.nest.map_structure(reduce, sums)
      nonfinite = self.strategy.reduce(tf.distribute.ReduceOp.SUM, nonfinite, axis=None)
      totals = {k: (totals[k][0] + sums[k][0], totals[k][1] + sums[k][1]) for k in totals}
      here = self.step + tf.cast(i, tf.int64) + 1
      first_bad = tf.where((first_bad < 0) & (nonfinite > 0.0), here, first_bad)
    return totals, first_bad

  def _eval_step_fn(self, batch):
    sums = self.strategy.run(self.task.eval_sums, args=(batch,))
    return tf.nest.map_structure(
        lambda t: self.strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None), sums)

  # -- public -----------------------------------------------------------------------
  def restore(self) -> int:
    """Restores the latest checkpoint if there is one; returns the step to start at.

    Every worker restores the chief's latest checkpoint (``workdir/checkpoints``), also
    non-chief workers, whose own saves go to a temporary folder.
    """
    latest = tf.train.latest_checkpoint(os.path.join(self.workdir, "checkpoints"))
    if latest:
      self.checkpoint.restore(latest).assert_existing_objects_matched()
      # A constant learning rate is a checkpointed variable; the config of the resumed
      # run wins (schedules are recomputed from the restored iteration count anyway).
      optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)  # Loss scaling.
      if not isinstance(optimizer._learning_rate,  # pylint: disable=protected-access
                        keras.optimizers.schedules.LearningRateSchedule):
        optimizer.learning_rate = self.config.optim.lr
      logging.info("Resumed from %s at step %d.", latest, self.current_step())
    return self.current_step()

  def current_step(self) -> int:
    """The global step as a Python int (also for a mirrored step variable)."""
    return int(self.step.read_value())

  def train_iterator(self, start_step: int):
    seed = self.config.seed
    fn = lambda ctx: self.task.train_dataset(self.config.batch_size, seed, start_step, ctx)
    return iter(self.strategy.distribute_datasets_from_function(fn))

  def evaluate(self) -> Dict[str, float]:
    fn = lambda ctx: self.task.eval_dataset(self.config.eval_batch_size, ctx)
    totals = None
    for batch in self.strategy.distribute_datasets_from_function(fn):
      sums = self._eval_step(batch)
      totals = sums if totals is None else tf.nest.map_structure(tf.add, totals, sums)
    return objectives.finalize(totals)

  def train_chunk(self, iterator, num_steps: int):
    """Runs ``num_steps`` steps; returns (metric means, first bad step or -1)."""
    totals, first_bad = self._train_steps(iterator, tf.constant(num_steps, tf.int64))
    return objectives.finalize(totals), int(first_bad)

  def learning_rate(self) -> float:
    return float(self.optimizer.learning_rate)

  def close(self) -> None:
    """Removes a non-chief worker's temporary checkpoint folder."""
    distribute.remove_write_dir(self.write_dir, self.workdir)


def _next_event(step: int, every: int, end: int) -> int:
  return min(end, (step // every + 1) * every) if every > 0 else end


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, float]:
  """Trains ``config`` in ``workdir`` (resuming if it holds a checkpoint) and evaluates.

  Args:
    config: an experiment config (see ``configs/``).
    workdir: output folder: ``checkpoints/``, TensorBoard ``train/`` and ``eval/`` event
      files, ``config.json`` and ``final_metrics.json``.

  Returns:
    The final evaluation metrics (``{"loss": ..., "accuracy": ...}``).

  Raises:
    NonFiniteLossError: the loss or gradients became NaN/inf (names the step).
    ValueError: an invalid config (names the field).
  """
  from hypernet import config_lib, summaries  # pylint: disable=g-import-not-at-top
  config_lib.validate(config)
  tf.io.gfile.makedirs(workdir)
  trainer = Trainer(config, workdir)
  is_chief = trainer.is_chief
  writer = summaries.Writer(workdir, enabled=is_chief)
  start = trainer.restore()
  counts = trainer.task.describe() if hasattr(trainer.task, "describe") else {}
  if start == 0:
    writer.config(config)
    writer.scalars(0, {f"params/{k}": v for k, v in counts.items()}, "train")
  logging.info("Parameters: %s", counts)
  if is_chief:
    with tf.io.gfile.GFile(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=2))

  total = config.num_steps
  iterator = trainer.train_iterator(start)
  step = start
  t0 = time.time()
  last_t, last_step = t0, step
  eval_metrics: Dict[str, float] = {}
  while step < total:
    stop = min(_next_event(step, config.log_every, total),
               _next_event(step, config.eval_every, total),
               _next_event(step, config.checkpoint_every, total))
    metrics, first_bad = trainer.train_chunk(iterator, stop - step)
    if first_bad >= 0:
      raise NonFiniteLossError(
          f"Non-finite loss or gradient at step {first_bad}; stopped before saving it. The "
          f"last good checkpoint ({trainer.manager.latest_checkpoint}) is kept. Lower "
          "config.optim.lr or set config.optim.grad_clip_norm.")
    trainer.step.assign(stop)
    step = stop
    now = time.time()
    if step % config.log_every == 0 or step == total:
      rate = (step - last_step) / max(now - last_t, 1e-9)
      metrics.update(learning_rate=trainer.learning_rate(), steps_per_sec=rate,
                     examples_per_sec=rate * config.batch_size)
      writer.scalars(step, metrics, "train")
      eta = (total - step) / max(rate, 1e-9)
      logging.info("step %d/%d  loss %.4f  accuracy %.4f  %.1f steps/s  ETA %.0fs", step, total,
                   metrics.get("loss", float("nan")), metrics.get("accuracy", float("nan")),
                   rate, eta)
      last_t, last_step = now, step
    if (config.eval_every > 0 and step % config.eval_every == 0) or step == total:
      eval_metrics = trainer.evaluate()
      writer.scalars(step, eval_metrics, "eval")
      logging.info("eval at step %d: %s", step, eval_metrics)
    if step % config.checkpoint_every == 0 or step == total:
      trainer.manager.save(checkpoint_number=step)
  if not eval_metrics:  # Resumed a finished run: evaluate what was restored.
    eval_metrics = trainer.evaluate()
  writer.flush()
  trainer.close()
  result = dict(eval_metrics)
  result.update(step=step, wall_time_sec=time.time() - t0,
                **{f"params/{k}": v for k, v in counts.items()})
  if is_chief:
    with tf.io.gfile.GFile(os.path.join(workdir, "final_metrics.json"), "w") as f:
      json.dump(result, f, indent=2)
  return result
