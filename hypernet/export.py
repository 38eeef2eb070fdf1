"""Export the target network a weight source produced as a plain Keras model file.

The exported ``.keras`` file holds an ordinary Keras 3 model (the target architecture,
e.g. ``keras.Sequential`` of Conv2D/Dense layers) with the generated weights written
into its variables. It loads and predicts with ``keras.models.load_model(path)`` alone:
no ``hypernet`` import, no hypernetwork, no custom objects.

* hypernetwork sources: the generated weights (quantised ones as the target ran on
  them); a conditional hypernetwork exports one condition (task id) per file;
* plain training: the target's own weights;
* meta-learners: the learned initial (pre-adaptation) weights -- fast weights depend
  on each episode's support set and are not part of the file.

Non-trainable state (BatchNorm moving statistics) is copied from the trained target.
"""
from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

from hypernet import functional, summaries


def target_for_export(task, condition: Optional[int] = None) -> keras.Model:
  """A fresh copy of ``task.target`` holding the weights the target runs on.

  Args:
    task: a built task with a ``target`` network (:mod:`hypernet.tasks`).
    condition: for a conditional hypernetwork, the condition (task id) whose weights
      are exported, in ``[0, num_conditions)``; default 0. Ignored otherwise.

  Returns:
    A built ``keras.Model`` (``keras.models.clone_model`` of the target) whose outputs
    equal the task's target network on the same inputs in inference mode.

  Raises:
    ValueError: the task has no ``target``, or ``condition`` is out of range.
  """
  target = getattr(task, "target", None)
  if target is None:
    raise ValueError(f"Task {type(task).__name__} has no target network to export.")
  weights = summaries.target_weights(task)
  clone = keras.models.clone_model(target)
  paths = list(functional.variable_paths(target))
  if len(clone.variables) != len(paths):
    raise ValueError(f"keras.models.clone_model({target.name!r}) has {len(clone.variables)} "
                     f"variables, the target {len(paths)}: cannot map the weights.")
  for path, source_var, var in zip(paths, functional.variable_paths(target).values(),
                                   clone.variables):
    value = tf.convert_to_tensor(weights.get(path, source_var))
    if value.shape.rank == len(var.shape) + 1:  # One weight set per condition.
      count = int(value.shape[0])
      index = 0 if condition is None else int(condition)
      if not 0 <= index < count:
        raise ValueError(f"condition={condition} is out of range: the hypernetwork has "
                         f"{count} conditions, [0, {count}).")
      value = value[index]
    if tuple(value.shape) != tuple(var.shape):
      raise ValueError(f"Weight {path!r}: shape {tuple(value.shape)} does not fit the "
                       f"cloned variable {var.path} of shape {tuple(var.shape)}.")
    var.assign(tf.cast(value, var.dtype))
  return clone


def export_target(task, path: str, condition: Optional[int] = None) -> keras.Model:
  """Writes the target network with its produced weights to a ``.keras`` file.

  Args:
    task: a built task whose parameters are trained / restored.
    path: output file; must end in ``.keras`` (Keras 3's native format).
    condition: see :func:`target_for_export`.

  Returns:
    The exported model (as written).

  Raises:
    ValueError: ``path`` does not end in ``.keras``; see :func:`target_for_export`.
  """
  if not str(path).endswith(".keras"):
    raise ValueError(f"Export path {path!r} must end in '.keras' (the Keras 3 format).")
  model = target_for_export(task, condition)
  model.save(path)
  return model
