"""Differentiable inner update rules: how an inner-loop learner turns gradients into steps.

A rule is optax's ``init`` / ``update`` pair made of differentiable TensorFlow ops only,
so an outer ``tf.GradientTape`` differentiates through every inner step, the rule's
state (momentum, Adam's moments) included: exact second order.

References:
  Finn, Abbeel, Levine 2017 (MAML, SGD); Li, Zhou, Chen, Li 2017 (Meta-SGD);
  Antoniou, Edwards, Storkey 2019, "How to train your MAML" (LSLR); Polyak 1964
  (momentum); Kingma, Ba 2015, "Adam" (Alg. 1).
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from hypernet.core import ops

Params = Dict[str, tf.Tensor]
State = Dict[str, Dict[str, tf.Tensor]]


class InnerRule:
  """The interface: ``init(params) -> state`` and ``update(grads, state, params, step) ->
  (new_params, new_state)``, with ``params`` / ``grads`` as ``{path: tensor}``.

  A rule may own trainable variables (learned learning rates): :meth:`build` creates them
  for the adapted weights, :attr:`variables` lists them. The learner that holds the rule
  exposes them as its own trainable variables.
  """

  #: Whether ``init`` returns state that ``update`` carries from step to step.
  stateful = False

  def build(self, variables: Mapping[str, tf.Variable], paths: Sequence[str],
            inner_steps: int) -> None:
    """Creates the rule's own variables for the adapted ``paths`` (default: none).

    Args:
      variables: the target's trainable variables ``{path: variable}``.
      paths: the adapted paths.
      inner_steps: the learner's inner steps (per-step rates).
    """
    del variables, paths, inner_steps

  @property
  def variables(self) -> List[tf.Variable]:
    """The rule's trainable variables (default: none)."""
    return []

  def learning_rates(self):
    """The rule's rates in the form of :func:`hypernet.meta.inner_loop.step_learning_rate`
    (a number, ``{path: tensor}`` or a list of those per step); ``None`` for a stateful rule
    (second order with the inner steps recomputed needs a stateless rule)."""
    return None

  def init(self, params: Params) -> State:
    """The state before the first step (default: empty)."""
    del params
    return {}

  def update(self, grads: Params, state: State, params: Params, step: int
             ) -> Tuple[Params, State]:
    """One inner step.

    Args:
      grads: ``{path: tensor}`` the support loss's gradients, the params' shapes/dtypes.
      state: the rule's state (from :meth:`init` or the previous step).
      params: ``{path: tensor}`` the adapted weights before the step.
      step: the inner step (a Python int from 0).

    Returns:
      ``(new_params, new_state)``.
    """
    raise NotImplementedError


def _check_rate(name: str, value) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
    raise ValueError(f"{name} must be a float > 0, got {value!r}.")
  return float(value)


def _check_fraction(name: str, value) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
    raise ValueError(f"{name} must be a float in [0, 1), got {value!r}.")
  return float(value)


def sgd_step(params: Params, grads: Params, rates, step: int) -> Params:
  """``p - lr * g`` per path, ``lr`` from ``rates`` at ``step``
  (:func:`hypernet.meta.inner_loop.step_learning_rate`'s forms); a Python-number rate
  enters in the gradient's dtype exactly."""
  out = {}
  for p, g in grads.items():
    lr = rates[step] if isinstance(rates, (list, tuple)) else rates
    lr = lr[p] if isinstance(lr, Mapping) else lr
    out[p] = params[p] - ops.to_dtype(lr, g.dtype) * g
  return out


class SGD(InnerRule):
  """Plain gradient descent ``theta - lr * g`` (MAML's inner step, Finn et al. 2017 Eq. 1).

  Args:
    inner_lr: the learning rate (float > 0), or already decoded rates (a scalar tensor,
      ``{path: tensor}``, or a per-step list of those).
  """

  def __init__(self, inner_lr=0.4):
    self.inner_lr = (_check_rate("inner_lr", inner_lr) if isinstance(inner_lr, (int, float))
                     else inner_lr)

  def learning_rates(self):
    return self.inner_lr

  def update(self, grads, state, params, step):
    return sgd_step(params, grads, self.learning_rates(), step), state


