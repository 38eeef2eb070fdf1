"""What every hypernetwork kind shares: the target spec, conditions, splitting, counts, and
the registry of kinds (:data:`KINDS`). How conditions and batches of weight sets work:
docs/hypernetworks.md.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from hypernet.core import weight_roles
from hypernet.core.registry import Registry

# The hypernetwork kinds by name, filled by ``@KINDS.register(name)`` on each class; a
# user's own subclass of :class:`Hypernetwork` is ``"package.module:Class"``.
KINDS = Registry("hypernetwork kind", "config.hypernet.kind", "hypernet.hypernetworks",
                 base="hypernet.hypernetworks.base:Hypernetwork")
"""The hypernetwork kinds by ``config.hypernet.kind`` (``@KINDS.register("name")`` on a
:class:`Hypernetwork` in ``hypernet/hypernetworks/``), or ``"package.module:Class"``."""

_warned_no_roles = []


def _warn_no_roles(name: str) -> None:
  from absl import logging  # pylint: disable=g-import-not-at-top
  _warned_no_roles.append(name)
  logging.warning(
      "Hypernetwork %r: its target_spec carries no layer roles (a dict built by hand, or "
      "filtered from functional.weight_spec into a plain dict), so kernels are recognised "
      "by their 'kernel' path leaf and get Dense/Conv fans by shape (wrong for depthwise, "
      "transposed, embedding, recurrent kernels). Select weights with "
      "functional.weight_spec(model, patterns) (or weight_roles.WeightSpec(dict, roles)) "
      "to initialise from the layer classes.", name)


class Hypernetwork(keras.Model):
  """Base class of the hypernetwork kinds. Subclasses implement :meth:`generate`.

  Args:
    target_spec: ``{path: tf.TensorSpec}`` of the target weights to generate (from
      :func:`hypernet.core.functional.weight_spec`).
    num_conditions: size of the learned condition-embedding table (0: none).
    condition_dim: dimension of a condition embedding / given condition vector (0:
      unconditional; must be > 0 when ``num_conditions > 0``).
    seed: seed of the condition-embedding initialiser.
    dtype: Keras dtype policy of the hypernetwork (``None``: the global policy, float32
      by default; ``"float64"`` for finite-difference checks; ``"mixed_bfloat16"``).
      Generated tensors are cast to the spec's dtypes.
    name: Keras model name.

  Attributes:
    target_spec, paths, shapes, dtypes, sizes: the spec and its per-tensor pieces.
    num_generated: total generated scalars ``P`` (int).

  A kind is registered with ``@KINDS.register("name")``; its constructor's keyword
  arguments are the fields of ``config.hypernet`` by their own names, except
  :attr:`config_exclude` (given by the builder, not the config). ``**kwargs`` passed on to
  this constructor bring ``num_conditions`` and ``condition_dim``.

  Raises:
    ValueError: an empty ``target_spec`` or negative / inconsistent condition sizes.
  """

  config_exclude = ("target_spec", "target_values", "seed", "dtype", "name")

  def __init__(self, target_spec: Mapping[str, tf.TensorSpec], *, num_conditions: int = 0,
               condition_dim: int = 0, seed: int = 0, dtype=None,
               name: str = "hypernetwork"):
    super().__init__(name=name, dtype=dtype)
    if not target_spec:
      raise ValueError("target_spec is empty: the hypernetwork has no weights to generate "
                       "(check the patterns that selected them).")
    if num_conditions < 0 or condition_dim < 0:
      raise ValueError(f"num_conditions ({num_conditions}) and condition_dim "
                       f"({condition_dim}) must be >= 0.")
    if num_conditions > 0 and condition_dim <= 0:
      raise ValueError(f"num_conditions={num_conditions} needs condition_dim > 0 (the size "
                       "of each learned condition embedding).")
    spec = weight_roles.WeightSpec(target_spec)
    if not spec.roles and not _warned_no_roles:
      _warn_no_roles(name)
    self.target_spec = spec  # Keras wraps it in a TrackedDict, which drops .roles:
    self.target_spec.roles = spec.roles  # the layer-class fans for the init.
    self.paths = list(self.target_spec)
    self.shapes = [tuple(int(d) for d in s.shape) for s in self.target_spec.values()]
    self.dtypes = [s.dtype for s in self.target_spec.values()]
    self.sizes = [int(np.prod(s)) for s in self.shapes]
    self.num_generated = int(sum(self.sizes))
    self.num_conditions = int(num_conditions)
    self.condition_dim = int(condition_dim)
    self.condition_embeddings = None
    if self.num_conditions:
      self.condition_embeddings = self.add_weight(
          shape=(self.num_conditions, self.condition_dim), name="condition_embeddings",
          initializer=keras.initializers.RandomNormal(stddev=1.0, seed=seed + 7919))

  @classmethod
  def check_target_spec(cls, target_spec: Mapping[str, Any]) -> None:
    """Checks, before anything is built, that this kind can generate every weight of
    ``target_spec`` (``{path: tf.TensorSpec or shape}``); the default accepts any. The
    config check (``config.hypernet.targets``) calls it with the selected weights.

    Raises:
      ValueError: a weight the kind cannot generate (names its path and the fix).
    """
    del target_spec

  # -- conditions -----------------------------------------------------------------
  @property
  def conditional(self) -> bool:
    return self.condition_dim > 0

  def init_conditions(self, num_samples: int = 64, seed: int = 0) -> Optional[np.ndarray]:
    """Condition vectors ``[n, condition_dim]`` that init statistics are measured on.

    The learned table's initial rows when there is one, else ``num_samples`` standard
    normal vectors (given condition vectors are assumed to have unit variance); ``None``
    for an unconditional hypernetwork.
    """
    if not self.conditional:
      return None
    if self.condition_embeddings is not None:
      return np.asarray(self.condition_embeddings.numpy(), np.float64)
    return np.random.default_rng(seed).standard_normal((num_samples, self.condition_dim))

  def condition_vectors(self, condition) -> Optional[tf.Tensor]:
    """Maps a call's ``condition`` to embedding vectors.

    Args:
      condition: ``None``; an integer id ``[]`` or ids ``[S]`` (needs
        ``num_conditions > 0``); or a float vector ``[condition_dim]`` or batch
        ``[S, condition_dim]``.

    Returns:
      ``None`` (unconditional), ``[condition_dim]`` or ``[S, condition_dim]`` in the
      hypernetwork's dtype.

    Raises:
      ValueError: a condition is missing or given to an unconditional hypernetwork; an
        id outside ``[0, num_conditions)`` (known when the call is traced or run eagerly);
        a vector of the wrong size or rank.
      tf.errors.InvalidArgumentError: an out-of-range id only known when a
        ``tf.function`` runs.
    """
    if condition is None:
      if self.conditional:
        raise ValueError(
            f"Hypernetwork {self.name!r} is conditional: call it with a condition id "
            f"(int in [0, {self.num_conditions})) or a condition vector of size "
            f"{self.condition_dim}.")
      return None
    if not self.conditional:
      raise ValueError(f"Hypernetwork {self.name!r} is unconditional (num_conditions=0, "
                       "condition_dim=0) but was given a condition; call it with none.")
    condition = tf.convert_to_tensor(condition)
    if condition.dtype.is_integer:
      return self._lookup(condition)
    if not condition.dtype.is_floating:
      raise TypeError(f"condition must be integer ids or float vectors; got dtype "
                      f"{condition.dtype.name}.")
    if condition.shape.rank not in (1, 2) or condition.shape[-1] != self.condition_dim:
      raise ValueError(f"A condition vector must have shape [{self.condition_dim}] or "
                       f"[S, {self.condition_dim}]; got {tuple(condition.shape)}.")
    return tf.cast(condition, self.compute_dtype)

  def _lookup(self, ids: tf.Tensor) -> tf.Tensor:
    if self.condition_embeddings is None:
      raise ValueError(f"Hypernetwork {self.name!r} has no learned condition table "
                       "(num_conditions=0): pass condition vectors, not integer ids.")
    if ids.shape.rank not in (0, 1):
      raise ValueError(f"condition ids must have shape [] or [S]; got {tuple(ids.shape)}.")
    n = self.num_conditions
    static = tf.get_static_value(ids)
    if static is not None:
      bad = np.asarray(static)[(np.asarray(static) < 0) | (np.asarray(static) >= n)]
      if bad.size:
        raise ValueError(f"condition id(s) {bad.tolist()} out of range: hypernetwork "
                         f"{self.name!r} has {n} learned conditions, ids [0, {n}).")
      return tf.gather(self.condition_embeddings, ids)
    ids64 = tf.cast(ids, tf.int64)
    checks = [
        tf.debugging.assert_non_negative(
            ids64, message=f"condition id out of range [0, {n}) for hypernetwork {self.name!r}"),
        tf.debugging.assert_less(
            ids64, tf.constant(n, tf.int64),
            message=f"condition id out of range [0, {n}) for hypernetwork {self.name!r}"),
    ]
    with tf.control_dependencies(checks):
      return tf.gather(self.condition_embeddings, tf.identity(ids))

  def __call__(self, condition=None, **kwargs):
    # Keras refuses Python ints as positional inputs; ids may be given as plain ints.
    if isinstance(condition, (int, np.integer, list, tuple)) and not isinstance(condition, bool):
      condition = tf.constant(np.asarray(condition))
    return super().__call__(condition, **kwargs)

  def call(self, condition=None) -> Dict[str, tf.Tensor]:
    """Returns ``{path: tensor}``: the spec's shapes, with a leading ``S`` axis when a
    batch of ``S`` conditions is given."""
    return self.generate(self.condition_vectors(condition))

  def generate(self, condition: Optional[tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Subclasses: weights for condition vectors ``None``, ``[d]`` or ``[S, d]``."""
    raise NotImplementedError

  # -- helpers --------------------------------------------------------------------
  def split(self, flat: tf.Tensor, unused_tail: int = 0,
            output_major: bool = False) -> Dict[str, tf.Tensor]:
    """Cuts ``[..., P + unused_tail]`` into ``{path: [..., *shape]}`` (leading axes kept),
    cast to the spec's dtypes; the last ``unused_tail`` scalars are dropped (their
    gradient is zero).

    ``output_major=True``: a tensor of rank >= 2 is read from ``flat`` with its last
    (output) axis first, ``[s_n, s_1, ..., s_{n-1}]`` (a Dense kernel ``[in, out]`` as
    ``[out, in]``, each unit's incoming weights contiguous, as PyTorch's
    ``Linear.weight``), then transposed to its Keras shape; rank 0-1 tensors as they are.
    """
    if unused_tail:
      parts = tf.split(flat, list(self.sizes) + [int(unused_tail)], axis=-1)[:-1]
    else:
      parts = tf.split(flat, self.sizes, axis=-1)
    lead = tf.shape(flat)[:-1]
    batched = flat.shape.rank > 1
    out = {}
    for p, t, s, d in zip(self.paths, parts, self.shapes, self.dtypes):
      moved = output_major and len(s) >= 2
      read = (s[-1],) + tuple(s[:-1]) if moved else tuple(s)
      t = tf.reshape(t, tf.concat([lead, tf.constant(read, tf.int32)], 0)) if batched \
          else tf.reshape(t, read)
      if moved:   # [..., s_n, s_1, ..., s_{n-1}] -> [..., s_1, ..., s_n]
        k = flat.shape.rank - 1
        t = tf.transpose(t, list(range(k)) + list(range(k + 1, k + len(s))) + [k])
      out[p] = tf.cast(t, d) if t.dtype != d else t
    return out

  def parameter_count(self) -> int:
    """Trainable scalars of the hypernetwork (int)."""
    return int(sum(np.prod(v.shape) for v in self.trainable_variables))

  def compression_ratio(self) -> float:
    """Generated scalars per trainable hypernetwork parameter (> 1: compresses)."""
    return self.num_generated / max(self.parameter_count(), 1)


