"""A meta-batch of tasks: adapt per task, evaluate on the query set, average.

The tasks of a meta-batch run inside one graph *without a Python loop per task*: either
``tf.map_fn`` (a ``tf.while_loop`` over tasks: the task is traced once) or
``tf.vectorized_map`` (the task is traced once and vectorised over tasks by ``pfor``).
Unrolling a Python loop over 16 conv4 tasks took over 40 s to trace.

``"map_fn"`` is the default. Measured on 2 shared CPU cores (conv4, 5-way 1-shot,
meta-batch 16, ``benchmarks/meta_bench.py --parallel map_fn,vectorized_map``) both
trace in seconds and their step rates are within the noise of each other (0.3-1 steps/s); map_fn traces faster. pfor
has no converter for Conv2DBackpropFilter and falls back to a while loop for it, which
also makes ``"vectorized_map"`` fail under ``jit_compile=True`` (map_fn compiles). Kept as an option because batching the forward
convolutions across tasks may pay off on an accelerator (not measured). Under XLA (CPU),
second-order gradients through two stacked conv/ReLU/max-pool blocks differed from the
float64 reference by up to 6e-3 relative while the plain TF graph agreed to 3e-7; first
order agreed exactly: check before compiling a second-order step.

Meta-batch inputs (as produced by the episode sampler), for T tasks of N-way K-shot with
Q queries per class:

  ``support_x``: ``[T, N*K, ...]`` (images: ``[T, N*K, H, W, C]``) float
  ``support_y``: ``[T, N*K]`` int class ids in ``[0, N)`` (or ``[T, N*K, ...]`` targets)
  ``query_x``:   ``[T, N*Q, ...]``
  ``query_y``:   ``[T, N*Q]``
"""
from __future__ import annotations

from typing import Dict, Mapping, NamedTuple, Optional

import tensorflow as tf

from hypernet import functional
from hypernet.meta import losses

Weights = Mapping[str, tf.Tensor]
BATCH_KEYS = ("support_x", "support_y", "query_x", "query_y")
PARALLEL = ("map_fn", "vectorized_map")


class MetaBatchResult(NamedTuple):
  """What :func:`meta_batch_loss` returns.

  Attributes:
    loss: scalar, mean over tasks of the query loss after adaptation: what the outer
      optimiser minimises (differentiable, second order if the learner is).
    metrics: ``{name: scalar}`` means over tasks, not differentiated:
      ``query_loss_after`` / ``query_loss_before`` (the query loss at the fast / initial
      weights) and, for classification, ``query_accuracy_after`` /
      ``query_accuracy_before`` in [0, 1]; the ``_before`` ones only with
      ``before_metrics``.
    state: ``{path: tensor}`` non-trainable state after the query pass, averaged over
      tasks for float state (BatchNorm moving statistics), task 0's for other dtypes.
      Apply it with :func:`hypernet.functional.assign_state` if wanted.
    per_task: ``{name: [T] tensor}``, the metrics per task before averaging;
      ``per_task["query_loss_after"]`` is differentiable (e.g. for
      ``tf.nn.compute_average_loss`` over a global meta-batch split across replicas).
  """
  loss: tf.Tensor
  metrics: Dict[str, tf.Tensor]
  state: Dict[str, tf.Tensor]
  per_task: Dict[str, tf.Tensor]


