"""Export the target network a weight source produced as a plain Keras model file: the
generated (or trained, or meta-learned initial) weights in a clone of the target, behind
a ``Rescaling`` of the stored pixels, loadable with ``keras.models.load_model`` alone.
The checks an export needs run before TensorFlow is imported. Details: docs/observability.md.
"""
from __future__ import annotations

import os

from typing import Dict, Optional

from hypernet import config_lib

# Keras, TensorFlow and the summaries are imported where they are used: the command line
# checks an export path, the run and its condition (check_export_path, check_exportable,
# check_condition) before it imports TensorFlow.


def target_for_export(task, condition: Optional[int] = None) -> keras.Model:
  """A fresh copy of ``task.target`` holding the weights the target runs on.

  Args:
    task: a built task with a ``target`` network (:mod:`hypernet.tasks.classification`).
    condition: for a conditional hypernetwork, the condition (task id) whose weights
      are exported, in ``[0, num_conditions)``; default 0. Ignored otherwise.

  Returns:
    A built ``keras.Model`` (``keras.models.clone_model`` of the target) whose outputs
    equal the task's target network on the same inputs in inference mode.

  Raises:
    ValueError: the task has no ``target``; ExportConditionError (a ValueError):
      ``condition`` is out of range.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.core import functional  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import protocol  # pylint: disable=g-import-not-at-top
  task = protocol.as_task(task)
  target = task.target
  if target is None:
    raise ValueError(f"Task {type(task).__name__} has no target network to export.")
  variables = functional.variable_paths(target)
  weights = {p: w for p, w in task.summary_weights().items() if p in variables}
  for path, value in weights.items():
    value = tf.convert_to_tensor(value)
    if value.shape.rank == len(variables[path].shape) + 1:
      count = int(value.shape[0])   # One weight set per condition.
      index = 0 if condition is None else int(condition)
      if not 0 <= index < count:
        raise ExportConditionError(f"condition={condition} is out of range: the "
                                   f"hypernetwork has {count} conditions, [0, {count}).")
      weights[path] = value[index]
  return functional.merged_model(target, weights)


class ExportPathError(ValueError):
  """The export path is not a ``.keras`` file name."""


class ExportConditionError(ValueError):
  """The condition (task id) to export is not one of the hypernetwork's conditions."""


def num_conditions(config) -> int:
  """The weight sets a run's source produces, one per condition (task id): the
  continual ``hnet`` / ``independent`` methods' ``num_tasks``, a conditional
  hypernetwork's ``num_conditions``; 0 when the target has one weight set."""
  if config.task == "continual":
    method = config.continual.method
    return int(config.continual.num_tasks) if method in ("hnet", "independent") else 0
  if config.hypernet.kind != "none":
    return int(config.hypernet.num_conditions)
  return 0


class NotExportableError(ValueError):
  """The run has no single target network to export."""


def exportable(config) -> bool:
  """Whether a run's target network is one set of weights that can be exported.

  Not for the learners that write the head per task
  (``config_lib.PROTOTYPE_HEAD_LEARNERS``: ``config.meta.learner="support_hypernet"``,
  ``"protonet"``, ``"support_adapter"``): they generate the classifier head from each
  task's support set and never train the target's own head variable, so a file of the
  target would classify with an untrained head (``"support_adapter"`` also adapts the
  body per task).
  """
  return not (config.task in ("few_shot", "sinusoid")
              and config.meta.learner in config_lib.PROTOTYPE_HEAD_LEARNERS)


def check_exportable(config) -> None:
  """Fails before any work on a run that is not :func:`exportable`.

  Raises:
    NotExportableError (a ValueError): one line naming the learner and what to use.
  """
  if not exportable(config):
    raise NotExportableError(
        f"--export: config.meta.learner={config.meta.learner!r} generates the head from "
        "each task's support set, so the run has no single target network to export; "
        "score it without --export, or train with hypernet.keras.MetaModel and save that "
        "model.")


def check_condition(config, condition: Optional[int]) -> None:
  """Fails before any work on a ``--condition`` the run's weight source does not have.

  Raises:
    ExportConditionError (a ValueError): naming ``--condition`` and the valid range.
  """
  count = num_conditions(config)
  if count and condition is not None and not 0 <= int(condition) < count:
    field = ("config.continual.num_tasks" if config.task == "continual"
             else "config.hypernet.num_conditions")
    raise ExportConditionError(
        f"--condition={condition} is out of range: the run has {count} conditions "
        f"({field}={count}); pick one of 0..{count - 1}.")


def check_export_path(path: str) -> None:
  """Fails before any work on an export path that cannot be written.

  Raises:
    ExportPathError (a ValueError): ``path`` does not end in ``.keras``.
    FileNotFoundError: the folder of ``path`` does not exist.
  """
  if not str(path).endswith(".keras"):
    raise ExportPathError(f"Export path {path!r} must end in '.keras' (the Keras 3 format).")
  folder = os.path.dirname(os.path.abspath(str(path)))
  if "://" not in str(path) and not os.path.isdir(folder):
    raise FileNotFoundError(f"--export={path}: the folder {folder} does not exist; create "
                            "it first or export elsewhere.")