ACTIVATIONS = ("relu", "elu", "gelu", "silu", "tanh", "leaky_relu")


def check_activation(activation: str) -> str:
  """Returns ``activation`` if it names one of :data:`ACTIVATIONS` (the generator's hidden
  units); raises ``ValueError`` naming the argument and the choices otherwise."""
  if activation not in ACTIVATIONS:
    raise ValueError(f"activation {activation!r} is unknown; choose one of {ACTIVATIONS} "
                     "(the hidden units of the hypernetwork's MLP).")
  return activation


def mlp(in_width: int, hidden: Sequence[int], *, seed: int, dtype, name: str,
        layer_prefix: str, activation: str = "relu",
        pytorch_init: bool = False) -> Optional[keras.Sequential]:
  """MLP ``in_width -> hidden[0] -> ... -> hidden[-1]`` with ``activation`` (one of
  :data:`ACTIVATIONS`, Keras' functions of those names; von Oswald et al. 2020 use ELU)
  after every layer (He-normal kernels and zero biases, or with ``pytorch_init`` both
  ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, :func:`pytorch_uniform`; layer ``i`` seeded
  ``seed + i``, named ``f"{layer_prefix}{i + 1}"``), as a ``keras.Sequential`` attribute-to-be:
  ``tf.train.Checkpoint`` tracks a Sequential, not a Python list of layers. ``None`` for
  no hidden layers. Call it on ``[n, in_width]`` (see :func:`apply_rowwise` for more
  leading axes).

  Raises:
    ValueError: an unknown ``activation``.
  """
  check_activation(activation)
  if not hidden:
    return None
  policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
  widths = [int(in_width)] + [int(h) for h in hidden]

  def initializers(i):
    if pytorch_init:
      return dict(kernel_initializer=pytorch_uniform(widths[i], seed + i),
                  bias_initializer=pytorch_uniform(widths[i], seed + 1000 + i))
    return dict(kernel_initializer=keras.initializers.HeNormal(seed=seed + i))

  return keras.Sequential(
      [keras.Input((int(in_width),), dtype=policy.variable_dtype)] +
      [keras.layers.Dense(int(h), activation=activation, name=f"{layer_prefix}{i + 1}",
                          dtype=policy, **initializers(i))
       for i, h in enumerate(hidden)], name=name)


