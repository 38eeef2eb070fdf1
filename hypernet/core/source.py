"""The weight-source protocol: what produces a target network's weights for a forward pass.

A weight source maps its own trainable parameters (and an optional context, e.g. a task
id) to ``{path: tensor}`` for some of the target's weights; the target runs on them
through :func:`hypernet.core.functional.functional_call`. Hypernetworks
(:mod:`hypernet.hypernetworks.source`) implement it above this layer.
"""
from __future__ import annotations

import abc
from typing import Dict, List

import keras
import numpy as np
import tensorflow as tf

from hypernet.core import functional


class WeightSource(abc.ABC):
  """Base class of the weight sources. Subclasses set ``generated_paths`` and implement
  :meth:`weights` (and :attr:`own_variables` when they have parameters). The inner-loop
  learners (:class:`hypernet.meta.Learner`, registered as virtual subclasses) are weight
  sources whose context is a support set.

  Target weights the source does not produce are read from the target's own variables,
  and are trained directly unless ``train_rest`` is False.

  Args:
    target: the target network (a built Keras model).
    train_rest: whether the target weights not produced here are trained directly (else
      frozen at their initial values).

  Attributes:
    target: the target network.
    generated_paths: list of the target paths (``"conv1/kernel"``) this source produces.
    train_rest: see Args.
  """

  def __init__(self, target: keras.Model, train_rest: bool = True):
    self.target = target
    self.train_rest = train_rest
    self.generated_paths: List[str] = []

  def weights(self, context=None) -> Dict[str, tf.Tensor]:
    """The produced weights.

    Args:
      context: what the weights depend on besides the source's parameters: ``None``, an
        int task id ``[]`` / ids ``[S]``, or float condition vectors ``[d]`` / ``[S, d]``
        (source-specific).

    Returns:
      ``{path: tensor}`` for exactly :attr:`generated_paths`, each of the target
      variable's shape and dtype (``[S, *shape]`` for a batch of ``S`` contexts); empty
      for a source that produces nothing (the target runs on its own variables).
    """
    del context
    return {}

  @property
  def own_variables(self) -> List[tf.Variable]:
    """The source's own trainable parameters (empty for the identity)."""
    return []

  @property
  def direct_target_variables(self) -> List[tf.Variable]:
    """Target variables trained directly (not generated, not frozen)."""
    if not self.train_rest:
      return []
    return [v for p, v in functional.variable_paths(self.target, trainable=True).items()
            if p not in self.generated_paths]

  @property
  def trainable_variables(self) -> List[tf.Variable]:
    """What the outer optimiser trains: :attr:`own_variables`, then
    :attr:`direct_target_variables`."""
    return list(self.own_variables) + self.direct_target_variables

  def trackables(self) -> Dict[str, object]:
    """Objects to checkpoint, by name.

    ``target_state`` lists the target's non-trainable variables explicitly: Keras 3 seed
    generators (dropout RNG state) are not tracked by ``tf.train.Checkpoint`` through the
    model, and a resumed run must continue their random stream.
    """
    return {"target": self.target, "target_state": list(self.target.non_trainable_variables)}

  def parameter_counts(self) -> Dict[str, int]:
    """Scalar counts (ints): ``trainable`` (optimised), ``source`` (the source's own
    parameters), ``generated`` (produced by this source), ``target`` (all trainable target
    scalars)."""
    count = lambda vs: int(sum(np.prod(v.shape) for v in vs))
    target_vars = functional.variable_paths(self.target, trainable=True)
    return {
        "trainable": count(self.trainable_variables),
        "source": count(self.own_variables),
        "generated": count([target_vars[p] for p in self.generated_paths]),
        "target": count(target_vars.values()),
    }


class IdentitySource(WeightSource):
  """Plain training: the target network runs on (and trains) its own variables."""
