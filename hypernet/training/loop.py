"""The one training loop: ``train_and_evaluate(config, workdir)`` and its :class:`Trainer`.

Every algorithm is a task (:class:`hypernet.tasks.Task`) trained by this loop:
the :class:`Trainer` builds task, optimiser, checkpoint and compiled step functions
under the run's :class:`~hypernet.training.distribute.Runtime` (strategy, dtype policy),
runs chunks of steps in one ``tf.function`` and evaluates; between chunks the periodic
actions of :mod:`hypernet.training.actions` log, evaluate, checkpoint, write summaries,
profile, stop on signals and handle non-finite steps. The workdir's layout is
:class:`~hypernet.training.workdir.Workdir`'s.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Dict, List, Optional, Tuple

from absl import logging
import keras
import ml_collections
import tensorflow as tf

from hypernet.training import actions, distribute

from hypernet.tasks import objectives, classification, protocol
from hypernet.hypernetworks import source as sources
from hypernet.training.workdir import Workdir
from hypernet.numerics import accel, devices, fused_adam, second_order

# Re-exported: the outer loop's parts that callers reach through this module.
NonFiniteLossError = actions.NonFiniteLossError
config_changes = actions.config_changes
console_interval = actions.console_interval
finished_result = actions.finished_result
first_nonfinite_tensor = actions.first_nonfinite_tensor
signal_name = actions.signal_name
train_tags = actions.train_tags
TRAIN_TAGS = actions.TRAIN_TAGS


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

  Fields: ``name`` (adam | fused_adam: the same update as one kernel per variable,
  :class:`hypernet.numerics.fused_adam.FusedAdam` | adamw | sgd), ``lr``, ``schedule``
  (constant | cosine | step: ``lr * decay_rate ** (step // decay_every)``),
  ``warmup_steps``, ``weight_decay`` (adamw), ``momentum`` (sgd), ``grad_clip_norm`` (global norm, 0 = off).

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
  elif config.schedule == "step":
    lr = keras.optimizers.schedules.ExponentialDecay(
        config.lr, config.decay_every, config.decay_rate, staircase=True)
  else:
    raise ValueError(f"config.optim.schedule={config.schedule!r}; use 'constant', 'cosine' "
                     "or 'step'.")
  clip = {"global_clipnorm": config.grad_clip_norm} if config.grad_clip_norm else {}
  if config.name == "adam":
    return keras.optimizers.Adam(lr, **clip)
  if config.name == "fused_adam":
    return fused_adam.FusedAdam(lr, **clip)
  if config.name == "adamw":
    return keras.optimizers.AdamW(lr, weight_decay=config.weight_decay, **clip)
  if config.name == "sgd":
    return keras.optimizers.SGD(lr, momentum=config.momentum, **clip)
  raise ValueError(f"config.optim.name={config.name!r}; use 'adam', 'fused_adam', 'adamw' or "
                   "'sgd'.")


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
    ValueError: a bad ``config.jit_compile`` or device kind, or a ``config.dtype_policy``
      whose gradients are wrong on this device (:func:`devices.precision_error`).
  """
  kind = kind or devices.accelerator()
  jit = _use_jit(config, kind)
  cpu_kernels = devices.cpu_kernels(kind)
  policy = config.dtype_policy
  error = devices.precision_error(policy, kind)
  if error:
    raise ValueError(error)
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
               build_task=protocol.build_task):
    """Builds everything under ``config.distribution``'s strategy.

    Args:
      config: the experiment config.
      workdir: the output folder (checkpoints under ``workdir/checkpoints`` on the
        chief; non-chief workers write theirs to a temporary folder).
      build_task: ``config -> task``, called inside the strategy scope (tests pass small
        analytic tasks here); a task without :class:`~hypernet.tasks.Task` as
        its base is wrapped (:func:`~hypernet.tasks.as_task`).
    """
    self.config = config
    self.workdir = workdir
    self.paths = Workdir(workdir)
    self.runtime = runtime = distribute.Runtime(config, workdir)
    self.strategy, self.num_replicas = runtime.strategy, runtime.num_replicas
    self.is_chief, self.write_dir = runtime.is_chief, runtime.write_dir
    self.cluster, self.multi_worker = runtime.cluster, runtime.multi_worker
    self.task_slot = runtime.task_slot
    try:
      self._build(build_task)
    except BaseException:
      runtime.close()
      raise
    self.restored_from: Optional[str] = None  # Set by restore().
    self._compile()

  def _build(self, build_task) -> None:
    """The task, optimiser, step and checkpoint, under the runtime's scope."""
    config = self.config
    keras.utils.set_random_seed(config.seed)
    self.devices = device_choices(config)
    if self.devices["warning"]:
      logging.warning(self.devices["warning"])
    with self.runtime.scope():
      self.task = protocol.as_task(build_task(config))
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
      self.runtime.prepare_optimizer(self.optimizer)
      self.optimizer.build(self.variables)
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
    self.checkpoint = tf.train.Checkpoint(step=self.step, optimizer=self.optimizer,
                                          **self.task.trackables())
    self.manager = self._make_manager()

  def _new_train_steps(self):
    """A fresh ``tf.function`` of the chunked train loop (one per run, or per phase),
    traced as written (no AutoGraph)."""
    return tf.function(self._train_steps_fn, autograph=False)

  def _compile(self) -> None:
    """The step functions (traced at their first call)."""
    self.jit = self.devices["jit"]
    # BatchNorm -> ReLU -> max-pool blocks of meta-learners on one CPU kernel
    # (config.meta.fused_blocks); XLA cannot compile it, and GPUs have no kernel for it.
    self.fused_blocks = self.devices["fused_blocks"]
    self.metric_names = list(self.task.metric_names)
    self.train_metric_names = list(self.task.train_metric_names)
    self._train_steps = self._new_train_steps()
    # A task whose step changes form at known steps (MAML++'s derivative-order annealing:
    # first order, then second) names its phases (task.phase_boundaries(), task.phase_at
    # (step)): one traced function per phase, each with only its own work in the graph.
    self._phase_steps = {}
    self._eval_step = tf.function(self._eval_step_fn, autograph=False)
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
        self.checkpoint, Workdir(self.write_dir).checkpoints,
        max_to_keep=self.config.checkpoint_keep if self.is_chief else 1)

  def agree_stop(self, signum: Optional[int]) -> List[int]:
    """:meth:`distribute.Runtime.agree_stop`: one signal number per worker (0: none), the
    same list on every worker (a collective, called between chunks of steps)."""
    return self.runtime.agree_stop(signum)

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
    """``num_steps`` steps in one ``tf.while_loop`` (traced without AutoGraph, like the
    task's code: converting this loop alone took ~0.1 s of every start)."""
    zero = tf.constant(0.0)
    totals = {k: (zero, zero) for k in self.train_metric_names + ["grad_norm"]}
    replica_step = tf.autograph.experimental.do_not_convert(self._replica_step_fn)
    reduce = lambda t: self.strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None)

    def body(i, totals, first_bad):
      sums, nonfinite = self.strategy.run(replica_step, args=(next(iterator),))
      sums = tf.nest.map_structure(reduce, sums)
      nonfinite = reduce(nonfinite)
      totals = {k: (totals[k][0] + sums[k][0], totals[k][1] + sums[k][1]) for k in totals}
      here = self.step + i + 1
      first_bad = tf.where((first_bad < 0) & (nonfinite > 0.0), here, first_bad)
      return i + 1, totals, first_bad

    _, totals, first_bad = tf.while_loop(
        lambda i, *_: i < num_steps, body,
        (tf.constant(0, tf.int64), totals, tf.constant(-1, tf.int64)))
    return totals, first_bad

  def _kernels(self):
    """The block in which a replica function is traced: fused blocks on or off."""
    return contextlib.nullcontext() if self.fused_blocks else accel.disabled("fused_blocks")

  def _eval_sums(self, batch):
    with self._kernels():
      return self.task.eval_sums(batch)

  def _eval_step_fn(self, batch):
    sums = self.strategy.run(tf.autograph.experimental.do_not_convert(self._eval_sums),
                             args=(batch,))
    return tf.nest.map_structure(
        lambda t: self.strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None), sums)

  def _unfit(self, path: str, error: Exception) -> Exception:
    """The one-line ``ConfigError`` for a checkpoint whose variables do not fit."""
    from hypernet import config_lib  # pylint: disable=g-import-not-at-top
    changed = config_changes(self.workdir, self.config)
    if changed or not tf.io.gfile.exists(self.paths.config):
      why = (f"the run that wrote it had a different config (changed here: "
             f"{', '.join(changed) or 'unknown'}), or another version of hypernet wrote "
             f"it. Rerun with that run's config (saved in {self.paths.config}), or train "
             "in a new --workdir.")
    else:   # Same config, other variables: another hypernet wrote it.
      why = ("its config is this run's, so another version of hypernet wrote it, one "
             "whose checkpoints hold other variables for this config. Resume it with that "
             "version, or train in a new --workdir.")
    return config_lib.ConfigError(f"The checkpoint {path} does not fit this config: {why} "
                                  f"[{type(error).__name__}: {_first_line(error)}]")

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
    from hypernet import config_lib  # pylint: disable=g-import-not-at-top
    from hypernet.training import checkpoints  # pylint: disable=g-import-not-at-top
    folder = self.paths.checkpoints
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
          raise self._unfit(path, e) from e
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
            f"unreadable; unreadable ones were moved to {self.paths.unreadable}). Rerunning the same command starts over from "
            "step 0; to keep this workdir as it is, train in a new --workdir.")
      return 0
    changed = config_changes(self.workdir, self.config, self.current_step())
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
        fn = self._phase_steps[phase] = self._new_train_steps()
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
    self.runtime.close()



