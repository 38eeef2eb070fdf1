"""The one training loop: ``train_and_evaluate(config, workdir)``.

Every algorithm (plain training, hypernetworks, meta-learners) is a *task*
(:mod:`hypernet.training.tasks`) run by this loop:

* models, optimiser and step are built under a ``tf.distribute`` strategy scope (the
  default strategy on one device; ``config.distribution`` picks another, see
  :mod:`hypernet.training.distribute`), so multi-device and multi-worker training need no other
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
  first bad step and the first non-finite tensor (found by replaying that step from the
  last checkpoint), before anything from that step is saved; with
  ``config.fault.nonfinite="skip"`` the bad step is skipped instead;
* SIGTERM / SIGINT: the current chunk finishes, every worker learns of the signal at the
  same chunk boundary (:meth:`Trainer.agree_stop`), all stop at that step, the chief's
  checkpoint of it is saved and the run ends with :class:`~hypernet.training.checkpoints.
  Preempted` (exit status 143: rerun to resume) or ``KeyboardInterrupt``; a lost peer
  worker ends it with one line and :class:`~hypernet.training.checkpoints.PeerLost`
  (143); a resume skips unreadable checkpoints; a second job on the same workdir is
  refused (:mod:`hypernet.training.checkpoints`);
* every ``config.summaries.every`` steps the model summaries of
  :class:`hypernet.training.summaries.ModelSummaries` (histograms, kernel images, norms) and an
  optional profiler trace; at step 0 an evaluation and the hparams plugin's record of
  the run; a resumed run first writes a TensorBoard restart marker at the restored step,
  so that no step appears twice;
* at the end the final evaluation metrics are written to ``workdir/final_metrics.json``;
  rerunning a finished run returns them without rewriting anything.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from typing import Dict, List, Optional, Tuple

from absl import logging
import keras
import ml_collections
import tensorflow as tf

from hypernet.training import console, distribute, objectives, tasks
from hypernet.numerics import devices, norm_relu_pool, second_order


class NonFiniteLossError(FloatingPointError):
  """The loss or gradient became NaN/inf; the last good checkpoint is kept."""


class WorkdirWriteError(OSError):
  """A checkpoint, event or metrics file could not be written (disk full, no permission);
  the message names the folder, and the previous checkpoint is kept."""


def _write_failure(error: BaseException) -> Optional[str]:
  """``"No space left on device"``-style reason when ``error`` is a failed file write
  (TensorFlow's or Python's), else ``None`` (a GPU out-of-memory error is not one)."""
  import errno  # pylint: disable=g-import-not-at-top
  if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EACCES, errno.EPERM,
                                                    errno.EROFS, errno.EDQUOT):
    return os.strerror(error.errno)
  text = str(getattr(error, "message", "") or error)
  for reason in ("No space left on device", "Disk quota exceeded", "Permission denied",
                 "Operation not permitted", "Read-only file system"):
    if reason in text and isinstance(error, (tf.errors.PermissionDeniedError,
                                             tf.errors.ResourceExhaustedError,
                                             tf.errors.FailedPreconditionError,
                                             tf.errors.UnknownError,
                                             tf.errors.InternalError)):
      return reason
  return None


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


def _use_jit(config, kind: Optional[str] = None) -> bool:
  """``config.jit_compile``: ``"auto"`` (XLA on GPU/TPU only: :func:`devices.xla_auto`),
  True/False, or the strings ``"true"``/``"false"`` (the field is a string, so
  ``--config.jit_compile=true``). ``kind``: the device kind (default: the one seen)."""
  value = config.jit_compile
  if isinstance(value, str) and value.lower() in ("true", "false"):
    value = value.lower() == "true"
  if value == "auto":
    return devices.xla_auto(kind)
  if isinstance(value, bool):
    return value
  raise ValueError(f"config.jit_compile must be 'auto', 'true' or 'false', got {value!r}.")


def device_choices(config, kind: Optional[str] = None) -> Dict[str, object]:
  """Every device-dependent choice the :class:`Trainer` makes for ``config``, in one dict.

  Args:
    config: an experiment config (reads ``jit_compile``, ``dtype_policy``,
      ``meta.fused_blocks``).
    kind: ``"cpu"``, ``"gpu"`` or ``"tpu"`` (default: :func:`devices.accelerator`, what
      TensorFlow sees).

  Returns:
    ``{"kind", "jit", "cpu_kernels", "fused_blocks", "loss_scaling", "warning"}``:
    XLA on the step's forward and backward pass; hypernet's CPU numerics (plain bias
    adds, fused kernel) allowed; the fused BatchNorm -> ReLU -> max-pool blocks on
    (``config.meta.fused_blocks``, CPU only, never under XLA, which cannot compile the
    C++ kernel); a ``LossScaleOptimizer`` around the optimiser; a one-line precision
    warning or ``None`` (:func:`devices.precision_warning`).

  Raises:
    ValueError: a bad ``config.jit_compile`` or device kind.
  """
  kind = kind or devices.accelerator()
  jit = _use_jit(config, kind)
  cpu_kernels = devices.cpu_kernels(kind)
  policy = config.dtype_policy
  return {
      "kind": kind,
      "jit": jit,
      "cpu_kernels": cpu_kernels,
      "fused_blocks": (bool(config.get("meta", {}).get("fused_blocks", True))
                       and not jit and cpu_kernels),
      "loss_scaling": devices.loss_scaling(policy),
      "warning": devices.precision_warning(policy, kind),
  }


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
    if config.distribution != "auto" or self.num_replicas > 1:
      logging.info("Distribution: %s (config.distribution=%r), %d replica(s).",
                   type(self.strategy).__name__, config.distribution, self.num_replicas)
    keras.utils.set_random_seed(config.seed)
    policy = config.dtype_policy
    distribute.check_dtype_policy(policy)
    self.devices = device_choices(config)
    if self.devices["warning"]:
      logging.warning(self.devices["warning"])
    with distribute.dtype_policy(policy), self.strategy.scope():
      self.task = tasks.as_task(build_task(config))
      self.variables = list(self.task.trainable_variables)
      if not self.variables:
        raise ValueError("The task has no trainable variables: everything is frozen "
                         "(check config.hypernet.train_rest and the generated patterns).")
      # A task that restarts the optimiser periodically (continual learning: one per
      # task) gives the schedule's horizon; otherwise the whole run.
      self.optimizer = make_optimizer(
          config.optim, self.task.schedule_steps or config.num_steps)
      if self.devices["loss_scaling"]:
        self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
      distribute.apply_reduced_gradients(self.optimizer)
      self.optimizer.build(self.variables)
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
    self.checkpoint = tf.train.Checkpoint(step=self.step, optimizer=self.optimizer,
                                          **self.task.trackables())
    self.write_dir = distribute.write_dir(workdir, self.strategy)
    self.manager = self._make_manager()
    # The workers of a multi-worker run, and this process's slot among them (agree_stop).
    self.cluster = distribute.cluster_tasks(self.strategy)
    own = distribute.task_info(self.strategy)
    self.task_slot = next((i for i, t in enumerate(self.cluster) if t[:2] == own), 0)
    self.multi_worker = len(self.cluster) > 1 and isinstance(
        self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
    self._agree = tf.function(self._agree_fn)
    self.restored_from: Optional[str] = None  # Set by restore().
    self.jit = self.devices["jit"]
    # BatchNorm -> ReLU -> max-pool blocks of meta-learners on one CPU kernel
    # (config.meta.fused_blocks); XLA cannot compile it, and GPUs have no kernel for it.
    self.fused_blocks = self.devices["fused_blocks"]
    self.metric_names = list(self.task.metric_names)
    self.train_metric_names = list(self.task.train_metric_names)
    self._train_steps = tf.function(self._train_steps_fn)
    # A task whose step changes form at known steps (MAML++'s derivative-order annealing:
    # first order, then second) names its phases (task.phase_boundaries(), task.phase_at
    # (step)): one traced function per phase, each with only its own work in the graph.
    self._phase_steps = {}
    self._eval_step = tf.function(self._eval_step_fn)
    # XLA compiles the forward and backward pass only: the cross-replica sums and the
    # optimiser update (a merge_call on CPU devices) stay outside the XLA cluster.
    # The tasks' code is plain TensorFlow (tf.while_loop, Python loops over static
    # sizes): traced as written, without AutoGraph converting every function it calls
    # (most of the set-up time of a meta-learning step).
    gradients_fn = tf.autograph.experimental.do_not_convert(self._gradients_fn)
    self._gradients = tf.function(gradients_fn, jit_compile=True) \
        if self.jit else gradients_fn

  def _make_manager(self) -> tf.train.CheckpointManager:
    return tf.train.CheckpointManager(
        self.checkpoint, os.path.join(self.write_dir, "checkpoints"),
        max_to_keep=self.config.checkpoint_keep if self.is_chief else 1)

  def _agree_fn(self, flags):
    def replica_fn(f):  # (A float tensor made on the replica's device: the collective
      # all-reduce refuses an int32 constant placed nowhere.)
      f = tf.cast(f, tf.float32)
      return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, f)
    summed = self.strategy.experimental_local_results(
        self.strategy.run(replica_fn, args=(flags,)))[0]
    return summed / (self.num_replicas // len(self.cluster))  # Per worker, not replica.

  def agree_stop(self, signum: Optional[int]) -> List[int]:
    """Shares "a signal asked me to stop" with every worker (a collective: every worker
    calls it at the same point of the loop, between chunks of steps).

    Args:
      signum: the signal this process received (``None``: none).

    Returns:
      One signal number per worker of :attr:`cluster` (0: none; one entry outside a
      multi-worker run), the same list on every worker, so all stop at the same step.
    """
    if not self.multi_worker:
      return [signum or 0]
    flags = [0] * len(self.cluster)
    flags[self.task_slot] = int(signum or 0)
    return [int(round(float(v))) for v in self._agree(tf.constant(flags, tf.int32)).numpy()]

  def save(self, step: int) -> str:
    """Saves checkpoint ``ckpt-<step>`` (on every worker: it may need collectives).

    Raises:
      WorkdirWriteError: the disk is full or the folder is not writable; names the
        folder, removes the partial ``ckpt-<step>_temp`` folder and keeps the previous
        checkpoint.
    """
    try:
      return self.manager.save(checkpoint_number=step)
    except (OSError, tf.errors.OpError) as e:
      reason = _write_failure(e)
      if reason is None:
        raise
      partial = os.path.join(self.manager.directory, f"ckpt-{step}_temp")
      try:
        if tf.io.gfile.exists(partial):
          tf.io.gfile.rmtree(partial)
      except (OSError, tf.errors.OpError):
        pass
      raise WorkdirWriteError(
          f"Cannot write checkpoint ckpt-{step} to {self.manager.directory}: {reason}. The "
          f"previous checkpoint ({self.manager.latest_checkpoint}) is kept; free space or "
          "fix that folder's permissions, then rerun the same command to resume.") from None

  # -- the compiled step ------------------------------------------------------------
  def _gradients_fn(self, batch):
    """This replica's loss share, metric sums, new state and (scaled) gradients."""
    scale_loss = self.optimizer.scale_loss if self.loss_scaling else None
    # The step is never differentiated from outside its trace: the tapes in it are all
    # there are (lets first-order steps keep Keras' cheaper normalisation moments).
    with second_order.all_tapes_visible(), self._kernels():
      loss, sums, state, grads = self.task.train_gradients(
          batch, self.config.batch_size, self.variables, scale_loss)
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
    totals = {k: (zero, zero) for k in self.train_metric_names + ["grad_norm"]}
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

  def _kernels(self):
    """The block in which a replica function is traced: fused blocks on or off."""
    return contextlib.nullcontext() if self.fused_blocks else norm_relu_pool.disabled()

  def _eval_sums(self, batch):
    with self._kernels():
      return self.task.eval_sums(batch)

  def _eval_step_fn(self, batch):
    sums = self.strategy.run(tf.autograph.experimental.do_not_convert(self._eval_sums),
                             args=(batch,))
    return tf.nest.map_structure(
        lambda t: self.strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None), sums)

  # -- public -----------------------------------------------------------------------
  def restore(self, replay: bool = False) -> int:
    """Restores the newest readable checkpoint if there is one; returns the step to start
    at (0 without one). Sets :attr:`restored_from` (the path, or ``None``).

    Every worker restores the chief's checkpoints (``workdir/checkpoints``), also
    non-chief workers, whose own saves go to a temporary folder. A checkpoint whose files
    are missing or unreadable (truncated, failed checksum) is skipped with a warning that
    names it; the chief moves an unreadable one into ``checkpoints/unreadable/`` and
    rewrites the state file without it, so that it is kept but neither resumed from nor
    counted by the rotation. ``replay``: the restore is the non-finite step search's
    rewind (logged as such, not as a resume).

    Raises:
      ConfigError: the newest readable checkpoint does not fit this config (another
        model or optimiser: missing or extra variables, other shapes); or checkpoints
        exist but none is readable (the unreadable ones were set aside, so a rerun starts
        over).
    """
    from hypernet.training import checkpoints, config_lib  # pylint: disable=g-import-not-at-top
    folder = checkpoints.checkpoint_dir(self.workdir)
    self.restored_from = None
    candidates = checkpoints.restore_candidates(folder) if tf.io.gfile.isdir(folder) else []
    if self.is_chief:  # Partial saves of a run that died while saving (we hold the lock).
      for partial in tf.io.gfile.glob(os.path.join(folder, "ckpt-*_temp")):
        tf.io.gfile.rmtree(partial)
    skipped = []
    for path, problem in candidates:
      problem = problem or checkpoints.unreadable(path)
      if problem is None:
        try:
          self.checkpoint.restore(path).assert_existing_objects_matched()
        except (ValueError, AssertionError, tf.errors.OpError) as e:
          changed = config_changes(self.workdir, self.config)
          raise config_lib.ConfigError(
              f"The checkpoint {path} does not fit this config: the run that wrote it had "
              f"a different config (changed here: {', '.join(changed) or 'unknown'}). Rerun "
              f"with that run's config (saved in {os.path.join(self.workdir, 'config.json')}"
              f"), or train in a new --workdir. [{type(e).__name__}: {_first_line(e)}]"
          ) from e
        self.restored_from = path
        break
      where = ""
      if self.is_chief and problem != "missing":
        where = f"; moved to {checkpoints.set_aside(path)}"
      logging.warning("Checkpoint %s is %s%s; trying the one before it.", path, problem,
                      where)
      skipped.append(path)
    if skipped and self.is_chief:  # The state file lists only what can be resumed.
      kept = [p for p, _ in reversed(candidates) if p not in skipped]
      checkpoints.write_state(folder, kept)
      self.manager = self._make_manager()
    if self.restored_from is None:
      if skipped:
        raise config_lib.ConfigError(
            f"No checkpoint in {folder} can be read ({', '.join(skipped)}: missing or "
            f"unreadable; unreadable ones were moved to {folder}/"
            f"{checkpoints.UNREADABLE_DIR}). Rerunning the same command starts over from "
            "step 0; to keep this workdir as it is, train in a new --workdir.")
      return 0
    changed = config_changes(self.workdir, self.config)
    if changed and not replay:
      logging.warning("Resuming with a config that differs from the run that wrote the "
                      "checkpoint in: %s. The new values apply from step %d on.",
                      ", ".join(changed), self.current_step())
    # A constant learning rate is a checkpointed variable; the config of the resumed
    # run wins (schedules are recomputed from the restored iteration count anyway).
    optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)  # Loss scaling.
    if isinstance(optimizer.learning_rate, (keras.Variable, tf.Variable)):  # not a schedule
      optimizer.learning_rate = self.config.optim.lr
    if skipped and not replay:
      logging.warning("Resuming from %s, the newest readable checkpoint, at step %d (not "
                      "from %s).", self.restored_from, self.current_step(), skipped[0])
    logging.info("Rewound to %s (step %d) to replay the steps after it." if replay else
                 "Resumed from %s at step %d.", self.restored_from, self.current_step())
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
    totals, first_bad = self.train_chunk_sums(iterator, num_steps)
    return objectives.finalize(totals), first_bad

  def train_chunk_sums(self, iterator, num_steps: int):
    """Runs ``num_steps`` steps; returns (``{metric: (sum, count)}`` floats, first bad
    step or -1): sums of several chunks add up to the sums over all their steps.

    A chunk that crosses one of the task's phase boundaries runs as one call per phase."""
    boundaries = sorted(self.task.phase_boundaries())
    if not boundaries:
      totals, first_bad = self._train_steps(iterator, tf.constant(num_steps, tf.int64))
      return {k: (float(s), float(c)) for k, (s, c) in totals.items()}, int(first_bad)
    step, end = self.current_step(), self.current_step() + num_steps
    sums: Dict[str, Tuple[float, float]] = {}
    first_bad = -1
    while step < end:
      until = min([b for b in boundaries if b > step] + [end])
      phase = self.task.phase_at(step)
      fn = self._phase_steps.get(phase)
      if fn is None:
        fn = self._phase_steps[phase] = tf.function(self._train_steps_fn)
      with self.task.tracing_phase(phase):  # Read while (and only when) fn traces.
        totals, bad = fn(iterator, tf.constant(until - step, tf.int64))
      for k, (s, c) in totals.items():
        before = sums.get(k, (0.0, 0.0))
        sums[k] = (before[0] + float(s), before[1] + float(c))
      if first_bad < 0 and int(bad) >= 0:
        first_bad = int(bad)
      step = until
      self.step.assign(step)  # The next segment numbers its steps from here.
    return sums, first_bad

  def learning_rate(self) -> float:
    # Through a tensor: float() of a constant rate's MirroredVariable raises.
    return float(tf.convert_to_tensor(self.optimizer.learning_rate))

  def close(self) -> None:
    """Removes a non-chief worker's temporary checkpoint folder."""
    distribute.remove_write_dir(self.write_dir, self.workdir)


