"""The whole target generated from the support set: a task-conditioned hypernetwork.

:class:`hypernet.meta.support_hypernet.SupportHypernetwork` generates the classifier head
from the support set's class prototypes; the body (every layer before the head) is the
same for every task. Here a hypernetwork of any kind (:mod:`hypernet.hypernetworks`,
conditional on a given ``[D]`` vector) also generates the body's weights for each task,
conditioned on a *task embedding* computed from the support set (the task-conditioned
hypernetwork of von Oswald et al. 2020, with the embedding inferred from the support
set instead of learned per task, as in LEO, Rusu et al. 2019, and the task encoders of
Requeima et al. 2019's CNAPs):

    z      = mean_i body(x_i; w0)                       (task embedding, [D], support set)
    w(z)   = w0 + gamma * H(z)                          (the body's weights for the task)
    head   = SupportHypernetwork.generate_head(body(x; w(z)), y)   (from the prototypes)

``w0`` are the body's variables (meta-learned), ``H`` the hypernetwork over the
selected body weights (``[D]`` condition vectors), ``gamma`` a learned scalar gate that
starts at 0: at initialisation the learner is exactly the head-only
:class:`SupportHypernetwork`, and meta-training learns how much of each task's body to
generate. The head is generated as there (from the prototypes of the task's own body),
then optionally fine-tuned by ``inner_steps`` SGD steps. Everything is differentiated
once (first order in the outer loop's sense: no inner gradient is differentiated unless
``inner_steps > 0`` on the head).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.hypernetworks import base as hn_base
from hypernet.meta import learner as learner_lib
from hypernet.meta import support_hypernet

Weights = Dict[str, tf.Tensor]


class SupportTargetHypernetwork(support_hypernet.SupportHypernetwork):
  """The body's weights and the head generated per task from its support set.

  Args:
    model: the built target network, as :class:`SupportHypernetwork` (a Sequential
      body ``[N*K, ...] -> [N*K, D]`` and a one-Dense head).
    loss_fn: the classification loss, as :class:`SupportHypernetwork`.
    hypernetwork: a built :class:`hypernet.hypernetworks.Hypernetwork` whose
      ``target_spec`` paths are body weights of ``model`` and whose ``condition_dim`` is
      ``D`` (the body's feature width), without a condition table; its output for a
      ``[D]`` task embedding is ``{path: tensor of the path's shape}``.
    gate: the initial value of the learned gate ``gamma`` (float; 0: the head-only
      learner at initialisation).
    **kwargs: ``head``, ``generator_widths``, ``scale``, ``inner_steps``, ``inner_lr``,
      ``first_order``, ``seed``, ``inner_training``, ``name`` as
      :class:`SupportHypernetwork`.

  Raises:
    ValueError: the hypernetwork generates a path that is not a body weight of
      ``model``, is conditioned on a table of ids, or its ``condition_dim`` is not
      ``D``; the errors of :class:`SupportHypernetwork`.
  """

  config_exclude = support_hypernet.SupportHypernetwork.config_exclude + ("hypernetwork",)

  def __init__(self, model: keras.Model, loss_fn, *, hypernetwork: hn_base.Hypernetwork,
               gate: float = 0.0, **kwargs):
    super().__init__(model, loss_fn, **kwargs)
    body_paths = set(self.split.body_paths.values())
    outside = [p for p in hypernetwork.target_spec if p not in body_paths]
    if outside:
      raise ValueError(f"The hypernetwork generates {outside}, which are not weights of "
                       f"the body {self.split.body.name!r} (its paths: {sorted(body_paths)}): "
                       "select body weights only (e.g. 'conv*/kernel').")
    kernel = functional.variable_paths(model)[self.kernel_path]
    dim = int(kernel.shape[0])
    if hypernetwork.num_conditions or hypernetwork.condition_dim != dim:
      raise ValueError(
          f"The hypernetwork must be conditioned on given [D] = [{dim}] task embeddings "
          f"(condition_dim={dim}, num_conditions=0), got condition_dim="
          f"{hypernetwork.condition_dim}, num_conditions={hypernetwork.num_conditions}.")
    self.hypernetwork = hypernetwork
    self.generated_body_paths = list(hypernetwork.target_spec)
    dtype = tf.as_dtype(kernel.dtype)
    with self.name_scope:
      self.gate = tf.Variable(tf.constant(float(gate), dtype), name="body_gate")

  @property
  def trainable_variables(self):
    """The head generator's, the gate's and the body hypernetwork's variables."""
    return learner_lib.unique_variables(super().trainable_variables,
                                        self.hypernetwork.trainable_variables)

  def task_embedding(self, support_x, weights: Optional[Weights] = None,
                     state: Optional[Weights] = None, inner_training=None) -> tf.Tensor:
    """``z``: the mean body feature of the support set under the initial weights,
    ``[D]`` in the head's dtype (BatchNorm in ``inner_training`` mode, default the
    learner's; its state is not kept)."""
    init = self.initial_weights(weights)
    training = self.inner_training if inner_training is None else inner_training
    features, _ = self.split.run_body(init, support_x, training, state or {})
    return tf.reduce_mean(features, axis=0)

  def task_weights(self, support_x, weights: Optional[Weights] = None,
                   state: Optional[Weights] = None) -> Weights:
    """``{path: w0 + gamma * H(z)}`` for the generated body paths (module doc)."""
    return self._task_weights(support_x, self.initial_weights(weights), state)

  def _task_weights(self, support_x, init: Weights, state: Optional[Weights],
                    inner_training=None) -> Weights:
    """:meth:`task_weights` from the initial weights ``init`` already read (the adapted
    paths as tensors); generated paths outside them are read from their variables."""
    missing = [p for p in self.generated_body_paths if p not in init]
    variables = functional.variable_paths(self._model) if missing else {}
    z = self.task_embedding(support_x, init, state, inner_training)
    generated = self.hypernetwork(z)
    out = {}
    for p in self.generated_body_paths:
      base = init[p] if p in init else tf.convert_to_tensor(variables[p])
      out[p] = base + tf.cast(self.gate, base.dtype) * tf.cast(generated[p], base.dtype)
    return out

  def adapt(self, support_x, support_y, weights: Optional[Weights] = None,
            state: Optional[Weights] = None, **options
            ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """The task's fast weights: the generated body (:meth:`task_weights`) and the head
    generated from the prototypes of its features (then ``inner_steps`` SGD steps).

    Args and returns as :meth:`SupportHypernetwork.adapt`.
    """
    task = self.initial_weights(weights)   # read once: embedding, body and head use it
    task.update(self._task_weights(support_x, task, state, options.get("inner_training")))
    return super().adapt(support_x, support_y, task, state, **options)
