"""A meta-batch of tasks: adapt per task, evaluate on the query set, average.

Two ways to get the meta-gradient of a meta-batch, both exact and both *without a Python
loop per task* (unrolling a Python loop over 16 conv4 tasks took over 40 s to trace):

* :func:`meta_batch_gradients` (per-task accumulation, what training uses): a
  ``tf.while_loop`` over tasks whose body adapts to one task, takes that task's
  meta-gradient with its own ``tf.GradientTape`` and adds it to a running sum. Each
  task's activations and second-order graph are freed when its iteration ends, so memory
  grows with one task, not with the meta-batch (as PyTorch frees each task's graph after
  its ``backward()``). Weights given as tensors (a hypernetwork's output) get the summed
  gradient, which the caller chains back through their producer once per meta-batch.
* :func:`meta_batch_loss`: the mean query loss under the caller's outer tape, tasks run
  by ``tf.map_fn`` (a ``tf.while_loop`` over tasks: the task is traced once) or
  ``tf.vectorized_map`` (vectorised over tasks by ``pfor``). Differentiating it keeps
  every task's intermediates for the backward loop: for conv4 with 15 queries per class
  1.5 GB above the import baseline at meta-batch 16 and 2.3 GB at 32, against 0.41 and
  0.45 GB for the accumulation, at step rates within the noise of each other
  (``benchmarks/meta_bench.py``, experiments/RESULTS_meta.md). In the differentiated
  loop two thirds of the max-pool gradients fall back from oneDNN to TF's generic
  kernel; in the accumulation's loop body all run on oneDNN.

For :func:`meta_batch_loss`, ``"map_fn"`` is the default. Measured on 2 shared CPU cores
(conv4, 5-way 1-shot, meta-batch 16) map_fn and vectorized_map both trace in seconds and
their step rates are within the noise of each other (0.3-1 steps/s); map_fn traces
faster. pfor
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

An input entry may also be a nest (dict, tuple) of such tensors, for a target with
several inputs (a transformer's ``{"token_ids": [T, N*K, L], "padding_mask": ...}``).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence

import keras
import tensorflow as tf

from hypernet.core import control_flow, functional
from hypernet.numerics import accel
from hypernet.meta import learner as learner_lib
from hypernet.meta import losses, per_step_bn

Weights = Mapping[str, tf.Tensor]
BATCH_KEYS = ("support_x", "support_y", "query_x", "query_y")
PARALLEL = ("map_fn", "vectorized_map")
# config.meta.parallel: "accumulate" (meta_batch_gradients) or one of PARALLEL.
STRATEGIES = ("accumulate",) + PARALLEL
# What every learner.adapt call of a meta-batch may be given (Learner.adapt).
ADAPT_OPTIONS = ("inner_steps", "inner_training", "first_order")


def sum_gradients(a, b):
  """``a + b`` for two gradients of one source, either of which may be ``None`` (no
  path) or ``tf.IndexedSlices`` (a gathered variable; densified before adding)."""
  if a is None or b is None:
    return b if a is None else a
  return tf.convert_to_tensor(a) + tf.convert_to_tensor(b)


class MetaBatchResult(NamedTuple):
  """What :func:`meta_batch_loss` returns.

  Attributes:
    loss: scalar, mean over tasks of the query loss after adaptation: what the outer
      optimiser minimises (differentiable, second order if the learner is).
    metrics: ``{name: scalar}`` means over tasks, not differentiated:
      ``loss`` / ``loss_before`` (the query loss at the fast / initial
      weights) and, for classification, ``accuracy`` /
      ``accuracy_before`` in [0, 1]; the ``_before`` ones only with
      ``before_metrics``.
    state: ``{path: tensor}`` non-trainable state after the query pass, averaged over
      tasks for float state (BatchNorm moving statistics), task 0's for other dtypes.
      Apply it with :func:`hypernet.core.functional.assign_state` if wanted.
    per_task: ``{name: [T] tensor}``, the metrics per task before averaging;
      ``per_task["loss"]`` is differentiable (e.g. for
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
  # An entry may be a nest of tensors (a multi-input target's inputs: a dict of token ids
  # and padding mask), each with the leading task axis.
  out = {k: tf.nest.map_structure(tf.convert_to_tensor, batch[k]) for k in BATCH_KEYS}
  leaves = {repr(k) + "".join(f"[{p!r}]" for p in path): v for k in BATCH_KEYS
            for path, v in keras.tree.flatten_with_path(out[k])}
  for k, v in leaves.items():
    if v.shape.rank is not None and v.shape.rank < 2:
      raise ValueError(f"batch[{k}] has shape {v.shape}; expected [T, examples, ...] "
                       "with T tasks in the meta-batch.")
  t = {k: v.shape[0] for k, v in leaves.items()}
  if len({n for n in t.values() if n is not None}) > 1:
    raise ValueError(f"batch entries disagree on the number of tasks T: {t}.")
  return out


def _task(entry, i):
  """Task ``i`` of a batch entry (a tensor or a nest of them)."""
  return tf.nest.map_structure(lambda t: tf.gather(t, i), entry)


def _query_metrics(model, loss_fn, qx, qy, out_after, loss_after, init, state, query_training,
                   before_metrics: bool, accuracy: bool, dtype) -> Dict[str, tf.Tensor]:
  """One task's query metrics in ``dtype``: ``loss`` (the loss already
  computed, not again), ``accuracy`` for classification, and with
  ``before_metrics`` the same at the initial weights (one more forward pass, no gradient)."""
  result = {"loss": loss_after}
  if accuracy:
    result["accuracy"] = losses.sparse_accuracy(qy, out_after)
  if before_metrics:
    out = tf.stop_gradient(functional.functional_call(model, init, qx, training=query_training,
                                                   state=state, accelerate="meta"))
    result["loss_before"] = loss_fn(qy, out)
    if accuracy:
      result["accuracy_before"] = losses.sparse_accuracy(qy, out)
  return {k: tf.cast(v, dtype) for k, v in result.items()}


def uses_multi_step_loss(learner) -> bool:
  """Whether ``learner`` asks for MAML++'s multi-step loss (``multi_step_loss=True``)."""
  return bool(learner.multi_step_loss)


def _adapt(learner, sx, sy, init, state, options):
  """``(fast weights after each step (a list; the last alone without MSL), state)``."""
  if uses_multi_step_loss(learner):
    return learner.adapt_steps(sx, sy, weights=init, state=state, **options)
  fast, task_state = learner.adapt(sx, sy, weights=init, state=state, **options)
  return [fast], task_state


def _objective(learner, model, steps, qx, qy, state, final_loss, query_training,
               msl_weights):
  """The differentiated per-task loss: the query loss at the fast weights, or with the
  multi-step loss ``sum_k w_k L_query(theta_k)`` (``msl_weights``, default all on the
  last step; Antoniou et al. 2019, Sec. 4)."""
  if len(steps) == 1 or msl_weights is None:
    return final_loss
  weights = tf.cast(msl_weights, final_loss.dtype)
  total = weights[-1] * final_loss
  for k, fast in enumerate(steps[:-1]):
    with per_step_bn.step_scope(k + 1):  # After k + 1 steps: per-step BatchNorm row k+1.
      out = functional.functional_call(model, fast, qx, training=query_training, state=state,
                                       accelerate="meta")
    total += weights[k] * learner.loss_fn(qy, out)
  return total


def _target_state(model, state) -> Dict[str, tf.Tensor]:
  """``state`` as a dict, default the target's non-trainable variables' values."""
  if state is None:
    return {p: tf.convert_to_tensor(v.value)
            for p, v in functional.variable_paths(model, trainable=False).items()}
  return dict(state)


def _metric_names(accuracy: bool, before_metrics: bool) -> List[str]:
  names = ["loss"] + (["accuracy"] if accuracy else [])
  if before_metrics:
    names += [f"{n}_before" for n in names]
  return names


def _check_options(adapt_options) -> Dict[str, object]:
  options = dict(adapt_options or {})
  unknown = sorted(set(options) - set(ADAPT_OPTIONS))
  if unknown:
    raise ValueError(f"adapt_options {unknown} are unknown; use {list(ADAPT_OPTIONS)}.")
  return {k: v for k, v in options.items() if v is not None}


def _map_tasks(task, elems, parallel, signature, parallel_iterations):
  """``task`` over the tasks of ``elems``: ``tf.map_fn`` or ``tf.vectorized_map``."""
  if parallel == "map_fn":
    return control_flow.map_fn(task, elems, fn_output_signature=signature,
                               parallel_iterations=parallel_iterations)
  # TensorFlow's BatchNorm / ReLU / max-pool ops vectorise over tasks; the fused block
  # has no pfor converter and would run in a loop over them (hypernet.numerics.norm_relu_pool).
  # (Entered inside the mapped function: eagerly, vectorized_map traces it in a
  # tf.function of its own, which a switch entered around the call does not reach.)
  def unfused_task(elems):
    with accel.disabled("fused_blocks"):
      return task(elems)

  return tf.vectorized_map(unfused_task, elems, fallback_to_while_loop=True)


def meta_batch_loss(learner, batch: Mapping[str, tf.Tensor], *,
                    weights: Optional[Weights] = None, state: Optional[Weights] = None,
                    parallel: str = "map_fn", query_training: Optional[bool] = True,
                    accuracy: Optional[bool] = None, before_metrics: bool = True,
                    parallel_iterations: Optional[int] = None, msl_weights=None,
                    adapt_options: Optional[Mapping[str, object]] = None
                    ) -> MetaBatchResult:
  """Adapts to every task of a meta-batch and returns the mean query loss and metrics.

  For each task: fast weights = ``learner.adapt(support_x, support_y, weights, state)``,
  then the query loss ``learner.loss_fn(query_y, f(query_x; fast weights))``. Call it
  inside the outer ``tf.GradientTape`` (and, for speed, inside a ``tf.function``); the
  tasks all start from the same initial weights and state.

  Args:
    learner: a :class:`hypernet.meta.learner.Learner`.
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
    msl_weights: with ``learner.multi_step_loss``, ``[inner_steps]`` weights of the query
      loss after each step (:func:`hypernet.meta.msl_weights`; ``None``: the last alone).
    adapt_options: options of every ``learner.adapt`` call: ``inner_steps``,
      ``inner_training``, ``first_order`` (:meth:`hypernet.meta.learner.Learner.adapt`).

  Returns:
    A :class:`MetaBatchResult` ``(loss, metrics, state, per_task)``.

  Raises:
    ValueError: a batch key is missing or shapes disagree; unknown ``parallel`` or option.
    hypernet.meta.inner_loop.MissingInnerGradientError: from the learner.
  """
  if parallel not in PARALLEL:
    raise ValueError(f"parallel={parallel!r}; use one of {PARALLEL}.")
  batch = _check_batch(batch)
  options = _check_options(adapt_options)
  model, loss_fn = learner.model, learner.loss_fn
  if accuracy is None:
    accuracy = loss_fn is losses.sparse_softmax_cross_entropy
  init = learner.initial_weights(weights)
  state = _target_state(model, state)
  # Per-task results in the weights' dtype (float64 models give float64 losses).
  loss_dtype = next(iter(init.values())).dtype
  msl = uses_multi_step_loss(learner)
  metric_names = _metric_names(accuracy, before_metrics) + (["msl_objective"] if msl else [])

  def task(elems):
    sx, sy, qx, qy = elems
    steps, task_state = _adapt(learner, sx, sy, init, state, options)
    adapted_state = task_state
    out_after, task_state = functional.functional_call(
        model, steps[-1], qx, training=query_training, return_state=True, state=task_state,
        accelerate="meta")
    loss_after = loss_fn(qy, out_after)
    result = _query_metrics(model, loss_fn, qx, qy, out_after, loss_after, init,
                            state, query_training, before_metrics, accuracy, loss_dtype)
    if msl:
      result["msl_objective"] = tf.cast(_objective(
          learner, model, steps, qx, qy, adapted_state, loss_after, query_training,
          msl_weights), loss_dtype)
    return result, {p: task_state[p] for p in state}

  signature = ({k: tf.TensorSpec([], loss_dtype) for k in metric_names},
               {p: tf.TensorSpec(t.shape, t.dtype) for p, t in state.items()})
  per_task, states = _map_tasks(task, tuple(batch[k] for k in BATCH_KEYS), parallel,
                                signature, parallel_iterations)
  return MetaBatchResult(
      tf.reduce_mean(per_task["msl_objective" if msl else "loss"]),
      {k: tf.stop_gradient(tf.reduce_mean(v)) for k, v in per_task.items()},
      {p: (tf.reduce_mean(s, axis=0) if s.dtype.is_floating else s[0])
       for p, s in states.items()}, per_task)


class MetaBatchGradients(NamedTuple):
  """What :func:`meta_batch_gradients` returns.

  Attributes:
    loss: scalar, mean over tasks of the query loss after adaptation (a value: not
      differentiable; its gradients are ``weight_grads`` / ``variable_grads``).
    weight_grads: ``{path: tensor}`` for each path of the ``weights`` argument: the
      gradient of ``sum_t task_weight * L_t`` with respect to that initial weight.
    variable_grads: one entry per ``variables`` element: the same gradient with respect
      to the variable as read *inside* the task loop (target weights not given in
      ``weights``, Meta-SGD's learning rates), or ``None`` where no task's loss depends
      on it there.
    metrics, state, per_task: as :class:`MetaBatchResult` (``per_task`` values here are
      not differentiable).
  """
  loss: tf.Tensor
  weight_grads: Dict[str, tf.Tensor]
  variable_grads: List[Optional[tf.Tensor]]
  metrics: Dict[str, tf.Tensor]
  state: Dict[str, tf.Tensor]
  per_task: Dict[str, tf.Tensor]


def meta_batch_gradients(learner, batch: Mapping[str, tf.Tensor],
                         variables: Sequence[tf.Variable], *,
                         weights: Optional[Weights] = None,
                         state: Optional[Weights] = None, task_weight=None,
                         query_training: Optional[bool] = True,
                         accuracy: Optional[bool] = None, before_metrics: bool = False,
                         parallel_iterations: int = 1, staggered: bool = False,
                         msl_weights=None, adapt_options=None) -> MetaBatchGradients:
  """Meta-gradients of a meta-batch, accumulated task by task in a ``tf.while_loop``.

  For task ``t``: fast weights from ``learner.adapt``, query loss ``L_t`` at them, and in
  the same loop iteration ``d(task_weight * L_t) / d(weights, variables)`` by a tape that
  sees only this task; the loop sums them: :func:`meta_batch_loss`'s gradient
  (``task_weight = 1/T``) up to float summation order, with the memory of one task
  (Finn et al. 2017, Alg. 2 line 10, as their per-task ``backward()``). Call it in a
  ``tf.function`` (eagerly the loop runs in Python; results are the same).
  No outer tape is needed: run a weight producer (hypernetwork) under your own tape and
  chain ``weight_grads`` through it with ``tape.gradient(..., output_gradients=)``.

  Args:
    learner: an inner-loop learner, as :func:`meta_batch_loss`.
    batch: dict with ``support_x``, ``support_y``, ``query_x``, ``query_y`` with a
      leading axis of ``T`` tasks (module doc).
    variables: ``tf.Variable`` s to differentiate as read inside the loop (e.g. the
      target's trainable variables and ``learner.trainable_variables``).
    weights: optional initial weights ``{path: tensor}`` shared by all tasks (e.g. a
      hypernetwork's output), differentiated as given; other paths read in the loop.
    state: optional non-trainable state ``{path: tensor}``; default the target's.
    task_weight: scalar multiplying each task's loss before differentiation (e.g. a loss
      scale / the global meta-batch size); default ``1/T``.
    query_training: as :func:`meta_batch_loss`.
    accuracy: as :func:`meta_batch_loss`.
    before_metrics: as :func:`meta_batch_loss` (off by default here).
    parallel_iterations: tasks in flight at once (1: memory of one task; more may overlap
      one task's forward pass with another's backward pass, with that many tasks' memory).
    staggered: with ``parallel_iterations > 1``, a task's query pass waits for the
      previous task's query gradient: one task's query activations alive at a time,
      beside the previous task's second-order pass back through its inner loop (meant
      for second order; ``_TaskGradients._staggered``).
    msl_weights: as :func:`meta_batch_loss`.
    adapt_options: as :func:`meta_batch_loss`.

  Returns:
    A :class:`MetaBatchGradients`.

  Raises:
    ValueError: a batch key is missing or shapes disagree; ``variables`` holds a
      non-variable.
    hypernet.meta.inner_loop.MissingInnerGradientError: from the learner.
  """
  batch = _check_batch(batch)
  options = _check_options(adapt_options)
  variables = _check_variables(variables)
  if accuracy is None:
    accuracy = learner.loss_fn is losses.sparse_softmax_cross_entropy
  weights = {p: tf.convert_to_tensor(w) for p, w in (weights or {}).items()}
  state = _target_state(learner.model, state)
  num_tasks = tf.shape(tf.nest.flatten(batch["support_x"])[0], out_type=tf.int32)[0]
  if task_weight is None:
    task_weight = 1.0 / tf.cast(num_tasks, tf.float64)
  one_task = _TaskGradients(learner, batch, variables, weights, state, task_weight,
                            query_training, accuracy, before_metrics, msl_weights, options)
  # The multi-step loss reads every step's fast weights: not staggered.
  stagger = (bool(staggered) and parallel_iterations > 1
             and not uses_multi_step_loss(learner))
  acc, state_sum, state_first, arrays = _accumulate(
      one_task, num_tasks, _metric_names(accuracy, before_metrics), stagger,
      parallel_iterations)
  per_task = {k: a.stack() for k, a in arrays.items()}
  metrics = {k: tf.reduce_mean(v) for k, v in per_task.items()}
  new_state = dict(state_first)
  new_state.update({p: s / tf.cast(num_tasks, s.dtype) for p, s in state_sum.items()})
  connected = one_task.connected or [True] * len(acc)
  grads = [g if c else None for g, c in zip(acc, connected)]
  return MetaBatchGradients(
      loss=metrics["loss"],
      weight_grads={p: g if g is not None else tf.zeros_like(weights[p])
                    for p, g in zip(weights, grads[:len(weights)])},
      variable_grads=grads[len(weights):], metrics=metrics,
      state={p: new_state[p] for p in state}, per_task=per_task)


def _check_variables(variables) -> List[tf.Variable]:
  variables = list(variables)
  bad = [type(v).__name__ for v in variables
         if not isinstance(v, (tf.Variable, keras.Variable))]
  if bad:
    raise ValueError(f"variables must be tf.Variables (got {bad}); give tensors as "
                     "weights= instead.")
  return variables


class _TaskGradients:
  """One task's meta-gradient, metrics and state in :func:`meta_batch_gradients`'s loop
  (``self(i, token)``). ``connected`` records at trace time which sources any task's
  loss depends on."""

  def __init__(self, learner, batch, variables, weights, state, task_weight,
               query_training, accuracy, before_metrics, msl_weights, options):
    self.learner, self.batch, self.variables = learner, batch, variables
    self.weights, self.weight_paths, self.state = weights, list(weights), state
    self.task_weight, self.query_training = task_weight, query_training
    self.accuracy, self.before_metrics = accuracy, before_metrics
    self.msl_weights, self.options = msl_weights, options
    self.connected: List[bool] = []
    # Per-task metrics in the weights' dtype (float64 models give float64 losses).
    model = learner.model
    self.dtype = (next(iter(weights.values())).dtype if weights else
                  tf.as_dtype(next(iter(functional.variable_paths(model, True).values())).dtype))

  def sources(self):
    return [self.weights[p] for p in self.weight_paths] + self.variables

  def query_pass(self, steps, qx, qy, query_state):
    """``(outputs, state, loss, scaled objective)`` of the query set at ``steps[-1]``."""
    learner = self.learner
    out, new_state = functional.functional_call(
        learner.model, steps[-1], qx, training=self.query_training, return_state=True,
        state=query_state, accelerate="meta")
    loss = learner.loss_fn(qy, out)
    objective = _objective(learner, learner.model, steps, qx, qy, query_state, loss,
                           self.query_training, self.msl_weights)
    return out, new_state, loss, objective * tf.cast(self.task_weight, loss.dtype)

  def __call__(self, i, token=None):
    sx, sy, qx, qy = (_task(self.batch[k], i) for k in BATCH_KEYS)
    sources = self.sources()
    # Watches the trainable variables read in the task (the gradient is asked for
    # ``variables`` only) and the given weights. Unstaggered: the whole task; staggered:
    # the adaptation only.
    with tf.GradientTape() as tape:
      tape.watch([self.weights[p] for p in self.weight_paths])
      init = self.learner.initial_weights(self.weights)
      steps, task_state = _adapt(self.learner, sx, sy, init, self.state, self.options)
      if token is None:
        out_after, task_state, loss, scaled = self.query_pass(steps, qx, qy, task_state)
    if token is None:
      grads = tape.gradient(scaled, sources)
      token_out = None
    else:
      out_after, task_state, loss, grads, token_out = self._staggered(
          tape, steps[-1], task_state, qx, qy, token)
    if not self.connected:
      self.connected.extend(g is not None for g in grads)
    grads = [tf.zeros_like(s) if g is None else tf.convert_to_tensor(g)
             for s, g in zip(sources, grads)]
    grads = [tf.cast(g, s.dtype) for s, g in zip(sources, grads)]
    result = _query_metrics(self.learner.model, self.learner.loss_fn, qx, qy, out_after,
                            tf.stop_gradient(loss), init, self.state, self.query_training,
                            self.before_metrics, self.accuracy, loss.dtype)
    return grads, result, {p: task_state[p] for p in self.state}, token_out

  def _staggered(self, tape, fast, task_state, qx, qy, token):
    """The task's gradient in two parts (:func:`meta_batch_gradients`, ``staggered``),
    the same chain rule: ``g = dL/d(fast weights, adapted float state)`` and the direct
    ``dL/d(sources)`` by a tape over the query pass alone, then ``g`` back through the
    inner loop by ``tape``, the tape over the adaptation."""
    sources = self.sources()
    # What the query pass takes from the adaptation: the fast weights and the float
    # state (moving statistics the inner steps updated, which a query pass with
    # training=False reads). It sees them as constants it watches, and waits for the
    # previous task's query gradient (``token``).
    float_state = {p: t for p, t in (task_state or {}).items() if t.dtype.is_floating}
    adapted = list(fast.values()) + list(float_state.values())
    fixed = [tf.stop_gradient(t) for t in adapted]
    fixed_fast = dict(zip(fast, fixed))
    query_state = None if task_state is None else {
        **task_state, **dict(zip(float_state, fixed[len(fast):]))}
    with tf.control_dependencies([token]):
      qx = tf.identity(qx)
    with tf.GradientTape() as query_tape:
      query_tape.watch(fixed + [self.weights[p] for p in self.weight_paths])
      out_after, task_state, loss, scaled = self.query_pass([fixed_fast], qx, qy,
                                                            query_state)
    parts = query_tape.gradient(scaled, fixed + sources)
    pairs = [(t, g) for t, g in zip(adapted, parts[:len(adapted)]) if g is not None]
    through = (tape.gradient([t for t, _ in pairs], sources,
                             output_gradients=[g for _, g in pairs])
               if pairs else [None] * len(sources))
    grads = [sum_gradients(a, b) for a, b in zip(parts[len(adapted):], through)]
    with tf.control_dependencies([g.values if isinstance(g, tf.IndexedSlices) else g
                                  for _, g in pairs]):
      token_out = tf.identity(token)
    return out_after, task_state, loss, grads, token_out


def _accumulate(one_task, num_tasks, metric_names, stagger, parallel_iterations):
  """The ``tf.while_loop`` over tasks summing ``one_task``'s gradients and float state
  (task 0's other state) and writing its metrics: ``(gradient sums, state sums, state
  firsts, {name: TensorArray})``."""
  state, dtype = one_task.state, one_task.dtype
  acc0 = [tf.zeros(tf.shape(s), s.dtype) for s in one_task.sources()]
  float_state = [p for p, s in state.items() if s.dtype.is_floating]
  state_sum0 = {p: tf.zeros_like(state[p]) for p in float_state}
  state_first0 = {p: s for p, s in state.items() if p not in state_sum0}
  arrays0 = {k: tf.TensorArray(dtype, size=num_tasks, element_shape=[])
             for k in metric_names}

  def body(i, acc, state_sum, state_first, arrays, token):
    grads, result, task_state, token = one_task(i, token if stagger else None)
    # Under a control dependency Grappler's arithmetic optimiser does not fold this sum
    # with the task gradient's own adds into one many-input AddN, which its memory
    # optimiser rewrites into a temporary variable where its static peak-memory estimate
    # passes half the free RAM, and that variable collides inside this loop
    # (tensorflow/tensorflow#23780; test_support_hypernet's 72-way episodes). The
    # trained weights are the same bit for bit as with the fold.
    with tf.control_dependencies([i]):
      acc = [a + g for a, g in zip(acc, grads)]
    state_sum = {p: state_sum[p] + task_state[p] for p in state_sum}
    state_first = {p: tf.where(tf.equal(i, 0), task_state[p], state_first[p])
                   for p in state_first}
    arrays = {k: arrays[k].write(i, tf.cast(result[k], dtype)) for k in arrays}
    return (i + 1, acc, state_sum, state_first, arrays,
            token if stagger else tf.zeros([], tf.float32))

  _, acc, state_sum, state_first, arrays, _ = tf.while_loop(
      lambda i, *_: i < num_tasks, body,
      (tf.constant(0, tf.int32), acc0, state_sum0, state_first0, arrays0,
       tf.zeros([], tf.float32)),
      parallel_iterations=parallel_iterations)
  return acc, state_sum, state_first, arrays
