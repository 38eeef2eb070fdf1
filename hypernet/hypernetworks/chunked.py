"""Chunked hypernetwork (Ha, Dai & Le 2016, Sec. 3; von Oswald et al. 2020, "Continual
learning with hypernetworks", Sec. 3.1 "chunking").

All generated target weights are flattened into one vector and cut into ``C`` chunks of
``chunk_size`` scalars. Each chunk ``c`` has a learned *chunk embedding* ``e_c``; one
shared MLP generator maps every embedding to its chunk:

    chunk_c = W_out . MLP(e_c) + b_out            (C chunks generated in one batched matmul)
    theta   = concat(chunk_1..chunk_C)[:P] * gain + mean   (P = total generated scalars)
    weights = split theta by tensor and reshape to the target's shapes

so the trainable parameter count is ``C * d_e + |MLP| + d_h * chunk_size + chunk_size``,
independent of how the ``P`` generated scalars are laid out; with ``chunk_size`` well
below ``P`` it is smaller than ``P``.

Initialisation (hyperfan-style, Chang et al. 2020): ``W_out`` is drawn with variance
``1 / (d_h * E[h^2])`` where ``E[h^2]`` is measured on the initial hidden activations of
all chunk embeddings, so each raw chunk element has unit variance at init; the fixed
(non-trainable) per-element ``gain`` and ``mean`` then give every generated tensor the
mean and standard deviation of :func:`hypernet.hypernetworks.init.target_statistics`
(He or Glorot variance for kernels).
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from hypernet.hypernetworks import init as hinit


class ChunkedHypernetwork(keras.Model):
  """Generates a target network's weights chunk by chunk from learned chunk embeddings.

  Args:
    target_spec: ``{path: tf.TensorSpec}`` of the weights to generate, from
      :func:`hypernet.functional.weight_spec` (shapes come from the target itself).
    target_values: ``{path: array}`` initial values of those weights (used for the
      initial mean/std of non-kernel tensors, see :mod:`hypernet.hypernetworks.init`).
      ``None``: kernels get the mode's variance, everything else mean 0 and std 0.05.
    chunk_size: scalars generated per chunk (the output width of the generator).
    chunk_emb_dim: dimension ``d_e`` of each chunk embedding.
    hidden: widths of the generator MLP's hidden layers (ReLU); the last is ``d_h``.
    init: ``"hyperfan_in"``, ``"hyperfan_out"`` or ``"glorot"``.
    seed: seed of every initialiser (int).
    dtype: Keras dtype policy of the hypernetwork's own parameters (``None``: the global
      policy, float32 by default; ``"float64"`` for finite-difference checks). Generated
      tensors are cast to the dtypes of ``target_spec``.
    name: Keras model name.

  Calling the model (``hnet()`` or ``hnet(None)``) returns ``{path: tensor}`` with
  each tensor of exactly the spec's shape and dtype.

  Raises:
    ValueError: empty ``target_spec``, non-positive sizes, or an unknown ``init``.
  """

  def __init__(self, target_spec: Mapping[str, tf.TensorSpec], *,
               target_values: Optional[Mapping[str, np.ndarray]] = None,
               chunk_size: int = 1024, chunk_emb_dim: int = 32,
               hidden: Sequence[int] = (64,), init: str = "hyperfan_in", seed: int = 0,
               dtype=None, name: str = "hypernetwork"):
    super().__init__(name=name, dtype=dtype)
    if not target_spec:
      raise ValueError("target_spec is empty: the hypernetwork has no weights to generate "
                       "(check config.hypernet.targets).")
    if chunk_size <= 0 or chunk_emb_dim <= 0 or any(int(h) <= 0 for h in hidden):
      raise ValueError(f"chunk_size ({chunk_size}), chunk_emb_dim ({chunk_emb_dim}) and "
                       f"hidden {tuple(hidden)} must be positive.")
    self.target_spec = dict(target_spec)
    self.paths = list(self.target_spec)
    self.shapes = [tuple(int(d) for d in s.shape) for s in self.target_spec.values()]
    self.dtypes = [s.dtype for s in self.target_spec.values()]
    self.sizes = [int(np.prod(s)) for s in self.shapes]
    self.num_generated = int(sum(self.sizes))
    self.chunk_size = int(chunk_size)
    self.num_chunks = -(-self.num_generated // self.chunk_size)
    self.init_mode = init

    if target_values is None:
      target_values = {p: np.zeros(s) for p, s in zip(self.paths, self.shapes)}
    stats = hinit.target_statistics({p: target_values[p] for p in self.paths}, init)
    gain = np.concatenate([np.full(n, stats[p][1]) for p, n in zip(self.paths, self.sizes)])
    mean = np.concatenate([np.full(n, stats[p][0]) for p, n in zip(self.paths, self.sizes)])
    # Fixed by the target's shapes, so constants rather than checkpointed state.
    compute_dtype = self.dtype_policy.compute_dtype
    self._gain = tf.constant(gain, compute_dtype)
    self._mean = tf.constant(mean, compute_dtype)

    self.chunk_embeddings = self.add_weight(
        shape=(self.num_chunks, int(chunk_emb_dim)), name="chunk_embeddings",
        initializer=keras.initializers.RandomNormal(stddev=1.0, seed=seed))
    layer_kwargs = {"dtype": self.dtype_policy}
    # A Sequential attribute (not a Python list) so tf.train.Checkpoint tracks it.
    self.generator = keras.Sequential(
        [keras.Input((int(chunk_emb_dim),), dtype=self.dtype_policy.variable_dtype)] +
        [keras.layers.Dense(int(h), activation="relu", name=f"{name}_hidden{i + 1}",
                            kernel_initializer=keras.initializers.HeNormal(seed=seed + 1 + i),
                            **layer_kwargs) for i, h in enumerate(hidden)],
        name=f"{name}_generator")
    width = int(hidden[-1]) if hidden else int(chunk_emb_dim)
    features = self._features()
    mean_sq = float(tf.reduce_mean(tf.square(features)))
    out_std = 1.0 / np.sqrt(width * max(mean_sq, 1e-12))
    self.output_head = keras.layers.Dense(
        self.chunk_size, name=f"{name}_output",
        kernel_initializer=keras.initializers.RandomNormal(stddev=out_std, seed=seed + 101),
        **layer_kwargs)
    self.output_head.build((None, width))
    self.built = True

  def _features(self, embeddings=None) -> tf.Tensor:
    return self.generator(self.chunk_embeddings if embeddings is None else embeddings)

  def flat_weights(self, embeddings=None) -> tf.Tensor:
    """All generated scalars as one vector ``[P]`` (compute dtype, before splitting)."""
    chunks = self.output_head(self._features(embeddings))    # [C, chunk_size]
    flat = tf.reshape(chunks, [-1])[: self.num_generated]
    return flat * self._gain + self._mean

  def split(self, flat: tf.Tensor) -> Dict[str, tf.Tensor]:
    """Cuts a ``[P]`` vector into ``{path: tensor}`` of the target's shapes and dtypes."""
    parts = tf.split(flat, self.sizes)
    return {p: tf.cast(tf.reshape(t, s), d) if d != t.dtype else tf.reshape(t, s)
            for p, t, s, d in zip(self.paths, parts, self.shapes, self.dtypes)}

  def call(self, condition=None):
    """Returns ``{path: tensor}``, the generated target weights (``condition`` unused)."""
    del condition
    return self.split(self.flat_weights())

  def compression_ratio(self) -> float:
    """Generated scalars per trainable hypernetwork parameter (> 1: compresses)."""
    return self.num_generated / max(self.count_params(), 1)
