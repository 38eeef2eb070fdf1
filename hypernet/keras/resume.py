"""``fit()`` resumed from a mid-epoch backup continues after the backed-up batch.

``keras.callbacks.BackupAndRestore(backup_dir, save_freq=N)`` saves every ``N`` batches,
but Keras 3 resumes a rerun at the first batch of the saved epoch, on the weights saved
mid-epoch: the batches before the backup are trained twice. A :class:`HyperModel` or
:class:`MetaModel` skips them instead (reads them from the data without a step), so the
rerun takes the uninterrupted run's steps (``tests/test_keras_restart.py``). The data
must give an epoch the same batches in a new process (a finite dataset read again each
epoch); the resumed epoch's logs cover the batches it trained.
"""
from __future__ import annotations

import inspect

import keras

from hypernet.numerics import compat

_FIT_PARAMETERS = inspect.signature(keras.Model.fit)


def batches_done(callbacks) -> int:
  """Batches of its epoch that the backup a batch-level ``BackupAndRestore`` among
  ``callbacks`` resumes from holds (0: none, or backups at epoch ends only)."""
  done = 0
  for c in callbacks:
    if isinstance(c, keras.callbacks.BackupAndRestore) and c.save_freq != "epoch":
      progress = compat.backup_progress(c.backup_dir)
      done = max(done, progress[1] if progress else 0)
  return done


class _SkipDone(keras.callbacks.Callback):
  """Consumes the first ``batches`` batches of the first epoch without training (after
  ``BackupAndRestore`` restored the weights in ``on_train_begin``: it comes before)."""

  def __init__(self, batches: int):
    super().__init__()
    self.batches = batches

  def on_train_begin(self, logs=None):
    model, train, left = self.model, self.model.train_function, [self.batches]

    def skip(iterator):
      if left[0] <= 0:
        model.train_function = train
        return train(iterator)
      steps = min(int(model.steps_per_execution), left[0])
      for _ in range(steps):
        next(iterator)
      left[0] -= steps
      return model.get_metrics_result()

    self._train = train
    model.train_function = skip

  def on_train_end(self, logs=None):
    self.model.train_function = self._train


class ResumeMidEpoch:
  """Mixin for a ``keras.Model``: ``fit()`` with a batch-level ``BackupAndRestore``
  whose backup is mid-epoch skips the batches the backup holds."""

  def fit(self, *args, **kwargs):  # pylint: disable=missing-function-docstring
    bound = _FIT_PARAMETERS.bind(self, *args, **kwargs).arguments
    callbacks = bound.get("callbacks")
    if not isinstance(callbacks, (list, tuple)):  # None, or Keras' own CallbackList.
      return super().fit(*args, **kwargs)
    done = batches_done(callbacks)
    if not done:
      return super().fit(*args, **kwargs)
    bound.pop("self")
    bound["callbacks"] = list(callbacks) + [_SkipDone(done)]
    return super().fit(**bound)