def pytorch_uniform(fan_in: int, seed: int, scale: float = 1.0) -> keras.initializers.Initializer:
  """``U(-scale / sqrt(fan_in), scale / sqrt(fan_in))``: PyTorch's default init of an
  ``nn.Linear``'s weight (``kaiming_uniform_(a=sqrt(5))``) and bias, by the layer's
  ``fan_in``."""
  bound = scale / float(np.sqrt(fan_in))
  return keras.initializers.RandomUniform(-bound, bound, seed=seed)


def apply_rowwise(layer, x: tf.Tensor) -> tf.Tensor:
  """Applies a layer that maps ``[n, d]`` rows to ``[n, k]`` on ``[..., d]`` (any leading
  axes, e.g. ``[S, C, d]`` for S conditions); ``layer=None`` is the identity."""
  if layer is None:
    return x
  if x.shape.rank == 2:
    return layer(x)
  lead = tf.shape(x)[:-1]
  y = layer(tf.reshape(x, [-1, x.shape[-1]]))
  return tf.reshape(y, tf.concat([lead, tf.shape(y)[-1:]], 0))


def with_condition(inputs: tf.Tensor, condition: Optional[tf.Tensor]) -> tf.Tensor:
  """Concatenates a condition to every row of ``inputs``.

  Args:
    inputs: ``[n, d_in]`` (e.g. chunk embeddings) or ``[d_in]``.
    condition: ``None``, ``[d_c]`` or ``[S, d_c]``.

  Returns:
    ``inputs`` (no condition), ``[..., d_in + d_c]`` for one condition, or
    ``[S, ..., d_in + d_c]`` for a batch of conditions.
  """
  if condition is None:
    return inputs
  condition = tf.cast(condition, inputs.dtype)
  if condition.shape.rank == 1:
    c = tf.broadcast_to(condition, tf.concat([tf.shape(inputs)[:-1], tf.shape(condition)], 0))
    return tf.concat([inputs, c], -1)
  s = tf.shape(condition)[0]
  tiled = tf.broadcast_to(inputs[None], tf.concat([[s], tf.shape(inputs)], 0))
  extra = inputs.shape.rank - 1
  c = tf.reshape(condition, tf.concat([[s], tf.ones([extra], tf.int32), [-1]], 0))
  c = tf.broadcast_to(c, tf.concat([tf.shape(tiled)[:-1], tf.shape(condition)[-1:]], 0))
  return tf.concat([tiled, c], -1)


