"""The task protocol: :class:`Task`, what the one train loop trains, with defaults for
its optional members, and :func:`as_task` for a class written without it as its base."""
from __future__ import annotations

import abc
import contextlib
from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from hypernet.core import functional
from hypernet.core.registry import Registry

TASKS = Registry("task", "config.task", "hypernet.tasks", base="hypernet.tasks.protocol:Task")
"""The built-in tasks by ``config.task`` (``@TASKS.register("name")`` on a :class:`Task` in
``hypernet/tasks/``); a user's task is ``"package.module:Class"`` (:func:`build_task`)."""


class Task(abc.ABC):
  """What the train loop trains: data, trainable state, loss, evaluation.

  Subclasses implement the abstract members and ``train_loss`` (or ``train_gradients``);
  every other member has a default. ``train_loss`` / ``train_gradients``,
  ``apply_state`` and ``eval_sums`` are traced into the loop's ``tf.function``s (the
  train step, the evaluation, the model summaries) as written, without AutoGraph
  (converting every function a step calls took most of its set-up time):
  branch and loop on tensors with ``tf.cond`` / ``tf.while_loop``; Python ``if`` and
  ``for`` are for static values.

  Attributes:
    metric_names: the names of the metric sums ``eval_sums`` returns (and, unless
      ``train_metric_names`` is set, ``train_loss``).
    event_every: steps between the loop pausing for :meth:`on_event` (0: no own period).
    schedule_steps: the learning-rate schedule's horizon when the task restarts the
      optimiser periodically (continual learning: one task); ``None``: the whole run.
    source, target, data: the weight source, the target network and the data set, for
      the model summaries and the export (``None`` when the task has none).
  """
  metric_names: Sequence[str] = ("loss", "accuracy")
  event_every: int = 0
  schedule_steps: Optional[int] = None
  source = None
  target = None
  data = None

  # -- required -----------------------------------------------------------------------
  @property
  @abc.abstractmethod
  def trainable_variables(self) -> List[tf.Variable]:
    """What the outer optimiser updates."""

  @abc.abstractmethod
  def trackables(self) -> Dict[str, object]:
    """``{name: trackable}``: what a checkpoint holds besides the step and optimiser."""

  @abc.abstractmethod
  def train_dataset(self, global_batch_size: int, seed: int, start_step: int = 0,
                    input_context=None) -> tf.data.Dataset:
    """This replica's training batches, from batch ``start_step`` on (step-indexed, so a
    resumed run sees the same data order)."""

  @abc.abstractmethod
  def eval_dataset(self, global_batch_size: int, input_context=None) -> tf.data.Dataset:
    """This replica's evaluation batches (finite)."""

  @abc.abstractmethod
  def eval_sums(self, batch) -> Dict[str, tuple]:
    """Metric sums ``{name: (sum float32 [], count float32 [])}`` of one batch."""

  @abc.abstractmethod
  def apply_state(self, state: Dict[str, tf.Tensor]) -> None:
    """Writes the new non-trainable state (BatchNorm statistics) ``train_loss`` returned."""

  # -- one of the two is required -------------------------------------------------------
  def train_loss(self, batch, global_batch_size: int):
    """``(loss, metric_sums, state)``: this replica's share of the global mean loss
    (``tf.nn.compute_average_loss``), ``{name: (sum, count)}`` and the new non-trainable
    state ``{path: tensor}``."""
    raise NotImplementedError(f"{type(self).__name__} defines neither train_loss nor "
                              "train_gradients.")

  def train_gradients(self, batch, global_batch_size: int, variables, scale_loss=None):
    """``(loss, metric_sums, state, grads)``. Default: ``train_loss`` differentiated
    under one tape; a task that takes its gradients itself (meta-learning, task by task)
    overrides it. ``scale_loss``: ``None`` or mixed precision's loss scaling, applied to
    what is differentiated."""
    with tf.GradientTape() as tape:
      loss, sums, state = self.train_loss(batch, global_batch_size)
      scaled = scale_loss(loss) if scale_loss is not None else loss
    return loss, sums, state, tape.gradient(scaled, variables)

  _train_metric_names = None  # Set through train_metric_names.

  # -- optional, with defaults ----------------------------------------------------------
  @property
  def train_metric_names(self) -> List[str]:
    """The metric sums of ``train_loss`` (default: :attr:`metric_names`)."""
    names = self._train_metric_names
    return list(self.metric_names if names is None else names)

  @train_metric_names.setter
  def train_metric_names(self, names: Sequence[str]) -> None:
    self._train_metric_names = tuple(names)

  def describe(self) -> Dict[str, float]:
    """Parameter counts for the logs, summaries and ``final_metrics.json``."""
    return {}

  def on_event(self, trainer, step: int, writer) -> None:
    """Called after every chunk of steps, before that step's evaluation (continual
    learning ends a task here)."""

  def final_metrics(self) -> Dict[str, object]:
    """More entries for ``final_metrics.json``."""
    return {}

  def phase_boundaries(self) -> Sequence[int]:
    """Steps where the step function changes form (MAML++'s derivative-order
    annealing); the Trainer traces one step function per phase."""
    return ()

  def phase_at(self, step: int):
    """The phase of global step ``step`` (0-based)."""
    del step
    return None

  def tracing_phase(self, phase):
    """A context entered while the step function of ``phase`` is called (and traced)."""
    del phase
    return contextlib.nullcontext()

  def summary_weights(self) -> Dict[str, tf.Tensor]:
    """The weights the target network runs on, ``{path: tensor}`` (model summaries,
    export, the non-finite search): the source's generated weights (all conditions of
    a conditional hypernetwork, with a leading axis) and the target's own trainable
    variables for the other paths. Empty without a ``source`` and ``target``."""
    if self.source is None or self.target is None:
      return {}
    hnet = getattr(self.source, "hypernetwork", None)
    num_conditions = int(getattr(hnet, "num_conditions", 0) or 0)
    generated = dict(self.source.weights(tf.range(num_conditions) if num_conditions
                                         else None))
    return {path: generated[path] if path in generated else tf.convert_to_tensor(variable)
            for path, variable in functional.variable_paths(self.target,
                                                            trainable=True).items()}

  def generated_paths(self) -> List[str]:
    """The target paths the weight source generates."""
    return list(getattr(self.source, "generated_paths", []) or [])


