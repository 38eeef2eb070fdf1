"""Functional calls on Keras 3 models: run a model on weights given as tensors.

A hypernetwork or an inner-loop learner produces the weights of a *target network* as
tensors. To differentiate through them, the target must run on those tensors directly:
``set_weights`` / ``Variable.assign`` would cut the gradient tape. This module wraps
Keras 3's ``Layer.stateless_call`` so that

* weights are keyed by *variable path* relative to the model (``"conv2/kernel"``;
  ``"backbone/conv2/kernel"`` for a nested model), see :func:`variable_paths`;
* weights not given come from the model's own variables (so gradients reach those too);
* the model's variables are never written: the updated non-trainable state (BatchNorm
  moving statistics, RNG seed state) is *returned* for the caller to apply or feed back.

Everything here works eagerly, inside ``tf.function`` (with or without
``jit_compile=True``) and under nested tapes, because it is ordinary TensorFlow code.
"""
from __future__ import annotations

import contextlib
import fnmatch
import inspect
import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import keras
import tensorflow as tf

from hypernet.numerics import accel, compat, second_order
from hypernet.core import ops, weight_roles
from hypernet.core.paths import _check_built, _relative_path, variable_paths  # pylint: disable=unused-import

Weights = Mapping[str, tf.Tensor]
Patterns = Union[str, Sequence[str], None]


def _compile_patterns(patterns: Patterns) -> List[str]:
  if patterns is None:
    return ["*"]
  if isinstance(patterns, str):
    patterns = [p.strip() for p in patterns.split(",") if p.strip()]
  return list(patterns)


def _matches(pattern: str, path: str) -> bool:
  """Glob match (``conv*/kernel``), or a regex when written ``re:<regex>``."""
  if pattern.startswith("re:"):
    return re.fullmatch(pattern[3:], path) is not None
  return fnmatch.fnmatchcase(path, pattern)


def select_paths(model: keras.Model, patterns: Patterns = None, *, trainable: Optional[bool] = True,
                 exclude: Patterns = ()) -> List[str]:
  """Selects variable paths of ``model`` by glob or regex patterns.

  Args:
    model: a built Keras model.
    patterns: a glob (``"conv*/kernel"``), a regex written ``"re:conv\\d/.*"``, a
      comma-separated string of them, or a list of them. ``None`` selects everything.
    trainable: restrict to trainable (``True``, default), non-trainable (``False``) or all
      (``None``) variables.
    exclude: patterns removed from the selection.

  Returns:
    The matching paths, in the model's variable order.

  Raises:
    ValueError: if a pattern matches no variable; the message lists the available paths.
  """
  paths = list(variable_paths(model, trainable=trainable))
  pats = _compile_patterns(patterns)
  excl = _compile_patterns(exclude) if exclude else []
  for pat in pats:
    if not any(_matches(pat, p) for p in paths):
      raise ValueError(
          f"Pattern {pat!r} matches no {'trainable ' if trainable else ''}weight of model "
          f"{model.name!r}. Available paths: {paths}")
  return [p for p in paths
          if any(_matches(pat, p) for pat in pats) and not any(_matches(e, p) for e in excl)]


def weight_spec(model: keras.Model, patterns: Patterns = None, **kwargs):
  """Returns ``{path: tf.TensorSpec(shape, dtype)}`` for the selected weights of ``model``.

  This is how a hypernetwork learns the shapes of the weights it must generate: from the
  target network itself, nothing hand-typed. Arguments are those of :func:`select_paths`.

  Returns:
    A :class:`hypernet.core.weight_roles.WeightSpec` (a dict) whose ``roles`` say what each
    weight is in its layer (kernel with its fans, bias, other), decided from the layer
    class: hypernetworks initialise from it.
  """
  variables = variable_paths(model, trainable=kwargs.get("trainable", True))
  spec = {p: tf.TensorSpec(tuple(variables[p].shape), tf.as_dtype(variables[p].dtype), name=p)
          for p in select_paths(model, patterns, **kwargs)}
  return weight_roles.WeightSpec(spec, weight_roles.weight_roles(model))


