"""Implicit MAML (Rajeswaran, Finn, Kakade, Levine 2019, "Meta-Learning with Implicit
Gradients").

The inner problem is proximal-regularised (Eq. 3 / Alg. 1):

  ``phi*(theta) = argmin_phi  L_support(phi) + lambda/2 * ||phi - theta||^2``,

solved here by ``inner_steps`` of gradient descent from ``phi = theta`` on that objective,
*without* recording anything for the outer gradient (no activation of any inner step is
kept). At the solution ``d phi*/d theta = (I + H/lambda)^-1`` with ``H`` the Hessian of
``L_support`` at ``phi*`` (Lemma 1), so for an outer loss ``L_query(phi*)``

  ``d L_query / d theta = (I + H/lambda)^-1  grad L_query(phi*)``      (Eq. 6)

which :class:`ImplicitMAML` computes by ``cg_steps`` iterations of conjugate gradient on
Hessian-vector products (Sec. 3.1, Alg. 2), each a reverse-over-reverse product through
one support pass. The memory of the meta-gradient is that of one support pass, whatever
the number of inner steps.

The meta-gradient is exact when the inner problem is solved to convergence and CG runs
to convergence (``tests/test_meta_algorithms.py`` checks it against the closed form on a
quadratic inner problem to float64 precision); with few inner steps or CG iterations it
is the paper's approximation (Theorem 1 bounds its error).
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import inner_loop
from hypernet.meta import learner as learner_lib
from hypernet.numerics import second_order

Weights = inner_loop.Weights


def _dot(a: Sequence[tf.Tensor], b: Sequence[tf.Tensor]) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(x * y) for x, y in zip(a, b)])


def conjugate_gradient(matvec, b: List[tf.Tensor], steps: int) -> List[tf.Tensor]:
  """``steps`` iterations of conjugate gradient for ``A x = b`` from ``x = 0``
  (Hestenes and Stiefel 1952; Nocedal and Wright 2006, Alg. 5.2).

  Args:
    matvec: ``matvec(list of tensors) -> list of tensors``: ``A v`` for a symmetric
      positive definite ``A`` acting on a list of tensors shaped like ``b``.
    b: the right-hand side, a list of float tensors.
    steps: iterations (an int >= 1, unrolled). With exact arithmetic CG is exact after
      as many iterations as ``A`` has distinct eigenvalues; once the residual is zero
      further iterations leave ``x`` unchanged (``0/0`` is taken as 0).

  Returns:
    ``x``, a list shaped like ``b``.
  """
  x = [tf.zeros_like(t) for t in b]
  r = list(b)
  p = list(b)
  rs = _dot(r, r)
  for _ in range(steps):
    ap = matvec(p)
    alpha = tf.math.divide_no_nan(rs, _dot(p, ap))
    x = [xi + alpha * pi for xi, pi in zip(x, p)]
    r = [ri - alpha * api for ri, api in zip(r, ap)]
    rs_new = _dot(r, r)
    beta = tf.math.divide_no_nan(rs_new, rs)
    p = [ri + beta * pi for ri, pi in zip(r, p)]
    rs = rs_new
  return x


@learner_lib.LEARNERS.register("imaml")
class ImplicitMAML(learner_lib.AdaptsPaths, learner_lib.Learner):
  """Implicit MAML: proximal inner problem, meta-gradient by CG (module doc).

  ``adapt`` returns the approximate inner solution ``phi*`` as the fast weights; an
  outer tape that differentiates a loss of them gets ``(I + H/lambda)^-1 g`` for the
  adapted initial weights (``g``: the loss's gradient at ``phi*``), by a
  ``tf.custom_gradient``. Works with :func:`hypernet.meta.meta_batch_gradients` and
  :func:`hypernet.meta.meta_batch_loss` like MAML.

  Args:
    model: the target network, as :class:`~hypernet.meta.inner_loop.MAML`.
    loss_fn: the support / query loss, as for MAML.
    proximal_lambda: the proximal regularisation ``lambda`` (> 0; Rajeswaran et al. use
      0.5-2 on Omniglot). The paper's Eq. 6 needs ``lambda`` large enough that
      ``I + H/lambda`` is positive definite (``H`` may have negative eigenvalues away
      from a minimum).
    cg_steps: conjugate-gradient iterations per meta-gradient (int >= 1; the paper uses
      5 on Omniglot).
    lam: deprecated name of ``proximal_lambda`` (a ``DeprecationWarning``).
    inner_lr: the step size of the gradient descent on the regularised inner objective.
    inner_steps: its steps (int >= 1).
    adapt: as :class:`~hypernet.meta.inner_loop.MAML`.
    exclude: as :class:`~hypernet.meta.inner_loop.MAML`.
    inner_training: as :class:`~hypernet.meta.inner_loop.MAML`.
    zero_init: as :class:`~hypernet.meta.inner_loop.MAML`.
    name: as :class:`~hypernet.meta.inner_loop.MAML`.

  Weights that are not adapted (``exclude``) are treated as constants of the inner
  problem: their meta-gradient is the query loss's direct gradient at ``phi*`` (the
  paper meta-learns the adapted initial weights only).

  Raises:
    ValueError: ``proximal_lambda`` not > 0, ``cg_steps`` not an int >= 1, or the errors of
      :class:`~hypernet.meta.inner_loop.MAML`.
  """

  config_exclude = ("model", "loss_fn", "name", "exclude", "inner_training", "lam")

  def __init__(self, model: keras.Model, loss_fn, *, proximal_lambda: float = 1.0,
               cg_steps: int = 5, inner_lr: float = 0.4, inner_steps: int = 1, adapt=None,
               exclude=(), inner_training: Optional[bool] = True, zero_init=(),
               name: Optional[str] = None, lam: Optional[float] = None):
    super().__init__(model, loss_fn, name=name)
    if lam is not None:
      warnings.warn("ImplicitMAML(lam=) is deprecated; use proximal_lambda= (the "
                    "config.meta field of the same name).", DeprecationWarning, stacklevel=2)
      proximal_lambda = lam
    if (not isinstance(proximal_lambda, (int, float)) or isinstance(proximal_lambda, bool)
        or not proximal_lambda > 0):
      raise ValueError(f"proximal_lambda must be a float > 0 (the proximal "
                       f"regularisation), got {proximal_lambda!r}.")
    if not isinstance(cg_steps, int) or isinstance(cg_steps, bool) or cg_steps < 1:
      raise ValueError(f"cg_steps must be an int >= 1 (conjugate-gradient iterations), got "
                       f"{cg_steps!r}.")
    self.proximal_lambda = float(proximal_lambda)
    self.cg_steps = cg_steps
    self.inner_lr = learner_lib.check_positive("inner_lr", inner_lr)
    self.inner_steps = learner_lib.check_int("inner_steps", inner_steps, 1)
    self.inner_training = inner_training
    second_order.check_second_order(model, f"Second-order {type(self).__name__}")
    self.adapted_paths, self.zero_init_paths = learner_lib.select_adapted(
        model, adapt, exclude, zero_init)

  def _support_loss(self, weights, params, sx, sy, state, training):
    call_weights = dict(weights)
    call_weights.update(zip(self.adapted_paths, params))
    outputs, new_state = functional.functional_call(
        self._model, call_weights, sx, training=training, return_state=True,
        state=state, accelerate="meta")
    return self.loss_fn(sy, outputs), new_state

  def solve(self, weights: Weights, sx, sy, state: Weights, inner_steps=None, training=None
            ) -> Tuple[List[tf.Tensor], Dict[str, tf.Tensor]]:
    """``inner_steps`` of gradient descent on ``L_support(phi) + proximal_lambda/2 ||phi - theta||^2``
    from ``phi = theta`` (``theta``: the adapted entries of ``weights``).

    Args:
      weights: every trainable path of the target ``{path: tensor}`` (constants).
      sx: one task's support inputs.
      sy: one task's support labels.
      state: the target's non-trainable state ``{path: tensor}``.
      inner_steps: the steps (default the learner's).
      training: the target's ``training=`` flag (default ``inner_training``).

    Returns:
      ``(phi, state)``: the adapted tensors in ``adapted_paths`` order, and the state
      after the last step.

    Raises:
      MissingInnerGradientError: an adapted weight does not affect the support loss.
    """
    training = self.inner_training if training is None else training
    theta = [weights[p] for p in self.adapted_paths]
    phi = list(theta)
    for step in range(inner_steps or self.inner_steps):
      with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(phi)
        loss, state = self._support_loss(weights, phi, sx, sy, state, training)
      grads = tape.gradient(loss, phi)
      missing = [p for p, g in zip(self.adapted_paths, grads) if g is None]
      if missing:
        raise inner_loop.MissingInnerGradientError(
            f"Inner step {step}: the support loss has no gradient with respect to the "
            f"adapted weight(s) {missing} of model {self._model.name!r}; exclude them from "
            "the adapted weights (the adapt= / exclude= path patterns).")
      lr = tf.constant(self.inner_lr, phi[0].dtype)
      lam = tf.constant(self.proximal_lambda, phi[0].dtype)
      phi = [tf.stop_gradient(f - lr * (g + lam * (f - t)))
             for f, g, t in zip(phi, grads, theta)]
    return phi, state

  def adapt(self, support_x, support_y, weights: Optional[Weights] = None,
            state: Optional[Weights] = None, **options
            ) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
    """Solves one task's proximal inner problem; the implicit gradient flows back.

    Args and returns as :meth:`hypernet.meta.inner_loop.MAML.adapt` (options
    ``inner_steps`` and ``inner_training``); the returned state is not differentiated.
    """
    training = options.get("inner_training")
    training = self.inner_training if training is None else training
    steps = options.get("inner_steps")
    steps = self.inner_steps if steps is None else int(steps)
    init = self.initial_weights(weights)
    full = inner_loop.all_trainable_weights(self._model, init)
    const = {p: tf.stop_gradient(t) for p, t in full.items()}
    state = {p: tf.stop_gradient(t)
             for p, t in inner_loop.read_state(self._model, state).items()}
    phi, new_state = self.solve(const, support_x, support_y, state, steps, training)
    lam = tf.constant(self.proximal_lambda, phi[0].dtype)

    def hessian_solver(upstream: List[tf.Tensor]) -> List[tf.Tensor]:
      # One support pass and its gradient, kept by a persistent tape; each CG iteration
      # differentiates <grad, v> once more (reverse over reverse).
      with tf.GradientTape(persistent=True, watch_accessed_variables=False) as outer:
        outer.watch(phi)
        with tf.GradientTape(watch_accessed_variables=False) as inner:
          inner.watch(phi)
          loss, _ = self._support_loss(const, phi, support_x, support_y, state, training)
        grad = inner.gradient(loss, phi)

      def matvec(v):
        v = [tf.stop_gradient(t) for t in v]
        with outer:
          gv = _dot(grad, v)
        hv = outer.gradient(gv, phi, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return [vi + hvi / lam for vi, hvi in zip(v, hv)]

      x = conjugate_gradient(matvec, upstream, self.cg_steps)
      del outer
      return x

    @tf.custom_gradient
    def implicit(*theta):
      del theta  # The solution's value does not depend on how theta is differentiated.

      def grad(*upstream):
        upstream = [tf.zeros_like(f) if u is None else tf.convert_to_tensor(u)
                    for f, u in zip(phi, upstream)]
        return hessian_solver(upstream)

      return [tf.identity(f) for f in phi], grad

    fast_adapted = implicit(*[init[p] for p in self.adapted_paths])
    fast = dict(init)
    fast.update(zip(self.adapted_paths, fast_adapted))
    return fast, new_state
