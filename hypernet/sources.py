"""Weight sources: what produces the target network's weights for a forward pass.

A weight source maps its own trainable parameters (plus an optional context, e.g. a
task id) to ``{path: tensor}`` for some of the target network's weights; the target runs
on them through :func:`hypernet.functional.functional_call`. Target weights the source
does not produce are read from the target's own variables, and are trained directly
unless frozen.

* :class:`IdentitySource` -- plain training: the target's own variables.
* :class:`HypernetworkSource` -- a hypernetwork generates the selected weights.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf

from hypernet import functional


class WeightSource:
  """Base class. Subclasses set ``generated_paths`` and implement :meth:`weights`.

  Attributes:
    target: the target network (a built Keras model).
    generated_paths: target paths this source produces.
    train_rest: whether target weights not produced here are trained directly.
  """

  def __init__(self, target: keras.Model, train_rest: bool = True):
    self.target = target
    self.train_rest = train_rest
    self.generated_paths: List[str] = []

  def weights(self, context=None) -> Dict[str, tf.Tensor]:
    """Returns ``{path: tensor}`` for the target (may be empty: use its variables)."""
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
    return list(self.own_variables) + self.direct_target_variables

  def trackables(self) -> Dict[str, object]:
    """Objects to checkpoint, by name.

    ``target_state`` lists the target's non-trainable variables explicitly: Keras 3 seed
    generators (dropout RNG state) are not tracked by ``tf.train.Checkpoint`` through the
    model, and a resumed run must continue their random stream.
    """
    return {"target": self.target, "target_state": list(self.target.non_trainable_variables)}

  def parameter_counts(self) -> Dict[str, int]:
    """``trainable`` (optimised scalars), ``generated`` (scalars this source produces),
    ``target`` (all trainable target scalars), ``source`` (the source's own scalars)."""
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


class HypernetworkSource(WeightSource):
  """A hypernetwork generates the target weights at ``generated_paths``.

  Args:
    target: the target network.
    hypernetwork: a Keras model whose call ``hypernetwork(context)`` returns
      ``{path: tensor}`` for exactly ``generated_paths``.
    train_rest: train the target weights that are not generated (else frozen at init).
  """

  def __init__(self, target: keras.Model, hypernetwork: keras.Model, train_rest: bool = True):
    super().__init__(target, train_rest)
    self.hypernetwork = hypernetwork
    self.generated_paths = list(hypernetwork.target_spec)

  def weights(self, context=None) -> Dict[str, tf.Tensor]:
    return self.hypernetwork(context)

  @property
  def own_variables(self):
    return list(self.hypernetwork.trainable_variables)

  def trackables(self):
    return dict(super().trackables(), hypernetwork=self.hypernetwork)


def build_weight_source(config, target: keras.Model) -> WeightSource:
  """Builds the weight source named by ``config.hypernet.kind`` for ``target``.

  ``config.hypernet.kind``: ``"none"`` (train the target directly) or ``"chunked"``.
  ``config.hypernet.targets``: glob/regex patterns of the target paths to generate.

  Raises:
    ValueError: an unknown kind (lists the known kinds) or a pattern matching no weight.
  """
  hc = config.hypernet
  if hc.kind == "none":
    return IdentitySource(target)
  spec = functional.weight_spec(target, hc.targets)
  values = {p: v.numpy() for p, v in functional.variable_paths(target).items() if p in spec}
  if hc.kind == "chunked":
    from hypernet.hypernetworks.chunked import ChunkedHypernetwork
    hnet = ChunkedHypernetwork(spec, target_values=values, chunk_size=hc.chunk_size,
                               chunk_emb_dim=hc.chunk_emb_dim, hidden=tuple(hc.hidden),
                               init=hc.init, seed=config.seed)
    return HypernetworkSource(target, hnet, train_rest=hc.train_rest)
  raise ValueError(f"config.hypernet.kind={hc.kind!r} is unknown; known: ['none', 'chunked'].")
