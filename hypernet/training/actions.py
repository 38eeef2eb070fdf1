"""The outer loop as periodic actions: chunks of compiled steps, and between them the
actions that are due (log, model summaries, task events, evaluation, console line,
checkpoint, profiler window), in the spirit of CLU's periodic actions; signals and
non-finite steps are handled between chunks too. :func:`run` is the loop."""
from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Dict, List, Optional, Tuple

from absl import logging
import ml_collections
import tensorflow as tf

from hypernet.training import console, distribute, summaries

from hypernet.tasks import objectives
from hypernet.training.workdir import Workdir


class NonFiniteLossError(FloatingPointError):
  """The loss or gradient became NaN/inf; the last good checkpoint is kept."""


@dataclasses.dataclass
class LoopState:
  """What the actions share: the run, the step reached and this chunk's results.

  ``train_metrics`` / ``eval_metrics`` are set by the log and evaluation actions when
  they ran at this step (``None`` otherwise); ``steady_t`` / ``steady_step`` are when
  the first chunk (one step, which traced the step function) ended.
  """
  trainer: object
  config: ml_collections.ConfigDict
  paths: Workdir
  writer: summaries.Writer
  start: int
  counts: Dict[str, float]
  t0: float
  step: int = 0
  iterator: object = None
  now: float = 0.0
  chunk_sums: Dict[str, Tuple[float, float]] = dataclasses.field(default_factory=dict)
  train_metrics: Optional[Dict[str, float]] = None
  eval_metrics: Optional[Dict[str, float]] = None
  steady_t: Optional[float] = None
  steady_step: Optional[int] = None

  @property
  def total(self) -> int:
    return self.config.num_steps