def condition_grid(base: np.ndarray, conditions: Optional[np.ndarray]) -> np.ndarray:
  """NumPy twin of :func:`with_condition` for init statistics: ``base`` ``[n, d]`` with
  every row of ``conditions`` ``[m, d_c]`` appended -> ``[m * n, d + d_c]``
  (``base`` itself when ``conditions`` is None)."""
  if conditions is None:
    return base
  n, m = base.shape[0], conditions.shape[0]
  return np.concatenate([np.tile(base, (m, 1)), np.repeat(conditions, n, axis=0)], axis=1)


def second_moment(x) -> float:
  """Mean of ``x**2`` (float), floored at 1e-12."""
  return max(float(np.mean(np.square(np.asarray(x, np.float64)))), 1e-12)


def check_mode(init: str, extra: Sequence[str] = ()) -> None:
  """Raises ``ValueError`` unless ``init`` is one of the hyperfan modes or ``extra`` (the
  kind's own)."""
  from hypernet.hypernetworks import init as hinit  # pylint: disable=g-import-not-at-top
  modes = tuple(hinit.MODES) + tuple(extra)
  if init not in modes:
    raise ValueError(f"init={init!r} is unknown; choose one of {modes}.")


def stats_for(target_spec: Mapping[str, tf.TensorSpec],
              target_values: Optional[Mapping[str, np.ndarray]],
              init: str) -> Dict[str, Tuple[float, float]]:
  """``{path: (mean, std)}`` each generated tensor should start with (see
  :func:`hypernet.hypernetworks.init.target_statistics`)."""
  from hypernet.hypernetworks import init as hinit  # pylint: disable=g-import-not-at-top
  check_mode(init)
  if target_values is None:
    target_values = {}
  values = {p: (target_values[p] if p in target_values
                else np.zeros([int(d) for d in s.shape])) for p, s in target_spec.items()}
  return hinit.target_statistics(values, init, roles=getattr(target_spec, "roles", None))
