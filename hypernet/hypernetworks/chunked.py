"""Chunked hypernetwork (Ha, Dai & Le 2016, Sec. 3; von Oswald et al. 2020, Sec. 3.1
"chunking"): one shared generator maps learned chunk embeddings to the chunks of all
generated weights. Its equations, options (embedding multiplier, K-FAC head, linear
generator) with their measurements, and initialisation: docs/hypernetworks.md.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from hypernet.hypernetworks import base
from hypernet.hypernetworks import init as hinit


@base.KINDS.register("chunked")
class ChunkedHypernetwork(base.Hypernetwork):
  """Generates a target network's weights chunk by chunk from learned chunk embeddings.

  Args:
    target_spec: ``{path: tf.TensorSpec}`` of the weights to generate, from
      :func:`hypernet.core.functional.weight_spec` (shapes come from the target itself).
    target_values: ``{path: array}`` initial values of those weights (used for the
      initial mean/std of non-kernel tensors, see :mod:`hypernet.hypernetworks.init`).
      ``None``: kernels get the mode's variance, biases their kernel's standard
      deviation, every other tensor mean 0 and std 0.05.
    chunk_size: scalars generated per chunk (the output width of the generator).
    chunk_emb_dim: dimension ``d_e`` of each chunk embedding.
    hidden: widths of the generator MLP's hidden layers; the last is ``d_h``.
      ``()``: a linear generator, ``chunk_c = W_out e_c + b_out`` (``d_h = d_e``;
      docs/hypernetworks.md, "Linear generator"); unconditional only.
    activation: the hidden units' nonlinearity, one of
      :data:`hypernet.hypernetworks.base.ACTIVATIONS` (``"relu"``; von Oswald et al. 2020
      use ``"elu"``, which has no dead units in a narrow generator).
    init: ``"hyperfan_in"``, ``"hyperfan_out"`` or ``"glorot"``; or ``"pytorch"``, the
      init of von Oswald et al. 2020's code (chrhenning/hypercl): every generator layer,
      the output head included, PyTorch's default ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``
      for kernel and bias, the raw chunks the weights themselves (no per-tensor gain or
      mean, no centring; ``center`` is ignored); docs/hypernetworks.md, "PyTorch's init".
    center: centre the generator's features at init (``b_out = -W_out . mean(h)``, see
      below); ``False``: ``b_out = 0`` and ``W_out`` scaled by ``E[h^2]`` instead.
    emb_multiplier: ``m > 0``; the chunk embeddings are stored divided by ``m`` and used
      multiplied by it, so Adam steps them ``m`` times faster (docs/hypernetworks.md). ``1``: plain.
    head_multiplier: ``m > 0``; the output head's kernel and bias are stored divided by
      ``m`` and the raw chunks multiplied by it: the same initial weights, and Adam moves
      every generated weight through the head ``m`` times faster (docs/hypernetworks.md,
      "Head multiplier"). ``1``: plain.
    head_precondition: ``lam >= 0``; ``> 0`` preconditions the output head's gradient by
      the damped inverse of its input second moment (docs/hypernetworks.md), ``lam`` being the
      damping relative to the mean eigenvalue. ``0``: the plain gradient.
    num_conditions: the number of learned condition embeddings (see
      :class:`hypernet.hypernetworks.base.Hypernetwork`).
    condition_dim: their size; the generator's input for chunk ``c`` is then
      ``[e_c ; condition]`` (von Oswald et al. 2020, Sec. 3.1).
    output_major: ``True``: every kernel (rank >= 2) is generated with its output axis
      first and transposed to Keras' layout (a Dense kernel ``[in, out]`` generated as
      ``[out, in]``: a chunk holds whole units' incoming weights, as in von Oswald et
      al. 2020's and PyTorch's layout, instead of whole inputs' outgoing weights).
      What it changes on permuted MNIST: docs/hypernetworks.md ("Output-major chunks").
      ``False``: Keras' row-major layout.
    condition_per_chunk: ``True``: every chunk gets a condition of its own, so a task
      shifts each chunk's generator input separately instead of all by one vector (as
      hypnettorch's ``cond_chunk_embs``, conditional chunk embeddings): the condition
      vector (a table row, or a given vector) is ``[C * condition_dim]``, cut into ``C``
      rows ``[C, condition_dim]``, and chunk ``c`` sees ``[e_c ; row_c]``. The attribute
      ``condition_dim`` is then ``C * condition_dim``.
    seed: seed of every initialiser (int).
    dtype: Keras dtype policy of the hypernetwork's own parameters (``None``: the global
      policy, float32 by default; ``"float64"`` for finite-difference checks). Generated
      tensors are cast to the dtypes of ``target_spec``.
    name: Keras model name.

  Calling the model (``hnet()`` or ``hnet(None)``; ``hnet(ids)`` / ``hnet(vectors)`` when
  conditional) returns ``{path: tensor}`` with each tensor of exactly the spec's shape
  and dtype (with a leading ``S`` axis for a batch of ``S`` conditions).

  Raises:
    ValueError: empty ``target_spec``, non-positive sizes, ``emb_multiplier`` or
      ``head_multiplier``, negative ``head_precondition``, an unknown ``init`` or
      ``activation``,
      ``hidden=()`` with conditions, or ``condition_per_chunk`` without a condition.
  """

  def __init__(self, target_spec: Mapping[str, tf.TensorSpec], *,
               target_values: Optional[Mapping[str, np.ndarray]] = None,
               chunk_size: int = 1024, chunk_emb_dim: int = 32,
               hidden: Sequence[int] = (64,), activation: str = "relu",
               init: str = "hyperfan_in", center: bool = True, emb_multiplier: float = 1.0,
               head_multiplier: float = 1.0, head_precondition: float = 0.0, num_conditions: int = 0,
               condition_dim: int = 0, condition_per_chunk: bool = False,
               output_major: bool = False, seed: int = 0,
               dtype=None, name: str = "hypernetwork"):
    self.condition_per_chunk = bool(condition_per_chunk)
    self.output_major = bool(output_major)
    self.chunk_condition_dim = int(condition_dim)
    if self.condition_per_chunk:
      if condition_dim <= 0:
        raise ValueError("condition_per_chunk=True needs a condition: set condition_dim > 0 "
                         "(the size per chunk).")
      generated = sum(int(np.prod(s.shape)) for s in target_spec.values())
      condition_dim = -(-generated // int(chunk_size)) * int(condition_dim)
    super().__init__(target_spec, num_conditions=num_conditions, condition_dim=condition_dim,
                     seed=seed, dtype=dtype, name=name)
    if chunk_size <= 0 or chunk_emb_dim <= 0 or any(int(h) <= 0 for h in hidden):
      raise ValueError(f"chunk_size ({chunk_size}), chunk_emb_dim ({chunk_emb_dim}) and "
                       f"hidden {tuple(hidden)} must be positive.")
    if not tuple(hidden) and self.condition_dim:
      raise ValueError(
          "A chunked hypernetwork without hidden layers (hidden=()) is linear in its input "
          "[e_c ; condition], so a condition would only add one and the same vector to "
          "every chunk. Give a conditional chunked hypernetwork a hidden layer "
          "(hidden=(64,), for instance).")
    if not emb_multiplier > 0:
      raise ValueError(f"emb_multiplier ({emb_multiplier}) must be positive "
                       "(1 is the plain embedding).")
    if not head_multiplier > 0:
      raise ValueError(f"head_multiplier ({head_multiplier}) must be positive "
                       "(1 is the plain output head).")
    if not head_precondition >= 0:
      raise ValueError(f"head_precondition ({head_precondition}) must be >= 0 "
                       "(0 is the plain gradient).")
    self.chunk_size = int(chunk_size)
    self.emb_multiplier = float(emb_multiplier)
    self.head_multiplier = float(head_multiplier)
    self.head_precondition = float(head_precondition)
    self.num_chunks = -(-self.num_generated // self.chunk_size)
    self.init_mode = init
    base.check_mode(init, extra=(hinit.PYTORCH,))
    pytorch_init = init == hinit.PYTORCH

    if pytorch_init:   # The raw chunks are the weights.
      gain, mean = np.ones(self.num_generated), np.zeros(self.num_generated)
    else:
      stats = base.stats_for(self.target_spec, target_values, init)
      gain = np.concatenate([np.full(n, stats[p][1]) for p, n in zip(self.paths, self.sizes)])
      mean = np.concatenate([np.full(n, stats[p][0]) for p, n in zip(self.paths, self.sizes)])
    # Fixed by the target's shapes, so constants rather than checkpointed state.
    self._gain = tf.constant(gain, self.compute_dtype)
    self._mean = tf.constant(mean, self.compute_dtype)
    # The same, zero-padded to the C * chunk_size generated scalars (:meth:`generate`).
    pad = self.num_chunks * self.chunk_size - self.num_generated
    self._pad = pad
    self._gain_padded = tf.constant(np.pad(gain, (0, pad)), self.compute_dtype)
    self._mean_padded = tf.constant(np.pad(mean, (0, pad)), self.compute_dtype)

    self.chunk_embeddings = self.add_weight(
        shape=(self.num_chunks, int(chunk_emb_dim)), name="chunk_embeddings",
        initializer=keras.initializers.RandomNormal(stddev=1.0 / self.emb_multiplier,
                                                    seed=seed))
    # A Sequential attribute (not a Python list) so tf.train.Checkpoint tracks it.
    in_width = int(chunk_emb_dim) + (self.chunk_condition_dim if self.condition_per_chunk
                                     else self.condition_dim)
    self.activation = base.check_activation(activation)
    self.generator = base.mlp(in_width, hidden, seed=seed + 1, dtype=self.dtype_policy,
                              name=f"{name}_generator", layer_prefix=f"{name}_hidden",
                              activation=activation, pytorch_init=pytorch_init)
    width = int(hidden[-1]) if hidden else in_width
    if pytorch_init:   # Stored divided by the head multiplier, as below; no centring.
      kernel_init = base.pytorch_uniform(width, seed + 101, 1 / self.head_multiplier)
      bias_init, center = base.pytorch_uniform(width, seed + 102, 1 / self.head_multiplier), None
    else:
      embeddings = self.embeddings.numpy().astype(np.float64)
      conditions = self.init_conditions(seed=seed)
      if self.condition_per_chunk:   # Each condition: its C rows beside the C embeddings.
        rows = conditions.reshape(len(conditions), self.num_chunks, self.chunk_condition_dim)
        inputs = np.concatenate(
            [np.broadcast_to(embeddings, rows.shape[:2] + embeddings.shape[1:]), rows],
            -1).reshape(-1, embeddings.shape[1] + rows.shape[-1])
      else:
        inputs = base.condition_grid(embeddings, conditions)
      # The features h_c (ReLU, ELU, ...) have a non-zero mean mu over the chunks, and
      # W_out . mu would be the same pattern in every chunk: weights chunk_size apart would
      # be correlated and a unit summing them would grow with its fan-in (initial digits
      # loss ~45 nats with chunk_size 128). So the output sees centred features:
      # b_out = -W_out . mu at init, and W_out is scaled by their variance.
      features = self._features(tf.constant(inputs, self.compute_dtype)).numpy()
      center = features.astype(np.float64).mean(axis=0) if center else np.zeros(width)
      out_std = 1.0 / np.sqrt(width * base.second_moment(features - center))
      out_std /= self.head_multiplier   # Stored divided by m (b_out below follows W_out).
      kernel_init = keras.initializers.RandomNormal(stddev=out_std, seed=seed + 101)
      bias_init = "zeros"
    self.output_head = keras.layers.Dense(
        self.chunk_size, name=f"{name}_output", dtype=self.dtype_policy,
        kernel_initializer=kernel_init, bias_initializer=bias_init)
    self.output_head.build((None, width))
    if center is not None:
      kernel = self.output_head.kernel.numpy().astype(np.float64)
      self.output_head.bias.assign((-center @ kernel).astype(self.output_head.bias.dtype))
    self.built = True

  @property
  def embeddings(self) -> tf.Tensor:
    """The chunk embeddings the generator sees, ``[C, d_e]``: the stored variable times
    ``emb_multiplier``."""
    if self.emb_multiplier == 1.0:
      return tf.convert_to_tensor(self.chunk_embeddings)
    return self.chunk_embeddings * tf.constant(self.emb_multiplier, self.chunk_embeddings.dtype)

  def _features(self, embeddings=None) -> tf.Tensor:
    return base.apply_rowwise(self.generator,
                              self.embeddings if embeddings is None else embeddings)

  def flat_weights(self, embeddings=None, condition=None) -> tf.Tensor:
    """All generated scalars as one vector ``[P]`` (``[S, P]`` for ``S`` conditions), in
    the order they are generated (each tensor output-major when ``output_major``).

    Args:
      embeddings: chunk embeddings ``[C, d_e]`` to use instead of the learned ones (as the
        generator sees them, i.e. already multiplied by ``emb_multiplier``).
      condition: ``None``, ``[condition_dim]`` or ``[S, condition_dim]`` vectors.
    """
    return self._flat(self._chunks(embeddings, condition))[..., : self.num_generated] * (
        self._gain) + self._mean

  @staticmethod
  def _flat(chunks: tf.Tensor) -> tf.Tensor:
    """``[(S,) C, k]`` -> ``[(S,) C * k]``."""
    return tf.reshape(chunks, tf.concat([tf.shape(chunks)[:-2], [-1]], 0))

  def _chunks(self, embeddings=None, condition=None) -> tf.Tensor:
    """The raw chunks ``[(S,) C, chunk_size]`` (head multiplier applied, no gain)."""
    e = self.embeddings if embeddings is None else tf.convert_to_tensor(embeddings)
    if self.condition_per_chunk and condition is not None:
      condition = tf.convert_to_tensor(condition)
      rows = tf.reshape(tf.cast(condition, e.dtype), tf.concat(
          [tf.shape(condition)[:-1], [self.num_chunks, self.chunk_condition_dim]], 0))
      lead = tf.shape(rows)[:-2]
      inputs = tf.concat([tf.broadcast_to(e, tf.concat([lead, tf.shape(e)], 0)), rows], -1)
    else:
      inputs = base.with_condition(e, condition)
    features = self._features(inputs)  # [(S,) C, d_h]
    if self.head_precondition > 0:
      chunks = self._preconditioned_head(features)
    else:
      chunks = base.apply_rowwise(self.output_head, features)  # [(S,) C, k]
    if self.head_multiplier != 1.0:
      chunks = chunks * tf.constant(self.head_multiplier, chunks.dtype)
    return chunks

  def _preconditioned_head(self, features: tf.Tensor) -> tf.Tensor:
    """``output_head(features)`` whose kernel / bias gradient is preconditioned (module
    doc); every row of ``features`` (all conditions' chunks) is one sample of the head's
    input. Solved in float32 at least (float64 when the hypernetwork is)."""
    lam = self.head_precondition
    width = int(features.shape[-1])

    @tf.custom_gradient
    def head(h, kernel, bias):
      def grad(g):
        dh = tf.matmul(g, kernel, transpose_b=True)
        solve_dtype = tf.float64 if h.dtype == tf.float64 else tf.float32
        rows = tf.reshape(tf.cast(h, solve_dtype), [-1, width])
        rows = tf.concat([rows, tf.ones_like(rows[:, :1])], 1)           # [R, d_h + 1]
        second = tf.matmul(rows, rows, transpose_a=True)                  # [d_h + 1]^2
        damping = lam * tf.linalg.trace(second) / (width + 1)
        second += damping * tf.eye(width + 1, dtype=solve_dtype)
        rhs = tf.matmul(rows, tf.reshape(tf.cast(g, solve_dtype), [-1, self.chunk_size]),
                        transpose_a=True)                                 # [d_h + 1, k]
        step = tf.linalg.solve(second, rhs)
        return (dh, tf.cast(step[:-1], kernel.dtype), tf.cast(step[-1], bias.dtype))
      return tf.matmul(h, kernel) + bias, grad

    return head(features, tf.convert_to_tensor(self.output_head.kernel),
                tf.convert_to_tensor(self.output_head.bias))

  def generate(self, condition=None):
    """``{path: tensor}`` for condition vectors ``None``, ``[d]`` or ``[S, d]``: the
    values of :meth:`flat_weights`, cut from all ``C * chunk_size`` scalars with the
    unused tail as one more part of the split, not sliced off first (the slice's
    gradient scatters into a zero vector of the full size: 0.3 ms of a 20 ms step of
    ``benchmarks/step_ratio.py``)."""
    flat = self._flat(self._chunks(condition=condition)) * self._gain_padded + self._mean_padded
    return self.split(flat, unused_tail=self._pad, output_major=self.output_major)
