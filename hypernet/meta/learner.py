"""The learner protocol, the learners' registry and what learners share.

A learner is a weight source whose context is a support set: ``adapt`` maps initial
weights and one task's support set to fast weights ``{path: tensor}``, on which the
target then runs (:func:`hypernet.core.functional.functional_call` with
``accelerate="meta"``). :mod:`hypernet.meta.meta_batch`, the train loop
and ``hn.keras.MetaModel`` use learners through this protocol only.
"""
from __future__ import annotations

import abc
import functools
import types
from typing import Any, Dict, List, Mapping, Optional, Tuple

import keras
import tensorflow as tf

from hypernet.core import functional, plugins, source
from hypernet.core.registry import Registry
from hypernet.meta import losses

Weights = Mapping[str, tf.Tensor]

LEARNERS = Registry("learner", "config.meta.learner", "hypernet.meta",
                    base="hypernet.meta.learner:Learner")
"""The learners by ``config.meta.learner`` (``@LEARNERS.register("name")`` on a
:class:`Learner` in ``hypernet/meta/``), or ``"package.module:Class"`` for your own."""


class Learner(tf.Module, abc.ABC):
  """An inner-loop learner: what the meta-batch code, the tasks and Keras call.

  A subclass writes :meth:`adapt`; the rest has defaults. Its constructor takes the
  target ``model`` and ``loss_fn`` first; its other keyword arguments are the
  ``config.meta`` fields of the same names when it is named by ``config.meta.learner``
  (``"package.module:Class"`` for a class of yours), or ``learner_args`` of
  ``hn.keras.MetaModel``; arguments that do not come from the config are listed in a
  class attribute ``config_exclude`` (``hypernet.core.registry.Registry``). Variables it creates (learned rates, generators) are its
  ``trainable_variables`` (``tf.Module``) and are meta-trained with the target.

  Args:
    model: the built target network (Keras 3), run functionally (``functional_call(..., accelerate="meta")``).
    loss_fn: ``loss_fn(labels, outputs) -> scalar``, or a name known to
      :func:`hypernet.meta.losses.get_loss`; the support loss and the query loss.
    name: module name.

  Attributes:
    multi_step_loss: the outer loss weighs the query loss after every inner step
      (:meth:`adapt_steps`; MAML++'s multi-step loss).
    first_order: the meta-gradient does not go through inner gradients.
    before_metrics: the query loss at the initial weights means something (``False``
      where the weights the target starts from are generated per task).
    min_inner_steps: the fewest inner steps the learner takes.
    inner_lrs: learned per-parameter inner learning rates ``{path: variable}``, logged
      by the train loop (default none).
  """

  # Constructor arguments that are not config.meta fields (given by the caller).
  config_exclude = ("model", "loss_fn", "name")
  inner_lrs: Mapping[str, tf.Variable] = types.MappingProxyType({})
  multi_step_loss = False
  first_order = False
  before_metrics = True
  min_inner_steps = 1

  def __init__(self, model: keras.Model, loss_fn, *, name: Optional[str] = None):
    super().__init__(name=name)
    self._model = model
    self.loss_fn = losses.get_loss(loss_fn)

  def __init_subclass__(cls, **kwargs):
    """Checks what a subclass's :meth:`adapt` returns (a learner of the user's fails in
    one line naming it, not deep inside the meta-batch code)."""
    super().__init_subclass__(**kwargs)
    adapt = cls.adapt  # Only a subclass's own adapt is checked (not one it inherits).
    if adapt is getattr(super(cls, cls), "adapt", None) or getattr(
        adapt, "__isabstractmethod__", False):
      return

    @functools.wraps(adapt)
    def checked(self, *args, **kw):
      return _check_adapted(type(self), adapt(self, *args, **kw))
    cls.adapt = checked

  # -- the weight-source protocol (hypernet.core.source.WeightSource) ----------------------
  @property
  def target(self) -> keras.Model:
    """The target network (the weight-source protocol's name for :attr:`model`)."""
    return self._model

  @property
  def own_variables(self) -> List[tf.Variable]:
    """The learner's own parameters (learned rates, generators, ...)."""
    return list(self.trainable_variables)

  def weights(self, context) -> Dict[str, tf.Tensor]:
    """The weight-source protocol: ``context = (support_x, support_y)``, the fast weights
    ``{path: tensor}`` after :meth:`adapt` from the target's own variables."""
    support_x, support_y = context
    return self.adapt(support_x, support_y)[0]

  @property
  def model(self) -> keras.Model:
    """The target network."""
    return self._model

  @property
  def untrained_paths(self) -> List[str]:
    """Target paths whose variables the learner never reads (not meta-trained)."""
    return []

  def parameter_counts(self) -> Dict[str, int]:
    """Extra parameter counts to report (``{name: count}``; default none)."""
    return {}

  def initial_weights(self, weights: Optional[Weights] = None) -> Dict[str, tf.Tensor]:
    """The weights the inner loop starts from (default: ``weights`` as tensors plus every
    trainable weight of the target they lack, read from its variable: a read an outer
    tape differentiates back to the variable).

    Raises:
      ValueError: a path of ``weights`` is not a variable of the target.
    """
    return initial_weights(self._model, weights,
                           list(functional.variable_paths(self._model, trainable=True)))

  @abc.abstractmethod
  def adapt(self, support_x, support_y, weights: Optional[Weights] = None,
            state: Optional[Weights] = None, **options
            ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """Adapts to one task's support set.

    Args:
      support_x: support inputs ``[N*K, ...]`` in the target's input dtype.
      support_y: support labels ``[N*K]`` int class ids, or regression targets.
      weights: initial weights ``{path: tensor}`` (from :meth:`initial_weights`, or a
        hypernetwork's output); paths not given are read from the target's variables.
      state: non-trainable state ``{path: tensor}`` (BatchNorm statistics).
      **options: per-call choices a learner takes where it has them, else ignores:
        ``inner_steps`` (int), ``inner_training`` (the target's ``training=`` flag in
        the inner loop), ``first_order`` (bool or scalar bool tensor: MAML++'s
        derivative-order annealing).

    Returns:
      ``(fast_weights, state)``: ``{path: tensor}`` to run the target on, and the state
      after adaptation.
    """

  def adapt_steps(self, support_x, support_y, weights: Optional[Weights] = None,
                  state: Optional[Weights] = None, **options
                  ) -> Tuple[List[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]:
    """The fast weights after every inner step (a list; default: the final ones only)
    and the state after the last step; read with :attr:`multi_step_loss`."""
    fast, state = self.adapt(support_x, support_y, weights, state, **options)
    return [fast], state


source.WeightSource.register(Learner)


class AdaptsPaths:
  """For a learner whose constructor sets ``adapted_paths`` (the paths the inner loop
  adapts) and ``zero_init_paths`` (those that start every task at zero), e.g. from
  :func:`select_adapted`: the two members of :class:`Learner` that follow from them.
  Put it before :class:`Learner` among the bases."""

  adapted_paths: List[str]
  zero_init_paths: List[str]

  @property
  def untrained_paths(self) -> List[str]:
    """The zero-initialised paths: their variables are never read (not meta-trained)."""
    return list(self.zero_init_paths)

  def initial_weights(self, weights: Optional[Weights] = None) -> Dict[str, tf.Tensor]:
    """The initial weights as tensors: ``weights`` plus the adapted paths it lacks.

    Adapted paths missing from ``weights`` are read from the target's variables (a
    variable read, so an outer tape differentiates back to the variable); ``zero_init``
    paths are zeros.

    Raises:
      ValueError: a path of ``weights`` is not a variable of the target.
    """
    return initial_weights(self._model, weights, self.adapted_paths, self.zero_init_paths)


def _check_adapted(cls, result):
  """``result`` of ``cls.adapt`` if it is ``(fast_weights, state)`` with two mappings."""
  if (isinstance(result, (tuple, list)) and len(result) == 2
      and isinstance(result[0], Mapping) and isinstance(result[1], (Mapping, type(None)))):
    return result
  what = (f"a {type(result).__name__} of {len(result)}" if isinstance(result, (tuple, list))
          else f"a {type(result).__name__}")
  raise plugins.PluginError(
      f"config.meta.learner: {cls.__name__}.adapt returned {what}; it must return "
      "(fast_weights, state): two dicts {path: tensor} (hypernet.meta.Learner.adapt).")


def unique_variables(*groups) -> List[tf.Variable]:
  """The variables of ``groups`` (iterables of variables) in order, each once: a learner's
  own ``trainable_variables`` joined with those of a module it holds that ``tf.Module``
  also finds through its attributes."""
  out, seen = [], set()
  for v in (v for group in groups for v in group):
    if id(v) not in seen:
      seen.add(id(v))
      out.append(v)
  return out


def check_int(name: str, value, least: int) -> int:
  """``value`` as an int ``>= least``.

  Raises:
    ValueError: not an int, or smaller (names ``name``).
  """
  if isinstance(value, bool) or not isinstance(value, int) or value < least:
    raise ValueError(f"{name} must be an int >= {least}, got {value!r}.")
  return value


def check_positive(name: str, value) -> float:
  """``value`` as a float ``> 0``.

  Raises:
    ValueError: not a number > 0 (names ``name``).
  """
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
    raise ValueError(f"{name} must be a float > 0, got {value!r}.")
  return float(value)


def select_adapted(model: keras.Model, adapt, exclude=(), zero_init=()
                   ) -> Tuple[List[str], List[str]]:
  """``(adapted paths, zero-initialised paths)`` of ``model`` from path patterns
  (:func:`hypernet.core.functional.select_paths`; ``adapt=None`` or ``""``: every
  trainable weight; ``zero_init=""`` or ``()``: none).

  Raises:
    ValueError: the patterns select nothing; a zero-initialised path is not adapted.
  """
  adapted = functional.select_paths(model, adapt or None, trainable=True, exclude=exclude)
  if not adapted:
    raise ValueError(
        f"adapt={adapt!r} with exclude={exclude!r} selects no weight of model "
        f"{model.name!r}; available: {list(functional.variable_paths(model, True))}")
  zeros = functional.select_paths(model, zero_init, trainable=True) if zero_init else []
  not_adapted = [p for p in zeros if p not in adapted]
  if not_adapted:
    raise ValueError(f"zero_init={zero_init!r} selects {not_adapted}, which the inner "
                     "loop does not adapt: they would stay zero. Adapt them or drop them.")
  return adapted, zeros


def initial_weights(model: keras.Model, weights: Optional[Weights], adapted,
                    zero_init=()) -> Dict[str, tf.Tensor]:
  """``weights`` as tensors plus the ``adapted`` paths it lacks, read from the target's
  variables (a read an outer tape differentiates back to the variable); ``zero_init``
  paths are zeros.

  Raises:
    ValueError: a path of ``weights`` is not a variable of the target.
  """
  weights = dict(weights or {})
  variables = functional.variable_paths(model)
  unknown = [p for p in weights if p not in variables]
  if unknown:
    raise ValueError(
        f"weights has path(s) {unknown} that are not variables of model "
        f"{model.name!r}; known paths: {list(variables)}")
  out = {p: tf.convert_to_tensor(w) for p, w in weights.items()}
  for p in adapted:
    if p not in out:
      out[p] = tf.convert_to_tensor(variables[p].value)
  for p in zero_init:
    out[p] = tf.zeros(variables[p].shape, variables[p].dtype)
  return out


def build_learner(spec, group: Mapping[str, Any], model: keras.Model, loss_fn, **given
                  ) -> Learner:
  """The learner ``spec`` (a registered name, ``"package.module:Class"`` or a
  :class:`Learner` subclass) for ``model``: its constructor gets the fields of ``group``
  it names (by their own names), then ``given``.

  Raises:
    hypernet.core.plugins.PluginError (a ValueError): an unknown name, a class that is
      not a :class:`Learner`, a required argument missing; the learner's own errors.
  """
  return LEARNERS.build(spec, group, model=model, loss_fn=loss_fn, **given)
