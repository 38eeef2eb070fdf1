"""Variable paths: the keys by which every weight of a Keras 3 model is addressed.

A path is the variable's Keras ``Variable.path`` with the model's own name stripped
(``"conv1/kernel"``, ``"backbone/conv1/kernel"`` in a nested model). The lowest module of
the functional core: :mod:`hypernet.core.weight_roles` and
:mod:`hypernet.core.functional` both key on these paths.
"""
from __future__ import annotations

from typing import Dict, Optional

import keras


def _check_built(model: keras.Model) -> None:
  if not model.built or not model.variables:
    raise ValueError(
        f"Model {model.name!r} is not built, so its weights have no shapes yet. Build it "
        "first: call it once on an example batch, or construct it with keras.Input(...).")


def _relative_path(model: keras.Model, variable) -> str:
  path = variable.path
  prefix = model.name + "/"
  return path[len(prefix):] if path.startswith(prefix) else path


def variable_paths(model: keras.Model, trainable: Optional[bool] = None) -> Dict[str, keras.Variable]:
  """Returns ``{path: variable}`` for a built Keras model, in ``model.variables`` order.

  Args:
    model: a built Keras 3 model (Sequential, Functional, subclassed or nested).
    trainable: ``True`` for trainable variables only, ``False`` for non-trainable only,
      ``None`` for all.

  Returns:
    An ordered dict from path (the variable's Keras path with the model's own name
    stripped, e.g. ``"conv1/kernel"``, ``"bn/moving_mean"``) to the ``keras.Variable``.

  Raises:
    ValueError: if the model is not built, or two variables share a path (rename the
      layers so that each has a unique name).
  """
  _check_built(model)
  if trainable is None:
    variables = model.variables
  elif trainable:
    variables = model.trainable_variables
  else:
    variables = model.non_trainable_variables
  paths: Dict[str, keras.Variable] = {}
  for v in variables:
    p = _relative_path(model, v)
    if p in paths and paths[p] is not v:
      raise ValueError(
          f"Two variables of model {model.name!r} share the path {p!r}; give their "
          "layers unique names so each weight can be addressed.")
    paths[p] = v
  return paths