def _check_mapping(name: str, value, fn: str = "functional_call") -> None:
  if value is not None and not isinstance(value, Mapping):
    raise TypeError(
        f"{fn}: {name}= must be a dict {{variable path: tensor}} (e.g. "
        f"{{'dense/kernel': w}}; paths from hypernet.core.functional.variable_paths(model)), or "
        f"None; got a {type(value).__name__}.")


def _check_single(path, value, fn: str, arg: str, shape=None) -> None:
  if not isinstance(path, str):
    raise TypeError(f"{fn}: {arg}= has the key {path!r} of type "
                    f"{type(path).__name__}; keys must be variable paths (str).")
  if isinstance(value, (list, tuple, dict)) and any(
      isinstance(v, (tf.Variable, keras.Variable, tf.Tensor))
      for v in tf.nest.flatten(value)):
    raise TypeError(
        f"{fn}: {arg}[{path!r}] is a {type(value).__name__} of "
        f"{len(tf.nest.flatten(value))} tensors/variables; give one tensor"
        + (f" of the variable's shape {tuple(shape)}" if shape is not None else "")
        + " for each path.")


def check_weight_values(model: keras.Model, weights, fn: str, arg: str = "weights") -> None:
  """Raises a ``TypeError`` naming ``fn``, ``arg`` and the path when ``weights`` is not a
  dict of single tensors (e.g. a list where the dict belongs, or a list of variables
  where one tensor belongs)."""
  _check_mapping(arg, weights, fn)
  variables = variable_paths(model)
  for path, value in (weights or {}).items():
    v = variables.get(path) if isinstance(path, str) else None
    _check_single(path, value, fn, arg, None if v is None else v.shape)


_HALF_FLOATS = (tf.float16, tf.bfloat16)


def _check_value(path: str, variable, value, batched: bool = False, arg: str = "weights") -> tf.Tensor:
  _check_single(path, value, "functional_call", arg, variable.shape)
  try:
    value = tf.convert_to_tensor(value)
  except (TypeError, ValueError) as e:
    raise TypeError(
        f"functional_call: {arg}[{path!r}] cannot be converted to a tensor "
        f"({type(value).__name__}): {e}") from e
  dtype = tf.as_dtype(variable.dtype)
  if value.dtype == tf.float32 and dtype in _HALF_FLOATS:
    # Mixed precision: inside the layers' autocast scope a float32 variable reads as its
    # layer's compute dtype; Keras casts the variable's value on read, and so do we.
    value = tf.cast(value, dtype)
  if value.dtype != dtype:
    raise TypeError(
        f"functional_call: {arg}[{path!r}]: expected dtype {tf.as_dtype(variable.dtype).name}, given "
        f"{value.dtype.name}. Cast it (tf.cast) or build the model with that dtype.")
  expected = tuple(variable.shape)
  given = tuple(value.shape)
  if len(given) != len(expected) or any(
      g is not None and g != e for g, e in zip(given, expected)):
    raise ValueError(
        f"functional_call: {arg}[{path!r}] has shape {given}; the variable's shape is "
        f"{expected}.")
  return value


# Added to a seed state's first element for replica r (times r): a large odd constant,
# so the streams of different replicas come from unrelated seeds.
REPLICA_SEED_STRIDE = 0x9E3779B1


def _replica_seed(path: str, variable):
  """A Keras seed-generator state with the ``tf.distribute`` replica id folded in.

  Inside ``strategy.run`` with more than one replica, replica ``r`` draws from seed state
  ``[s + r * REPLICA_SEED_STRIDE, c]`` instead of ``[s, c]``, so dropout masks differ
  across replicas; replica 0 (and any single-device call) keeps ``[s, c]`` unchanged.
  Other variables are returned as they are.
  """
  if not compat.is_seed_state_path(path):
    return variable
  ctx = tf.distribute.get_replica_context()
  if ctx is None or ctx.num_replicas_in_sync == 1:
    return variable
  value = tf.convert_to_tensor(variable)
  stride = REPLICA_SEED_STRIDE if value.dtype.size == 8 else REPLICA_SEED_STRIDE % 2**31
  offset = tf.cast(ctx.replica_id_in_sync_group, value.dtype) * tf.constant(stride, value.dtype)
  return value + tf.stack([offset, tf.zeros_like(offset)])