class MetaSGD(SGD):
  """Meta-SGD (Li et al. 2017, Eq. 3): ``theta - alpha o g`` with ``alpha`` a trainable
  variable per adapted weight, of its shape and dtype, initialised to ``inner_lr``
  (:attr:`rates`, ``{path: tf.Variable}``)."""

  def __init__(self, inner_lr: float = 0.4):
    super().__init__(inner_lr)
    self.rates: Dict[str, tf.Variable] = {}

  def build(self, variables, paths, inner_steps):
    del inner_steps
    self.rates = {
        p: tf.Variable(tf.fill(tuple(variables[p].shape), tf.constant(
            self.inner_lr, tf.as_dtype(variables[p].dtype))), trainable=True,
                       name="inner_lr_" + p.replace("/", "_"))
        for p in paths}

  @property
  def variables(self):
    return list(self.rates.values())

  def learning_rates(self):
    return {p: tf.convert_to_tensor(v) for p, v in self.rates.items()}


class LSLR(SGD):
  """MAML++'s learned per-layer per-step rates (Antoniou et al. 2019, Sec. 4 "LSLR"): one
  trainable scalar per adapted tensor and inner step, initialised to ``inner_lr``
  (:attr:`rates`, ``{path: tf.Variable [inner_steps]}``). Steps beyond ``inner_steps``
  (more steps at meta-test time) reuse the last step's rate."""

  def __init__(self, inner_lr: float = 0.4):
    super().__init__(inner_lr)
    self.rates: Dict[str, tf.Variable] = {}
    self.inner_steps = 1

  def build(self, variables, paths, inner_steps):
    self.inner_steps = int(inner_steps)
    self.rates = {
        p: tf.Variable(tf.fill([self.inner_steps], tf.constant(
            self.inner_lr, tf.as_dtype(variables[p].dtype))), trainable=True,
                       name="step_lr_" + p.replace("/", "_"))
        for p in paths}

  @property
  def variables(self):
    return list(self.rates.values())

  def learning_rates(self, steps: Optional[int] = None):
    """``[{path: scalar}]``, one per inner step (``steps``: default the built count)."""
    rates = {p: tf.convert_to_tensor(v) for p, v in self.rates.items()}
    last = self.inner_steps - 1
    return [{p: r[min(k, last)] for p, r in rates.items()}
            for k in range(steps or self.inner_steps)]

  def update(self, grads, state, params, step):
    rates = {p: tf.convert_to_tensor(v)[min(step, self.inner_steps - 1)]
             for p, v in self.rates.items()}
    return sgd_step(params, grads, rates, 0), state


class Momentum(InnerRule):
  """Heavy-ball momentum (Polyak 1964; PyTorch's ``SGD(momentum=)``):
  ``v' = momentum * v + g``, ``theta' = theta - lr * v'`` (``+ momentum * v'`` added to
  ``g`` with ``nesterov``), ``v = 0`` at the start of each task.

  Args:
    inner_lr: the learning rate (float > 0).
    momentum: the decay of the velocity (float in [0, 1)).
    nesterov: Nesterov's look-ahead form (Sutskever et al. 2013).
  """

  stateful = True

  def __init__(self, inner_lr: float = 0.4, momentum: float = 0.9, nesterov: bool = False):
    self.inner_lr = _check_rate("inner_lr", inner_lr)
    self.momentum = _check_fraction("momentum", momentum)
    self.nesterov = bool(nesterov)

  def init(self, params):
    return {"velocity": {p: tf.zeros_like(t) for p, t in params.items()}}

  def update(self, grads, state, params, step):
    del step
    new_v, new_p = {}, {}
    for p, g in grads.items():
      mu = ops.to_dtype(self.momentum, g.dtype)
      v = mu * state["velocity"][p] + g
      direction = g + mu * v if self.nesterov else v
      new_v[p] = v
      new_p[p] = params[p] - ops.to_dtype(self.inner_lr, g.dtype) * direction
    return new_p, {"velocity": new_v}


