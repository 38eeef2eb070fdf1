"""A support-conditioned hypernetwork: the classifier head generated from the support set.

For each task the target's *body* (every layer before the head) embeds the support set;
the mean embedding of class ``c`` (its prototype, Snell et al. 2017, Eq. 1) is fed to a
small hypernetwork ``phi`` shared by all classes, which generates that class's row of the
head (Qiao, Liu, Shen, Yuille 2018, "Few-Shot Image Recognition by Predicting
Parameters from Activations", Sec. 3: a parameter predictor from class-mean activations
to classifier weights). Optionally the generated head is then fine-tuned by
``inner_steps`` SGD steps on the support set, as Proto-MAML does (Triantafillou et al.
2020, "Meta-Dataset", Sec. 3.2: MAML's output layer initialised from prototypes), first
or second order.

With ``p_c`` the prototype (``[D]``) and ``phi(p) = relu(p W1 + b1) W2 + b2`` (``[D + 1]``;
``W2``, ``b2`` start at zero):

    w_c = p_c + phi(p_c)[:D]                          (generated weight row, [D])
    b_c = -||w_c||^2 / 2 + phi(p_c)[D]                (generated bias)
    head/kernel[:, c] = s * w_c,  head/bias[c] = s * b_c,  s = exp(log_scale) > 0

So at initialisation ``logits_c(x) = -s/2 ||f(x) - p_c||^2 + s/2 ||f(x)||^2``: with
``s = 2`` (the default) exactly the squared-Euclidean logits of Prototypical Networks
(Snell et al. 2017, Eq. 2 and Sec. 2.4; the ``||f(x)||^2`` term is the same for every
class and cancels in the softmax). Meta-training learns the body, the hypernetwork
``phi`` and the scale ``s`` through the query loss (the one train loop, as every other
learner), and the head's initial variables are not used.

A :class:`hypernet.meta.learner.Learner` (``config.meta.learner = "support_hypernet"``).
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from hypernet.meta import protonet, rules
from hypernet.meta import learner as learner_lib

Weights = Dict[str, tf.Tensor]


@learner_lib.LEARNERS.register("support_hypernet")
class SupportHypernetwork(learner_lib.Learner):
  """Classifier head generated per task from the support set's class prototypes.

  Args:
    model: the built target network, a ``keras.Sequential`` whose head (``head``
      patterns) is one ``Dense`` layer mapping ``[batch, D]`` features to ``[batch, N]``
      logits (conv4's ``head``), or give ``body`` / ``head_model`` as :class:`~hypernet.meta.anil.ANIL`.
    loss_fn: as :class:`~hypernet.meta.inner_loop.MAML` (the classification loss).
    head: path patterns of the generated head weights (default ``"head/*"``): exactly
      one kernel ``[D, N]`` and one bias ``[N]``.
    generator_widths: hidden ReLU widths of the hypernetwork ``phi`` (``()``: no hidden
      layer, ``phi`` linear).
    scale: the initial logit scale ``s`` (> 0; 2 = Prototypical Networks' logits).
    inner_steps: SGD steps on the generated head after generation (int >= 0; 0: none).
    inner_lr: their learning rate (float > 0).
    first_order: treat those steps' gradients as constants.
    seed: seed of the hypernetwork's initial weights (Glorot uniform for ``W1``).
    inner_training: as :class:`~hypernet.meta.anil.ANIL`.
    body: as :class:`~hypernet.meta.anil.ANIL`.
    head_model: as :class:`~hypernet.meta.anil.ANIL`.
    name: as :class:`~hypernet.meta.anil.ANIL`.

  Raises:
    ValueError: ``inner_steps`` < 0, ``scale`` <= 0, a bad width, or a head that is not
      one ``[D, N]`` kernel and one ``[N]`` bias; the split's errors
      (:class:`~hypernet.meta.anil.HeadSplit`).
  """

  config_exclude = ("model", "loss_fn", "name", "seed", "inner_training", "body",
                    "head_model")
  before_metrics = False
  min_inner_steps = 0

  def __init__(self, model: keras.Model, loss_fn, *, head="head/*",
               generator_widths: Sequence[int] = (), scale: float = 2.0,
               inner_steps: int = 0, inner_lr: float = 0.4, first_order: bool = False,
               seed: int = 0, inner_training: Optional[bool] = True,
               body: Optional[keras.Model] = None, head_model: Optional[keras.Model] = None,
               name: Optional[str] = None):
    if isinstance(inner_steps, bool) or not isinstance(inner_steps, int) or inner_steps < 0:
      raise ValueError(f"inner_steps must be an int >= 0 for the support-conditioned "
                       f"hypernetwork (0: the generated head as it is), got {inner_steps!r}.")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not scale > 0:
      raise ValueError(f"scale must be a float > 0 (2.0: Prototypical Networks' logits), "
                       f"got {scale!r}.")
    widths = tuple(generator_widths)
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
      raise ValueError(f"generator_widths must be ints >= 1, got {widths!r}.")
    super().__init__(model, loss_fn, name=name)
    self.inner_steps = inner_steps
    self.inner_lr = learner_lib.check_positive("inner_lr", inner_lr)
    self.first_order = bool(first_order)
    self.inner_training = inner_training
    self.rule = rules.SGD(self.inner_lr)
    # Only the head is differentiated twice here (and not at all with inner_steps=0):
    # no second-order check of the whole target.
    layout = protonet.dense_head(model, head, body, head_model)
    self.adapted_paths = layout.paths
    self.split = layout.split
    self._body, self._head = self.split.body, self.split.head  # Checkpointed as before.
    self.kernel_path, self.bias_path = layout.kernel_path, layout.bias_path
    # The head's own variables are replaced by the generated weights (not trained).
    self.generated_paths = [self.kernel_path, self.bias_path]
    dim, self.num_ways = layout.dim, layout.num_ways
    # Under a mixed policy the body's features come in the compute dtype (bfloat16 /
    # float16); the prototypes, the generator and the head are in the variables' dtype.
    self.head_dtype = layout.dtype
    self.generator_widths = widths
    self._make_generator(dim, layout.dtype, seed, scale)

  def _make_generator(self, dim: int, dtype, seed: int, scale: float) -> None:
    with self.name_scope:
      self.generator = []  # [(W, b)] per layer of phi; the last one starts at zero
      fan_in = dim
      for i, width in enumerate(self.generator_widths):
        init = keras.initializers.GlorotUniform(seed=seed + i)
        self.generator.append((
            tf.Variable(tf.cast(init((fan_in, width)), dtype), name=f"phi{i}_kernel"),
            tf.Variable(tf.zeros([width], dtype), name=f"phi{i}_bias")))
        fan_in = width
      self.generator.append((
          tf.Variable(tf.zeros([fan_in, dim + 1], dtype), name="phi_out_kernel"),
          tf.Variable(tf.zeros([dim + 1], dtype), name="phi_out_bias")))
      self.log_scale = tf.Variable(tf.constant(math.log(scale), dtype), name="log_scale")

  @property
  def body(self) -> keras.Model:
    """The feature extractor."""
    return self.split.body

  @property
  def head_model(self) -> keras.Model:
    """The generated part: features -> outputs."""
    return self.split.head

  def parameter_counts(self) -> Dict[str, int]:
    """``{"generator": parameters of phi and the scale}``."""
    return {"generator": sum(int(math.prod(v.shape)) for v in self.trainable_variables)}

  def initial_weights(self, weights: Optional[Weights] = None) -> Dict[str, tf.Tensor]:
    """``weights`` as tensors plus the head's paths read from their variables (the
    generated head replaces them in :meth:`adapt`)."""
    return learner_lib.initial_weights(self._model, weights, self.adapted_paths)

  @property
  def untrained_paths(self):
    """The generated head's paths: their variables are never read (not meta-trained)."""
    return list(self.generated_paths)

  def generate_head(self, features: tf.Tensor, labels: tf.Tensor) -> Weights:
    """The head generated from support features (module doc, equations).

    An episode may have fewer classes ``n`` than the head's ``N`` outputs (a head sized
    for training with more ways than testing, ``config.meta.train_ways``, as
    Prototypical Networks train with higher way, Snell et al. 2017 Sec. 3.1): classes
    ``n..N-1`` get a zero row and a bias of half the dtype's lowest value, so their
    softmax probability is exactly 0 and they never win the argmax.

    Args:
      features: ``[n*K, D]`` support embeddings (the body's output; a mixed policy's
        compute dtype is cast to the head's variable dtype).
      labels: ``[n*K]`` int class ids ``0..n-1`` (``n <= N``); every one must occur.

    Returns:
      ``{kernel path: [D, N], bias path: [N]}``.

    Raises:
      InvalidArgumentError: a class below the largest label has no support example.
    """
    protos, present = protonet.class_prototypes(tf.cast(features, self.head_dtype), labels,
                                                self.num_ways)
    h = protos
    for w, b in self.generator[:-1]:
      h = tf.nn.relu(tf.matmul(h, w) + b)
    w_out, b_out = self.generator[-1]
    delta = tf.matmul(h, w_out) + b_out                      # [N, D + 1]
    rows = protos + delta[:, :-1]
    bias = -0.5 * tf.reduce_sum(tf.square(rows), axis=-1) + delta[:, -1]
    scale = tf.exp(self.log_scale)
    kernel, bias = protonet.prototype_head(scale * rows, scale * bias, present)
    return {self.kernel_path: kernel, self.bias_path: bias}

  def adapt(self, support_x, support_y, weights: Optional[Weights] = None,
            state: Optional[Weights] = None, **options
            ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """The head generated from the support set's prototypes (:meth:`generate_head`),
    then ``inner_steps`` SGD steps on it (options as
    :meth:`hypernet.meta.learner.Learner.adapt`).

    Returns:
      ``(fast_weights, state)`` keyed by target paths.
    """
    init = self.initial_weights(weights)
    state = dict(state or {})
    training = options.get("inner_training")
    training = self.inner_training if training is None else training
    steps = options.get("inner_steps")
    steps = self.inner_steps if steps is None else int(steps)
    features, body_state = self.split.run_body(init, support_x, training, state)
    fast = dict(init)
    fast.update(self.generate_head(features, support_y))
    new_state = dict(state)
    new_state.update(body_state)
    if steps:
      head, head_state = self.split.adapt_head(
          fast, features, support_y, state, self.loss_fn, rule=self.rule,
          inner_steps=steps, first_order=self.first_order, training=training)
      fast.update(head)
      new_state.update(head_state)
    return fast, new_state