def _takes_training(model) -> bool:
  """Whether ``model.call`` names a ``training`` argument (Keras passes it only then)."""
  try:
    return "training" in inspect.signature(model.call).parameters
  except (TypeError, ValueError):
    return True


def _constrained(variable, value: tf.Tensor) -> tf.Tensor:
  """``variable.constraint(value)`` (a layer's ``kernel_constraint`` / ``bias_constraint``
  / ``embeddings_constraint``...: Keras' ``NonNeg``, ``MaxNorm``, ``UnitNorm``,
  ``MinMaxNorm`` or a user's callable), differentiably; ``value`` when there is none."""
  constraint = getattr(variable, "constraint", None)
  if constraint is None:
    return value
  projected = tf.convert_to_tensor(constraint(value))
  if projected.dtype != value.dtype or projected.shape != value.shape:
    raise TypeError(
        f"functional_call: the constraint {type(constraint).__name__} of variable "
        f"{variable.path!r} returned {projected.dtype.name} {tuple(projected.shape)} for a "
        f"{value.dtype.name} {tuple(value.shape)} weight; a constraint must keep the "
        "weight's shape and dtype.")
  return projected


def functional_call(model: keras.Model, weights: Optional[Weights], *args,
                    training: Optional[bool] = False, return_state: bool = False,
                    return_losses: bool = False,
                    state: Optional[Weights] = None, strict: bool = True,
                    overrides: Optional[Mapping[str, Callable]] = None,
                    accelerate: accel.Accelerate = True, **kwargs):
  """Runs ``model(*args, **kwargs)`` with some or all of its weights given as tensors.

  The forward pass reads ``weights[path]`` wherever the model would read the variable at
  that path, so gradients flow from the outputs back to those tensors (and on to whatever
  produced them: a hypernetwork, an inner loop); variables not given are read as they
  are. Built on Keras 3 ``Layer.stateless_call``; the model's variables are never
  assigned. Normalisation moments are exact to second order, so nested tapes around the
  call give exact second derivatives (``docs/layers.md``: what is tested per layer).
  A given weight of a layer with a constraint (``kernel_constraint=``...) is used as
  ``constraint(weights[path])``, differentiably (``docs/layers.md``, "Layer constraints").

  Args:
    model: a built Keras 3 model (Sequential, Functional, subclassed, nested).
    weights: ``{path: tensor}`` for trainable (or non-trainable) variables, with the
      variable's exact shape and dtype. Paths as in :func:`variable_paths`. ``None`` or
      ``{}`` runs the model on its own variables.
    *args: the model's inputs, e.g. a float32 batch of shape ``[B, H, W, C]``.
    training: passed to the model as ``training=`` (BatchNorm batch statistics, dropout);
      not passed to a subclassed model whose ``call`` takes no ``training`` argument.
    return_state: also return the updated non-trainable state.
    return_losses: also return the model's losses for *these* weights: weight
      regularizer penalties computed on the given tensors (e.g. ``L2(0.5)`` on a given
      kernel ``w = 2.0`` gives ``2.0`` with ``d/dw = 2.0``), activity regularizers and
      ``add_loss`` terms of this call; a list of scalar tensors (empty if none).
    state: ``{path: tensor}`` for non-trainable variables (e.g. BatchNorm moving
      statistics fed back from a previous call); merged with ``weights``.
    strict: raise on a path that is not a variable of the model (default). With
      ``False`` unknown paths are ignored.
    overrides: ``{layer name: fn}``; during this call the layer's output ``h`` is
      replaced by ``fn(h)`` for everything downstream, while the gradient passes
      straight through to ``h`` (see :func:`hypernet.core.ops.override_layer_outputs`). E.g.
      a model ``y = a**2`` with ``overrides={"a": lambda a: 2.0 * tf.ones_like(a)}``
      where ``a = 1`` gives ``y = 4`` and ``dy/da = 4``. The model is left unmodified.
    accelerate: which faster kernels the call uses (:func:`hypernet.numerics.accel.choose`
      decides from this and the device): ``True`` fused float32 training-mode
      BatchNorm; ``"meta"`` (the meta-learners' calls) also, on CPU, plain bias adds and
      fused BatchNorm-ReLU-max-pool blocks; ``False`` Keras' own code. Values differ by
      rounding only; ``accel.disabled()`` turns them off around a block.
    **kwargs: passed to the model's ``call``.

  Returns:
    The model's outputs; with ``return_state=True`` a pair ``(outputs, new_state)``, with
    ``return_losses=True`` a pair ``(outputs, losses)``, with both the triple
    ``(outputs, new_state, losses)`` (Keras' ``stateless_call`` order), where
    ``new_state`` is ``{path: tensor}`` over all non-trainable variables (moving mean and
    variance after this batch in training mode, unchanged values in inference mode). Apply
    it with :func:`assign_state` or feed it back through ``state=``. Under a
    ``tf.distribute`` strategy with several replicas, seed states not given are read with
    the replica id folded in (:func:`_replica_seed`: dropout masks differ per replica).

  Raises:
    ValueError: the model is not built; a path names no variable of the model (the
      message lists the paths); a tensor's shape differs from the variable's; an
      ``overrides`` key names no layer (the message lists the layer names); an unknown
      ``accelerate``.
    TypeError: ``weights`` / ``state`` is not a dict; a value is not one tensor (e.g. a
      list of variables); a tensor's dtype differs from the variable's; a constraint
      changes a weight's shape or dtype.
    hypernet.numerics.compat.UnsupportedVersionError: this Keras' normalisation moments
      cannot be made exact (its canary failed: one warning at first use) and nested
      tapes record a model with a normalisation layer (a second derivative would lose a
      term); first-order calls run on.
  """
  _check_built(model)
  _check_mapping("weights", weights)
  _check_mapping("state", state)
  given: Dict[str, tf.Tensor] = dict(weights or {})
  if state:
    given.update(state)
  trainable = variable_paths(model, trainable=True)
  non_trainable = variable_paths(model, trainable=False)
  misplaced = [p for p in (state or ()) if p in trainable]
  if misplaced:
    raise ValueError(
        f"functional_call: state= is for non-trainable variables (BatchNorm statistics, "
        f"seed state); {misplaced} are trainable: pass them in weights=.")
  if strict:
    unknown = [p for p in given if p not in trainable and p not in non_trainable]
    if unknown:
      raise ValueError(
          f"Unknown weight path(s) {unknown} for model {model.name!r}. Known paths: "
          f"{list(trainable) + list(non_trainable)}")
  state_paths = set(state or ())
  arg_of = lambda p: "state" if p in state_paths else "weights"
  tv = [_constrained(v, _check_value(p, v, given[p], arg=arg_of(p))) if p in given else v
        for p, v in trainable.items()]
  ctx = tf.distribute.get_replica_context()
  if ctx is not None and ctx.num_replicas_in_sync > 1:
    compat.check_seed_state()  # how _replica_seed finds the seed states
  ntv = [_check_value(p, v, given[p], arg=arg_of(p)) if p in given else _replica_seed(p, v)
         for p, v in non_trainable.items()]
  if training is not None and _takes_training(model):
    kwargs["training"] = training
  with (ops.override_layer_outputs(model, overrides) if overrides
        else contextlib.nullcontext()), second_order.exact_moments_scope(), \
      accel.scope(accelerate):
    result = model.stateless_call(tv, ntv, *args, return_losses=return_losses, **kwargs)
  outputs, new_ntv = result[0], result[1]
  second_order.check_outputs_differentiable_once(model, outputs)
  out = (outputs,)
  if return_state:
    out += (dict(zip(non_trainable.keys(), new_ntv)),)
  if return_losses:
    out += (list(result[2]),)
  return out[0] if len(out) == 1 else out


