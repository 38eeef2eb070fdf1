"""Several training steps per ``tf.function`` call in ``fit()`` by default.

Keras' default, ``compile(steps_per_execution=1)``, calls one ``tf.function`` per step
and runs the callbacks between steps: on the small models of hypernetwork and
meta-learning work that Python overhead costs a third of the step rate (``HyperModel.fit``
at 0.68x hypernet's Trainer on the digits main job's network; docs/keras.md,
``benchmarks/keras_fit_bench.py``). A
:class:`HyperModel` or :class:`MetaModel` compiled without ``steps_per_execution`` (or
with ``"auto"``) therefore runs up to :data:`MAX_STEPS` steps per call in ``fit()``,
chosen per call by :func:`auto_steps_per_execution` so that nothing a user can see
changes: the same steps on the same batches (the same weights, bit for bit where the
graph optimiser fuses the step's ops the same way in both), the same number of
steps per epoch, and every batch seen by a callback that asks for batches.
``evaluate()`` and ``predict()`` keep one step per call. An explicit
``steps_per_execution=N`` is Keras' own behaviour, unchanged.
"""
from __future__ import annotations

import inspect
import math
from typing import Optional, Sequence

import keras

# The most steps one fit() call runs per execution under "auto".
MAX_STEPS = 100

_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_test_batch_begin",
                "on_test_batch_end", "on_batch_begin", "on_batch_end")


def _batch_blind(callback) -> bool:
  """Whether ``callback`` works the same when it sees one batch in N: it has no batch
  hooks of its own, or it is Keras' progress bar / history, or a checkpoint / TensorBoard
  callback that acts per epoch only."""
  if isinstance(callback, (keras.callbacks.ProgbarLogger, keras.callbacks.History)):
    return True
  if isinstance(callback, (keras.callbacks.ModelCheckpoint, keras.callbacks.BackupAndRestore)):
    return getattr(callback, "save_freq", None) == "epoch"
  if isinstance(callback, keras.callbacks.TensorBoard):
    return callback.update_freq == "epoch" and not getattr(callback, "profile_batch", 0)
  return all(getattr(type(callback), hook) is getattr(keras.callbacks.Callback, hook)
             for hook in _BATCH_HOOKS)


def _divisor_at_most(n: int, cap: int) -> int:
  """The largest divisor of ``n`` that is at most ``cap``."""
  return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def auto_steps_per_execution(steps_per_epoch: Optional[int] = None,
                             validation_steps: Optional[int] = None,
                             callbacks: Optional[Sequence] = None,
                             cap: int = MAX_STEPS, num_replicas: int = 1) -> int:
  """The steps per ``tf.function`` call for one ``fit()`` under ``"auto"``.

  Args:
    steps_per_epoch, validation_steps: ``fit()``'s arguments. Given, the result divides
      them: Keras runs whole executions, so a count that is not a multiple would be
      rounded up (more steps than asked for; keras-team/keras#20861). Not given, the data
      ends an execution early where it ends (Keras stops at the end of a finite dataset
      inside an execution).
    callbacks: ``fit()``'s callbacks. A callback with batch hooks (other than Keras'
      progress bar and history, and checkpoint / TensorBoard callbacks that act per
      epoch) would see one batch in N: then 1.
    cap: the most steps per call.
    num_replicas: replicas of the model's ``tf.distribute`` strategy. More than one:
      1 (Keras 3.15's multi-step loop over a distributed iterator fails in TensorFlow 2.21
      with "You must feed a value for placeholder tensor 'while/cond/Placeholder'").

  Returns:
    An int in ``[1, cap]``.

  Raises:
    ValueError: ``cap`` is not a positive int.
  """
  if not isinstance(cap, int) or cap < 1:
    raise ValueError(f"cap must be a positive int, got {cap!r}.")
  if num_replicas > 1 or not all(_batch_blind(c) for c in callbacks or ()):
    return 1
  counts = [int(n) for n in (steps_per_epoch, validation_steps) if n is not None and n > 0]
  return _divisor_at_most(math.gcd(*counts), cap) if counts else cap


_FIT_PARAMETERS = inspect.signature(keras.Model.fit)


class AutoStepsPerExecution:
  """Mixin for a ``keras.Model``: ``compile(steps_per_execution="auto")`` (the default
  here) runs :func:`auto_steps_per_execution` steps per call in each ``fit()``; the
  compiled step functions of each count are kept, so a later ``fit()`` does not trace
  again. ``get_compile_config`` keeps ``"auto"``, so a reloaded model fits the same way.
  """

  _auto_steps = None  # Set by compile(): whether steps_per_execution is "auto".

  def compile(self, *args, steps_per_execution="auto", **kwargs):  # pylint: disable=missing-function-docstring
    self._auto_steps = steps_per_execution == "auto"
    self._step_functions = _StepFunctions()
    super().compile(*args, steps_per_execution=1 if self._auto_steps else steps_per_execution,
                    **kwargs)

  def compile_from_config(self, config):
    """Compiles a model that ``keras.models.load_model`` rebuilt, as ``compile()`` did
    before saving (Keras skips a custom ``compile`` on load): the optimiser is built with
    its slots, which the file then fills, so a reloaded model continues ``fit()`` where
    the saved one stopped."""
    self.compile(**keras.saving.deserialize_keras_object(config))
    if self.optimizer is not None and self.built:
      self.optimizer.build(self.trainable_variables)

  def get_compile_config(self):  # pylint: disable=missing-function-docstring
    config = super().get_compile_config()
    if config is not None and self._auto_steps is not None:
      config["steps_per_execution"] = ("auto" if self._auto_steps
                                       else self.steps_per_execution)
    return config

  def fit(self, *args, **kwargs):  # pylint: disable=missing-function-docstring
    if not self._auto_steps:
      return super().fit(*args, **kwargs)
    bound = _FIT_PARAMETERS.bind(self, *args, **kwargs).arguments
    steps = auto_steps_per_execution(
        bound.get("steps_per_epoch"), bound.get("validation_steps"), bound.get("callbacks"),
        num_replicas=self.distribute_strategy.num_replicas_in_sync)
    kept = (self.steps_per_execution, self.train_function, self.test_function)
    self.steps_per_execution = steps
    self.train_function, self.test_function = self._step_functions.get(steps)
    try:
      return super().fit(*args, **kwargs)
    finally:
      self._step_functions.put(steps, self.train_function, self.test_function)
      self.steps_per_execution, self.train_function, self.test_function = kept


class _StepFunctions:
  """``{steps per execution: (train_function, test_function)}``, held outside Keras'
  attribute tracking (a plain object, not a dict attribute of the model)."""

  def __init__(self):
    self._functions = {}

  def get(self, steps: int):
    return self._functions.get(steps, (None, None))

  def put(self, steps: int, train_function, test_function) -> None:
    self._functions[steps] = (train_function, test_function)