# -- the outer loop (train_and_evaluate and its helpers) ---------------------------------
def config_changes(workdir: str, config) -> list:
  """``["optim.lr: 0.001 -> 0.01", ...]``: fields where ``config`` differs from the
  config saved in ``workdir/config.json`` by the run that started there (``[]`` if none
  is saved)."""
  from hypernet.training import config_lib  # pylint: disable=g-import-not-at-top
  path = os.path.join(workdir, "config.json")
  if not tf.io.gfile.exists(path):
    return []
  with tf.io.gfile.GFile(path) as f:
    saved = config_lib.flatten(ml_collections.ConfigDict(json.load(f)))
  now = config_lib.flatten(ml_collections.ConfigDict(json.loads(config.to_json_best_effort())))
  return [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(saved) | set(now))
          if json.dumps(saved.get(k)) != json.dumps(now.get(k))]


def _first_line(error: BaseException, limit: int = 300) -> str:
  """The first line of an error's message (TensorFlow's carry a long node trace after it)."""
  text = str(getattr(error, "message", "") or error).strip()
  line = next((l.strip() for l in text.splitlines() if l.strip()), type(error).__name__)
  return line if len(line) <= limit else line[:limit] + "..."


def signal_name(signum: int) -> str:
  import signal  # pylint: disable=g-import-not-at-top
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f"signal {signum}"