def assign_state(model: keras.Model, state: Weights) -> None:
  """Writes a state dict returned by :func:`functional_call` into the model's variables.

  Use it for non-trainable state only (BatchNorm moving statistics, seed generators):
  writing trainable weights this way would cut the gradient tape.

  Raises:
    ValueError: a path names no non-trainable variable of the model.
  """
  variables = variable_paths(model, trainable=False)
  for path, value in state.items():
    if path not in variables:
      raise ValueError(f"{path!r} is not a non-trainable variable of {model.name!r}; "
                       f"known: {list(variables)}")
    variables[path].assign(value)


def merged_model(model: keras.Model, weights: Optional[Weights] = None) -> keras.Model:
  """A plain Keras model holding ``weights``: ``keras.models.clone_model(model)`` with
  each given path's tensor written into the clone (the others copied from ``model``), so
  it runs, saves and loads without hypernet (e.g. generated adapters merged into the
  base for export).

  Args:
    model: a built Keras model.
    weights: ``{path: tensor}`` of the variable shapes (``None``: the model's own).

  Returns:
    A built ``keras.Model`` whose outputs equal ``functional_call(model, weights, x)``.

  Raises:
    ValueError: a path the model lacks (lists them), a tensor of another shape (a batch
      of weight sets: pick one), a clone whose variables do not map one to one.
  """
  variables = variable_paths(model)
  weights = dict(weights or {})
  unknown = [p for p in weights if p not in variables]
  if unknown:
    raise ValueError(f"merged_model: {unknown} are not variables of {model.name!r}; "
                     f"known: {list(variables)}.")
  clone = keras.models.clone_model(model)
  if len(clone.variables) != len(variables):
    raise ValueError(f"keras.models.clone_model({model.name!r}) has {len(clone.variables)} "
                     f"variables, the model {len(variables)}: cannot map the weights.")
  for (path, source), var in zip(variables.items(), clone.variables):
    value = tf.convert_to_tensor(weights.get(path, source))
    if tuple(value.shape) != tuple(var.shape):
      raise ValueError(f"Weight {path!r}: shape {tuple(value.shape)} does not fit the "
                       f"variable of shape {tuple(var.shape)} (a batch of weight sets: "
                       "pick one).")
    var.assign(tf.cast(value, var.dtype))
  return clone


