"""Hypernetworks as weight sources: :class:`HypernetworkSource` and the builders from a
config group (``config.hypernet``).

:class:`HypernetworkSource` implements :class:`hypernet.core.source.WeightSource` over
any hypernetwork kind, optionally quantising the generated weights.
"""
from __future__ import annotations

import fnmatch
from typing import Dict, List, Optional

import keras
import tensorflow as tf

from hypernet.core import functional, ops, plugins
from hypernet.core.registry import ConfigError
from hypernet.core.source import IdentitySource, WeightSource
from hypernet.hypernetworks import base


class HypernetworkSource(WeightSource):
  """A hypernetwork generates the target weights at ``generated_paths``.

  Args:
    target: the target network.
    hypernetwork: a Keras model whose call ``hypernetwork(context)`` returns
      ``{path: tensor}`` for exactly ``generated_paths`` (any kind in
      :mod:`hypernet.hypernetworks`).
    train_rest: train the target weights that are not generated (else frozen at init).
    quantize: ``"none"``, ``"binary"``, ``"ternary"`` or ``"int8"``: the target runs on
      quantised generated weights while the gradient reaches the hypernetwork straight
      through (:mod:`hypernet.core.ops`; BinaryConnect / TWN / int8 fake quantisation). One
      scale per tensor, and per weight set for a batch of weight sets.
    quantize_targets: glob pattern(s) of the generated paths to quantise (e.g.
      ``"*kernel"``); the others pass unchanged.

  Raises:
    ValueError: an unknown ``quantize`` (lists the kinds) or a ``quantize_targets``
      pattern that matches no generated path (lists them).
  """

  def __init__(self, target: keras.Model, hypernetwork: keras.Model, train_rest: bool = True,
               quantize: str = "none", quantize_targets="*kernel"):
    super().__init__(target, train_rest)
    self.hypernetwork = hypernetwork
    self.generated_paths = list(hypernetwork.target_spec)
    if quantize not in ops.QUANTIZERS:
      raise ValueError(f"quantize={quantize!r} is unknown; known: "
                       f"{sorted(ops.QUANTIZERS)}.")
    self.quantize = quantize
    self.quantized_paths: List[str] = []
    if quantize != "none":
      pats = ([p.strip() for p in quantize_targets.split(",") if p.strip()]
              if isinstance(quantize_targets, str) else list(quantize_targets))
      for pat in pats:
        if not any(fnmatch.fnmatchcase(p, pat) for p in self.generated_paths):
          raise ValueError(f"quantize_targets pattern {pat!r} matches no "
                           f"generated path; generated: {self.generated_paths}")
      self.quantized_paths = [p for p in self.generated_paths
                              if any(fnmatch.fnmatchcase(p, pat) for pat in pats)]

  def weights(self, context=None) -> Dict[str, tf.Tensor]:
    """Generated weights ``{path: tensor}`` (``[S, ...]`` for ``S`` conditions),
    quantised where configured."""
    weights = dict(self.hypernetwork(context))
    if self.quantize == "none":
      return weights
    quantizer = ops.QUANTIZERS[self.quantize]
    for path in self.quantized_paths:
      w = weights[path]
      rank = len(self.hypernetwork.target_spec[path].shape)
      # A batch of weight sets gets one scale per set: reduce over all but the set axis.
      axis = tuple(range(1, rank + 1)) if w.shape.rank == rank + 1 else None
      weights[path] = quantizer(w, axis=axis)
    return weights

  @property
  def own_variables(self):
    return list(self.hypernetwork.trainable_variables)

  def trackables(self):
    return dict(super().trackables(), hypernetwork=self.hypernetwork)


