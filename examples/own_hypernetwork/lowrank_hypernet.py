"""A hypernetwork kind of the user's own, outside the package: low-rank generated weights.

Every generated tensor ``t``, viewed as a matrix ``[rows, cols]`` (a kernel
``[..., in, out]`` as ``[prod(...) in, out]``, a bias ``[out]`` as ``[1, out]``), is

    W_t = sigma_t * U_t diag(1 + M_t c) V_t^T / sqrt(rank) + mu_t

with learned factors ``U_t [rows, rank]``, ``V_t [cols, rank]`` (both ``N(0, 1)`` at
init, so the raw product has unit variance), an optional condition ``c`` that scales
the rank components (``M_t [condition_dim, rank]``, zero at init), and the fixed target
statistics ``(mu_t, sigma_t)`` of the hyperfan initialisation. It plugs into everything
by name, ``config.hypernet.kind = "lowrank_hypernet:LowRankHypernetwork"``, or as the
class, ``hn.keras.HyperModel(target, LowRankHypernetwork)``: its constructor's keyword
arguments are the fields of ``config.hypernet`` (``rank`` is its own; ``num_conditions``,
``condition_dim`` reach :class:`hypernet.hypernetworks.Hypernetwork` through ``**kwargs``).
"""
import numpy as np
import keras
import tensorflow as tf

import hypernet as hn
from hypernet.hypernetworks import base


class LowRankHypernetwork(hn.hypernetworks.Hypernetwork):
  """Generates each target tensor as a rank-``rank`` product of learned factors.

  Args:
    target_spec: ``{path: tf.TensorSpec}`` of the weights to generate.
    rank: the rank of every generated matrix (int > 0).
    target_values: ``{path: array}`` initial target values (init statistics), or None.
    init: ``"hyperfan_in"``, ``"hyperfan_out"`` or ``"glorot"``.
    seed: seed of the factors' initialisers.
    **kwargs: :class:`hypernet.hypernetworks.Hypernetwork` arguments (``num_conditions``,
      ``condition_dim``, ``dtype``, ``name``).

  Raises:
    ValueError: ``rank < 1`` (and the base class's errors).
  """

  def __init__(self, target_spec, *, rank: int = 4, target_values=None,
               init: str = "hyperfan_in", seed: int = 0, **kwargs):
    super().__init__(target_spec, seed=seed, **kwargs)
    if rank < 1:
      raise ValueError(f"rank ({rank}) must be a positive integer.")
    self.rank = int(rank)
    stats = base.stats_for(self.target_spec, target_values, init)
    normal = lambda s: keras.initializers.RandomNormal(stddev=1.0, seed=seed + s)
    self.u, self.v, self.m, self._stats = [], [], [], []
    for i, (path, shape) in enumerate(zip(self.paths, self.shapes)):
      rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
      cols = int(shape[-1]) if shape else 1
      name = path.replace("/", "_")
      self.u.append(self.add_weight(shape=(rows, self.rank), name=f"{name}_u",
                                    initializer=normal(2 * i)))
      self.v.append(self.add_weight(shape=(cols, self.rank), name=f"{name}_v",
                                    initializer=normal(2 * i + 1)))
      if self.conditional:
        self.m.append(self.add_weight(shape=(self.condition_dim, self.rank),
                                      name=f"{name}_m", initializer="zeros"))
      self._stats.append(stats[path])
    self.built = True

  def generate(self, condition):
    """``{path: tensor}`` for condition vectors ``None``, ``[d]`` or ``[S, d]``."""
    out = {}
    scale = 1.0 / np.sqrt(self.rank)
    for i, (path, shape, dtype) in enumerate(zip(self.paths, self.shapes, self.dtypes)):
      u, v = tf.convert_to_tensor(self.u[i]), tf.convert_to_tensor(self.v[i])
      mean, std = self._stats[i]
      if condition is None:
        w = tf.matmul(u, v, transpose_b=True)                         # [rows, cols]
        w = tf.reshape(w, shape)
      else:
        gates = 1.0 + tf.matmul(tf.reshape(condition, [-1, self.condition_dim]),
                                self.m[i])                             # [S, rank]
        w = tf.einsum("rk,sk,ck->src", u, gates, v)                   # [S, rows, cols]
        lead = [-1] if condition.shape.rank == 2 else []
        w = tf.reshape(w, lead + list(shape))
      w = w * tf.cast(std * scale, w.dtype) + tf.cast(mean, w.dtype)
      out[path] = tf.cast(w, dtype) if w.dtype != dtype else w
    return out