def _next_event(step: int, every: int, end: int) -> int:
  return min(end, (step // every + 1) * every) if every > 0 else end


def _check_before_building(config) -> None:
  """Fails on what the config alone cannot tell, naming the field, before the workdir is
  created or anything is built: a few-shot Omniglot run without a data folder, and
  hypernetwork patterns that match no weight of the target network (or weights the kind
  cannot generate), checked on the target built alone (cheap) for image classification,
  continual ``hnet``, sinusoid and Omniglot few-shot tasks."""
  from hypernet.training import config_lib, models  # pylint: disable=g-import-not-at-top
  from hypernet import data as data_lib  # pylint: disable=g-import-not-at-top
  omniglot = config.task == "few_shot" and config.data.name == "omniglot"
  if omniglot:
    from hypernet.training import meta_tasks  # pylint: disable=g-import-not-at-top
    meta_tasks.omniglot_dir(config)
  plugins = config_lib.is_plugin_value("model.name", config.model.name) or \
      config_lib.is_plugin_value("data.name", config.data.name)
  if config.hypernet.kind == "none" and not plugins:  # (Plug-ins: checked here, unbuilt.)
    return
  if config.task in ("classification", "multitask_classification") or (
      config.task == "continual" and config.continual.method == "hnet"):
    data = data_lib.load_classification(config.data)
    target = models.make_target(config.model, data.image_shape, data.num_classes)
  elif config.task == "sinusoid" or omniglot:
    from hypernet.training import meta_tasks  # pylint: disable=g-import-not-at-top
    size = config.data.image_size
    target = meta_tasks.make_meta_target(config, (1,) if config.task == "sinusoid" else
                                         (size, size, 1), meta_tasks.head_ways(config))
  else:
    return
  config_lib.check_target_patterns(config, target)


def _describe_nonfinite(name: str, value) -> Optional[str]:
  value = tf.convert_to_tensor(value)
  if not value.dtype.is_floating:
    return None
  bad = tf.logical_not(tf.math.is_finite(value))
  count = int(tf.reduce_sum(tf.cast(bad, tf.int64)))
  if not count:
    return None
  nans = int(tf.reduce_sum(tf.cast(tf.math.is_nan(value), tf.int64)))
  return (f"{name} ({count} of {int(tf.size(value))} values non-finite: {nans} NaN, "
          f"{count - nans} inf)")


def first_nonfinite_tensor(trainer: Trainer, step: int) -> str:
  """Names the first non-finite tensor of training step ``step`` (1-based).

  Recomputes step ``step`` eagerly on the trainer's *current* parameters (which must be
  those before that step, see :func:`_replay_to`) and its training batch (index
  ``step - 1`` of the step-indexed pipeline), checking in computation order: the input
  batch, the trainable parameters, the generated target weights, the loss, then the
  gradient of each trainable variable. Nothing is written (the forward pass's new state
  is discarded).

  Returns:
    e.g. ``"generated weight conv2/kernel (18432 of 18432 values non-finite: ...)"``, or
    a sentence saying the step was finite on replay (non-deterministic kernels).
  """
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  config = trainer.config
  batch = next(iter(trainer.task.train_dataset(config.batch_size, config.seed, step - 1).take(1)))
  with trainer.strategy.scope():
    for key, value in batch.items():
      found = _describe_nonfinite(f"input batch[{key!r}]", value)
      if found:
        return found
    for v in trainer.variables:
      found = _describe_nonfinite(f"parameter {summaries.variable_name(v)}", v)
      if found:
        return found
    for path, value in summaries.target_weights(trainer.task).items():
      found = _describe_nonfinite(f"target weight {path}", value)
      if found:
        return found.replace("target weight", "generated weight", 1) \
            if path in summaries.generated_paths(trainer.task) else found
    loss, grads = summaries.loss_and_gradients(trainer.task, trainer.variables, batch,
                                               config.batch_size, trainer.strategy)
    found = _describe_nonfinite("loss", loss)
    if found:
      return found
    for g, v in zip(grads, trainer.variables):
      name = f"gradient of {summaries.variable_name(v)}"
      found = _describe_nonfinite(name, g) if g is not None else None
      if found:
        return found
  return ("none: the step was finite when replayed from the last checkpoint (non-"
          "deterministic kernels?); enable config.deterministic to reproduce it")


def _replay_to(trainer: Trainer, step: int) -> int:
  """Restores the latest checkpoint and replays the steps after it up to ``step``.

  Returns:
    -1 when the parameters are now those after ``step``; else the first non-finite step
    met while replaying (the replay stops before it, as the original run did).
  """
  start = trainer.restore(replay=True)
  if start > step:
    raise RuntimeError(f"The latest checkpoint (step {start}) is past step {step}.")
  if step > start:
    _, bad = trainer.train_chunk(trainer.train_iterator(start), step - start)
    if bad >= 0:
      return bad
    trainer.step.assign(step)
  return -1


def _counts_text(counts: Dict[str, float]) -> str:
  """The parameter counts as a markdown table (TensorBoard's Text tab)."""
  rows = [f"| {k} | {v:,.4g} |" if isinstance(v, float) else f"| {k} | {v:,} |"
          for k, v in counts.items()]
  return "\n".join(["| parameters | count |", "|---|---:|"] + rows)


def _metrics_text(step: int, metrics: Dict[str, float]) -> str:
  """The final evaluation metrics as a markdown table."""
  rows = [f"| {k} | {100 * v:.2f}% |" if "accuracy" in k and "ci95" not in k
          else f"| {k} | {v:.6g} |" for k, v in metrics.items()]
  return "\n".join([f"| metric (step {step}) | value |", "|---|---:|"] + rows)


def finished_result(workdir: str, step: int) -> Optional[Dict]:
  """``workdir/final_metrics.json`` if it records a run that ended at ``step``."""
  path = os.path.join(workdir, "final_metrics.json")
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    saved = json.load(f)
  return saved if saved.get("step") == step else None


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, float]:
  """Trains ``config`` in ``workdir`` (resuming if it holds a checkpoint) and evaluates.

  Args:
    config: an experiment config (see ``configs/``).
    workdir: output folder: ``checkpoints/``, TensorBoard ``train/`` and ``eval/`` event
      files (and the hparams session in the folder itself), ``config.json``, ``lock`` and
      ``final_metrics.json``.

  Returns:
    The final evaluation metrics (``{"loss": ..., "accuracy": ...}``) with ``step``,
    ``start_step`` (the step this process resumed at; 0 for a fresh run),
    ``wall_time_sec`` (this process's, from ``start_step``), ``params/*`` counts and
    ``skipped_steps`` (non-finite steps skipped with ``config.fault.nonfinite="skip"``).

  Raises:
    ConfigError (a ValueError): an invalid config (names the field), raised before
      anything is built or written; one that only the loaded data or the built task
      shows (e.g. more ways than Omniglot classes) is raised while building. Any error
      while building removes the workdir (and parents) the run created, if it holds
      nothing but the lock file.
    WorkdirInUseError: another live job holds ``workdir``.
    NonFiniteLossError: the loss or gradients became NaN/inf (names the step and the
      first non-finite tensor).
    Preempted: a ``SystemExit`` with status 143 (rerun the same command on every worker
      to resume): SIGTERM reached this or another worker
      (``config.fault.handle_signals``); every worker stopped at the same step and the
      chief saved it. SIGINT on this worker raises ``KeyboardInterrupt`` instead. A
      signal during the last chunk lets the run finish (and return).
    PeerLost: a ``Preempted`` (status 143): another worker of a multi-worker run is
      gone; the one-line message names it and the checkpoint the rerun resumes from.
    WorkdirWriteError: a checkpoint or other file could not be written (disk full, no
      permission); names the folder, the previous checkpoint is kept.
  """
  from hypernet.training import checkpoints, config_lib  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  config_lib.validate(config)
  # First TensorFlow work: multi-worker and TPU strategies set up the runtime (cached, so
  # the Trainer gets the same one).
  chief = distribute.is_chief(distribute.get_strategy(config))
  _check_before_building(config)
  if config.deterministic:
    tf.config.experimental.enable_op_determinism()
  catcher = checkpoints.SignalCatcher(enabled=config.fault.handle_signals)
  lock = checkpoints.WorkdirLock(workdir, enabled=config.fault.lock_workdir and chief)
  with lock, catcher:
    try:
      result = _train_and_evaluate_locked(config, workdir, catcher)
    except BaseException as e:
      # A job that failed while building (checks that need the loaded data or the built
      # task, e.g. more ways than Omniglot has classes) leaves no workdir it created.
      lock.remove_if_unused()
      _raise_one_line(e, config, workdir)
      raise
  if "stop_message" not in result:
    return result
  if catcher.received == signal.SIGINT:
    catcher.exit_by_signal()  # KeyboardInterrupt (exit status 130 from the command line).
  catcher.ignore_further_sigterm()
  raise checkpoints.Preempted(result["stop_message"], result["step"], result["checkpoint"])


# Errors of a collective whose peer is gone (closed socket, missed heartbeats, the
# coordination service's leader unreachable).
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                tf.errors.CancelledError, tf.errors.AbortedError)