def build_hypernetwork(hc, target_spec, target_values=None, seed: int = 0, dtype=None,
                       condition_dim: Optional[int] = None) -> base.Hypernetwork:
  """Builds the hypernetwork kind ``hc.kind`` (``hc`` = ``config.hypernet``) from
  :data:`hypernet.hypernetworks.base.KINDS`.

  Args:
    hc: the ``config.hypernet`` group: ``kind`` (a registered name or a user's
      ``"package.module:Class"``), and the kind's constructor arguments by their own
      names (``init``, ``num_conditions``, ``condition_dim``, ``hidden``, ``chunk_size``,
      ...; fields of other kinds are left out).
    target_spec: ``{path: tf.TensorSpec}`` of the weights to generate.
    target_values: ``{path: array}`` initial target values (init statistics).
    seed: initialiser seed.
    dtype: the hypernetwork's Keras dtype policy; ``None``: ``"float64"`` for a float64
      target (finite-difference checks), else the global policy (``config.dtype_policy``,
      e.g. mixed_bfloat16).
    condition_dim: the size of given condition vectors when the hypernetwork has no
      condition table (``hc.num_conditions == 0``), e.g. a task embedding computed from
      a support set; ``None``: ``hc.condition_dim`` with a table, else unconditional.

  Raises:
    hypernet.core.registry.ConfigError (a ValueError): an unknown kind (lists the known
      ones), or the kind constructor's own error, prefixed with ``config.hypernet`` (its
      arguments are the group's field names); the command line prints it as one line.
  """
  if dtype is None and next(iter(target_spec.values())).dtype == tf.float64:
    dtype = "float64"
  given = dict(target_spec=target_spec, target_values=target_values, seed=seed, dtype=dtype,
               condition_dim=(hc.condition_dim if hc.num_conditions else
                              int(condition_dim or 0)))
  try:
    cls = base.KINDS.get(hc.kind)
  except plugins.PluginError as e:  # Names the field already.
    raise ConfigError(str(e)) from e
  group = {k: v for k, v in dict(hc).items() if k in base.KINDS.config_fields(cls)}
  try:
    return base.KINDS.build(cls, group, **given)
  except ValueError as e:   # The arguments are the group's fields, by name.
    raise ConfigError(f"config.hypernet (kind {hc.kind!r}): {e}") from e


def build_weight_source(config, target: keras.Model) -> WeightSource:
  """Builds the weight source named by ``config.hypernet.kind`` for ``target``.

  ``config.hypernet.kind``: ``"none"`` (train the target directly) or a hypernetwork kind
  (:func:`build_hypernetwork`; with ``num_conditions > 0`` a conditional one).
  ``config.hypernet.targets``: glob/regex patterns of the target paths to generate;
  ``train_rest``: train the others directly (else freeze them); ``quantize`` /
  ``quantize_targets``: see :class:`HypernetworkSource`.

  Raises:
    ValueError: an unknown kind (lists the known kinds), a pattern matching no weight
      (names it and lists the paths), or a kind's own errors.
  """
  hc = config.hypernet
  if hc.kind == "none":
    return IdentitySource(target)
  try:
    base.KINDS.get(hc.kind)  # An unknown kind fails before the spec is built.
  except plugins.PluginError as e:
    raise ConfigError(str(e)) from e
  spec = functional.weight_spec(target, hc.targets)
  values = {p: v.numpy() for p, v in functional.variable_paths(target).items() if p in spec}
  hnet = build_hypernetwork(hc, spec, values, seed=config.seed)
  try:
    return HypernetworkSource(target, hnet, train_rest=hc.train_rest, quantize=hc.quantize,
                              quantize_targets=hc.quantize_targets)
  except ValueError as e:
    raise ConfigError(f"config.hypernet: {e}") from e


def check_target_patterns(config, target) -> None:
  """Checks that every pattern of ``config.hypernet.targets`` selects a trainable weight
  of ``target`` (a built Keras model), and that the chosen kind can generate the selected
  weights (its ``check_target_spec``: the static kind takes square conv kernels only).

  Raises:
    ConfigError: naming ``config.hypernet.targets``: the pattern that matches nothing
      (with the target's trainable weight paths), or the kind's objection and its fix.
  """
  kind = config.hypernet.kind
  if kind == "none":
    return
  variables = functional.variable_paths(target, trainable=True)
  targets = config.hypernet.targets
  patterns = [p.strip() for p in str(targets).split(",") if p.strip()]
  for pattern in patterns:
    if not any(functional._matches(pattern, p) for p in variables):  # pylint: disable=protected-access
      raise ConfigError(
          f"config.hypernet.targets={targets!r}: the pattern {pattern!r} "
          f"matches no trainable weight of the target network {target.name!r}. Its "
          f"trainable weights: {list(variables)}.")
  selected = {p: v.shape for p, v in variables.items()
              if any(functional._matches(q, p) for q in patterns)}  # pylint: disable=protected-access
  try:
    base.KINDS.get(kind).check_target_spec(selected)
  except ValueError as e:
    raise ConfigError(f"config.hypernet.targets={targets!r} (config.hypernet.kind="
                      f"{kind!r}): {e}") from e