# -- train_and_evaluate -------------------------------------------------------------------
def _first_line(error: BaseException, limit: int = 300) -> str:
  """The first line of an error's message (TensorFlow's carry a long node trace after it)."""
  text = str(getattr(error, "message", "") or error).strip()
  line = next((l.strip() for l in text.splitlines() if l.strip()), type(error).__name__)
  return line if len(line) <= limit else line[:limit] + "..."


def _check_before_building(config) -> None:
  """Fails on what the config alone cannot tell, naming the field, before the workdir is
  created or anything is built: a few-shot Omniglot run without a data folder, and
  hypernetwork patterns that match no weight of the target network (or weights the kind
  cannot generate), checked on the target built alone (cheap) for image classification,
  continual ``hnet``, sinusoid and Omniglot few-shot classification."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import targets
  from hypernet import data as data_lib  # pylint: disable=g-import-not-at-top
  omniglot = config.task == "few_shot" and config.data.name == "omniglot"
  if omniglot:
    from hypernet.tasks import meta_learning  # pylint: disable=g-import-not-at-top
    meta_learning.omniglot_dir(config)
  plugins = config_lib.is_plugin_value("model.name", config.model.name) or \
      config_lib.is_plugin_value("data.name", config.data.name)
  if config.hypernet.kind == "none" and not plugins:  # (Plug-ins: checked here, unbuilt.)
    return
  if config.task in ("classification", "multitask_classification") or (
      config.task == "continual" and config.continual.method == "hnet"):
    data = data_lib.load_classification(config.data)
    target = targets.make_target(config.model, data.image_shape, data.num_classes)
  elif config.task == "sinusoid" or omniglot:
    from hypernet.tasks import meta_learning  # pylint: disable=g-import-not-at-top
    size = config.data.image_size
    target = meta_learning.make_meta_target(config, (1,) if config.task == "sinusoid" else
                                         (size, size, 1), meta_learning.head_ways(config))
  else:
    return
  sources.check_target_patterns(config, target)


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
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  from hypernet.training import checkpoints  # pylint: disable=g-import-not-at-top
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
  latest = tf.train.latest_checkpoint(Workdir(workdir).checkpoints)
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
    return actions.run(config, workdir, trainer, signals)
  finally:
    trainer.close()