def _raise_one_line(error: BaseException, config, workdir: str) -> None:
  """Turns a lost peer worker into :class:`PeerLost` and a failed file write into
  :class:`WorkdirWriteError`, each with one line; returns for any other error."""
  from hypernet.training import checkpoints  # pylint: disable=g-import-not-at-top
  if isinstance(error, (checkpoints.Preempted, WorkdirWriteError)):
    return
  reason = _write_failure(error)
  if reason is not None:
    path = getattr(error, "filename", None) or str(error).split(";", 1)[0].strip()
    folder = os.path.dirname(path) if path and os.path.isabs(path) else workdir
    raise WorkdirWriteError(f"Cannot write to {folder}: {reason}. The previous checkpoint "
                            f"is kept; free space or fix that folder's permissions, then "
                            "rerun the same command to resume.") from None
  if config.distribution != "multi_worker":
    return
  strategy = distribute.get_strategy(config)
  cluster = distribute.cluster_tasks(strategy)
  text = str(getattr(error, "message", "") or error)
  if len(cluster) < 2 or not (isinstance(error, _PEER_ERRORS) or (
      isinstance(error, tf.errors.OpError) and "Collective ops is aborted" in text)):
    return
  own = distribute.task_info(strategy)
  named = [(kind, int(i)) for kind, i in re.findall(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)",
                                                      text)]
  others = [t for t in cluster if t[:2] != own]
  lost = [t for t in others if t[:2] in named]
  if not lost and "leader" in text:  # The coordination service runs on the first task.
    lost = [cluster[0]] if cluster[0][:2] != own else []
  if not lost and len(others) == 1:
    lost = others
  who = (", ".join(distribute.task_name(t) for t in lost) if lost
         else "a peer worker (TensorFlow did not say which)")
  cause = next((c for c in ("stopped sending heartbeats", "Socket closed",
                            "Connection reset by peer", "Connection refused", "Deadline Exceeded",
                            "preempted/died/restarted", "failed to connect") if c in text),
               type(error).__name__)
  latest = tf.train.latest_checkpoint(checkpoints.checkpoint_dir(workdir))
  resume = (f"it resumes from {latest} (step {latest.rsplit('-', 1)[-1]})" if latest
            else "it starts over from step 0 (no checkpoint yet)")
  message = (f"Lost {who} ({cause}); this {own[0]} {own[1]} stops too. Rerun the same "
             f"command on every worker: {resume}.")
  logging.error("%s", message)
  raise checkpoints.PeerLost(message, checkpoint=latest) from None


