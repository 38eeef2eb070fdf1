"""The layout of a training workdir, in one place (TensorFlow-free: the command line uses
it before TensorFlow loads).

    WORKDIR/config.json                  the config of the run that started here
    WORKDIR/config_resumed_at_<N>.json   a changed config a resumed run brought
    WORKDIR/final_metrics.json           the final evaluation (``train_and_evaluate``)
    WORKDIR/eval_step<N>.json            ``python -m hypernet.evaluate``'s metrics
    WORKDIR/eval_step<N>_<setting>.json  the same in another setting (``--set``)
    WORKDIR/lock                         the running job's lock (``checkpoints.WorkdirLock``)
    WORKDIR/checkpoints/ckpt-<N>.*       checkpoints (``unreadable/``: set aside)
    WORKDIR/train/, WORKDIR/eval/        TensorBoard runs
"""
from __future__ import annotations

import os


class Workdir:
  """The paths of one training workdir (a local folder or a ``gs://``-style path).

  Args:
    path: the workdir. A non-chief worker of a multi-worker run writes its checkpoints
      under a ``Workdir`` of its own temporary folder.
  """

  CONFIG = "config.json"
  FINAL_METRICS = "final_metrics.json"
  LOCK = "lock"
  CHECKPOINTS = "checkpoints"
  UNREADABLE = "unreadable"
  TRAIN = "train"
  EVAL = "eval"
  EXPORT = "target.keras"

  def __init__(self, path: str):
    self.path = os.fspath(path)

  def __fspath__(self) -> str:
    return self.path

  def __str__(self) -> str:
    return self.path

  def __repr__(self) -> str:
    return f"Workdir({self.path!r})"

  def join(self, *parts: str) -> str:
    return os.path.join(self.path, *parts)

  @property
  def local(self) -> bool:
    """Whether this is a local folder (else a ``gs://``-style path: ``tf.io.gfile``)."""
    return "://" not in self.path

  @property
  def config(self) -> str:
    return self.join(self.CONFIG)

  def resumed_config(self, step: int) -> str:
    """Where a resumed run with a changed config records it (``config.json`` stays)."""
    return self.join(f"config_resumed_at_{step}.json")

  def config_at(self, step=None) -> str:
    """The config that wrote checkpoint ``step``: the ``config_resumed_at_<N>.json`` with
    the largest ``N < step`` (``step=None``: the largest ``N``), else ``config.json``. A
    run resumed at ``N`` with a changed config trains steps ``N + 1, ...`` with it, so
    the checkpoints after ``N`` are that config's, not ``config.json``'s (a field that
    keeps the parameters' shapes, such as ``hypernet.activation``, would otherwise
    rebuild another network on the same weights)."""
    prefix, suffix = "config_resumed_at_", ".json"
    if self.local:
      names = os.listdir(self.path) if os.path.isdir(self.path) else []
    else:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      names = [os.path.basename(p) for p in tf.io.gfile.glob(self.join(prefix + "*" + suffix))]
    starts = [int(n[len(prefix):-len(suffix)]) for n in names
              if n.startswith(prefix) and n.endswith(suffix) and n[len(prefix):-len(suffix)].isdigit()]
    starts = [n for n in starts if step is None or n < int(step)]
    return self.resumed_config(max(starts)) if starts else self.config

  @property
  def final_metrics(self) -> str:
    return self.join(self.FINAL_METRICS)

  def eval_metrics(self, step: int, setting: str = "") -> str:
    """``eval_step<N>.json``, or ``eval_step<N>_<setting>.json`` for an evaluation in
    another setting (``python -m hypernet.evaluate --set``)."""
    return self.join(f"eval_step{step}{'_' + setting if setting else ''}.json")

  @property
  def lock(self) -> str:
    return self.join(self.LOCK)

  @property
  def checkpoints(self) -> str:
    return self.join(self.CHECKPOINTS)

  def checkpoint(self, step) -> str:
    """The prefix of checkpoint ``ckpt-<step>``."""
    return os.path.join(self.checkpoints, f"ckpt-{step}")

  @property
  def unreadable(self) -> str:
    """Where unreadable checkpoints are set aside."""
    return os.path.join(self.checkpoints, self.UNREADABLE)

  def run(self, split: str) -> str:
    """A TensorBoard run folder (``"train"``, ``"eval"``; ``""``: the workdir itself)."""
    return self.join(split) if split else self.path

  @property
  def export(self) -> str:
    """The export path the closing summary suggests."""
    return self.join(self.EXPORT)
