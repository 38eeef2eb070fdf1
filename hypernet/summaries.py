"""TensorBoard summaries under the workdir: ``train/`` and ``eval/`` event files."""
from __future__ import annotations

import os
from typing import Mapping

import tensorflow as tf


class Writer:
  """Writes scalars and the config; a no-op on non-chief workers (``enabled=False``)."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self._writers = {}
    self._workdir = workdir

  def _writer(self, split: str):
    if split not in self._writers:
      self._writers[split] = tf.summary.create_file_writer(os.path.join(self._workdir, split))
    return self._writers[split]

  def scalars(self, step: int, values: Mapping[str, float], split: str = "train") -> None:
    if not self.enabled:
      return
    with self._writer(split).as_default(step=step):
      for k, v in values.items():
        tf.summary.scalar(k, float(v))

  def config(self, config) -> None:
    """The config as a markdown code block under the ``config`` text tag."""
    if not self.enabled:
      return
    text = "```\n" + str(config) + "\n```"
    with self._writer("train").as_default(step=0):
      tf.summary.text("config", text)

  def flush(self) -> None:
    for w in self._writers.values():
      w.flush()