def _train_and_evaluate_locked(config, workdir: str, signals) -> Dict[str, float]:
  """Builds the trainer and runs the outer loop; the workdir is locked, signals caught."""
  tf.io.gfile.makedirs(workdir)
  trainer = Trainer(config, workdir)
  try:
    return _outer_loop(config, workdir, trainer, signals)
  finally:
    trainer.close()


# Tags of the train run's scalars besides the task's metrics: grouped so that TensorBoard
# (which sorts and groups tags by their first path component, and expands the first two
# groups) opens on the metrics (accuracy, loss); see summaries.py.
TRAIN_TAGS = {"learning_rate": "optimizer/learning_rate", "grad_norm": "optimizer/grad_norm",
              "steps_per_sec": "speed/steps_per_sec",
              "examples_per_sec": "speed/examples_per_sec"}


def train_tags(metrics: Dict[str, float]) -> Dict[str, float]:
  """The train run's TensorBoard tags for a progress point's values (:data:`TRAIN_TAGS`)."""
  return {TRAIN_TAGS.get(k, k): v for k, v in metrics.items()}


def console_interval(config) -> int:
  """Steps between progress lines on the console: ``config.console_every``, or when it is
  0 about ten lines a run (at most), a multiple of ``config.log_every`` (TensorBoard
  still gets a point every ``log_every`` steps) and, when evaluations are more frequent
  than that, of ``config.eval_every``, so that every line shows the evaluation of its
  step."""
  if config.get("console_every"):
    return int(config.console_every)
  unit = config.log_every
  if 0 < config.eval_every <= config.num_steps / 10:
    unit = math.lcm(unit, config.eval_every)
  return unit * max(1, math.ceil(config.num_steps / (10 * unit)))


