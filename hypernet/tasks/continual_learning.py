"""Continual learning as a task of the one train loop (``config.task = "continual"``):
``config.continual.num_tasks`` tasks learned one after another, ``steps_per_task`` steps
each, by the ``hnet`` (von Oswald et al. 2020), ``finetune``, ``ewc`` or ``independent``
methods, scored under CL1 and CL3 at the end of each task. The methods, scenarios and
state: docs/continual-learning.md ("How the continual task runs").
"""
from __future__ import annotations

import copy
from typing import Dict, List

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from hypernet.continual import regularizers, task_inference
from hypernet.core import functional
from hypernet.core.registry import ConfigError
from hypernet.hypernetworks import source as sources
from hypernet.tasks import classification, targets, objectives, protocol
from hypernet import data as data_lib
from hypernet.data import continual as cl_data
from hypernet.data import pipeline

METHODS = ("hnet", "finetune", "ewc", "independent")
TASK_INFERENCE = ("entropy", "ppca")
_TASK_STATS = "continual_task_stats:"  # state-dict prefix of the per-task statistics
BENCHMARKS = ("split", "permuted")


class _TableSource(sources.WeightSource):
  """Independent networks: ``T`` full weight sets, one per task, each initialised as a
  fresh target would be (set ``t`` from seed ``seed + 7919 * (t + 1)``).

  The set being trained is its own variables (:attr:`working`, what the optimiser sees),
  so that an optimiser step costs one network's update, not ``T``: Keras' Adam updates
  every variable it is given, and a ``[T, *shape]`` table would have it run over all
  ``T`` sets each step for the one set with a gradient. The other sets are stored in
  non-trainable ``[T, *shape]`` variables (:attr:`sets`). :meth:`store` writes the working
  set into its row at the end of its task; :meth:`load` makes row ``t`` the working set.
  ``weights(t)`` reads the working set for ``t == current`` and the stored row otherwise.

  Args:
    target: the target network (built).
    build_target: a callable returning a fresh target of the same architecture.
    num_sets: ``T``.
    seed: the run's seed.
  """

  def __init__(self, target: keras.Model, build_target, num_sets: int, seed: int):
    super().__init__(target, train_rest=False)
    variables = functional.variable_paths(target, trainable=True)
    self.generated_paths = list(variables)
    inits = []
    for t in range(num_sets):          # Set t: a target built from its own seed.
      keras.utils.set_random_seed(seed + 7919 * (t + 1))
      other = functional.variable_paths(build_target(), trainable=True)
      inits.append({p: other[p].numpy() for p in variables})
    keras.utils.set_random_seed(seed)
    name = lambda p: p.replace("/", "_")
    self.sets = {p: tf.Variable(np.stack([i[p] for i in inits]), trainable=False,
                                name="sets_" + name(p)) for p in variables}
    self.working = {p: tf.Variable(inits[0][p], name="working_" + name(p))
                    for p in variables}
    self.current = tf.Variable(0, dtype=tf.int32, trainable=False, name="working_set")

  def weights(self, context=None) -> Dict[str, tf.Tensor]:
    """``{path: [*shape]}`` for a task id ``context`` (int32 scalar), ``{path: [S,
    *shape]}`` for ids ``[S]``."""
    ids = tf.convert_to_tensor(context, tf.int32)
    out = {}
    for p, table in self.sets.items():
      working = self.working[p]
      if ids.shape.rank == 0:   # A training step: the working set, without a table read.
        out[p] = tf.cond(tf.equal(ids, self.current), lambda w=working: tf.identity(w),
                         lambda table=table: tf.gather(table, ids))
      else:
        is_working = tf.reshape(tf.equal(ids, self.current),
                                [-1] + [1] * len(working.shape))
        out[p] = tf.where(is_working, working[None], tf.gather(table, ids))
    return out

  def store(self, t: int) -> None:
    """Writes the working set into row ``t`` (the end of task ``t``)."""
    for p, table in self.sets.items():   # One update per task: a whole-table assign,
      table.assign(tf.tensor_scatter_nd_update(   # which distributed variables support.
          table, [[t]], tf.convert_to_tensor(self.working[p])[None]))

  def load(self, t: int) -> None:
    """Makes row ``t`` the working set (the start of task ``t``)."""
    for p, table in self.sets.items():
      self.working[p].assign(tf.gather(table, t))
    self.current.assign(t)

  @property
  def own_variables(self):
    return list(self.working.values())

  def parameter_counts(self) -> Dict[str, int]:
    """As :meth:`WeightSource.parameter_counts`, with ``trainable`` and ``source`` all
    ``T`` sets (each is trained, in its own task)."""
    counts = super().parameter_counts()
    counts["trainable"] = counts["source"] = int(
        sum(np.prod(v.shape) for v in self.sets.values()))
    return counts

  def trackables(self):
    return dict(super().trackables(), independent_sets=list(self.sets.values()),
                independent_working=list(self.working.values()),
                independent_current=self.current)


