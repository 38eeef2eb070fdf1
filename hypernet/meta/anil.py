"""ANIL: Almost No Inner Loop (Raghu, Raghu, Bengio, Vinyals 2020, "Rapid Learning or
Feature Reuse? Towards Understanding the Effectiveness of MAML", Sec. 4).

Only the *head* (the weights selected by a path pattern, e.g. ``"head/*"``) is adapted in
the inner loop. The *body* is not adapted, so its features of the support set are
computed once and the inner steps run the head alone. The body is still meta-trained:
its meta-gradient comes through the query loss, both directly (query features) and
through the adapted head (support features enter the inner gradient).

The body / head split is derived from a ``keras.Sequential`` target (the body is every
layer before the first one holding a head weight), or given explicitly as two built
models sharing the target's variables.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import inner_loop
from hypernet.meta import learner as learner_lib
from hypernet.numerics import second_order

Weights = Mapping[str, tf.Tensor]


def split_sequential(model: keras.Model, head_paths) -> Tuple[keras.Model, keras.Model]:
  """Splits a built ``keras.Sequential`` into (body, head) at the first head layer.

  The two new ``Sequential`` models reuse the target's layers, hence its variables.

  Args:
    model: a built ``keras.Sequential`` target network.
    head_paths: variable paths (relative to ``model``) of the head.

  Returns:
    ``(body, head)``, both built: ``body`` maps the target's inputs to features,
    ``head`` maps features to the target's outputs.

  Raises:
    ValueError: ``model`` is not a built Sequential, or the first layer already holds a
      head weight (nothing is left for the body: use MAML).
  """
  if not isinstance(model, keras.Sequential):
    raise ValueError(
        f"ANIL can split only a keras.Sequential target into body and head; model "
        f"{model.name!r} is a {type(model).__name__}. Pass body= and head_model= (two "
        "built models sharing the target's layers) instead.")
  functional._check_built(model)  # pylint: disable=protected-access
  paths = functional.variable_paths(model)
  head_ids = {id(paths[p]) for p in head_paths}
  layers = model.layers
  first = next((i for i, layer in enumerate(layers)
                if any(id(v) in head_ids for v in layer.trainable_variables)), None)
  if first is None or first == 0:
    raise ValueError(
        f"The head weights {list(head_paths)} of model {model.name!r} "
        f"{'are in no layer' if first is None else 'start at its first layer'}, so there "
        "is no body to run once; use MAML for adapting the whole network.")
  try:
    input_shape = tuple(model.inputs[0].shape)
  except (AttributeError, ValueError, IndexError, TypeError) as e:
    raise ValueError(
        f"Cannot read the input shape of model {model.name!r}; build it with "
        "keras.Input(...) as its first element.") from e
  body = keras.Sequential(layers[:first], name=model.name + "_body")
  body.build(input_shape)
  head = keras.Sequential(layers[first:], name=model.name + "_head")
  head.build(tuple(body.outputs[0].shape))
  return body, head


class HeadSplit:
  """A target as a body (run once per task) and a head (adapted), sharing its variables.

  Args:
    model: the target network.
    head_paths: the head's target paths.
    body: optional built model computing the features; with ``head_model``. Default:
      split a Sequential ``model`` at its first head layer (:func:`split_sequential`).
    head_model: optional built model mapping features to outputs.

  Attributes:
    body, head: the two models.
    body_paths, head_paths: ``{sub-model path: target path}`` of each.
    head_adapted: the head's sub-model paths of ``head_paths`` (argument), in order.

  Raises:
    ValueError: only one of ``body`` / ``head_model``; the split is impossible; a head
      weight lies in the body or outside the head model; a sub-model variable is not the
      target's.
  """

  def __init__(self, model: keras.Model, head_paths, body=None, head_model=None):
    if (body is None) != (head_model is None):
      raise ValueError("Give both body= and head_model=, or neither.")
    if body is None:
      body, head_model = split_sequential(model, head_paths)
    self.body, self.head = body, head_model
    full_by_id = {id(v): p for p, v in functional.variable_paths(model).items()}

    def sub_to_full(sub_model):
      out = {}
      for sub_path, v in functional.variable_paths(sub_model).items():
        if id(v) not in full_by_id:
          raise ValueError(f"Variable {v.path!r} of {sub_model.name!r} is not a variable "
                           f"of the target {model.name!r}.")
        out[sub_path] = full_by_id[id(v)]
      return out

    self.body_paths = sub_to_full(body)     # {body path: target path}
    self.head_paths = sub_to_full(head_model)
    in_body = [p for p in self.body_paths.values() if p in head_paths]
    if in_body:
      raise ValueError(f"Head weights {in_body} lie in the body model {body.name!r}.")
    head_full_to_sub = {f: s for s, f in self.head_paths.items()}
    missing = [p for p in head_paths if p not in head_full_to_sub]
    if missing:
      raise ValueError(f"Head weights {missing} are not in the head model "
                       f"{head_model.name!r}.")
    self.head_adapted = [head_full_to_sub[p] for p in head_paths]

  @staticmethod
  def sub(mapping, paths) -> Dict[str, tf.Tensor]:
    """``mapping`` (target paths) restricted to and keyed by a sub-model's paths."""
    return {s: mapping[f] for s, f in paths.items() if f in mapping}

  def run_body(self, weights, inputs, training, state):
    """``(features, {target path: state})``: the body on ``inputs`` at ``weights``."""
    features, body_state = functional.functional_call(
        self.body, self.sub(weights, self.body_paths), inputs, training=training,
        return_state=True, state=self.sub(state, self.body_paths), accelerate="meta")
    return features, {self.body_paths[s]: t for s, t in body_state.items()}

  def adapt_head(self, fast, features, labels, state, loss_fn, *, rule, inner_steps,
                 first_order, training):
    """``(head weights, head state)`` keyed by target paths after ``inner_steps`` of
    ``rule`` on the head alone (:func:`hypernet.meta.inner_loop.inner_sgd`)."""
    head_fast, head_state = inner_loop.inner_sgd(
        self.head, loss_fn, self.sub(fast, self.head_paths), self.head_adapted, features,
        labels, rule=rule, inner_steps=inner_steps, first_order=first_order,
        training=training, state=self.sub(state, self.head_paths))
    return ({self.head_paths[s]: t for s, t in head_fast.items()},
            {self.head_paths[s]: t for s, t in head_state.items()})


