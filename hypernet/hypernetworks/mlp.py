"""Full MLP hypernetwork: a shared MLP trunk and one linear output head per target tensor
(Ha, Dai & Le 2016; hypnettorch's ``HMLP``). Its equations and initialisation:
docs/hypernetworks.md.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from hypernet.hypernetworks import base


@base.KINDS.register("mlp")
class MLPHypernetwork(base.Hypernetwork):
  """One output head per target tensor on a shared MLP trunk.

  Args:
    target_spec: ``{path: tf.TensorSpec}`` of the weights to generate.
    target_values: ``{path: array}`` initial target values (for the init mean/std of
      non-kernel tensors); ``None``: zeros.
    embedding_dim: size of the learned input embedding ``z`` (0 allowed only when
      conditional: the condition is then the whole input).
    hidden: widths of the trunk's hidden layers; ``()`` feeds ``[z ; c]`` to the heads
      directly.
    activation: the hidden units' nonlinearity, one of
      :data:`hypernet.hypernetworks.base.ACTIVATIONS` (``"relu"``).
    init: ``"hyperfan_in"``, ``"hyperfan_out"`` or ``"glorot"``.
    num_conditions: see :class:`hypernet.hypernetworks.base.Hypernetwork`.
    condition_dim: see :class:`hypernet.hypernetworks.base.Hypernetwork`.
    seed: seed of every initialiser.
    dtype: Keras dtype policy (``None``: the global one).
    name: Keras model name.

  Calling it: ``hnet()`` (unconditional), ``hnet(task_id)`` / ``hnet(ids [S])`` or
  ``hnet(vector)`` / ``hnet(vectors [S, d])`` returns ``{path: tensor}`` of the spec's
  shapes (``[S, *shape]`` for a batch of conditions).

  Raises:
    ValueError: non-positive sizes, no input at all, an unknown ``init`` or ``activation``.
  """

  def __init__(self, target_spec: Mapping[str, tf.TensorSpec], *,
               target_values: Optional[Mapping[str, np.ndarray]] = None,
               embedding_dim: int = 8, hidden: Sequence[int] = (32,),
               activation: str = "relu", init: str = "hyperfan_in", num_conditions: int = 0, condition_dim: int = 0,
               seed: int = 0, dtype=None, name: str = "hypernetwork"):
    super().__init__(target_spec, num_conditions=num_conditions, condition_dim=condition_dim,
                     seed=seed, dtype=dtype, name=name)
    if embedding_dim < 0 or any(int(h) <= 0 for h in hidden):
      raise ValueError(f"embedding_dim ({embedding_dim}) must be >= 0 and hidden "
                       f"{tuple(hidden)} positive.")
    if embedding_dim == 0 and not self.conditional:
      raise ValueError("An unconditional MLP hypernetwork needs embedding_dim > 0 (its only "
                       "input).")
    stats = base.stats_for(self.target_spec, target_values, init)
    self.init_mode = init
    self.embedding_dim = int(embedding_dim)
    self.embedding = None
    if self.embedding_dim:
      self.embedding = self.add_weight(
          shape=(self.embedding_dim,), name="embedding",
          initializer=keras.initializers.RandomNormal(stddev=1.0, seed=seed))
    width = self.embedding_dim + self.condition_dim
    self.activation = base.check_activation(activation)
    self.trunk = base.mlp(width, hidden, seed=seed + 1, dtype=self.dtype_policy,
                          name=f"{name}_trunk", layer_prefix=f"{name}_hidden",
                          activation=activation)
    width = int(hidden[-1]) if hidden else width
    # E[h^2] of the trunk's initial features over every initial input.
    base_in = (self.embedding.numpy()[None].astype(np.float64) if self.embedding is not None
               else np.zeros((1, 0)))
    x0 = base.condition_grid(base_in, self.init_conditions(seed=seed))
    mean_sq = base.second_moment(base.apply_rowwise(self.trunk,
                                                    tf.constant(x0, self.compute_dtype)))
    self.head = keras.layers.Dense(
        self.num_generated, name=f"{name}_heads", dtype=self.dtype_policy,
        kernel_initializer=keras.initializers.RandomNormal(
            stddev=1.0 / np.sqrt(width * mean_sq), seed=seed + 1000))
    self.head.build((None, width))
    self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
    gain = np.concatenate([np.full(n, stats[p][1]) for p, n in zip(self.paths, self.sizes)])
    mean = np.concatenate([np.full(n, stats[p][0]) for p, n in zip(self.paths, self.sizes)])
    # Fixed by the target's shapes: constants, not parameters.
    self._gain = tf.constant(gain, self.compute_dtype)
    self._mean = tf.constant(mean, self.compute_dtype)
    self.built = True

  def head_columns(self, path: str) -> slice:
    """The columns of the head's kernel ``[d_h, P]`` and bias ``[P]`` that form ``path``'s
    head ``H_t``, ``b_t``."""
    i = self.paths.index(path)
    return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

  def generate(self, condition: Optional[tf.Tensor]) -> Dict[str, tf.Tensor]:
    if self.embedding is not None:
      x = base.with_condition(tf.convert_to_tensor(self.embedding), condition)
    else:
      x = condition
    batched = x.shape.rank == 2
    h = base.apply_rowwise(self.trunk, x if batched else x[None])      # [S or 1, d_h]
    flat = self.head(h) * self._gain + self._mean                      # [S or 1, P]
    return self.split(flat if batched else flat[0])