def input_scale(task) -> Optional[float]:
  """The factor the training pipeline multiplies stored pixels by (``data.pixel_scale``),
  or ``None`` when the task has no image data set (meta-learning, sinusoid)."""
  from hypernet.tasks import protocol  # pylint: disable=g-import-not-at-top
  scale = getattr(protocol.as_task(task).data, "pixel_scale", None)
  return None if scale is None else float(scale)


def exported_model(task, condition: Optional[int] = None,
                   softmax: bool = False) -> keras.Model:
  """The model written by :func:`export_target`: input scaling, target, optional softmax.

  Args:
    task: a built task (see :func:`target_for_export`).
    condition: see :func:`target_for_export`.
    softmax: append a ``Softmax`` layer (outputs class probabilities instead of logits).

  Returns:
    ``keras.Model`` mapping stored inputs (e.g. digits pixels 0..16, float32
    ``[N, 8, 8, 1]``) through ``Rescaling(pixel_scale)`` (if the task has an image data
    set) and the target to logits (or probabilities) ``[N, num_classes]``.
  """
  import keras  # pylint: disable=g-import-not-at-top
  target = target_for_export(task, condition)
  scale = input_scale(task)
  if scale is None and not softmax:
    return target
  inputs = keras.Input(shape=tuple(target.inputs[0].shape[1:]), name="inputs")
  x = inputs if scale is None else keras.layers.Rescaling(scale, name="pixel_scale")(inputs)
  outputs = target(x)
  if softmax:
    outputs = keras.layers.Softmax(name="probabilities")(outputs)
  return keras.Model(inputs, outputs, name=f"{target.name}_exported")


def _stored_range(task) -> str:
  """``"lo..hi"``: the range of the training images as stored (what the exported model
  takes), read from the data, not assumed from the pixel scale."""
  from hypernet.tasks import protocol  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  x = np.asarray(protocol.as_task(task).data.x_train)
  lo, hi = float(x.min()), float(x.max())
  fmt = (lambda v: f"{v:.0f}") if lo.is_integer() and hi.is_integer() else (
      lambda v: f"{v:.3g}")
  return f"{fmt(lo)}..{fmt(hi)}"


def _fraction(scale: float) -> str:
  inverse = 1.0 / scale
  return f"1/{round(inverse)}" if abs(inverse - round(inverse)) < 1e-6 else f"{scale:.6g}"


def input_contract(task, model, softmax: bool = False) -> Dict[str, str]:
  """What an exported model takes and returns, in words for the console.

  Args:
    task: the built task the model was exported from.
    model: the exported model (:func:`exported_model`).
    softmax: whether it ends in a softmax.

  Returns:
    ``{"input": "float32 [batch, 8, 8, 1]: values 0..16 as the data set stores them (the
    model scales them by 1/16 itself)", "output": "logits [batch, 10] (softmax gives probabilities)",
    "load": "keras.models.load_model(path) (Keras alone; no hypernet import)"}``.
  """
  shape = ", ".join(["batch"] + [str(d) for d in model.inputs[0].shape[1:]])
  dtype = getattr(model.inputs[0], "dtype", "float32")
  dtype = getattr(dtype, "name", dtype)
  scale = input_scale(task)
  if scale is not None:
    values = f"values {_stored_range(task)} as the data set stores them (" + (
        "the model applies no scaling)" if scale == 1.0 else
        f"the model scales them by {_fraction(scale)} itself)")
  else:
    values = "inputs as the training episodes feed them"
  out = ", ".join(["batch"] + [str(d) for d in model.outputs[0].shape[1:]])
  output = (f"class probabilities [{out}] (a softmax)" if softmax else
            f"logits [{out}] (apply a softmax for probabilities, or export with "
            "--export_softmax)")
  return {"input": f"{dtype} [{shape}]: {values}", "output": output,
          "load": "keras.models.load_model(path): Keras alone, no hypernet import"}


def export_target(task, path: str, condition: Optional[int] = None,
                  softmax: bool = False) -> keras.Model:
  """Writes the target network with its produced weights to a ``.keras`` file.

  Args:
    task: a built task whose parameters are trained / restored.
    path: output file; must end in ``.keras`` (Keras 3's native format), in an existing
      folder.
    condition: see :func:`target_for_export`.
    softmax: see :func:`exported_model`.

  Returns:
    The exported model (as written, see :func:`exported_model`).

  Raises:
    ValueError: ``path`` does not end in ``.keras``; see :func:`target_for_export`.
    FileNotFoundError: the folder of ``path`` does not exist.
  """
  check_export_path(path)
  model = exported_model(task, condition, softmax)
  model.save(path)
  return model