# The members a task must have (train_loss or train_gradients besides), and those the
# loop reads with a default; a class with another base is checked and wrapped by them.
TASK_INTERFACE = ("trainable_variables", "trackables", "train_dataset", "eval_dataset",
                  "eval_sums", "apply_state")
_OPTIONAL = ("train_loss", "train_gradients", "metric_names", "event_every",
             "schedule_steps", "source", "target", "data", "describe", "on_event",
             "final_metrics", "phase_boundaries", "phase_at", "tracing_phase",
             "summary_weights", "generated_paths")


class TaskAdapter(Task):
  """A task written without :class:`Task` as its base, seen through :class:`Task`: its
  own members where it has them, the defaults elsewhere; any other attribute is read
  from it."""

  def __init__(self, task):
    self.wrapped = task
    for name in _OPTIONAL:  # The one place optional members are looked for.
      if hasattr(task, name):
        setattr(self, name, getattr(task, name))
    if hasattr(task, "train_metric_names"):
      self.train_metric_names = task.train_metric_names

  def __getattr__(self, name):  # Only for names not found on the adapter itself.
    if name == "wrapped":  # Not set yet (e.g. a copy being made): no recursion.
      raise AttributeError(name)
    return getattr(self.wrapped, name)

  @property
  def trainable_variables(self):
    return self.wrapped.trainable_variables

  def trackables(self):
    return self.wrapped.trackables()

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    return self.wrapped.train_dataset(global_batch_size, seed, start_step, input_context)

  def eval_dataset(self, global_batch_size, input_context=None):
    return self.wrapped.eval_dataset(global_batch_size, input_context)

  def eval_sums(self, batch):
    return self.wrapped.eval_sums(batch)

  def apply_state(self, state):
    return self.wrapped.apply_state(state)


def as_task(task) -> Task:
  """``task`` itself if it is a :class:`Task`, else a :class:`TaskAdapter` around it."""
  return task if isinstance(task, Task) else TaskAdapter(task)


def missing_members(task) -> List[str]:
  """The parts of the task interface ``task`` (an object, or a :class:`Task` subclass)
  lacks, in :data:`TASK_INTERFACE` order (``[]``: none)."""
  cls = task if isinstance(task, type) else type(task)
  if issubclass(cls, Task):
    abstract = getattr(cls, "__abstractmethods__", ())
    missing = [name for name in TASK_INTERFACE if name in abstract]
    has_loss = any(getattr(cls, name) is not getattr(Task, name)
                   for name in ("train_loss", "train_gradients"))
  else:
    missing = [name for name in TASK_INTERFACE if not hasattr(task, name)]
    has_loss = hasattr(task, "train_loss") or hasattr(task, "train_gradients")
  return missing + ([] if has_loss else ["train_loss (or train_gradients)"])


def build_plugin_task(config) -> Task:
  """``config.task = "package.module:Class"``: ``Class(config)``, checked against the task
  interface (:class:`Task`; a class with another base is wrapped, :func:`as_task`).

  Raises:
    ValueError (PluginError): the import fails, or the class lacks part of the interface
      (lists what is missing), naming ``config.task``.
  """
  from hypernet.core import plugins  # pylint: disable=g-import-not-at-top
  cls = plugins.load_object(config.task, "config.task")
  subclass = isinstance(cls, type) and issubclass(cls, Task)
  def make():
    return plugins.call(cls, config.task, "config.task", "Task(config)", config)

  task = None if subclass else make()
  missing = missing_members(cls if subclass else task)
  if missing:
    raise plugins.PluginError(
        f"config.task={config.task!r}: {cls.__name__ if subclass else type(task).__name__} "
        f"lacks {missing} of the task interface (hypernet/tasks/protocol.py; docs/keras.md, "
        "'Plug-ins').")
  if subclass:
    task = make()
  return as_task(task)


def build_task(config) -> Task:
  """Builds the task named by ``config.task`` (call inside the strategy scope): a name
  registered in :data:`TASKS`, or the user's ``"package.module:Class"``
  (:func:`build_plugin_task`).

  Raises:
    ValueError (PluginError): an unknown ``config.task`` (lists the known ones).
  """
  if ":" in str(config.task):
    return build_plugin_task(config)
  return TASKS.get(config.task)(config)