def all_reduce_state(state: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """Makes the non-trainable state returned by :func:`functional_call` agree across
  replicas before it is written (:func:`assign_state`).

  Floating state (BatchNorm moving mean/variance) becomes its mean over replicas; other
  state (integer RNG seed states) becomes replica 0's value, broadcast by a sum in which
  the other replicas contribute zeros. The moving mean then equals the single-device
  value (it is linear in the batch mean and replicas hold equal shares of the batch);
  the moving variance is the mean of the per-replica batch variances, which is what
  per-replica BatchNorm normalises with (``BatchNormalization(synchronized=True)`` uses
  global batch statistics instead).

  Args:
    state: ``{path: tensor}`` from :func:`functional_call` with ``return_state=True``,
      as computed on this replica.

  Returns:
    ``{path: tensor}``, identical on every replica; unchanged outside a distribution
    strategy's replica context or with one replica.
  """
  state = dict(state or {})
  ctx = tf.distribute.get_replica_context()
  if ctx is None or ctx.num_replicas_in_sync == 1 or not state:
    return state
  floats = {k: v for k, v in state.items() if v.dtype.is_floating}
  others = {k: v for k, v in state.items() if k not in floats}
  out = {}
  if floats:
    out.update(ctx.all_reduce(tf.distribute.ReduceOp.MEAN, floats))
  if others:
    first = tf.equal(ctx.replica_id_in_sync_group, 0)
    masked = {k: tf.where(first, v, tf.zeros_like(v)) for k, v in others.items()}
    out.update(ctx.all_reduce(tf.distribute.ReduceOp.SUM, masked))
  return {k: out[k] for k in state}


def num_elements(spec: Mapping[str, tf.TensorSpec]) -> int:
  """Total number of scalars in a weight spec (``{path: TensorSpec}``)."""
  total = 0
  for s in spec.values():
    n = 1
    for d in s.shape:
      n *= int(d)
    total += n
  return total