def _sqrt(x: tf.Tensor) -> tf.Tensor:
  """``sqrt(x)`` for ``x >= 0`` whose derivative at 0 is 0, not infinite (a weight whose
  inner gradient is exactly 0 would otherwise turn the second-order term into NaN)."""
  positive = x > 0
  return tf.where(positive, tf.sqrt(tf.where(positive, x, tf.ones_like(x))),
                  tf.zeros_like(x))


class Adam(InnerRule):
  """Adam (Kingma & Ba 2015, Alg. 1) as an inner rule, bias-corrected:
  ``m' = b1 m + (1-b1) g``, ``v' = b2 v + (1-b2) g^2``, ``theta' = theta - lr *
  m_hat / (sqrt(v_hat) + eps)`` with ``m_hat = m' / (1 - b1^t)``, ``v_hat = v' / (1 -
  b2^t)``, ``t = step + 1``; ``m = v = 0`` at the start of each task. The first step is
  ``lr * g / (|g| + eps)``. The square root's derivative at an exactly-zero ``v_hat`` is
  taken as 0.

  Args:
    inner_lr: the learning rate (float > 0).
    beta1: the first moment's decay (float in [0, 1)).
    beta2: the second moment's decay (float in [0, 1)).
    epsilon: added to ``sqrt(v_hat)`` (float > 0).
  """

  stateful = True

  def __init__(self, inner_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.999,
               epsilon: float = 1e-8):
    self.inner_lr = _check_rate("inner_lr", inner_lr)
    self.beta1 = _check_fraction("beta1", beta1)
    self.beta2 = _check_fraction("beta2", beta2)
    self.epsilon = _check_rate("epsilon", epsilon)

  def init(self, params):
    zeros = lambda: {p: tf.zeros_like(t) for p, t in params.items()}
    return {"m": zeros(), "v": zeros()}

  def update(self, grads, state, params, step):
    t = step + 1
    new_m, new_v, new_p = {}, {}, {}
    for p, g in grads.items():
      c = lambda x: ops.to_dtype(x, g.dtype)  # pylint: disable=cell-var-from-loop
      m = c(self.beta1) * state["m"][p] + c(1.0 - self.beta1) * g
      v = c(self.beta2) * state["v"][p] + c(1.0 - self.beta2) * tf.square(g)
      m_hat = m / c(1.0 - self.beta1 ** t)
      v_hat = v / c(1.0 - self.beta2 ** t)
      new_m[p], new_v[p] = m, v
      new_p[p] = params[p] - c(self.inner_lr) * m_hat / (_sqrt(v_hat) + c(self.epsilon))
    return new_p, {"m": new_m, "v": new_v}


RULES = {"sgd": SGD, "momentum": Momentum, "adam": Adam}


def get_rule(rule, inner_lr: float, **hyper) -> InnerRule:
  """A rule by name (``"sgd"``, ``"momentum"``, ``"adam"``) built with ``inner_lr`` and
  those of ``hyper`` its constructor takes (``momentum``, ``nesterov``, ``beta1``,
  ``beta2``, ``epsilon``), or an :class:`InnerRule` as is.

  Raises:
    ValueError: an unknown name (lists the known ones), or a bad hyperparameter.
  """
  if isinstance(rule, InnerRule):
    return rule
  if rule not in RULES:
    raise ValueError(f"inner_rule={rule!r} is unknown; use one of {sorted(RULES)} or an "
                     "hypernet.meta.rules.InnerRule.")
  cls = RULES[rule]
  names = inspect.signature(cls.__init__).parameters
  return cls(inner_lr, **{k: v for k, v in hyper.items() if k in names})