def next_event(step: int, every: int, end: int) -> int:
  """The next multiple of ``every`` after ``step``, at most ``end`` (``end`` for 0)."""
  return min(end, (step // every + 1) * every) if every > 0 else end


class Action:
  """A piece of the outer loop run between chunks of steps.

  ``next_stop`` is where it needs the loop to pause (the chunk ends at the nearest of
  all actions'); after each chunk every action's ``on_chunk`` runs, then ``__call__`` of
  those that are ``due``, in the order of the loop's list.
  """
  every = 0

  def next_stop(self, state: LoopState) -> int:
    return next_event(state.step, self.every, state.total)

  def due(self, state: LoopState) -> bool:
    return self.every > 0 and state.step % self.every == 0

  def __call__(self, state: LoopState) -> None:
    pass

  def before_chunk(self, state: LoopState) -> None:
    """Before each chunk (after the workers agreed to go on)."""

  def on_chunk(self, state: LoopState) -> None:
    """After each chunk, before the due actions run."""

  def on_timing(self, state: LoopState) -> None:
    """The first chunk (it traced the step function) ended: rates are timed from here."""

  def on_rewind(self, state: LoopState) -> None:
    """Training went back to ``state.step`` (a skipped non-finite step)."""

  def on_end(self, state: LoopState) -> None:
    """The loop ended (finished or stopped by a signal)."""

  def close(self) -> None:
    """The run ends with an error."""


# -- train scalars and the console ----------------------------------------------------
# Tags of the train run's scalars besides the task's metrics: grouped so that TensorBoard
# (which sorts and groups tags by their first path component, and expands the first two
# groups) opens on the metrics (accuracy, loss); see summaries.py.
TRAIN_TAGS = {"learning_rate": "optimizer/learning_rate", "grad_norm": "optimizer/grad_norm",
              "steps_per_sec": "speed/steps_per_sec",
              "examples_per_sec": "speed/examples_per_sec"}


def train_tags(metrics: Dict[str, float]) -> Dict[str, float]:
  """The train run's TensorBoard tags for a progress point's values (:data:`TRAIN_TAGS`)."""
  return {TRAIN_TAGS.get(k, k): v for k, v in metrics.items()}


class LogScalars(Action):
  """Every ``config.log_every`` steps (and at the end): the training metrics averaged
  over every step since the previous point, learning rate and speed, as TensorBoard
  scalars; sets ``state.train_metrics``."""

  def __init__(self, config):
    self.every = config.log_every
    self.batch_size = config.batch_size
    self.pending: Dict[str, Tuple[float, float]] = {}  # Metric sums since the last point.
    self.last_t, self.last_step = time.time(), 0

  def due(self, state):
    return state.step % self.every == 0 or state.step == state.total

  def on_chunk(self, state):
    zero = (0.0, 0.0)
    self.pending = {k: (self.pending.get(k, zero)[0] + v[0], self.pending.get(k, zero)[1] + v[1])
                    for k, v in state.chunk_sums.items()}

  def on_timing(self, state):
    self.last_t, self.last_step = state.now, state.step

  def on_rewind(self, state):
    self.pending = {}
    self.last_t, self.last_step = time.time(), state.step

  def __call__(self, state):
    step, now = state.step, state.now
    rate = (step - self.last_step) / max(now - self.last_t, 1e-9) if step > self.last_step \
        else 0.0
    metrics = objectives.finalize(self.pending)
    self.pending = {}
    metrics.update(learning_rate=state.trainer.learning_rate(), steps_per_sec=rate,
                   examples_per_sec=rate * self.batch_size)
    state.writer.scalars(step, train_tags(metrics), "train")
    state.train_metrics = metrics
    self.last_t, self.last_step = now, step


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


class ConsoleLine(Action):
  """One console line every :func:`console_interval` steps: the last log point's
  training metrics, this step's evaluation if there was one, the rate since the last
  line (steady state) and the ETA; an evaluation between lines gets a line of its own
  when evaluations are rarer than lines."""

  def __init__(self, config, metric_names):
    self.every = console_interval(config)
    self.eval_every = config.eval_every
    self.metric_names = list(metric_names)
    self.last_t, self.last_step = time.time(), 0

  def next_stop(self, state):
    return state.total  # A multiple of log_every: the log action pauses there.

  def due(self, state):
    return state.train_metrics is not None or state.eval_metrics is not None

  def on_timing(self, state):
    self.last_t, self.last_step = state.now, state.step

  def __call__(self, state):
    step, total, now, metrics = state.step, state.total, state.now, state.train_metrics
    evaluated = state.eval_metrics is not None
    if metrics is not None and (step % self.every == 0 or step == total):
      rate = (step - self.last_step) / max(now - self.last_t, 1e-9) if step > self.last_step \
          else 0.0
      eta = (f"ETA {console.format_duration((total - step) * (now - state.steady_t) / (step - state.steady_step))}"
             if step > state.steady_step else "ETA after the next line")
      shown = "  ".join(f"{k} {metrics[k]:.4f}" for k in self.metric_names
                        if k in metrics and math.isfinite(metrics[k]))
      also = f"  | eval {console.format_metrics(state.eval_metrics)} |" if evaluated else ""
      logging.info("step %d/%d  %s%s  %s  %s", step, total, shown, also,
                   console.format_rate(rate), eta)
      self.last_t, self.last_step = now, step
    elif evaluated and self.eval_every >= self.every:
      logging.info("eval at step %d: %s", step, console.format_metrics(state.eval_metrics))


# -- model summaries, task events, evaluation, checkpoints, profiler -------------------
class WriteModelSummaries(Action):
  """Every ``config.summaries.every`` steps: :class:`summaries.ModelSummaries` (the
  chief writes them; every worker pauses there, so all chunks end at the same steps)."""

  def __init__(self, config, trainer):
    self.every = config.summaries.every
    self.summaries = summaries.ModelSummaries(
        trainer.task, trainer.variables, config, trainer.strategy) \
        if self.every and trainer.is_chief else None

  def due(self, state):
    return self.summaries is not None and state.step % self.every == 0

  def __call__(self, state):
    self.summaries.write(state.writer, state.step)


class TaskEvents(Action):
  """The task's own events (:meth:`Task.on_event`, continual learning: the end of a
  task) after every chunk, before that step's evaluation, so that it sees the state
  they leave; the loop pauses every ``task.event_every`` steps."""

  def __init__(self, task):
    self.task = task
    self.every = task.event_every

  def due(self, state):
    return True

  def __call__(self, state):
    self.task.on_event(state.trainer, state.step, state.writer)


class Evaluate(Action):
  """Every ``config.eval_every`` steps and at the end: the evaluation, as TensorBoard
  scalars of the eval run; sets ``state.eval_metrics``. Keeps this process's
  evaluations (the smoothing note) and the latest (the final metrics)."""

  def __init__(self, config):
    self.every = config.eval_every
    self.history: List[Dict[str, float]] = []  # This process's evaluations, in step order.
    self.latest: Dict[str, float] = {}

  def due(self, state):
    return (self.every > 0 and state.step % self.every == 0) or state.step == state.total

  def __call__(self, state):
    self.latest = state.trainer.evaluate()
    self.history.append(self.latest)
    state.writer.scalars(state.step, self.latest, "eval")
    state.eval_metrics = self.latest


class SaveCheckpoint(Action):
  """Every ``config.checkpoint_every`` steps and at the end: a checkpoint."""

  def __init__(self, config, start: int):
    self.every = config.checkpoint_every
    self.saved_step = start  # Restored, or the step-0 save: the same on every worker.

  def due(self, state):
    return state.step % self.every == 0 or state.step == state.total

  def __call__(self, state):
    state.trainer.save(state.step)
    self.saved_step = state.step

  def on_rewind(self, state):
    self.saved_step = state.step  # The skipping saved it.


class Profile(Action):
  """A profiler trace of the steps ``config.summaries.profile_start`` on
  (:class:`summaries.Profiler`); the loop pauses where it starts and stops."""

  def __init__(self, config, paths: Workdir, is_chief: bool):
    self.profiler = summaries.Profiler(paths.run(Workdir.TRAIN), config.summaries.profile_start,
                                       config.summaries.profile_steps, enabled=is_chief)

  def next_stop(self, state):
    return min([b for b in self.profiler.boundaries() if b > state.step] + [state.total])

  def due(self, state):
    return False

  def before_chunk(self, state):
    self.profiler.update(state.step)

  def on_end(self, state):
    self.profiler.update(state.step)
    self.profiler.close()

  def close(self):
    self.profiler.close()


# -- signals ----------------------------------------------------------------------------
def signal_name(signum: int) -> str:
  import signal  # pylint: disable=g-import-not-at-top
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f"signal {signum}"


class SignalStop:
  """SIGTERM / SIGINT between chunks: every worker learns of a signal at the same chunk
  boundary (:meth:`Trainer.agree_stop`), all stop at that step and the chief's
  checkpoint of it is saved."""

  def __init__(self, signals, checkpoint: SaveCheckpoint):
    self.signals = signals
    self.checkpoint = checkpoint
    self.stop_signals: List[int] = []

  def requested(self, state: LoopState) -> bool:
    """Whether any worker got a signal (a collective: every worker calls it)."""
    self.stop_signals = state.trainer.agree_stop(self.signals.received)
    return any(self.stop_signals)

  def stopped(self, state: LoopState) -> Optional[Dict]:
    """The run's result when a signal stopped it before the end (``None`` otherwise): the
    step is saved and the message says how to resume."""
    if not any(self.stop_signals) or state.step >= state.total:
      return None  # (A signal in the last chunk: the run finishes.)
    trainer, step = state.trainer, state.step
    if self.checkpoint.saved_step != step:
      trainer.save(step)
    state.writer.flush()
    path = state.paths.checkpoint(step)  # The chief's.
    signum = self.signals.received or next(s for s in self.stop_signals if s)
    who = ""
    if trainer.multi_worker:
      senders = [distribute.task_name(t) for t, s in zip(trainer.cluster, self.stop_signals)
                 if s]
      who = f" (sent to {', '.join(senders)})"
    every = " on every worker" if trainer.multi_worker else ""
    message = (f"Stopped by {signal_name(signum)}{who} at step {step}; saved checkpoint "
               f"{path}. Rerun the same command{every} to resume.")
    logging.warning("%s", message)
    return {"step": step, "interrupted_by_signal": signum, "stop_message": message,
            "checkpoint": path}


# -- non-finite steps ---------------------------------------------------------------------
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


def first_nonfinite_tensor(trainer, step: int) -> str:
  """Names the first non-finite tensor of training step ``step`` (1-based).

  Recomputes step ``step`` eagerly on the trainer's *current* parameters (which must be
  those before that step, see :func:`replay_to`) and its training batch (index
  ``step - 1`` of the step-indexed pipeline), checking in computation order: the input
  batch, the trainable parameters, the generated target weights, the loss, then the
  gradient of each trainable variable. Nothing is written (the forward pass's new state
  is discarded).

  Returns:
    e.g. ``"generated weight conv2/kernel (18432 of 18432 values non-finite: ...)"``, or
    a sentence saying the step was finite on replay (non-deterministic kernels).
  """
  config, task = trainer.config, trainer.task
  batch = next(iter(task.train_dataset(config.batch_size, config.seed, step - 1).take(1)))
  with trainer.strategy.scope():
    named = [(f"input batch[{key!r}]", value) for key, value in batch.items()]
    named += [(f"parameter {summaries.variable_name(v)}", v) for v in trainer.variables]
    generated = set(task.generated_paths())
    named += [(f"{'generated' if path in generated else 'target'} weight {path}", value)
              for path, value in task.summary_weights().items()]
    for name, value in named:
      found = _describe_nonfinite(name, value)
      if found:
        return found
    loss, grads = summaries.loss_and_gradients(task, trainer.variables, batch,
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


def replay_to(trainer, step: int) -> int:
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


class NonFiniteGuard:
  """A chunk with a non-finite loss or gradient: the parameters go back to those before
  the first bad step (restore and replay), the first non-finite tensor is named, then
  the step is skipped (``config.fault.nonfinite="skip"``, up to ``max_skips``) or the
  run stops with :class:`NonFiniteLossError` before anything of that step is saved."""

  def __init__(self, fault):
    self.skip = fault.nonfinite == "skip"
    self.max_skips = fault.max_skips
    self.skipped: List[int] = []

  def handle(self, state: LoopState, first_bad: int) -> None:
    """Rewinds ``state`` to the bad step, skipping it; or raises.

    Raises:
      NonFiniteLossError: naming the step and the first non-finite tensor.
    """
    trainer = state.trainer
    while True:  # Back to the parameters before the bad step.
      replayed_bad = replay_to(trainer, first_bad - 1)
      if replayed_bad < 0:
        break
      first_bad = replayed_bad
    culprit = first_nonfinite_tensor(trainer, first_bad)
    if not (self.skip and len(self.skipped) < self.max_skips):
      more = (f" after skipping {len(self.skipped)} steps {self.skipped} (config.fault."
              f"max_skips={self.max_skips})") if self.skipped else ""
      raise NonFiniteLossError(
          f"Non-finite loss or gradient at step {first_bad}{more}; the first non-finite "
          f"tensor is {culprit}. Stopped before saving that step: the last good checkpoint "
          f"({trainer.manager.latest_checkpoint}) is kept. Lower config.optim.lr, set "
          "config.optim.grad_clip_norm, or set config.fault.nonfinite='skip' to skip such "
          "steps.")
    self.skipped.append(first_bad)
    logging.warning("Non-finite loss or gradient at step %d (first non-finite tensor: "
                    "%s); skipped that step (%d skipped so far).", first_bad, culprit,
                    len(self.skipped))
    state.writer.scalars(first_bad, {"skipped_steps": len(self.skipped)}, "train")
    trainer.step.assign(first_bad)
    trainer.save(first_bad)
    state.iterator = trainer.train_iterator(first_bad)
    state.step = first_bad


# -- the run's record: config, parameter counts, final metrics ---------------------------
def config_changes(workdir: str, config, step=None) -> list:
  """``["optim.lr: 0.001 -> 0.01", ...]``: fields where ``config`` differs from the
  config in effect at checkpoint ``step`` (:meth:`Workdir.config_at`: the run that
  started in ``workdir``, or the last resume that changed it; ``None``: the latest);
  ``[]`` if none is saved."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  path = Workdir(workdir).config_at(step)
  if not tf.io.gfile.exists(path):
    return []
  with tf.io.gfile.GFile(path) as f:
    saved = config_lib.flatten(ml_collections.ConfigDict(json.load(f)))
  now = config_lib.flatten(ml_collections.ConfigDict(json.loads(config.to_json_best_effort())))
  return [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(saved) | set(now))
          if json.dumps(saved.get(k)) != json.dumps(now.get(k))]


def finished_result(workdir: str, step: int) -> Optional[Dict]:
  """``workdir/final_metrics.json`` if it records a run that ended at ``step``."""
  path = Workdir(workdir).final_metrics
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    saved = json.load(f)
  return saved if saved.get("step") == step else None


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


def _record_start(state: LoopState, resumed: bool) -> None:
  """What a run records before its first step: the TensorBoard restart marker of a
  resumed run, the config, parameter counts and hparams of a fresh one (and its step-0
  checkpoint), the parameter counts on the console, ``config.json``."""
  config, trainer, writer, start = state.config, state.trainer, state.writer, state.start
  if resumed:
    # Points the interrupted run logged after the restored step are dropped; a run resumed
    # from its step-0 checkpoint starts over and rewrites step 0.
    writer.restart(start + 1 if start else 0)
  if start == 0:
    writer.config(config)
    writer.text(0, {"parameters": _counts_text(state.counts)}, "train")
    if config.summaries.hparams:
      writer.hparams(config, trainer.metric_names,
                     {f"params.{k}": v for k, v in state.counts.items()})
    # A step-0 checkpoint: a non-finite step before the first save can then be replayed.
    trainer.save(0)
  writer.flush()
  logging.info("Parameters: %s", ", ".join(
      f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v:,}"
      for k, v in state.counts.items()))
  if trainer.is_chief:
    # config.json describes the run that started in this workdir; a resumed run with a
    # config other than the one in effect at its step records it beside it instead of
    # overwriting it (Workdir.config_at: evaluation rebuilds each checkpoint's config).
    path = state.paths.config
    if start and tf.io.gfile.exists(path):
      path = state.paths.resumed_config(start)
      if not config_changes(state.paths.path, config, start):
        if tf.io.gfile.exists(path):   # An earlier resume here, with another config.
          tf.io.gfile.remove(path)
        path = None
    if path:
      with tf.io.gfile.GFile(path, "w") as f:
        f.write(config.to_json_best_effort(indent=2))


def _final_result(state: LoopState, evaluate: Evaluate, guard: NonFiniteGuard) -> Dict:
  """The final metrics (also written to ``final_metrics.json`` by the chief), with the
  TensorBoard smoothing note."""
  trainer, writer, step = state.trainer, state.writer, state.step
  if not evaluate.latest:  # A finished run without saved metrics: evaluate the restored one.
    evaluate.latest = trainer.evaluate()
  result = dict(evaluate.latest)
  result.update(step=step, start_step=state.start, wall_time_sec=time.time() - state.t0,
                **{f"params/{k}": v for k, v in state.counts.items()})
  result["skipped_steps"] = guard.skipped
  result.update(trainer.task.final_metrics())
  writer.text(step, {"final_metrics": _metrics_text(step, evaluate.latest)}, "eval")
  writer.flush()
  if trainer.is_chief:
    # How TensorBoard's default smoothing draws the eval curves: from this process's
    # evaluations for a fresh run, from the event files for a resumed one.
    names = trainer.metric_names
    note = summaries.series_smoothing_note(
        {k: [m[k] for m in evaluate.history if k in m] for k in names}, names) \
        if state.start == 0 else \
        summaries.smoothing_note(state.paths.run(Workdir.EVAL), names)
    if note:
      logging.warning(note)
    with tf.io.gfile.GFile(state.paths.final_metrics, "w") as f:
      json.dump(result, f, indent=2)
  return result


# -- the loop -----------------------------------------------------------------------------
def _first_evaluation(state: LoopState, model_summaries: WriteModelSummaries,
                      evaluate: Evaluate) -> None:
  """A fresh run's model summaries and evaluation at step 0. Tracing the step functions
  takes seconds each: said before each, so the console is never silent for long."""
  if not (state.step == 0 and state.total > 0 and
          (model_summaries.summaries or evaluate.every > 0)):
    return
  logging.info("Compiling the %s and %s step 0 ...",
               "summaries" if model_summaries.summaries else "evaluation",
               "evaluating" if evaluate.every > 0 else "writing")
  if model_summaries.summaries:  # (A resumed run wrote these before it stopped.)
    model_summaries(state)
  if evaluate.every > 0:
    evaluate(state)
    state.eval_metrics = None


def _train(state: LoopState, actions: List[Action], stop: SignalStop,
           guard: NonFiniteGuard) -> None:
  """Chunks of steps to ``config.num_steps`` (or a signal), the due actions after each."""
  trainer = state.trainer
  logging.info("Compiling the train step ...")
  compile_t = time.time()
  while state.step < state.total:
    if stop.requested(state):  # Every worker stops at the same chunk boundary.
      break
    for action in actions:
      action.before_chunk(state)
    end = min([a.next_stop(state) for a in actions]
              + ([state.step + 1] if state.steady_t is None else []))
    sums, first_bad = trainer.train_chunk_sums(state.iterator, end - state.step)
    if first_bad >= 0:
      guard.handle(state, first_bad)  # Raises, or rewinds to the skipped step.
      for action in actions:
        action.on_rewind(state)
      continue
    trainer.step.assign(end)
    state.step, state.now, state.chunk_sums = end, time.time(), sums
    state.train_metrics = state.eval_metrics = None
    for action in actions:
      action.on_chunk(state)
    if state.steady_t is None:  # The first chunk (one step) traced the step: not timed.
      state.steady_t, state.steady_step = state.now, state.step
      for action in actions:
        action.on_timing(state)
      logging.info("Compiled in %.1f s; training (a line every %d steps) ...",
                   state.now - compile_t, console_interval(state.config))
    for action in actions:
      if action.due(state):
        action(state)


def run(config, workdir: str, trainer, signals) -> Dict:
  """Trains to ``config.num_steps`` from the trainer's latest checkpoint, with the
  periodic actions between chunks; returns the final metrics, a finished run's saved
  ones, or (stopped by a signal) ``{"step", "interrupted_by_signal", "stop_message",
  "checkpoint"}``."""
  t0 = time.time()
  paths = Workdir(workdir)
  writer = summaries.Writer(workdir, enabled=trainer.is_chief)
  start = trainer.restore()
  if start >= config.num_steps:
    saved = finished_result(workdir, start)
    if saved is not None:  # A finished run: report it, rewrite nothing.
      logging.info("The run in %s finished at step %d; its saved metrics follow (a larger "
                   "--config.num_steps continues it).", workdir, start)
      return saved
  state = LoopState(trainer, config, paths, writer, start, trainer.task.describe(), t0,
                    step=start)
  _record_start(state, resumed=trainer.restored_from is not None)
  model_summaries, evaluate = WriteModelSummaries(config, trainer), Evaluate(config)
  checkpoint, guard = SaveCheckpoint(config, start), NonFiniteGuard(config.fault)
  actions = [Profile(config, paths, trainer.is_chief), LogScalars(config), model_summaries,
             TaskEvents(trainer.task), evaluate, ConsoleLine(config, trainer.metric_names),
             checkpoint]
  stop = SignalStop(signals, checkpoint)
  state.iterator = trainer.train_iterator(start)
  _first_evaluation(state, model_summaries, evaluate)
  try:
    _train(state, actions, stop, guard)
  except NonFiniteLossError:
    for action in actions:
      action.close()
    writer.flush()
    raise
  for action in actions:
    action.on_end(state)
  return stop.stopped(state) or _final_result(state, evaluate, guard)