@learner_lib.LEARNERS.register("anil")
class ANIL(learner_lib.AdaptsPaths, learner_lib.Learner):
  """ANIL (Raghu et al. 2020): MAML adapting only the head, the body run once.

  Args:
    model: the built target network.
    loss_fn: as :class:`hypernet.meta.inner_loop.MAML`.
    head: path patterns of the head weights (the only adapted ones), default
      ``"head/*"``.
    body: optional built model computing the features (sharing ``model``'s variables);
      with ``head_model``. Default: split a Sequential ``model`` at its first head layer.
    head_model: optional built model mapping features to outputs.
    inner_lr: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_steps: as :class:`~hypernet.meta.inner_loop.MAML`.
    first_order: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_training: as :class:`~hypernet.meta.inner_loop.MAML`.
    exclude: as :class:`~hypernet.meta.inner_loop.MAML`.
    zero_init: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_rule: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_momentum: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_beta1: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_beta2: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_epsilon: as :class:`~hypernet.meta.inner_loop.MAML`.
    name: as :class:`~hypernet.meta.inner_loop.MAML`.

  Raises:
    ValueError: the head pattern matches nothing; the split is impossible (see
      :func:`split_sequential`); a head weight lies in ``body``; the errors of MAML's
      arguments.
  """

  config_exclude = ("model", "loss_fn", "name", "exclude", "inner_training", "body",
                    "head_model")

  def __init__(self, model: keras.Model, loss_fn, *, head="head/*",
               body: Optional[keras.Model] = None, head_model: Optional[keras.Model] = None,
               inner_lr: float = 0.4, inner_steps: int = 1, first_order: bool = False,
               inner_training: Optional[bool] = True, exclude=(), zero_init=(),
               inner_rule="sgd", inner_momentum: float = 0.9, inner_beta1: float = 0.9,
               inner_beta2: float = 0.999, inner_epsilon: float = 1e-8,
               name: Optional[str] = None, **unknown):
    if "adapt" in unknown:
      raise TypeError("ANIL adapts the head only: give its path patterns as head=.")
    if unknown:
      raise TypeError(f"ANIL got unexpected keyword argument(s) {sorted(unknown)}.")
    super().__init__(model, loss_fn, name=name)
    self.inner_steps = learner_lib.check_int("inner_steps", inner_steps, 1)
    self.inner_lr = learner_lib.check_positive("inner_lr", inner_lr)
    self.first_order = bool(first_order)
    self.inner_training = inner_training
    self.rule = inner_loop.make_rule(inner_rule, self.inner_lr,
                                     inner_momentum=inner_momentum, inner_beta1=inner_beta1,
                                     inner_beta2=inner_beta2, inner_epsilon=inner_epsilon)
    if not self.first_order:
      second_order.check_second_order(model, f"Second-order {type(self).__name__}")
    self.adapted_paths, self.zero_init_paths = learner_lib.select_adapted(
        model, head, exclude, zero_init)
    self.split = HeadSplit(model, self.adapted_paths, body, head_model)
    with self.name_scope:
      self.rule.build(functional.variable_paths(model, trainable=True), self.adapted_paths,
                      self.inner_steps)
    inner_loop.expose_rule_variables(self, self.rule)

  @property
  def body(self) -> keras.Model:
    """The feature extractor (run once per task in the inner loop)."""
    return self.split.body

  @property
  def head_model(self) -> keras.Model:
    """The adapted part: features -> outputs."""
    return self.split.head

  def adapt(self, support_x, support_y, weights: Optional[Weights] = None,
            state: Optional[Weights] = None, **options
            ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """As :meth:`MAML.adapt`, running the body once on the support set.

    Returns:
      ``(fast_weights, state)`` keyed by target paths: the given weights with the head
      paths adapted; the non-trainable state of the target after the inner loop.
    """
    init = self.initial_weights(weights)
    state = dict(state or {})
    training = options.get("inner_training")
    training = self.inner_training if training is None else training
    steps = options.get("inner_steps")
    steps = self.inner_steps if steps is None else int(steps)
    features, body_state = self.split.run_body(init, support_x, training, state)
    fast = dict(init)
    new_state = dict(state)
    new_state.update(body_state)
    if steps:
      head, head_state = self.split.adapt_head(
          fast, features, support_y, state, self.loss_fn, rule=self.rule,
          inner_steps=steps, first_order=self.first_order, training=training)
      fast.update(head)
      new_state.update(head_state)
    return fast, new_state