def _outer_loop(config, workdir: str, trainer: Trainer, signals) -> Dict[str, float]:
  """Runs chunks of steps to ``config.num_steps`` with events between them."""
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  t0 = time.time()
  is_chief = trainer.is_chief
  writer = summaries.Writer(workdir, enabled=is_chief)
  start = trainer.restore()
  resumed = trainer.restored_from is not None
  total = config.num_steps
  if start >= total:
    saved = finished_result(workdir, start)
    if saved is not None:  # A finished run: report it, rewrite nothing.
      logging.info("The run in %s finished at step %d; its saved metrics follow (a larger "
                   "--config.num_steps continues it).", workdir, start)
      return saved
  if resumed:
    # Points the interrupted run logged after the restored step are dropped; a run resumed
    # from its step-0 checkpoint starts over and rewrites step 0.
    writer.restart(start + 1 if start else 0)
  counts = trainer.task.describe()
  if start == 0:
    writer.config(config)
    writer.text(0, {"parameters": _counts_text(counts)}, "train")
    if config.summaries.hparams:
      writer.hparams(config, trainer.metric_names,
                     {f"params.{k}": v for k, v in counts.items()})
    # A step-0 checkpoint: a non-finite step before the first save can then be replayed.
    trainer.save(0)
  writer.flush()
  logging.info("Parameters: %s", ", ".join(
      f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v:,}" for k, v in counts.items()))
  if is_chief:
    # config.json describes the run that started in this workdir; a resumed run with a
    # changed config records it beside it instead of overwriting it.
    name = "config.json"
    if start and tf.io.gfile.exists(os.path.join(workdir, name)):
      name = f"config_resumed_at_{start}.json" if config_changes(workdir, config) else None
    if name:
      with tf.io.gfile.GFile(os.path.join(workdir, name), "w") as f:
        f.write(config.to_json_best_effort(indent=2))
  model_summaries = summaries.ModelSummaries(trainer.task, trainer.variables, config,
                                             trainer.strategy) \
      if config.summaries.every and is_chief else None
  profiler = summaries.Profiler(os.path.join(workdir, "train"), config.summaries.profile_start,
                                config.summaries.profile_steps, enabled=is_chief)

  iterator = trainer.train_iterator(start)
  step = start
  eval_metrics: Dict[str, float] = {}
  eval_history: List[Dict[str, float]] = []  # This process's evaluations, in step order.
  # Tracing the step functions (the model summaries, the evaluation, the first chunk)
  # takes seconds each: said before each, so the console is never silent for long.
  if step == 0 and total > 0 and (model_summaries or config.eval_every > 0):
    logging.info("Compiling the %s and %s step 0 ...",
                 "summaries" if model_summaries else "evaluation",
                 "evaluating" if config.eval_every > 0 else "writing")
    if model_summaries:  # (A resumed run wrote these before it stopped.)
      model_summaries.write(writer, step)
    if config.eval_every > 0:
      eval_history.append(trainer.evaluate())
      writer.scalars(0, eval_history[-1], "eval")
  logging.info("Compiling the train step ...")
  compile_t = time.time()
  last_t, last_step = time.time(), step
  # Rates and the ETA use steady-state steps: the first chunk of a process (one step)
  # carries the tracing of the step function, so their clocks start after it.
  steady_t, steady_step = None, None
  console_every = console_interval(config)
  console_t, console_step = last_t, step
  skipped: List[int] = []
  saved_step = start  # Restored, or the step-0 save: the same on every worker.
  pending: Dict[str, Tuple[float, float]] = {}  # Metric sums since the last log point.
  stop_signals: List[int] = []
  while step < total:
    # Every worker stops at the same chunk boundary when any of them got a signal.
    stop_signals = trainer.agree_stop(signals.received)
    if any(stop_signals):
      break
    profiler.update(step)
    stop = min([_next_event(step, every, total) for every in (
        config.log_every, config.eval_every, config.checkpoint_every, config.summaries.every,
        trainer.task.event_every)]
               + [b for b in profiler.boundaries() if b > step]
               + ([step + 1] if steady_t is None else []))
    sums, first_bad = trainer.train_chunk_sums(iterator, stop - step)
    if first_bad >= 0:
      while True:  # Back to the parameters before the bad step.
        replayed_bad = _replay_to(trainer, first_bad - 1)
        if replayed_bad < 0:
          break
        first_bad = replayed_bad
      culprit = first_nonfinite_tensor(trainer, first_bad)
      if config.fault.nonfinite == "skip" and len(skipped) < config.fault.max_skips:
        skipped.append(first_bad)
        logging.warning("Non-finite loss or gradient at step %d (first non-finite tensor: "
                        "%s); skipped that step (%d skipped so far).", first_bad, culprit,
                        len(skipped))
        writer.scalars(first_bad, {"skipped_steps": len(skipped)}, "train")
        trainer.step.assign(first_bad)
        trainer.save(first_bad)
        iterator = trainer.train_iterator(first_bad)
        step = last_step = saved_step = first_bad
        pending = {}
        last_t = time.time()
        continue
      profiler.close()
      writer.flush()
      more = (f" after skipping {len(skipped)} steps {skipped} (config.fault.max_skips="
              f"{config.fault.max_skips})") if skipped else ""
      raise NonFiniteLossError(
          f"Non-finite loss or gradient at step {first_bad}{more}; the first non-finite "
          f"tensor is {culprit}. Stopped before saving that step: the last good checkpoint "
          f"({trainer.manager.latest_checkpoint}) is kept. Lower config.optim.lr, set "
          "config.optim.grad_clip_norm, or set config.fault.nonfinite='skip' to skip such "
          "steps.")
    trainer.step.assign(stop)
    step = stop
    # A log point averages every step since the previous one (the one-step first chunk
    # of a process included).
    pending = {k: (pending.get(k, (0.0, 0.0))[0] + v[0], pending.get(k, (0.0, 0.0))[1] + v[1])
               for k, v in sums.items()}
    now = time.time()
    if steady_t is None:  # The first chunk (one step) traced the step: not timed.
      steady_t, steady_step = now, step
      last_t, last_step = console_t, console_step = now, step
      logging.info("Compiled in %.1f s; training (a line every %d steps) ...",
                   now - compile_t, console_every)
    logged = step % config.log_every == 0 or step == total
    if logged:
      rate = (step - last_step) / max(now - last_t, 1e-9) if step > last_step else 0.0
      metrics = objectives.finalize(pending)
      pending = {}
      metrics.update(learning_rate=trainer.learning_rate(), steps_per_sec=rate,
                     examples_per_sec=rate * config.batch_size)
      writer.scalars(step, train_tags(metrics), "train")
      last_t, last_step = now, step
    if model_summaries and step % config.summaries.every == 0:
      model_summaries.write(writer, step)
    # Task events (continual: the end of a task) before this step's evaluation, so that
    # it sees the state they leave (the final CL3 evaluation chooses among every task).
    trainer.task.on_event(trainer, step, writer)
    evaluated = (config.eval_every > 0 and step % config.eval_every == 0) or step == total
    if evaluated:
      eval_metrics = trainer.evaluate()
      eval_history.append(eval_metrics)
      writer.scalars(step, eval_metrics, "eval")
    if logged and (step % console_every == 0 or step == total):
      # One console line per console_every steps: the last log_every steps' training
      # metrics, the evaluation of this step if there was one, the rate since the last
      # line (steady state) and the ETA.
      rate = (step - console_step) / max(now - console_t, 1e-9) if step > console_step \
          else 0.0
      eta = (f"ETA {console.format_duration((total - step) * (now - steady_t) / (step - steady_step))}"
             if step > steady_step else "ETA after the next line")
      shown = "  ".join(f"{k} {metrics[k]:.4f}" for k in trainer.metric_names
                        if k in metrics and math.isfinite(metrics[k]))
      also = f"  | eval {console.format_metrics(eval_metrics)} |" if evaluated else ""
      logging.info("step %d/%d  %s%s  %s  %s", step, total, shown, also,
                   console.format_rate(rate), eta)
      console_t, console_step = now, step
    elif evaluated and config.eval_every >= console_every:
      logging.info("eval at step %d: %s", step, console.format_metrics(eval_metrics))
    if step % config.checkpoint_every == 0 or step == total:
      trainer.save(step)
      saved_step = step
  profiler.update(step)
  profiler.close()
  if any(stop_signals) and step < total:  # (A signal in the last chunk: the run finishes.)
    if saved_step != step:
      trainer.save(step)
    writer.flush()
    path = os.path.join(workdir, "checkpoints", f"ckpt-{step}")  # The chief's.
    signum = signals.received or next(s for s in stop_signals if s)
    who = ""
    if trainer.multi_worker:
      senders = [distribute.task_name(t) for t, s in zip(trainer.cluster, stop_signals) if s]
      who = f" (sent to {', '.join(senders)})"
    every = " on every worker" if trainer.multi_worker else ""
    message = (f"Stopped by {signal_name(signum)}{who} at step {step}; saved checkpoint "
               f"{path}. Rerun the same command{every} to resume.")
    logging.warning("%s", message)
    return {"step": step, "interrupted_by_signal": signum, "stop_message": message,
            "checkpoint": path}
  if not eval_metrics:  # A finished run without saved metrics: evaluate the restored one.
    eval_metrics = trainer.evaluate()
  result = dict(eval_metrics)
  result.update(step=step, start_step=start, wall_time_sec=time.time() - t0,
                **{f"params/{k}": v for k, v in counts.items()})
  result["skipped_steps"] = skipped
  result.update(trainer.task.final_metrics())
  writer.text(step, {"final_metrics": _metrics_text(step, eval_metrics)}, "eval")
  writer.flush()
  if is_chief:
    # How TensorBoard's default smoothing draws the eval curves: from this process's
    # evaluations for a fresh run, from the event files for a resumed one.
    note = summaries.series_smoothing_note(
        {k: [m[k] for m in eval_history if k in m] for k in trainer.metric_names},
        trainer.metric_names) if start == 0 else \
        summaries.smoothing_note(os.path.join(workdir, "eval"), trainer.metric_names)
    if note:
      logging.warning(note)
  if is_chief:
    with tf.io.gfile.GFile(os.path.join(workdir, "final_metrics.json"), "w") as f:
      json.dump(result, f, indent=2)
  return result
