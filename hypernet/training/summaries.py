"""TensorBoard summaries under the workdir: the :class:`Writer` of the ``train/`` and
``eval/`` runs (scalars, histograms, images, text, hparams, restart markers), the
:class:`ModelSummaries` of the weights a source generates, the :class:`Profiler`, and
reading runs back (:func:`read_scalars`, :func:`smoothed`). What is written where and
when: docs/observability.md.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from hypernet.numerics import compat
from hypernet.training.workdir import Workdir


class Writer:
  """Writes summaries into the workdir's runs; a no-op on non-chief workers.

  Args:
    workdir: the run's output folder.
    enabled: ``False`` on non-chief workers of a multi-worker job.
  """

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self._writers = {}
    self._workdir = workdir
    self._paths = Workdir(workdir)

  def _writer(self, split: str):
    if split not in self._writers:
      self._writers[split] = tf.summary.create_file_writer(self._paths.run(split))
    return self._writers[split]

  def scalars(self, step: int, values: Mapping[str, float], split: str = "train") -> None:
    """Scalars ``{tag: float}`` at ``step``."""
    if not self.enabled:
      return
    with self._writer(split).as_default(step=step):
      for k, v in values.items():
        tf.summary.scalar(k, float(v))

  def histograms(self, step: int, values: Mapping[str, np.ndarray], split: str = "train",
                 buckets: int = 30) -> None:
    """Histograms ``{tag: array of any shape}`` (all elements) at ``step``."""
    if not self.enabled:
      return
    with self._writer(split).as_default(step=step):
      for k, v in values.items():
        tf.summary.histogram(k, np.asarray(v, np.float32).ravel(), buckets=buckets)

  def images(self, step: int, values: Mapping[str, np.ndarray], split: str = "train") -> None:
    """Images ``{tag: float [H, W, C] in [0, 1]}`` (C = 1 or 3) at ``step``."""
    if not self.enabled:
      return
    with self._writer(split).as_default(step=step):
      for k, v in values.items():
        tf.summary.image(k, np.asarray(v, np.float32)[None], max_outputs=1)

  def text(self, step: int, values: Mapping[str, str], split: str = "train") -> None:
    """Markdown texts ``{tag: str}`` at ``step`` (TensorBoard's Text tab)."""
    if not self.enabled:
      return
    with self._writer(split).as_default(step=step):
      for k, v in values.items():
        tf.summary.text(k, v)

  def config(self, config) -> None:
    """The fields the run uses (:func:`hypernet.config_lib.used_fields`) as a
    markdown table under the ``config`` text tag: one row per dotted field, values as
    they are written on the command line (``(32, 64)``, ``'chunked'``)."""
    from hypernet import config_lib  # pylint: disable=g-import-not-at-top
    rows = [f"| `{k}` | `{v!r}` |" for k, v in config_lib.used_fields(config).items()]
    self.text(0, {"config": "\n".join(["| field | value |", "|---|---|"] + rows)})

  def hparams(self, config, metrics: Sequence[str], extra: Optional[Mapping] = None,
              trial_id: Optional[str] = None) -> None:
    """Registers the run with the hparams plugin (``tensorboard.plugins.hparams.api``).

    The session is written into the ``eval`` run, next to its metric columns.

    Args:
      config: the experiment config; the fields the run uses become hyperparameters
        (:func:`hypernet.config_lib.hparams`, display order kept).
      metrics: tags of the ``eval`` run shown as metric columns (``accuracy``, ``loss``).
      extra: more hyperparameter columns, e.g. ``{"params.trainable": 69824}``.
      trial_id: the session name (default: the workdir's folder name).
    """
    if not self.enabled:
      return
    from hypernet import config_lib  # pylint: disable=g-import-not-at-top
    hp = compat.hparams_api()
    values = dict(config_lib.hparams(config))
    values.update(extra or {})
    # The HParams table prints numbers with 5 significant digits (64 as "64.000"):
    # integers go in as text, so that they read as integers.
    values = {k: str(v) if isinstance(v, int) and not isinstance(v, bool) else v
              for k, v in values.items()}
    # TensorBoard lists the hyperparameters marked "differs" first (then by name) and the
    # HParams table shows the first five by default: mark the key fields.
    pb = compat.hparams_config_summary(
        [hp.HParam(k) for k in values],
        [hp.Metric(tag, display_name=f"eval {tag}") for tag in metrics],
        first=config_lib.HPARAMS_FIRST)
    with self._writer("eval").as_default(step=0):
      with tf.summary.experimental.summary_scope("hparams_config"):
        tf.summary.experimental.write_raw_pb(pb.SerializeToString(), step=0)
      hp.hparams(values, trial_id=trial_id or os.path.basename(os.path.normpath(self._workdir)))

  def restart(self, step: int, splits: Sequence[str] = ("train", "eval")) -> List[str]:
    """Writes a restart marker at ``step`` into each run of ``splits`` that has events.

    TensorBoard drops the events of a run whose step is ``>= step`` that precede the
    marker (``SessionLog.START``; its first START only opens a session, so the marker
    holds two). The marker is an events file of its own named to sort after the run's
    existing files and before those this process writes next; call it before writing
    anything else into these runs.

    Returns:
      The marker files written.
    """
    if not self.enabled:
      return []
    written = []
    for split in splits:
      folder = self._paths.run(split)
      if split in self._writers or not tf.io.gfile.glob(
          os.path.join(folder, "events.out.tfevents.*")):
        continue
      # TensorFlow names its files events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2:
      # ".0.restart" sorts before this process's next file of the same second.
      path = os.path.join(folder, f"events.out.tfevents.{int(time.time()):010d}."
                          f"{socket.gethostname()}.{os.getpid()}.0.restart")
      now = time.time()
      # TensorFlow's public copies of the event protos (tf.compat.v1.Event).
      start = tf.compat.v1.Event(wall_time=now, step=step, session_log=tf.compat.v1.SessionLog(
          status=tf.compat.v1.SessionLog.START))
      with tf.io.TFRecordWriter(path) as f:
        f.write(tf.compat.v1.Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
        f.write(start.SerializeToString())
        f.write(start.SerializeToString())
      written.append(path)
    return written

  def flush(self) -> None:
    for w in self._writers.values():
      w.flush()


# -- what the target network runs on ---------------------------------------------------
def target_weights(task) -> Dict[str, tf.Tensor]:
  """The weights the target network runs on, ``{path: tensor}``
  (:meth:`hypernet.tasks.Task.summary_weights`)."""
  return dict(task.summary_weights())


def generated_paths(task) -> List[str]:
  """The target paths a task's weight source generates
  (:meth:`hypernet.tasks.Task.generated_paths`)."""
  return list(task.generated_paths())


def loss_and_gradients(task, variables: Sequence, batch, global_batch_size: int,
                       strategy=None) -> Tuple[tf.Tensor, List[Optional[tf.Tensor]]]:
  """The training loss of ``batch`` and its gradient for each variable, in replica context.

  Distributed variables can only be watched by a tape inside ``strategy.run``; every
  local replica computes the whole ``batch`` and replica 0's values are returned (its
  dropout seed is the single-device one). Nothing collective runs, so a single worker
  may call it. The forward pass's new state is discarded.

  Returns:
    ``(loss float32 [], [gradient or None per variable])``.
  """
  strategy = strategy or tf.distribute.get_strategy()
  connected = []

  def replica_fn(b):
    with tf.GradientTape() as tape:
      loss, _, _ = task.train_loss(b, global_batch_size)
    grads = tape.gradient(loss, list(variables))
    connected[:] = [g is not None for g in grads]
    return loss, [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]

  loss, grads = strategy.run(replica_fn, args=(batch,))
  first = lambda x: strategy.experimental_local_results(x)[0]
  return first(loss), [first(g) if c else None for g, c in zip(grads, connected)]


def variable_name(variable) -> str:
  """A variable's Keras path (``hypernetwork/chunk_embeddings``), else its TF name
  without the ``:0`` suffix (plain ``tf.Variable``s, e.g. learned inner learning rates)."""
  path = getattr(variable, "path", None)
  return path if path else variable.name.split(":")[0]


def embedding_variables(variables: Iterable) -> Dict[str, object]:
  """``{path: variable}`` of the trainable variables named like embeddings (chunk,
  condition / task embeddings)."""
  return {variable_name(v): v for v in variables
          if "embedding" in variable_name(v).rsplit("/", 1)[-1]}


def kernel_grid(kernel: np.ndarray, max_filters: int = 64, scale: Optional[int] = None,
                max_width: int = 320, gap: int = 2) -> np.ndarray:
  """Draws a conv kernel's filters as one image: a grid of small pictures.

  Each filter ``kernel[:, :, :, o]`` is scaled by its own largest absolute value so that
  0 is mid-grey (0.5), negative weights darker and positive brighter; filters are
  enlarged ``scale`` times (nearest neighbour, so each weight is a visible square) and
  laid out in rows no wider than ``max_width`` pixels (TensorBoard's image card shows it
  whole, without a scrollbar), columns balanced over the rows, separated by ``gap``
  white pixels.

  Args:
    kernel: ``[kh, kw, in_channels, out_channels]``; with 3 input channels the filters
      are RGB, otherwise the mean over input channels is drawn in grey.
    max_filters: draw at most this many filters (the first ones).
    scale: enlargement factor (default: filters about 30 pixels wide, 10x for 3x3).
    max_width: widest image in pixels (at least one filter per row).
    gap: white pixels between filters and around the grid.

  Returns:
    float32 ``[H, W, C]`` in ``[0, 1]``, ``C`` = 3 for RGB filters, else 1.

  Raises:
    ValueError: ``kernel`` is not 4-D.
  """
  kernel = np.asarray(kernel, np.float32)
  if kernel.ndim != 4:
    raise ValueError(f"kernel must be [kh, kw, in, out], got shape {kernel.shape}.")
  kh, kw, cin, cout = kernel.shape
  filters = kernel if cin == 3 else kernel.mean(axis=2, keepdims=True)
  filters = np.moveaxis(filters, 3, 0)[:max_filters]          # [n, kh, kw, c]
  peak = np.abs(filters).max(axis=(1, 2, 3), keepdims=True)
  filters = 0.5 + 0.5 * filters / np.where(peak > 0, peak, 1.0)
  scale = scale or max(1, 30 // max(kh, kw))
  filters = filters.repeat(scale, axis=1).repeat(scale, axis=2)
  n, h, w, c = filters.shape
  cols = max(1, min(n, (max_width - gap) // (w + gap)))
  rows = int(np.ceil(n / cols))
  cols = int(np.ceil(n / rows))  # Balanced: 32 filters in 4 rows of 8, not 9 + 9 + 9 + 5.
  grid = np.ones((rows * (h + gap) + gap, cols * (w + gap) + gap, c), np.float32)
  for i in range(n):
    r, q = divmod(i, cols)
    top, left = gap + r * (h + gap), gap + q * (w + gap)
    grid[top:top + h, left:left + w] = filters[i]
  return grid


class ModelSummaries:
  """Histograms, kernel images and norms of what the hypernetwork produces and learns.

  At each call (every ``config.summaries.every`` steps) a separate ``tf.function``
  computes, on the training batch of the next step:

  * ``weights/generated/<path>`` histograms: each generated target tensor
    (``weights/target/<path>`` for target weights trained directly);
    ``weights/embeddings/<variable>``: chunk and
    condition embeddings;
  * ``weights/kernels/<path>`` images: the first ``config.summaries.kernel_images`` conv kernels
    as filter grids (condition 0 of a conditional hypernetwork);
  * scalars ``weights/norm/<generated|target>/<path>`` (Frobenius norm of each weight
    tensor), ``weights/grad_norm/<variable>`` (gradient of the training loss w.r.t. each trainable
    variable: hypernetwork layers and directly trained target weights) and
    ``weights/update_norm/<variable>`` / ``weights/update_ratio/<variable>`` (change of each variable
    since the previous summary, absolute and relative to its norm).

  The forward pass's new state (BatchNorm statistics, dropout RNG) is discarded, so
  training is unchanged.

  Args:
    task: the built task (:mod:`hypernet.tasks.classification`).
    variables: the trainable variables the optimiser updates.
    config: the experiment config (``batch_size``, ``seed``, ``summaries.*``).
    strategy: the ``tf.distribute`` strategy the variables were made under.
  """

  def __init__(self, task, variables: Sequence, config, strategy=None):
    self.task = task
    self.variables = list(variables)
    self.config = config
    self.strategy = strategy or tf.distribute.get_strategy()
    self.embeddings = embedding_variables(self.variables)
    self.generated = set(generated_paths(task))
    self._previous: Optional[Dict[str, np.ndarray]] = None
    # Traced as written, like the train step (Task's contract: no AutoGraph): converting
    # the task's call tree cost about 3 s of a run's first trace (digits, 2 cores).
    self._compute = tf.function(self._compute_fn, autograph=False)

  def _compute_fn(self, batch):
    weights = target_weights(self.task)
    loss, grads = loss_and_gradients(self.task, self.variables, batch,
                                     self.config.batch_size, self.strategy)
    grad_norms = {variable_name(v): tf.norm(tf.cast(g, tf.float32))
                  for g, v in zip(grads, self.variables) if g is not None}
    return weights, grad_norms, loss

  def _batch(self, step: int):
    ds = self.task.train_dataset(self.config.batch_size, self.config.seed, step)
    return next(iter(ds.take(1)))

  def compute(self, step: int) -> Dict[str, Dict[str, np.ndarray]]:
    """Everything written at ``step``, as numpy: ``{"histograms", "images", "scalars"}``."""
    with self.strategy.scope():
      weights, grad_norms, _ = self._compute(self._batch(step))
    weights = {p: t.numpy() for p, t in weights.items()}
    kind = lambda p: "generated" if p in self.generated else "target"
    histograms = {f"weights/{kind(p)}/{p}": w for p, w in weights.items()}
    histograms.update({f"weights/embeddings/{p}": v.numpy()
                       for p, v in self.embeddings.items()})
    scalars = {f"weights/norm/{kind(p)}/{p}": float(np.linalg.norm(w))
               for p, w in weights.items()}
    scalars.update({f"weights/grad_norm/{p}": float(g) for p, g in grad_norms.items()})
    current = {variable_name(v): v.numpy() for v in self.variables}
    if self._previous is not None:
      for p, value in current.items():
        delta = float(np.linalg.norm(value - self._previous[p]))
        scalars[f"weights/update_norm/{p}"] = delta
        scalars[f"weights/update_ratio/{p}"] = delta / max(float(np.linalg.norm(value)), 1e-12)
    self._previous = current
    images = {}
    kernels = [(p, w) for p, w in weights.items() if p.endswith("kernel") and w.ndim in (4, 5)]
    for p, w in kernels[: self.config.summaries.kernel_images]:
      images[f"weights/kernels/{p}"] = kernel_grid(w[0] if w.ndim == 5 else w,
                                           self.config.summaries.max_filters)
    return {"histograms": histograms, "images": images, "scalars": scalars}

  def write(self, writer: Writer, step: int) -> None:
    """Computes and writes the model summaries of ``step`` into ``writer``'s train run."""
    values = self.compute(step)
    writer.histograms(step, values["histograms"], "train")
    writer.images(step, values["images"], "train")
    writer.scalars(step, values["scalars"], "train")


class Profiler:
  """A profiler trace of steps ``[start, start + num_steps)`` into ``logdir``.

  Written by ``tf.profiler.experimental`` under ``logdir/plugins/profile/<time>/``
  (TensorBoard's Profile tab, from the ``tensorboard-plugin-profile`` package).
  ``num_steps = 0`` disables it.
  """

  def __init__(self, logdir: str, start: int, num_steps: int, enabled: bool = True):
    self.logdir = logdir
    self.start, self.stop = start, start + num_steps
    self.enabled = enabled and num_steps > 0
    self.active = False

  def boundaries(self) -> List[int]:
    """Steps at which the train loop must pause so the trace can start or stop."""
    return [self.start, self.stop] if self.enabled else []

  def update(self, step: int) -> None:
    """Starts or stops the trace when ``step`` (steps done so far) reaches a boundary."""
    if not self.enabled:
      return
    if not self.active and self.start <= step < self.stop:
      tf.profiler.experimental.start(self.logdir)
      self.active = True
      logging.info("Profiler trace started at step %d.", step)
    elif self.active and step >= self.stop:
      tf.profiler.experimental.stop()
      self.active = False
      logging.info("Profiler trace of steps %d-%d written under %s/plugins/profile.",
                   self.start, self.stop, self.logdir)

  def close(self) -> None:
    if self.active:
      tf.profiler.experimental.stop()
      self.active = False


def smoothed(values: Sequence[float], weight: float = 0.6) -> List[float]:
  """A series as TensorBoard's scalar charts draw it with smoothing ``weight`` (default
  0.6): a debiased exponential moving average over the points in step order (the i-th
  point is ``ema_i / (1 - weight**i)``); non-finite points and constant series are left
  as they are (TensorBoard's ``resmoothDataset``).

  Args:
    values: the series' values in step order.
    weight: TensorBoard's smoothing slider.

  Returns:
    The smoothed values, one per point.
  """
  values = [float(v) for v in values]
  if not values or all(v == values[0] for v in values):
    return list(values)
  out, last, count = [], 0.0, 0
  for v in values:
    if not np.isfinite(v):
      out.append(v)
      continue
    last, count = last * weight + (1 - weight) * v, count + 1
    out.append(last / (1 - weight ** count) if weight != 1 else last)
  return out


def smoothing_note(logdir: str, tags: Sequence[str], weight: float = 0.6) -> Optional[str]:
  """A warning when TensorBoard's default smoothing misdraws the last point of a run's
  series (few points after a large change, e.g. a few evaluations starting at chance):
  more than 0.5 percentage points for accuracies, more than 10% otherwise (a loss).

  Args:
    logdir: a run folder (``workdir/eval``).
    tags: the tags to check (the task's metrics).
    weight: TensorBoard's smoothing.

  Returns:
    e.g. ``"TensorBoard's default smoothing (0.6) draws the last eval accuracy as 89.57%
    (the value is 98.61%, 4 points): set its Smoothing slider to 0 or evaluate more often
    (config.eval_every)."``, or ``None``.
  """
  series = {tag: [v for _, v in points] for tag, points in read_scalars(logdir).items()}
  return series_smoothing_note(series, tags, os.path.basename(os.path.normpath(logdir)),
                               weight)


def series_smoothing_note(series: Mapping[str, Sequence[float]], tags: Sequence[str],
                          run: str = "eval", weight: float = 0.6) -> Optional[str]:
  """:func:`smoothing_note` for series in memory: ``{tag: [value, ...]}`` in step order
  (a fresh run's evaluations, without reading its event files back)."""
  from hypernet.training import console  # pylint: disable=g-import-not-at-top
  wrong = []
  for tag in tags:
    values = list(series.get(tag, []))
    if len(values) < 2:
      continue
    drawn, value = smoothed(values, weight)[-1], values[-1]
    fraction = "accuracy" in tag or tag.endswith("error")
    if abs(drawn - value) > (0.005 if fraction else 0.1 * abs(value)):
      wrong.append(f"{tag} as {console.metric_value(tag, drawn)} (the value is "
                   f"{console.metric_value(tag, value)}, {len(values)} points)")
  if not wrong:
    return None
  return (f"TensorBoard's default smoothing ({weight}) draws the last {run} "
          f"{'; '.join(wrong)}: set its Smoothing slider to 0 or evaluate more often "
          "(config.eval_every).")


def read_scalars(logdir: str) -> Dict[str, List[Tuple[int, float]]]:
  """Reads the scalars of one run folder: ``{tag: [(step, value), ...]}`` sorted by step.

  Reads both TF2 summaries (tensor values) and legacy ``simple_value`` scalars, files in
  name order as TensorBoard does; a restart marker (``SessionLog.START`` at step ``s``,
  :meth:`Writer.restart`) drops the values read so far at steps ``>= s``.
  """
  out: Dict[str, Dict[int, float]] = {}
  for path in sorted(tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*"))):
    try:
      for record in tf.data.TFRecordDataset(path):
        _add_scalars(tf.compat.v1.Event.FromString(record.numpy()), out)
    except tf.errors.DataLossError:  # The tail of a file whose writer was killed.
      logging.warning("%s ends in a truncated record; read what precedes it.", path)
  return {tag: sorted(steps.items()) for tag, steps in out.items()}


def _add_scalars(event, out: Dict[str, Dict[int, float]]) -> None:
  if event.HasField("session_log") and event.session_log.status == event.session_log.START:
    for steps in out.values():
      for s in [s for s in steps if s >= event.step]:
        del steps[s]
    return
  for value in event.summary.value:
    if value.HasField("tensor"):
      array = tf.make_ndarray(value.tensor)
      if array.ndim != 0 or array.dtype.kind not in "fiu":
        continue
      number = float(array)
    elif value.HasField("simple_value"):
      number = float(value.simple_value)
    else:
      continue
    out.setdefault(value.tag, {})[int(event.step)] = number
