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

from typing import Dict, Mapping, Optional, Tuple

import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.numerics import plain_bias
from hypernet.meta import inner_loop

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


class ANIL(inner_loop.MAML):
  """ANIL (Raghu et al. 2020): MAML adapting only the head, the body run once.

  Args:
    model: the built target network.
    loss_fn: as :class:`hypernet.meta.inner_loop.MAML`.
    head: path patterns of the head weights (the only adapted ones), default
      ``"head/*"``.
    body: optional built model computing the features (sharing ``model``'s variables);
      with ``head_model``. Default: split a Sequential ``model`` at its first head layer.
    head_model: optional built model mapping features to outputs.
    **kwargs: ``inner_lr``, ``inner_steps``, ``first_order``, ``inner_training``,
      ``exclude``, ``name`` as :class:`MAML`.

  Raises:
    ValueError: the head pattern matches nothing; the split is impossible (see
      :func:`split_sequential`); a head weight lies in ``body``.
  """

  def __init__(self, model: keras.Model, loss_fn, *, head="head/*",
               body: Optional[keras.Model] = None, head_model: Optional[keras.Model] = None,
               **kwargs):
    if "adapt" in kwargs:
      raise TypeError("ANIL adapts the head only: give its path patterns as head=.")
    super().__init__(model, loss_fn, adapt=head, **kwargs)
    if (body is None) != (head_model is None):
      raise ValueError("Give both body= and head_model=, or neither.")
    if body is None:
      body, head_model = split_sequential(model, self.adapted_paths)
    self._body, self._head = body, head_model
    full = functional.variable_paths(model)
    full_by_id = {id(v): p for p, v in full.items()}

    def sub_to_full(sub_model):
      out = {}
      for sub_path, v in functional.variable_paths(sub_model).items():
        if id(v) not in full_by_id:
          raise ValueError(f"Variable {v.path!r} of {sub_model.name!r} is not a variable "
                           f"of the target {model.name!r}.")
        out[sub_path] = full_by_id[id(v)]
      return out

    self._body_paths = sub_to_full(body)     # {body path: target path}
    self._head_paths = sub_to_full(head_model)
    in_body = [p for p in self._body_paths.values() if p in self.adapted_paths]
    if in_body:
      raise ValueError(f"Head weights {in_body} lie in the body model {body.name!r}.")
    head_full_to_sub = {f: s for s, f in self._head_paths.items()}
    missing = [p for p in self.adapted_paths if p not in head_full_to_sub]
    if missing:
      raise ValueError(f"Head weights {missing} are not in the head model "
                       f"{head_model.name!r}.")
    self._head_adapted = [head_full_to_sub[p] for p in self.adapted_paths]

  @property
  def body(self) -> keras.Model:
    """The feature extractor (run once per task in the inner loop)."""
    return self._body

  @property
  def head_model(self) -> keras.Model:
    """The adapted part: features -> outputs."""
    return self._head

  def adapt(self, support_x, support_y, weights: Optional[Weights] = None,
            state: Optional[Weights] = None
            ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """As :meth:`MAML.adapt`, running the body once on the support set.

    Returns:
      ``(fast_weights, state)`` keyed by target paths: the given weights with the head
      paths adapted; the non-trainable state of the target after the inner loop.
    """
    init = self.initial_weights(weights)
    state = dict(state or {})

    def sub(mapping, paths):
      return {s: mapping[f] for s, f in paths.items() if f in mapping}

    features, body_state = plain_bias.call(functional.functional_call,
        self._body, sub(init, self._body_paths), support_x, training=self.inner_training,
        return_state=True, state=sub(state, self._body_paths))
    fast = dict(init)
    fast.update(self._initial_head(init, features, support_y))
    new_state = dict(state)
    new_state.update({self._body_paths[s]: t for s, t in body_state.items()})
    if self.inner_steps:
      head_fast, head_state = inner_loop.inner_sgd(
          self._head, self.loss_fn, sub(fast, self._head_paths), self._head_adapted,
          features, support_y, inner_lr=self.inner_learning_rates(),
          inner_steps=self.inner_steps, first_order=self.first_order,
          training=self.inner_training, state=sub(state, self._head_paths))
      fast.update({self._head_paths[s]: t for s, t in head_fast.items()})
      new_state.update({self._head_paths[s]: t for s, t in head_state.items()})
    return fast, new_state

  def _initial_head(self, init, features, support_y) -> Dict[str, tf.Tensor]:
    """The head's weights ``{target path: tensor}`` the inner steps start from, given
    the task's support features ``[N*K, D]``: the initial weights (a subclass may
    generate them from the support set)."""
    del features, support_y
    return {p: init[p] for p in self._head_paths.values() if p in init}