def _check_batch(batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  missing = [k for k in BATCH_KEYS if k not in batch]
  if missing:
    raise ValueError(f"batch lacks {missing}; a meta-batch is a dict with keys "
                     f"{list(BATCH_KEYS)} (support/query of shape [T, examples, ...]).")
  out = {k: tf.convert_to_tensor(batch[k]) for k in BATCH_KEYS}
  for k, v in out.items():
    if v.shape.rank is not None and v.shape.rank < 2:
      raise ValueError(f"batch[{k!r}] has shape {v.shape}; expected [T, examples, ...] "
                       "with T tasks in the meta-batch.")
  t = {k: v.shape[0] for k, v in out.items()}
  if len({n for n in t.values() if n is not None}) > 1:
    raise ValueError(f"batch entries disagree on the number of tasks T: {t}.")
  return out


def meta_batch_loss(learner, batch: Mapping[str, tf.Tensor], *,
                    weights: Optional[Weights] = None, state: Optional[Weights] = None,
                    parallel: str = "map_fn", query_training: Optional[bool] = True,
                    accuracy: Optional[bool] = None, before_metrics: bool = True,
                    parallel_iterations: Optional[int] = None) -> MetaBatchResult:
  """Adapts to every task of a meta-batch and returns the mean query loss and metrics.

  For each task: fast weights = ``learner.adapt(support_x, support_y, weights, state)``,
  then the query loss ``learner.loss_fn(query_y, f(query_x; fast weights))``. Call it
  inside the outer ``tf.GradientTape`` (and, for speed, inside a ``tf.function``); the
  tasks all start from the same initial weights and state.

  Args:
    learner: an inner-loop learner (:class:`~hypernet.meta.inner_loop.MAML`,
      ``FirstOrderMAML``, ``MetaSGD``, :class:`~hypernet.meta.anil.ANIL`): anything with
      ``model``, ``loss_fn``, ``initial_weights(weights)`` and
      ``adapt(x, y, weights=, state=)``.
    batch: dict with ``support_x``, ``support_y``, ``query_x``, ``query_y`` (module doc).
    weights: optional initial weights ``{path: tensor}`` shared by all tasks (e.g. a
      hypernetwork's output); others come from the target's variables.
    state: optional non-trainable state ``{path: tensor}``; default the target's.
    parallel: ``"map_fn"`` (tf.map_fn, a while loop over tasks) or ``"vectorized_map"``
      (tf.vectorized_map: all tasks as one batched computation).
    query_training: the target's ``training=`` flag on the query set (``True``: BatchNorm
      uses the query batch statistics, as in Finn et al.'s implementation).
    accuracy: also report accuracies (argmax of the outputs vs. integer labels). ``None``:
      when the loss is :func:`hypernet.meta.losses.sparse_softmax_cross_entropy`.
    before_metrics: also evaluate the query set at the initial weights (one more forward
      pass per task, about a quarter of a 1-shot meta-step; e.g. only at evaluation).
    parallel_iterations: ``tf.map_fn``'s parallel iterations (None: TF's default).

  Returns:
    A :class:`MetaBatchResult` ``(loss, metrics, state, per_task)``.

  Raises:
    ValueError: a batch key is missing or shapes disagree; unknown ``parallel``.
    hypernet.meta.inner_loop.MissingInnerGradientError: from the learner.
  """
  if parallel not in PARALLEL:
    raise ValueError(f"parallel={parallel!r}; use one of {PARALLEL}.")
  batch = _check_batch(batch)
  model, loss_fn = learner.model, learner.loss_fn
  if accuracy is None:
    accuracy = loss_fn is losses.sparse_softmax_cross_entropy
  init = learner.initial_weights(weights)
  if state is None:
    state = {p: tf.convert_to_tensor(v.value)
             for p, v in functional.variable_paths(model, trainable=False).items()}
  state = dict(state)
  # Per-task results in the weights' dtype (float64 models give float64 losses).
  loss_dtype = next(iter(init.values())).dtype
  metric_names = ["query_loss_after"] + (["query_accuracy_after"] if accuracy else [])
  if before_metrics:
    metric_names += [n.replace("_after", "_before") for n in metric_names]

  def task(elems):
    sx, sy, qx, qy = elems
    fast, task_state = learner.adapt(sx, sy, weights=init, state=state)
    out_after, task_state = functional.functional_call(
        model, fast, qx, training=query_training, return_state=True, state=task_state)
    outputs = {"after": out_after}
    if before_metrics:
      outputs["before"] = tf.stop_gradient(functional.functional_call(
          model, init, qx, training=query_training, state=state))
    result = {}
    for when, out in outputs.items():
      result[f"query_loss_{when}"] = loss_fn(qy, out)
      if accuracy:
        result[f"query_accuracy_{when}"] = losses.sparse_accuracy(qy, out)
    result = {k: tf.cast(result[k], loss_dtype) for k in metric_names}
    return result, {p: task_state[p] for p in state}

  elems = tuple(batch[k] for k in BATCH_KEYS)
  if parallel == "map_fn":
    signature = ({k: tf.TensorSpec([], loss_dtype) for k in metric_names},
                 {p: tf.TensorSpec(t.shape, t.dtype) for p, t in state.items()})
    per_task, states = tf.map_fn(task, elems, fn_output_signature=signature,
                                 parallel_iterations=parallel_iterations)
  else:
    per_task, states = tf.vectorized_map(task, elems, fallback_to_while_loop=True)
  loss = tf.reduce_mean(per_task["query_loss_after"])
  metrics = {k: tf.stop_gradient(tf.reduce_mean(v)) for k, v in per_task.items()}
  new_state = {p: (tf.reduce_mean(s, axis=0) if s.dtype.is_floating else s[0])
               for p, s in states.items()}
  return MetaBatchResult(loss, metrics, new_state, per_task)
