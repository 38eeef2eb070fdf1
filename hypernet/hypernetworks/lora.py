"""Generated low-rank adapters: a hypernetwork that keeps a base model's weights and
produces ``W + scale * A @ B`` for the weights a user selects (LoRA, Hu et al. 2022,
"LoRA: Low-Rank Adaptation of Large Language Models", Eq. 3), with the factors ``A``,
``B`` generated per task (from a task id, a task embedding or any condition vector:
HyperTuning, Phang et al. 2023; HyperLoRA / Text-to-LoRA, Charakorn et al. 2025) or held
as plain per-task factors.

A kernel ``W`` of shape ``[d_1, ..., d_k]`` is read as a matrix ``[m, n]``: ``m`` the
product of its leading axes contracted with the layer's input, ``n`` the product of the
rest (Dense ``[in, out]``: ``m = in``; a ``ConvND`` kernel ``[*k, in, out]``: ``m =
K * in``, ``n = out``, the factorisation of LoRA for convolutions; an attention
projection ``[d_model, heads, head_dim]``: ``m = d_model``, ``n = heads * head_dim``;
the output projection ``[heads, head_dim, d_model]``: ``m = heads * head_dim``;
``Embedding`` ``[vocab, d]``: ``m = vocab``). Then

    W'(c) = W_0 + scale * reshape(A(c) @ B(c), W.shape),   A(c): [m, r], B(c): [r, n]

with ``W_0`` the target's weights when the hypernetwork is built (frozen unless
``train_base``) and ``B = 0`` at the start, as LoRA starts (so ``W' = W_0``).
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from hypernet.core import weight_roles
from hypernet.hypernetworks import base
from hypernet.hypernetworks.mlp import MLPHypernetwork

GENERATORS = ("mlp", "table")


def matrix_split(shape: Sequence[int], role: Optional[weight_roles.WeightRole] = None) -> int:
  """The axis ``s`` at which a kernel of ``shape`` is read as the matrix
  ``[prod(shape[:s]), prod(shape[s:])]``: the shortest leading block of axes whose size
  is the kernel's fan-in (the axes its layer contracts with the input), from ``role``;
  an ``Embedding`` table splits after its vocabulary axis; otherwise (no role, or no
  leading block of that size) all axes but the last.

  Raises:
    ValueError: a shape of rank < 2 (not a kernel).
  """
  shape = [int(d) for d in shape]
  if len(shape) < 2:
    raise ValueError(f"A low-rank adapter needs a kernel of rank >= 2, got shape {shape}.")
  if role is not None and role.layer == "Embedding":
    return 1
  if role is not None and role.kind == "kernel" and role.fan_in > 0:
    for s in range(1, len(shape)):
      if int(np.prod(shape[:s])) == role.fan_in:
        return s
  return len(shape) - 1


def _constant(value):
  """A Keras initializer returning ``value`` (an array of the variable's shape)."""
  value = np.asarray(value)
  return lambda shape, dtype=None: tf.cast(tf.reshape(value, shape), dtype or tf.float32)


@base.KINDS.register("lora")
class LoRAHypernetwork(base.Hypernetwork):
  """Low-rank adapters ``W_0 + scale * A @ B`` on the selected target weights (module doc).

  Args:
    target_spec: ``{path: tf.TensorSpec}`` of the adapted weights (kernels, rank >= 2),
      from :func:`hypernet.core.functional.weight_spec` (its layer roles decide how each
      kernel is read as a matrix: :func:`matrix_split`).
    target_values: ``{path: array}``: the base weights ``W_0`` (the target's weights when
      the model is built: a pre-trained model's). Required.
    rank: the adapters' rank ``r`` (int >= 1; above ``min(m, n)`` of a small weight, e.g.
      a classifier head, its update is simply of full rank).
    scale: the factor on ``A @ B`` (LoRA's ``alpha / r``).
    generator: ``"mlp"``: an :class:`~hypernet.hypernetworks.mlp.MLPHypernetwork` maps the
      condition (a learned task embedding, or a given condition vector) to every
      ``A`` and ``B``; ``"table"``: plain factors, one ``A``, ``B`` pair per condition id
      (``num_conditions`` of them, or one without conditions: ordinary LoRA, and
      independent adapters per task).
    hidden: the ``"mlp"`` generator's hidden widths.
    embedding_dim: the ``"mlp"`` generator's own learned input embedding (0: the
      condition alone).
    train_base: train ``W_0`` too (else frozen); :meth:`freeze_base` freezes it later (e.g.
      after a first task, ``config.continual.freeze_base_after``), keeping a copy.
    num_conditions: learned condition (task) embeddings for the ``"mlp"`` generator, or
      factor pairs for ``"table"``; 0: none.
    condition_dim: the size of a condition embedding / given condition vector (``"mlp"``).
    seed: seed of every initialiser.
    dtype: Keras dtype policy (``None``: the global one).
    name: Keras model name.

  Calling it: as every hypernetwork kind (``hnet()``, ``hnet(task_id)``, ``hnet(ids [S])``,
  ``hnet(vectors [S, d])``): ``{path: W'}`` of the spec's shapes (``[S, *shape]`` for a
  batch of conditions). :meth:`factors` returns ``A``, ``B`` themselves, :meth:`updates`
  the update ``scale * A @ B`` alone (for a base held elsewhere).

  Raises:
    ValueError: no base values, a weight of rank < 2, ``rank`` < 1, an unknown ``generator``, a ``"table"`` given ``condition_dim`` without
      ``num_conditions`` (it takes ids, not vectors), the generator's own errors.
  """

  def __init__(self, target_spec: Mapping[str, tf.TensorSpec], *,
               target_values: Optional[Mapping[str, np.ndarray]] = None, rank: int = 4,
               scale: float = 1.0, generator: str = "mlp", hidden: Sequence[int] = (32,),
               embedding_dim: int = 8, train_base: bool = False, num_conditions: int = 0,
               condition_dim: int = 0, seed: int = 0, dtype=None, name: str = "hypernetwork"):
    table = generator == "table"
    # W_0 + delta is computed in the variables' dtype (float32 under a mixed policy: a
    # small update added in bfloat16 would round away against W_0), so this layer's own
    # policy is that dtype (Keras would otherwise autocast W_0 inside calls); the MLP
    # generator computes the factors in the given policy.
    policy = (keras.dtype_policies.get(dtype) if dtype is not None
              else keras.config.dtype_policy())
    # The table holds one factor pair per id: no embedding table of the base class.
    super().__init__(target_spec, num_conditions=0 if table else num_conditions,
                     condition_dim=0 if table else condition_dim, seed=seed,
                     dtype=policy.variable_dtype, name=name)
    if generator not in GENERATORS:
      raise ValueError(f"generator={generator!r} is unknown; choose one of {GENERATORS}.")
    self.check_target_spec(self.target_spec)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)):
      raise ValueError(f"scale must be a float (LoRA's alpha / rank), got {scale!r}.")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
      raise ValueError(f"rank must be an int >= 1, got {rank!r}.")
    if table and condition_dim and not num_conditions:
      raise ValueError("generator='table' holds one factor pair per condition id: set "
                       "num_conditions (condition vectors need generator='mlp').")
    missing = [p for p in self.paths if target_values is None or p not in target_values]
    if missing:
      raise ValueError(f"A LoRA hypernetwork needs the base weights W_0 (target_values) "
                       f"of every adapted weight; missing: {missing}.")
    self.rank, self.scale, self.generator_kind = int(rank), float(scale), generator
    self.table_conditions = int(num_conditions) if table else 0
    roles = getattr(self.target_spec, "roles", {}) or {}
    self.matrix_shapes: Dict[str, Tuple[int, int]] = {}
    for path, shape in zip(self.paths, self.shapes):
      s = matrix_split(shape, roles.get(path))
      m, n = int(np.prod(shape[:s])), int(np.prod(shape[s:]))
      self.matrix_shapes[path] = (m, n)
    self.train_base = bool(train_base)
    self.base_weights = {
        p: self.add_weight(shape=s, name="base_" + p.replace("/", "_"),
                           initializer=_constant(target_values[p]),
                           trainable=self.train_base)
        for p, s in zip(self.paths, self.shapes)}
    # 1: W_0 trains (train_base); 0: frozen by freeze_base() (a variable: no retrace).
    self.base_gate = self.add_weight(shape=(), name="base_gate", trainable=False,
                                     initializer=keras.initializers.Constant(
                                         1.0 if self.train_base else 0.0))
    # With train_base: W_0 as freeze_base() found it, what the adapters use from then on
    # (an optimiser's momentum or weight decay keeps moving the trainable copy).
    self.frozen_base = ({p: self.add_weight(shape=s, name="frozen_base_" + p.replace("/", "_"),
                                            initializer=_constant(target_values[p]),
                                            trainable=False)
                         for p, s in zip(self.paths, self.shapes)} if self.train_base else {})
    rng = np.random.default_rng(seed)
    # A as LoRA starts it (Kaiming-scaled, 1/sqrt(m)), B = 0.
    a_init = {p: rng.normal(0.0, 1.0 / np.sqrt(m), (m, self.rank))
              for p, (m, n) in self.matrix_shapes.items()}
    if table:
      count = max(self.table_conditions, 1)
      self.factor_a = {p: self.add_weight(
          shape=(count, m, self.rank), name="lora_a_" + p.replace("/", "_"),
          initializer=_constant(np.stack(
              [a_init[p]] + [rng.normal(0.0, 1.0 / np.sqrt(m), (m, self.rank))
                             for _ in range(count - 1)])))
          for p, (m, n) in self.matrix_shapes.items()}
      self.factor_b = {p: self.add_weight(shape=(count, self.rank, n),
                                          name="lora_b_" + p.replace("/", "_"),
                                          initializer="zeros")
                       for p, (m, n) in self.matrix_shapes.items()}
      self.generator = None
    else:
      spec, values = {}, {}
      for p, (m, n) in self.matrix_shapes.items():
        spec[p + "/lora_a"] = tf.TensorSpec((m, self.rank), self.compute_dtype)
        spec[p + "/lora_b"] = tf.TensorSpec((self.rank, n), self.compute_dtype)
        values[p + "/lora_a"], values[p + "/lora_b"] = a_init[p], np.zeros((self.rank, n))
      spec = weight_roles.WeightSpec(spec, {q: weight_roles.WeightRole("other") for q in spec})
      self.generator = MLPHypernetwork(
          spec, target_values=values, embedding_dim=embedding_dim, hidden=tuple(hidden),
          condition_dim=self.condition_dim, seed=seed + 17, dtype=policy,
          name=f"{name}_factors")
      kernel, bias = self.generator.head.kernel, self.generator.head.bias
      k, b = kernel.numpy(), bias.numpy()
      for p in self.paths:   # B = 0 at the start: its head columns are zero.
        cols = self.generator.head_columns(p + "/lora_b")
        k[:, cols], b[cols] = 0.0, 0.0
      kernel.assign(k)
      bias.assign(b)
    self.built = True

  @classmethod
  def check_target_spec(cls, target_spec) -> None:
    """Every adapted weight must be a kernel (rank >= 2); a bias or a normalisation scale
    is adapted by training it directly (``train_rest``)."""
    low = [p for p, s in target_spec.items()
           if len(getattr(s, "shape", s)) < 2]
    if low:
      raise ValueError(f"low-rank adapters need kernels (rank >= 2); {low} are not: select "
                       "kernels only, e.g. '*kernel' or '*attention*/kernel'.")

  @property
  def conditional(self) -> bool:
    return self.table_conditions > 0 or self.condition_dim > 0

  def init_conditions(self, num_samples: int = 64, seed: int = 0):
    if self.table_conditions:
      return None
    return super().init_conditions(num_samples, seed)

  def condition_vectors(self, condition):
    if not self.table_conditions:
      return super().condition_vectors(condition)
    if condition is None:
      raise ValueError(f"Hypernetwork {self.name!r} holds {self.table_conditions} factor "
                       f"pairs: call it with an id in [0, {self.table_conditions}).")
    condition = tf.convert_to_tensor(condition)
    if not condition.dtype.is_integer:
      raise ValueError("generator='table' takes integer condition ids, not vectors.")
    n, static = self.table_conditions, tf.get_static_value(condition)
    if static is not None and np.any((np.asarray(static) < 0) | (np.asarray(static) >= n)):
      raise ValueError(f"condition id(s) {np.asarray(static).tolist()} out of range: "
                       f"{self.name!r} holds {n} factor pairs, ids [0, {n}).")
    return condition

  def factors(self, condition=None) -> Dict[str, Tuple[tf.Tensor, tf.Tensor]]:
    """``{path: (A [.., m, r], B [.., r, n])}`` for a call's condition (a leading ``S``
    axis for a batch of conditions)."""
    return self._factors(self.condition_vectors(condition))

  def _factors(self, condition):
    if self.generator is None:
      ids = tf.zeros([], tf.int32) if condition is None else condition
      return {p: (tf.gather(self.factor_a[p], ids), tf.gather(self.factor_b[p], ids))
              for p in self.paths}
    flat = self.generator.generate(condition)
    return {p: (flat[p + "/lora_a"], flat[p + "/lora_b"]) for p in self.paths}

  def generate(self, condition) -> Dict[str, tf.Tensor]:
    """``W_0 + scale * A @ B`` for each adapted weight (condition: vectors or ids)."""
    out = {}
    for p, update in self._updates(condition).items():
      w0 = tf.convert_to_tensor(self.base_weights[p])
      if self.train_base:  # W_0 while the gate is 1; its frozen copy (no gradient) at 0.
        gate = tf.cast(self.base_gate, w0.dtype)
        w0 = gate * w0 + (1.0 - gate) * tf.convert_to_tensor(self.frozen_base[p])
      w = w0 + update
      dtype = self.dtypes[self.paths.index(p)]
      out[p] = tf.cast(w, dtype) if w.dtype != dtype else w
    return out

  def updates(self, condition=None) -> Dict[str, tf.Tensor]:
    """``{path: scale * reshape(A @ B, W.shape)}``: the update alone, to add to a base
    held elsewhere (a learner adds it to the target's current weights,
    :class:`hypernet.meta.SupportAdapter`); ``[S, *shape]`` for a batch of conditions, in
    the variables' dtype (float32 under a mixed policy), zero at the start (``B = 0``)."""
    return self._updates(self.condition_vectors(condition))

  def _updates(self, condition) -> Dict[str, tf.Tensor]:
    out = {}
    for p, shape_p, (a, b) in zip(self.paths, self.shapes, self._factors(condition).values()):
      delta = tf.matmul(a, b)                                  # [.., m, n]
      shape = tf.concat([tf.shape(delta)[:-2], tf.constant(shape_p, tf.int32)], 0)
      out[p] = self.scale * tf.cast(tf.reshape(delta, shape), self.variable_dtype)
    return out

  def freeze_base(self) -> None:
    """Freezes ``W_0`` as it is now: the adapters use this copy from the next step on, and
    the trainable ``W_0`` gets a zero gradient (an optimiser's momentum or weight decay
    may still move it, unused). Variables only, so compiled steps need no retrace. No
    effect when ``train_base`` is False or the base is frozen already."""
    if not self.train_base or float(self.base_gate.numpy()) == 0.0:
      return
    for p in self.paths:
      self.frozen_base[p].assign(self.base_weights[p])
    self.base_gate.assign(0.0)

  def base(self) -> Dict[str, tf.Tensor]:
    """``{path: W_0}``: the base the adapters are added to now (the frozen copy after
    :meth:`freeze_base`)."""
    frozen = self.train_base and float(self.base_gate.numpy()) == 0.0
    return {p: tf.convert_to_tensor((self.frozen_base if frozen else self.base_weights)[p])
            for p in self.paths}

  def parameter_count(self) -> int:
    """The adapters' trainable scalars: the generator's (or the factor tables'), without
    the frozen base (with ``train_base``, the base as well)."""
    return int(sum(np.prod(v.shape) for v in self.trainable_variables))

  def compression_ratio(self) -> float:
    """Adapted scalars per trainable parameter."""
    return self.num_generated / max(self.parameter_count(), 1)
