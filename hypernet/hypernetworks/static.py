"""The static hypernetwork of Ha, Dai & Le 2016 ("HyperNetworks", ICLR 2017, Sec. 3.1):
tiled conv kernels from learned layer embeddings through a shared two-layer linear
generator. Its equations, tiling, parameter count and initialisation:
docs/hypernetworks.md.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from hypernet.core import ops
from hypernet.hypernetworks import base


@base.KINDS.register("static")
class StaticHypernetwork(base.Hypernetwork):
  """Ha et al.'s static hypernetwork for conv kernels ``[f, f, in, out]``.

  Args:
    target_spec: ``{path: tf.TensorSpec}``; every entry a conv kernel of shape
      ``[f, f, in, out]`` with the same ``f``.
    target_values: unused by kernels (their target variance comes from the shape);
      accepted for a uniform constructor.
    z_dim: ``N_z``, size of each layer (tile) embedding.
    hidden_dim: ``d``, size of ``a_i``; 0 means ``d = N_z`` (as in Ha et al.).
    slice_in: ``N_in``, input channels of one basic tile.
    slice_out: ``N_out``, output channels of one basic tile.
    init: ``"hyperfan_in"``, ``"hyperfan_out"`` or ``"glorot"``.
    num_conditions: see :class:`hypernet.hypernetworks.base.Hypernetwork`.
    condition_dim: see :class:`hypernet.hypernetworks.base.Hypernetwork`.
    seed: seed of every initialiser.
    dtype: Keras dtype policy (``None``: the global one).
    name: Keras model name.

  Raises:
    ValueError: a spec entry that is not a square conv kernel ``[f, f, in, out]``, kernels
      of different ``f`` (the message names the path and the fix), non-positive sizes.
  """

  def __init__(self, target_spec: Mapping[str, tf.TensorSpec], *,
               target_values: Optional[Mapping[str, np.ndarray]] = None,
               z_dim: int = 4, hidden_dim: int = 0, slice_in: int = 16, slice_out: int = 16,
               init: str = "hyperfan_in", num_conditions: int = 0, condition_dim: int = 0,
               seed: int = 0, dtype=None, name: str = "hypernetwork"):
    super().__init__(target_spec, num_conditions=num_conditions, condition_dim=condition_dim,
                     seed=seed, dtype=dtype, name=name)
    hidden_dim = hidden_dim or z_dim
    if min(z_dim, hidden_dim, slice_in, slice_out) <= 0:
      raise ValueError(f"z_dim ({z_dim}), hidden_dim ({hidden_dim}), slice_in ({slice_in}) "
                       f"and slice_out ({slice_out}) must be positive.")
    self.check_target_spec(self.target_spec)
    self.kernel_size = self.shapes[0][0]
    self.z_dim, self.hidden_dim = int(z_dim), int(hidden_dim)
    self.slice_in, self.slice_out = int(slice_in), int(slice_out)
    self.init_mode = init
    # Tiles: kernel t has an m_t x n_t grid of embeddings, rows of ``z`` in order.
    self.grids: list[Tuple[int, int]] = [(-(-s[2] // slice_in), -(-s[3] // slice_out))
                                         for s in self.shapes]
    self.num_tiles = int(sum(m * n for m, n in self.grids))
    d_in = self.z_dim + self.condition_dim
    out = self.kernel_size ** 2 * self.slice_out
    normal = lambda std, s: keras.initializers.RandomNormal(stddev=std, seed=seed + s)
    self.z = self.add_weight(shape=(self.num_tiles, self.z_dim), name="z",
                             initializer=normal(1.0, 0))
    self.w_in = self.add_weight(shape=(self.slice_in, d_in, self.hidden_dim), name="w_in",
                                initializer=normal(1.0 / np.sqrt(d_in), 1))
    self.b_in = self.add_weight(shape=(self.slice_in, self.hidden_dim), name="b_in",
                                initializer="zeros")
    # Measure E[a^2] per kernel at init to set the output layer's scale and the gains.
    conds = self.init_conditions(seed=seed)
    z0 = self.z.numpy().astype(np.float64)
    w_in0 = self.w_in.numpy().astype(np.float64)
    a_sq = []  # per kernel
    start = 0
    for m, n in self.grids:
      zt = base.condition_grid(z0[start: start + m * n], conds)
      a_sq.append(base.second_moment(np.einsum("tz,izd->tid", zt, w_in0)))
      start += m * n
    sizes = np.array([m * n for m, n in self.grids], np.float64)
    a_sq_all = float(np.sum(sizes * np.array(a_sq)) / np.sum(sizes))
    self.w_out = self.add_weight(shape=(self.hidden_dim, out), name="w_out",
                                 initializer=normal(1.0 / np.sqrt(self.hidden_dim * a_sq_all), 2))
    self.b_out = self.add_weight(shape=(out,), name="b_out", initializer="zeros")
    stats = base.stats_for(self.target_spec, target_values, init)
    self._gains = [float(stats[p][1] * np.sqrt(a_sq_all / a)) for p, a in zip(self.paths, a_sq)]
    self.built = True

  @classmethod
  def check_target_spec(cls, target_spec: Mapping[str, Any]) -> None:
    """Every entry a square conv kernel ``[f, f, in, out]``, all of one ``f``.

    Raises:
      ValueError: naming the first entry that is not, and the fix.
    """
    first = None
    for path, spec in target_spec.items():
      shape = tuple(int(d) for d in getattr(spec, "shape", spec))
      if len(shape) != 4 or shape[0] != shape[1]:
        raise ValueError(
            f"The static hypernetwork (Ha et al. 2016) generates square conv kernels "
            f"[f, f, in, out]; {path!r} has shape {shape}. Select conv kernels only, e.g. "
            "'conv*/kernel'.")
      if first is None:
        first = (path, shape[0])
      elif shape[0] != first[1]:
        raise ValueError(f"All kernels generated by one static hypernetwork need the same "
                         f"spatial size; {path!r} is {shape[0]}x{shape[0]}, the first one "
                         f"{first[0]!r} is {first[1]}x{first[1]}. Generate them with "
                         "separate hypernetworks or select one size.")

  def tiles(self, condition: Optional[tf.Tensor] = None) -> tf.Tensor:
    """All raw tiles ``[(S,) T, f, f, N_in, N_out]`` (before cropping and gains)."""
    zc = base.with_condition(tf.convert_to_tensor(self.z), condition)       # [(S,) T, d_in]
    a = tf.einsum("...tz,izd->...tid", zc, self.w_in) + self.b_in           # [(S,) T, N_in, d]
    k = tf.einsum("...tid,do->...tio", a, self.w_out) + self.b_out          # [(S,) T, N_in, ffN_out]
    f = self.kernel_size
    lead = tf.shape(k)[:-3]
    k = tf.reshape(k, tf.concat([lead, [self.num_tiles, self.slice_in, f, f, self.slice_out]], 0))
    rank = k.shape.rank
    perm = list(range(rank - 5)) + [rank - 5, rank - 3, rank - 2, rank - 4, rank - 1]
    return tf.transpose(k, perm)                                            # [(S,) T, f, f, N_in, N_out]

  def generate(self, condition: Optional[tf.Tensor]) -> Dict[str, tf.Tensor]:
    tiles = self.tiles(condition)
    lead = tf.shape(tiles)[:-5]
    nl = tiles.shape.rank - 5
    f, si, so = self.kernel_size, self.slice_in, self.slice_out
    out, start = {}, 0
    for path, shape, dtype, (m, n), gain in zip(self.paths, self.shapes, self.dtypes,
                                                self.grids, self._gains):
      t = tiles[..., start: start + m * n, :, :, :, :]
      start += m * n
      t = tf.reshape(t, tf.concat([lead, [m, n, f, f, si, so]], 0))
      # [.., m, n, f, f, si, so] -> [.., f, f, m, si, n, so] -> [.., f, f, m si, n so]
      perm = list(range(nl)) + [nl + i for i in (2, 3, 0, 4, 1, 5)]
      t = tf.reshape(tf.transpose(t, perm), tf.concat([lead, [f, f, m * si, n * so]], 0))
      t = t[..., : shape[2], : shape[3]] * ops.to_dtype(gain, t.dtype)
      out[path] = tf.cast(t, dtype) if t.dtype != dtype else t
    return out