class _State(tf.Module):
  """The continual-learning state a checkpoint holds (targets, Fisher, accuracy rows)."""


@protocol.TASKS.register("continual")
class ContinualTask(protocol.Task):
  """Continual learning (see the module doc). Batches carry the task id ``"task"``
  (int32 scalar) and the global ``"step"`` besides ``"image"`` / ``"label"``.

  Args:
    config: the experiment config (``config.continual`` fields).
    data: optional :class:`~hypernet.data.base.ImageClassificationData` to split
      instead of loading ``config.data``.

  Raises:
    ValueError: an unknown method / benchmark (lists them), ``config.num_steps`` other
      than ``num_tasks * steps_per_task``, a hypernetwork kind ``"none"`` for ``hnet``.
  """

  def __init__(self, config, data=None):
    cc = config.continual
    self.config = config
    self.num_tasks = T = int(cc.num_tasks)
    self.steps_per_task = int(cc.steps_per_task)
    _check_config(config)
    self._load_tasks(config, data)
    self.classes = c = self.tasks[0].num_classes
    self.method = cc.method
    self._fisher_fn = None   # EWC's Fisher pass, traced on first use (_task_fisher)
    multi_head = self.method in ("finetune", "ewc")
    self.target = targets.make_target(config.model, self.tasks[0].image_shape,
                                     T * c if multi_head else c)
    self._make_state(cc)
    self._make_source(config)
    self._make_task_stats()
    # The target's own penalties (config.model.kernel_l2: on the weights actually used,
    # generated ones included) join the objective and the metrics, as in classification.
    self.has_losses = classification.has_losses(self.target, self.tasks[0].image_shape)
    self.metric_names = ["loss", "accuracy", "cl_penalty"] + (
        ["regularization_loss"] if self.has_losses else [])
    self.event_every = self.steps_per_task
    # The optimiser restarts at each task (_reset_optimizer_slots): a learning-rate
    # schedule spans one task.
    self.schedule_steps = self.steps_per_task

  def _load_tasks(self, config, data) -> None:
    """The ``T`` tasks' data (``self.tasks``) and their evaluation sets."""
    cc, T = config.continual, self.num_tasks
    base = data if data is not None else data_lib.load_classification(config.data)
    if cc.benchmark == "split":
      self.tasks = cl_data.split_tasks(base, T, int(cc.classes_per_task))
    else:
      self.tasks = cl_data.permuted_tasks(base, T, config.seed)
    if cc.eval_examples_per_task:
      n = int(cc.eval_examples_per_task)
      self.eval_tasks = [type(d)(name=d.name, x_train=d.x_train[:1], y_train=d.y_train[:1],
                                 x_test=d.x_test[:n], y_test=d.y_test[:n],
                                 num_classes=d.num_classes, pixel_scale=d.pixel_scale)
                         for d in self.tasks]
    else:
      self.eval_tasks = self.tasks

  def _make_state(self, cc) -> None:
    """The checkpointed state: accuracy matrices, rows done, the current task and the
    tasks' input densities (``task_inference="ppca"``)."""
    T = self.num_tasks
    self.state = _State(name="continual")
    with self.state.name_scope:
      self.state.acc_cl1 = tf.Variable(tf.fill([T, T], -1.0), trainable=False, name="acc_cl1")
      self.state.acc_cl3 = tf.Variable(tf.fill([T, T], -1.0), trainable=False, name="acc_cl3")
      self.state.rows_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="rows_done")
      self.state.current = tf.Variable(0, dtype=tf.int32, trainable=False, name="current")
      if cc.task_inference == "ppca":   # Each task's input density (filled at its end).
        d, r = int(np.prod(self.tasks[0].image_shape)), int(cc.ppca_components)
        if not 1 <= r < d:
          raise ConfigError(
              f"config.continual.ppca_components={r} must be in [1, {d}) (the images have "
              f"{d} values; 20 is the committed configs' choice).")
        self.state.ppca_mean = tf.Variable(tf.zeros([T, d]), trainable=False,
                                           name="ppca_mean")
        self.state.ppca_basis = tf.Variable(tf.zeros([T, r, d]), trainable=False,
                                            name="ppca_basis")
        self.state.ppca_scales = tf.Variable(tf.ones([T, r]), trainable=False,
                                             name="ppca_scales")
        self.state.ppca_noise = tf.Variable(tf.ones([T]), trainable=False, name="ppca_noise")

  def _make_source(self, config) -> None:
    """The method's weight source (and its state: stored outputs, Fisher, anchors)."""
    T, c = self.num_tasks, self.classes
    if self.method == "hnet":
      hc = copy.deepcopy(config.hypernet)
      if hc.kind == "none":
        raise ValueError("config.continual.method='hnet' needs a hypernetwork: set "
                         "config.hypernet.kind (mlp | chunked | static).")
      hc.num_conditions = T
      spec = functional.weight_spec(self.target, hc.targets)
      values = {p: v.numpy() for p, v in functional.variable_paths(self.target).items()
                if p in spec}
      hnet = sources.build_hypernetwork(hc, spec, values, seed=config.seed)
      self.source = sources.HypernetworkSource(self.target, hnet, train_rest=hc.train_rest)
      self.hnet = hnet
      width = sum(int(np.prod(s.shape)) for s in spec.values())
      with self.state.name_scope:
        self.state.targets = tf.Variable(tf.zeros([T, width]), trainable=False,
                                         name="hnet_targets")
    elif self.method == "independent":
      self.source = _TableSource(
          self.target, lambda: targets.make_target(config.model, self.tasks[0].image_shape, c),
          T, config.seed)
    else:
      self.source = sources.IdentitySource(self.target)
      if self.method == "ewc":
        params = self.source.trainable_variables
        with self.state.name_scope:
          self.state.anchors = [tf.Variable(tf.zeros_like(p), trainable=False,
                                            name=f"anchor{i}") for i, p in enumerate(params)]
          self.state.fisher = [tf.Variable(tf.zeros_like(p), trainable=False,
                                           name=f"fisher{i}") for i, p in enumerate(params)]

  def _make_task_stats(self) -> None:
    """Normalisation state per task (hypnettorch keeps BatchNorm statistics per
    condition): for the methods with per-task weights, task t trains and is evaluated
    with its own moving statistics, so learning task t' > t leaves task t's network,
    statistics included, unchanged. finetune / EWC share one network and one set of
    statistics."""
    T = self.num_tasks
    self.task_stat_paths: List[str] = []
    if self.method in ("hnet", "independent"):
      non_trainable = functional.variable_paths(self.target, trainable=False)
      self.task_stat_paths = [q for q, v in non_trainable.items()
                              if tf.as_dtype(v.dtype).is_floating]
      if self.task_stat_paths:
        with self.state.name_scope:
          self.state.task_stats = [
              tf.Variable(tf.stack([tf.convert_to_tensor(non_trainable[q].value)] * T),
                          trainable=False, name="task_stats_" + q.replace("/", "_"))
              for q in self.task_stat_paths]

  # -- the task interface ------------------------------------------------------------
  @property
  def trainable_variables(self):
    return self.source.trainable_variables

  def trackables(self) -> Dict[str, object]:
    return dict(self.source.trackables(), continual=self.state)

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    spt = self.steps_per_task
    parts = []
    for t, data in enumerate(self.tasks):
      lo, hi = t * spt, (t + 1) * spt
      if hi <= start_step:
        continue
      first = max(start_step, lo) - lo
      ds = pipeline.train_dataset(data, global_batch_size, seed + 1000 * t, first,
                                  num_steps=spt - first, input_context=input_context,
                                  augment_shift=self.config.data.augment_shift,
                                  augment_flip=self.config.data.augment_flip,
                                  augment_rotation=self.config.data.augment_rotation,
                                  augment_scale=self.config.data.augment_scale,
                                  augment_shear=self.config.data.augment_shear)
      local = pipeline._replica_layout(global_batch_size, input_context)[1]  # pylint: disable=protected-access
      ds = ds.enumerate().map(tf.autograph.experimental.do_not_convert(
          lambda k, b, t=t, s0=lo + first, n=local: dict(
              b, task=tf.constant(t, tf.int32), step=s0 + k // n)))
      parts.append(ds)
    out = parts[0]
    for ds in parts[1:]:
      out = out.concatenate(ds)
    return out

  def eval_dataset(self, global_batch_size, input_context=None):
    out = None
    for t, data in enumerate(self.eval_tasks):
      ds = pipeline.eval_dataset(data, global_batch_size, "test", input_context)
      ds = ds.map(tf.autograph.experimental.do_not_convert(
          lambda b, t=t: dict(b, task=tf.constant(t, tf.int32))))
      out = ds if out is None else out.concatenate(ds)
    return out

  def _task_state(self, task) -> Dict[str, tf.Tensor]:
    """Task ``task``'s normalisation state ``{path: tensor}`` (``{}`` without any);
    ``task`` a scalar, or ``[S]`` ids for ``[S, ...]`` stacked states."""
    return {q: tf.gather(v, task) for q, v in
            zip(self.task_stat_paths, getattr(self.state, "task_stats", []))}

  def _logits(self, x, task, training):
    """Logits ``[B, c]`` of the given task (CL1), the new non-trainable state (the
    per-task statistics as ``_TASK_STATS + path`` entries: the whole ``[T, ...]`` table
    with row ``task`` replaced, written by :meth:`apply_state`) and the target's own
    losses for the weights used (``functional_call(..., return_losses=True)``)."""
    if self.method in ("hnet", "independent"):
      logits, state, losses = functional.functional_call(
          self.target, self.source.weights(task), x, training=training, return_state=True,
          state=self._task_state(task) or None, return_losses=True)
      for q, table in zip(self.task_stat_paths, getattr(self.state, "task_stats", [])):
        row = tf.reshape(tf.cast(task, tf.int32), [1, 1])
        state[_TASK_STATS + q] = tf.tensor_scatter_nd_update(table, row, state.pop(q)[None])
      return logits, state, losses
    logits, state, losses = functional.functional_call(
        self.target, None, x, training=training, return_state=True, return_losses=True)
    heads = tf.reshape(logits, [-1, self.num_tasks, self.classes])
    return tf.gather(heads, task, axis=1), state, losses

  def _past_outputs(self, ids, delta=None):
    """``[S, P]``: the hypernetwork's flattened outputs for task ids ``ids``, at
    ``Theta + delta`` when a look-ahead ``delta`` (``{variable path: tensor}``) is given."""
    if delta is None:
      generated = self.hnet(ids)
    else:
      variables = functional.variable_paths(self.hnet, trainable=True)
      generated = functional.functional_call(
          self.hnet, {p: variables[p] + d for p, d in delta.items()}, ids)
    return regularizers.flatten_weights(generated, self.hnet.paths, 1)

  def penalty(self, task, step, delta=None):
    """The method's continual-learning penalty at this step (float32 scalar); ``delta``:
    the hypernetwork's look-ahead step (von Oswald et al. Eq. 2), or ``None``."""
    cc = self.config.continual
    if self.method == "ewc":
      return regularizers.ewc_penalty(self.source.trainable_variables, self.state.anchors,
                                         self.state.fisher, cc.ewc_lambda)
    if self.method != "hnet" or self.num_tasks == 1:
      return tf.constant(0.0)
    k = int(cc.past_tasks_per_step)
    if k > 0:   # A random subset of K past tasks (with replacement), drawn from the step.
      seed = tf.stack([tf.constant(self.config.seed, tf.int64), tf.cast(step, tf.int64)])
      ids = tf.random.stateless_uniform([k], seed, 0, tf.maximum(task, 1), dtype=tf.int32)
      generated = self._past_outputs(ids, delta)
      return tf.where(task > 0, regularizers.output_regularizer(
          generated, tf.gather(self.state.targets, ids), cc.beta, num_terms=k), 0.0)
    ids = tf.range(self.num_tasks)
    mask = tf.cast(ids < task, tf.float32)
    generated = self._past_outputs(ids, delta)
    sq = tf.reduce_sum(tf.square(generated - tf.stop_gradient(self.state.targets)), 1)
    return tf.cast(cc.beta, tf.float32) * tf.math.divide_no_nan(
        tf.reduce_sum(mask * sq), tf.cast(task, tf.float32))

  def train_loss(self, batch, global_batch_size):
    task = batch["task"]
    lookahead = self.method == "hnet" and self.config.continual.lookahead
    with tf.GradientTape(watch_accessed_variables=lookahead) as tape:
      logits, state, losses = self._logits(batch["image"], task, training=True)
      per_example, sums = objectives.classification(logits, batch["label"])
      loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
      loss = classification.add_regularization(loss, losses, sums)
    delta = None
    if lookahead:  # One SGD step of the task loss (no CL penalty), a constant of the penalty.
      variables = functional.variable_paths(self.hnet, trainable=True)
      grads = tape.gradient(loss, list(variables.values()))
      lr = self.config.optim.lr
      delta = {p: -lr * tf.stop_gradient(tf.convert_to_tensor(g))
               for p, g in zip(variables, grads) if g is not None}
    penalty = self.penalty(task, batch["step"], delta)
    sums["cl_penalty"] = (penalty, tf.constant(1.0))
    loss = loss + tf.nn.scale_regularization_loss(penalty)
    return loss, sums, state

  def eval_sums(self, batch):
    task, x, y = batch["task"], batch["image"], tf.cast(batch["label"], tf.int32)
    weight = batch.get("weight", tf.ones_like(y, tf.float32))
    logits, _, losses = self._logits(x, task, training=False)
    _, sums = objectives.classification(logits, y, weight)
    classification.add_regularization(None, losses, sums)
    correct1 = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32)
    pred_task, pred_class = self._infer_task(x)
    correct3 = tf.cast((pred_task == task) & (pred_class == y), tf.float32)
    sums["cl3_accuracy"] = (tf.reduce_sum(correct3 * weight), tf.reduce_sum(weight))
    for k in range(self.num_tasks):
      w = weight * tf.cast(tf.equal(task, k), tf.float32)
      sums[f"accuracy/task{k}"] = (tf.reduce_sum(correct1 * w), tf.reduce_sum(w))
      sums[f"cl3_accuracy/task{k}"] = (tf.reduce_sum(correct3 * w), tf.reduce_sum(w))
    return sums

  def _infer_task(self, x):
    """CL3: ``(task, class)`` per example, over the tasks finished (``<= current``, the
    last task whose end event ran; task 0 before that)."""
    seen = tf.range(self.num_tasks) <= self.state.current
    if self.method in ("hnet", "independent"):
      from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
      weights = self.source.weights(tf.range(self.num_tasks))       # {path: [T, ...]}
      weights.update(self._task_state(tf.range(self.num_tasks)))    # each task's statistics
      logits = batched.batched_functional_call(self.target, weights, x, shared_inputs=True)
      if self.config.continual.task_inference == "entropy":
        return entropy_task_inference(logits, seen)
    else:
      logits = functional.functional_call(self.target, None, x, training=False)
      heads = tf.reshape(logits, [-1, self.num_tasks, self.classes])
      if self.config.continual.task_inference == "entropy":
        heads = tf.where(seen[None, :, None], heads, -np.inf)
        flat = tf.argmax(tf.reshape(heads, [-1, self.num_tasks * self.classes]), -1,
                         output_type=tf.int32)
        return flat // self.classes, flat % self.classes
      logits = tf.transpose(heads, [1, 0, 2])                       # [T, B, c]
    density = task_inference.ppca_log_likelihood(
        x, self.state.ppca_mean, self.state.ppca_basis, self.state.ppca_scales,
        self.state.ppca_noise)                                       # [T, B]
    density = tf.where(seen[:, None], density, -np.inf)
    task = tf.argmax(density, 0, output_type=tf.int32)
    picked = tf.gather(tf.transpose(logits, [1, 0, 2]), task, batch_dims=1)
    return task, tf.argmax(picked, -1, output_type=tf.int32)

  def _fit_density(self, t: int) -> None:
    """Fits task ``t``'s input density (``task_inference="ppca"``) on its training
    images, as the pipeline feeds them (scaled by ``pixel_scale``)."""
    data = self.tasks[t]
    # One float64 copy of the images, scaled and then centred in place (a scaled and a
    # centred copy beside it: 3 x 376 MB for a 60,000-image MNIST task).
    x = data.x_train.reshape(len(data.x_train), -1).astype(np.float64)
    x *= data.pixel_scale
    mean, basis, scales, noise = task_inference.ppca_fit(
        x, int(self.config.continual.ppca_components), overwrite_x=True)
    for var, value in ((self.state.ppca_mean, mean), (self.state.ppca_basis, basis),
                       (self.state.ppca_scales, scales), (self.state.ppca_noise, noise)):
      var.assign(tf.tensor_scatter_nd_update(var, [[t]], tf.cast(value, var.dtype)[None]))

  def apply_state(self, state):
    state = dict(state or {})
    for q, table in zip(self.task_stat_paths, getattr(self.state, "task_stats", [])):
      if _TASK_STATS + q in state:
        table.assign(state.pop(_TASK_STATS + q))
    if state:
      functional.assign_state(self.target, state)

  def describe(self) -> Dict[str, float]:
    counts = self.source.parameter_counts()
    one_target = counts["target"]
    counts["compression_ratio"] = one_target / max(counts["source"], 1) if counts["source"] \
        else 0.0
    if self.config.continual.task_inference == "ppca":   # Stored per task, not trained.
      counts["task_density_floats_per_task"] = int(
          np.prod(self.state.ppca_basis.shape[1:]) + self.state.ppca_mean.shape[1]
          + self.state.ppca_scales.shape[1] + 1)
    return counts

  # -- events of the loop --------------------------------------------------------------
  def on_event(self, trainer, step: int, writer) -> None:
    """At the end of task ``t`` (step ``(t+1) * steps_per_task``): fills row ``t`` of the
    accuracy matrices, logs ``cl/acc_task_k``, and prepares task ``t + 1`` (stores the
    hypernetwork's outputs / the Fisher and anchors, resets the optimiser's slots).
    Idempotent: a row already in the (restored) state is not redone."""
    if step % self.steps_per_task or step == 0:
      return
    done = step // self.steps_per_task - 1
    if int(self.state.rows_done.read_value()) > done:
      return
    self.state.current.assign(done)
    if self.method == "independent":
      self.source.store(done)
    if self.config.continual.task_inference == "ppca":
      self._fit_density(done)
    metrics = trainer.evaluate()
    row1 = np.full(self.num_tasks, -1.0, np.float32)
    row3 = row1.copy()
    for k in range(done + 1):
      row1[k] = metrics[f"accuracy/task{k}"]
      row3[k] = metrics[f"cl3_accuracy/task{k}"]
    acc1 = self.state.acc_cl1.numpy()
    acc3 = self.state.acc_cl3.numpy()
    acc1[done], acc3[done] = row1, row3
    self.state.acc_cl1.assign(acc1)
    self.state.acc_cl3.assign(acc3)
    writer.scalars(step, {**{f"cl/acc_task_{k}": float(row1[k]) for k in range(done + 1)},
                          **{f"cl3/acc_task_{k}": float(row3[k]) for k in range(done + 1)}},
                   "eval")
    if done + 1 == int(self.config.continual.freeze_base_after):
      self.hnet.freeze_base()   # A LoRA base trained on the first tasks (_check_config).
    if done + 1 < self.num_tasks:
      self._prepare_next_task(done)
      _reset_optimizer_slots(trainer.optimizer)
    self.state.rows_done.assign(done + 1)

  def _prepare_next_task(self, done: int) -> None:
    cc = self.config.continual
    if self.method == "hnet":
      generated = regularizers.flatten_weights(
          self.hnet(tf.range(self.num_tasks)), self.hnet.paths, 1)
      if not cc.refresh_targets:   # Keep rows 0..done-1 as stored after their own task.
        keep = (tf.range(self.num_tasks) < done)[:, None]
        generated = tf.where(keep, self.state.targets, generated)
      self.state.targets.assign(generated)
    elif self.method == "ewc":
      data = self.tasks[done]
      n = min(int(cc.fisher_samples), len(data.x_train))
      idx = np.random.default_rng([self.config.seed, done]).choice(len(data.x_train), n,
                                                                   replace=False)
      x = tf.constant(data.x_train[idx].astype(np.float32) * data.pixel_scale)
      y = tf.constant(data.y_train[idx].astype(np.int32))
      fisher = self._task_fisher(x, y, tf.constant(done, tf.int32))
      params = self.source.trainable_variables
      for f_var, f_new, anchor, p in zip(self.state.fisher, fisher, self.state.anchors, params):
        f_var.assign(float(cc.ewc_gamma) * f_var + f_new)
        anchor.assign(p)
    elif self.method == "independent":
      self.source.load(done + 1)

  def _task_fisher(self, images, labels, task):
    """EWC's diagonal Fisher of ``task``'s head (:func:`regularizers.diagonal_fisher`) on
    ``images [N, ...]`` float32, ``labels [N]`` int32, ``task`` an int32 scalar tensor.
    Traced once for the whole sequence (the task a tensor argument), not once per task."""
    if self._fisher_fn is None:
      params = self.source.trainable_variables

      def fisher(x, y, t):
        def log_likelihood(xb, yb):
          logits = self._logits(xb, t, training=False)[0]
          return -tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
        return regularizers.diagonal_fisher(log_likelihood, params, x, y)

      self._fisher_fn = tf.function(fisher, autograph=False, reduce_retracing=True)
    return self._fisher_fn(images, labels, task)

  def final_metrics(self) -> Dict[str, object]:
    """Accuracy matrices and their summaries (von Oswald et al. Sec. 4): mean final
    accuracy (last row), mean during accuracy (diagonal: each task right after it was
    learned), forgetting (during - final), for CL1 and CL3."""
    out = {}
    for name, var in (("cl1", self.state.acc_cl1), ("cl3", self.state.acc_cl3)):
      acc = var.numpy().astype(np.float64)
      rows = int(self.state.rows_done.read_value())
      if rows == 0:
        continue
      final = acc[rows - 1, :rows]
      during = np.diag(acc)[:rows]
      out[f"{name}/matrix"] = acc[:rows, :rows].round(6).tolist()
      out[f"{name}/final_accuracy"] = float(final.mean())
      out[f"{name}/during_accuracy"] = float(during.mean())
      out[f"{name}/forgetting"] = float(during.mean() - final.mean())
    return out


def _check_config(config) -> None:
  """The ``config.continual`` choices and ``config.num_steps`` against the sequence.

  Raises:
    ValueError: an unknown method / benchmark / task inference, or ``num_steps`` outside
      ``(0, num_tasks * steps_per_task]``.
  """
  cc = config.continual
  T, steps_per_task = int(cc.num_tasks), int(cc.steps_per_task)
  if cc.method not in METHODS:
    raise ValueError(f"config.continual.method={cc.method!r} is unknown; known: {list(METHODS)}.")
  if cc.benchmark not in BENCHMARKS:
    raise ValueError(f"config.continual.benchmark={cc.benchmark!r} is unknown; known: "
                     f"{list(BENCHMARKS)}.")
  if cc.task_inference not in TASK_INFERENCE:
    raise ValueError(f"config.continual.task_inference={cc.task_inference!r} is unknown; "
                     f"known: {list(TASK_INFERENCE)}.")
  if not 0 < config.num_steps <= T * steps_per_task:
    raise ValueError(
        f"config.num_steps={config.num_steps} must be at most config.continual.num_tasks "
        f"* steps_per_task = {T * steps_per_task} (the whole sequence; fewer stops "
        "inside it, and a rerun with more resumes there).")
  freeze = int(cc.freeze_base_after)
  if freeze and not (cc.method == "hnet" and config.hypernet.kind == "lora"
                     and config.hypernet.train_base and 0 < freeze < T):
    raise ValueError(
        f"config.continual.freeze_base_after={freeze} freezes the base of generated "
        "low-rank adapters after that many tasks: it needs continual.method='hnet', "
        "hypernet.kind='lora', hypernet.train_base=True and a value in [1, num_tasks); "
        "set it to 0 otherwise.")
  if config.num_steps < T * steps_per_task:
    done, rest = divmod(config.num_steps, steps_per_task)
    learned = (f"learns tasks 0..{done - 1}" if done else "completes no task") + (
        f" and {rest} of the {steps_per_task} steps of task {done}" if rest else "")
    logging.warning(
        "config.num_steps=%d stops inside the task sequence: it %s of "
        "config.continual.num_tasks=%d (steps_per_task=%d). The final accuracy averages "
        "over every task's test set, untrained tasks included, and the cl/ accuracy "
        "matrices hold only the tasks finished. Set --config.num_steps=%d for the whole "
        "sequence (a rerun with more steps resumes here), or lower "
        "config.continual.steps_per_task.", config.num_steps, learned, T,
        steps_per_task, T * steps_per_task)


def entropy_task_inference(logits: tf.Tensor, seen: tf.Tensor):
  """HNET+ENT (von Oswald et al. 2020, Sec. 4): each input's task is the one whose
  weights give the lowest predictive entropy.

  Args:
    logits: ``[T, B, c]``, the target's logits for ``B`` inputs under each task's weights.
    seen: ``[T]`` bool, the tasks that may be chosen (learned so far).

  Returns:
    ``(task [B] int32, class [B] int32)``: the chosen task and its arg-max class.
  """
  logp = tf.nn.log_softmax(logits, -1)
  entropy = -tf.reduce_sum(tf.exp(logp) * logp, -1)                  # [T, B]
  entropy = tf.where(seen[:, None], entropy, tf.constant(np.inf, entropy.dtype))
  task = tf.argmin(entropy, 0, output_type=tf.int32)
  picked = tf.gather(tf.transpose(logits, [1, 0, 2]), task, batch_dims=1)
  return task, tf.argmax(picked, -1, output_type=tf.int32)


def _reset_optimizer_slots(optimizer) -> None:
  """A fresh optimiser for the next task, with the same checkpoint layout: zeros its slot
  variables (moments) and its iteration count, keeping its learning rate variable.

  The iteration count is reset too because Adam's bias correction reads it: zeroed
  moments under an old count (no correction) make the first steps of a task up to ~6x
  the learning rate (``m / sqrt(v)`` with ``v`` warming up over ~1/(1-beta_2) steps). A
  learning-rate schedule, read at the iteration count, restarts with each task. The
  loop's global step is a separate variable (unchanged)."""
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  counters = {id(o.iterations): o.iterations for o in (optimizer, inner)
              if getattr(o, "iterations", None) is not None}
  keep = set(counters)
  lr = inner.learning_rate  # public: the variable itself for a constant rate
  if isinstance(lr, (tf.Variable, keras.Variable)):
    keep.add(id(lr))
  for v in inner.variables:
    if id(v) in keep or not tf.as_dtype(v.dtype).is_floating:
      continue
    v.assign(tf.zeros_like(v))
  for it in counters.values():
    it.assign(0)
