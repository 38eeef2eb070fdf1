"""A learner of your own, outside the package: MAML with one learned rate per layer.

``PerLayerMAML`` subclasses ``hn.meta.Learner`` and writes ``adapt`` only: ``inner_steps``
plain gradient steps whose rate is a trainable scalar per layer (``exp`` of a log-rate,
so it stays positive), meta-trained with the initial weights. Its constructor's keyword
arguments are the ``config.meta`` fields of the same names, so the CLI builds it with

    PYTHONPATH=examples/own_learner python -m hypernet.train \\
        --config=configs/sinusoid_maml.py --config.meta.learner=my_learner:PerLayerMAML \\
        --workdir=/tmp/own_learner

and Keras with ``hn.keras.MetaModel(target, PerLayerMAML, loss="mse")`` (train.py here).
"""
import math

import tensorflow as tf

import hypernet as hn


class PerLayerMAML(hn.meta.Learner):
  """MAML (second order) whose inner rate is learned per layer.

  Args:
    model: the built target network.
    loss_fn: the support / query loss (``"mse"``, ``"sparse_softmax_cross_entropy"``
      or ``loss(labels, outputs)``).
    inner_lr: every layer's initial rate (float > 0).
    inner_steps: inner gradient steps (int >= 1).
    name: module name.
  """

  def __init__(self, model, loss_fn, *, inner_lr: float = 0.4, inner_steps: int = 1,
               name=None):
    super().__init__(model, loss_fn, name=name)
    if not inner_lr > 0 or inner_steps < 1:
      raise ValueError(f"inner_lr must be > 0 and inner_steps >= 1, got {inner_lr}, "
                       f"{inner_steps}.")
    self.inner_steps = int(inner_steps)
    self.paths = list(hn.variable_paths(model, trainable=True))
    layers = sorted({p.rpartition("/")[0] for p in self.paths})
    with self.name_scope:
      self.log_lrs = {layer: tf.Variable(math.log(inner_lr), dtype=tf.float32,
                                         name="log_lr_" + layer.replace("/", "_"))
                      for layer in layers}

  def adapt(self, support_x, support_y, weights=None, state=None, **options):
    """``inner_steps`` gradient steps from ``weights`` (every trainable weight:
    ``hn.meta.Learner.initial_weights``), each layer at its own learned rate."""
    fast = self.initial_weights(weights)
    steps = options.get("inner_steps") or self.inner_steps
    training = options.get("inner_training")
    training = True if training is None else training
    for _ in range(steps):
      params = [fast[p] for p in self.paths]
      with tf.GradientTape() as tape:
        tape.watch(params)
        outputs, state = hn.functional_call(self.model, fast, support_x,
                                            training=training, return_state=True,
                                            state=state, accelerate="meta")
        loss = self.loss_fn(support_y, outputs)
      grads = tape.gradient(loss, params)
      for p, g in zip(self.paths, grads):
        rate = tf.exp(self.log_lrs[p.rpartition("/")[0]])
        fast[p] = fast[p] - tf.cast(rate, g.dtype) * g
    return fast, dict(state or {})
