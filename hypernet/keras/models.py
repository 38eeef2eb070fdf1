"""Keras-native training: ``compile()`` / ``fit()`` / ``evaluate()`` / ``predict()``.

Two ``keras.Model`` s that run the project's weight sources inside Keras' own training
loop, so Keras callbacks (TensorBoard, ModelCheckpoint, BackupAndRestore, EarlyStopping),
``model.save()`` / ``keras.models.load_model()`` and ``tf.distribute`` strategy scopes
work as they do for any Keras model:

* :class:`HyperModel` -- a hypernetwork generates (some of) the weights of a *target*
  Keras model; the model's trainable weights are the hypernetwork's (plus the target
  weights it does not generate, unless ``train_rest=False``) and its ``call`` runs the
  target on the generated weights (:func:`hypernet.core.functional.functional_call`).
  Keras' own ``train_step`` trains it: one tape over the hypernetwork and the target.
* :class:`MetaModel` -- an inner-loop learner (MAML, first-order MAML, Meta-SGD, ANIL,
  the support-conditioned hypernetwork, :mod:`hypernet.meta`); ``train_step`` is one
  meta-step on a meta-batch of episodes (inner loop on each support set, query loss at
  the fast weights, second order where the learner is), ``test_step`` reports the query
  loss and accuracy after adaptation.

Both are registered Keras serialisables (package ``"hypernet"``): a model built from a
hypernetwork *kind name* (or a learner name) saves its config and reloads exactly. Both
run several steps per ``tf.function`` call in ``fit()`` unless compiled with
``steps_per_execution`` (:mod:`hypernet.keras.steps_per_execution`).
"""
from __future__ import annotations

import warnings
from typing import Dict, Mapping, Optional

import keras
import numpy as np
import tensorflow as tf

from hypernet.core import control_flow, functional
from hypernet.hypernetworks import base as hn_base
from hypernet.hypernetworks import batched
from hypernet.keras.resume import ResumeMidEpoch
from hypernet.keras.steps_per_execution import AutoStepsPerExecution
from hypernet.numerics import compat


def _save_variables(layer, extra, store) -> None:
  """``Layer.save_own_variables`` for the layer's own variables
  (:func:`hypernet.numerics.compat.own_variables`), then ``extra``."""
  for i, v in enumerate(compat.own_variables(layer) + list(extra)):
    store[f"{i}"] = np.asarray(v.numpy())


def _load_variables(layer, extra, store) -> None:
  variables = compat.own_variables(layer) + list(extra)
  if len(store.keys()) != len(variables):
    raise ValueError(f"{type(layer).__name__} {layer.name!r}: the saved file holds "
                     f"{len(store.keys())} variables of its own, this model has "
                     f"{len(variables)} (saved from another kind of model?).")
  for i, v in enumerate(variables):
    v.assign(store[f"{i}"])


def _as_model(value, name: str) -> keras.Model:
  if isinstance(value, dict):
    value = keras.saving.deserialize_keras_object(value)
  if not isinstance(value, keras.Model):
    raise TypeError(f"{name} must be a built keras.Model, got {type(value).__name__}.")
  if not value.built or not value.variables:
    raise ValueError(f"{name} {value.name!r} is not built: construct it with keras.Input(...) "
                     "or call it once on an example batch, so that its weights have shapes.")
  _warn_if_bfloat16_conv_gradients_wrong(value, name)
  return value


# Convolutions whose kernel gradient is TensorFlow's Conv2DBackpropFilter (depthwise ones
# have their own, exact kernel).
_CONV_CLASSES = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
                 keras.layers.SeparableConv1D, keras.layers.SeparableConv2D,
                 keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose,
                 keras.layers.Conv3DTranspose)


def _layers(model):
  for layer in getattr(model, "layers", ()):
    yield layer
    yield from _layers(layer)


def _warn_if_bfloat16_conv_gradients_wrong(model, name: str) -> None:
  """One warning where ``model`` has a convolution computing in bfloat16 and this
  device's bfloat16 convolution kernel gradient is wrong
  (:func:`hypernet.numerics.devices.bfloat16_conv_gradient_error`; the Trainer refuses
  ``config.dtype_policy='mixed_bfloat16'`` there)."""
  convs = [l.name for l in _layers(model)
           if isinstance(l, _CONV_CLASSES) and l.compute_dtype == "bfloat16"]
  if not convs:
    return
  from hypernet.numerics import devices  # pylint: disable=g-import-not-at-top
  reason = devices.bfloat16_conv_gradient_error()
  if reason:
    warnings.warn(f"{name}: convolution {convs[0]!r} computes in bfloat16, and {reason}: "
                  "its kernel gradients will be wrong; train it in float32 here.",
                  stacklevel=3)


def _kind(spec) -> type:
  """The hypernetwork class for a kind name, ``"package.module:Class"`` or a class."""
  from hypernet.core import plugins  # pylint: disable=g-import-not-at-top
  try:
    return hn_base.KINDS.get(spec)
  except plugins.PluginError as e:  # Its message names the config field; this is no config.
    message = str(e).replace(f"{hn_base.KINDS.field}=", "HyperModel(hypernetwork=", 1)
    raise ValueError(message.replace(f"{spec!r}", f"{spec!r})", 1)) from e


@keras.saving.register_keras_serializable(package="hypernet")
class HyperModel(compat.MultiWorkerFit, ResumeMidEpoch, AutoStepsPerExecution, keras.Model):
  """A ``keras.Model`` whose ``call`` runs ``target`` on weights a hypernetwork generates.

  ``model(x)``: ``weights = hypernetwork()``; ``target(x)`` run on them (weights not
  generated are the target's own variables). A *conditional* hypernetwork (one with
  ``num_conditions`` or ``condition_dim``) takes the condition as an input:
  ``model((x, condition))`` with ``condition`` int ``[B]`` ids (or float ``[B, d]``
  vectors): example ``b`` runs on the weights generated for ``condition[b]``
  (:func:`hypernet.hypernetworks.batched.batched_functional_call` with
  ``per_example=True``).

  Trainable weights: the hypernetwork's, and with ``train_rest`` the target weights it
  does not generate; the generated target variables are neither trained nor read. The
  target's own losses (kernel regularizers, activity regularizers, ``add_loss``) are
  computed on the generated weights and added to the compiled loss; non-trainable state
  (BatchNorm moving statistics, dropout RNG) is written back after each training call
  (averaged over replicas under a ``tf.distribute`` strategy).

  Args:
    target: a built Keras model (Sequential, Functional, subclassed), or its serialised
      config.
    hypernetwork: a kind: a registered name (``"mlp"``, ``"chunked"``, ``"static"``,
      :data:`hypernet.hypernetworks.base.KINDS`), ``"package.module:Class"``, or a
      subclass of :class:`hypernet.hypernetworks.base.Hypernetwork` (built here for the
      ``targets`` weights of ``target``; saved and reloaded by ``model.save`` /
      ``keras.models.load_model``, which rebuild the same class); or a built
      :class:`hypernet.hypernetworks.base.Hypernetwork` for ``target`` (its
      ``target_spec`` paths must be trainable weights of ``target``; such a model does
      not save whole).
    targets: glob / ``re:`` patterns of the generated target weights (kinds only), see
      :func:`hypernet.core.functional.select_paths`.
    train_rest: train the target weights that are not generated (else frozen).
    hypernetwork_args: keyword arguments of the kind's constructor (e.g. ``chunk_size``,
      ``hidden``, ``num_conditions``, ``condition_dim``), kinds only.
    seed: initialiser seed of the hypernetwork (kinds only).
    **kwargs: ``keras.Model`` arguments (``name``).

  Raises:
    TypeError: ``target`` is not a Keras model, or ``hypernetwork`` is neither a kind name
      nor a Hypernetwork.
    ValueError: an unbuilt target, an unknown kind (lists them), a pattern matching no
      weight (lists the paths), a hypernetwork generating a path the target lacks.
  """

  def __init__(self, target, hypernetwork="chunked", *, targets="*", train_rest: bool = True,
               hypernetwork_args: Optional[dict] = None, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.target = _as_model(target, "HyperModel(target=...)")
    self._kind_config = None
    if isinstance(hypernetwork, (str, type)):
      cls = _kind(hypernetwork)
      # Saved configs hold JSON lists where the constructor was given tuples.
      args = {k: tuple(v) if isinstance(v, list) else v
              for k, v in dict(hypernetwork_args or {}).items()}
      spec = functional.weight_spec(self.target, targets)
      variables = functional.variable_paths(self.target)
      values = {p: variables[p].numpy() for p in spec}
      self._kind_config = dict(hypernetwork=hn_base.KINDS.name_of(cls), targets=targets,
                               hypernetwork_args=dict(args), seed=int(seed))
      hypernetwork = cls(spec, target_values=values, seed=int(seed), **args)
    elif not isinstance(hypernetwork, hn_base.Hypernetwork):
      raise TypeError("HyperModel(hypernetwork=...) must be a kind (a name of "
                      f"{list(hn_base.KINDS.names())}, 'package.module:Class' or a "
                      "Hypernetwork subclass) or a built Hypernetwork, got "
                      f"{type(hypernetwork).__name__}.")
    self.hypernetwork = hypernetwork
    trainable = functional.variable_paths(self.target, trainable=True)
    unknown = [p for p in hypernetwork.target_spec if p not in trainable]
    if unknown:
      raise ValueError(f"The hypernetwork generates {unknown}, which are not trainable "
                       f"weights of the target {self.target.name!r}; its trainable weights: "
                       f"{list(trainable)}.")
    wrong = [f"{p}: generated {tuple(s.shape)}, target {tuple(trainable[p].shape)}"
             for p, s in hypernetwork.target_spec.items()
             if tuple(s.shape) != tuple(trainable[p].shape)]
    if wrong:
      raise ValueError(f"The hypernetwork generates weights of another shape than the "
                       f"target's: {wrong}; build it from functional.weight_spec(target).")
    self.generated_paths = list(hypernetwork.target_spec)
    self.train_rest = bool(train_rest)
    self.built = True  # The target and the hypernetwork are built.

  # -- what is trained ----------------------------------------------------------------
  @property
  def trainable_weights(self):
    """The hypernetwork's trainable weights, then (``train_rest``) the target's trainable
    weights that are not generated."""
    if not self.trainable:
      return []
    out = list(self.hypernetwork.trainable_weights)
    if self.train_rest:
      generated = {id(v) for p, v in functional.variable_paths(
          self.target, trainable=True).items() if p in self.generated_paths}
      out += [v for v in self.target.trainable_weights if id(v) not in generated]
    return out

  @property
  def non_trainable_weights(self):
    trained = {id(v) for v in self.trainable_weights}
    return [v for v in self.weights if id(v) not in trained]

  # Keras reads these (optimiser build, saving) apart from the *_weights properties.
  trainable_variables = trainable_weights
  non_trainable_variables = non_trainable_weights

  def parameter_counts(self) -> Dict[str, float]:
    """What the hypernetwork generates and what is trained, in scalars.

    Returns:
      ``{"trainable": ..., "hypernetwork": ..., "generated": ..., "target": ...,
      "compression_ratio": ...}``: this model's trainable weights (the hypernetwork's,
      plus the target weights it does not generate with ``train_rest``), the
      hypernetwork's own trainable weights, the target weights it generates, all of the
      target's trainable weights, and ``generated / hypernetwork`` (above 1: fewer
      parameters than the weights they generate; the command line prints the same).
    """
    size = lambda vs: int(sum(np.prod(tuple(v.shape)) for v in vs))
    h = self.hypernetwork
    return {"trainable": size(self.trainable_weights), "hypernetwork": h.parameter_count(),
            "generated": h.num_generated, "target": size(self.target.trainable_weights),
            "compression_ratio": h.compression_ratio()}

  def summary(self, *args, **kwargs):
    """Keras' summary, then one line: how many target weights the hypernetwork generates
    from how many parameters (:meth:`parameter_counts`)."""
    super().summary(*args, **kwargs)
    c = self.parameter_counts()
    line = (f"Generated: {c['generated']:,} of the target's {c['target']:,} trainable "
            f"weights, from {c['hypernetwork']:,} hypernetwork parameters (compression "
            f"ratio {c['compression_ratio']:.2f}); trained here: {c['trainable']:,}.")
    (kwargs.get("print_fn") or print)(line)

  # -- forward --------------------------------------------------------------------------
  def generate(self, condition=None) -> Dict[str, tf.Tensor]:
    """The generated target weights ``{path: tensor}`` (``[S, ...]`` for ``S``
    conditions)."""
    return dict(self.hypernetwork(condition))

  @tf.autograph.experimental.do_not_convert
  def call(self, inputs, training=None):
    """Runs the target on the generated weights.

    Args:
      inputs: the target's input (e.g. float32 ``[B, H, W, C]``); for a conditional
        hypernetwork ``(x, condition)`` (a tuple, list or dict with keys ``"inputs"`` and
        ``"condition"``) with ``condition`` int ``[B]`` or float ``[B, d]``.
      training: the target's ``training=`` flag (dropout, BatchNorm).

    Returns:
      The target's output, e.g. float32 logits ``[B, classes]``.
    """
    training = bool(training)
    if self.hypernetwork.conditional:
      if isinstance(inputs, Mapping):
        x, condition = inputs["inputs"], inputs["condition"]
      elif isinstance(inputs, (tuple, list)) and len(inputs) == 2:
        x, condition = inputs
      else:
        raise ValueError("A HyperModel with a conditional hypernetwork takes (x, condition) "
                         "or {'inputs': x, 'condition': condition}; got one input.")
      weights = self.generate(condition)
      out, state, losses = batched.batched_functional_call(
          self.target, weights, x, per_example=True, training=training, return_state=True,
          return_losses=True)
      state = batched.reduce_state(state)
      losses = [tf.reduce_mean(l, 0) for l in losses]
    else:
      out, state, losses = functional.functional_call(
          self.target, self.generate(None), inputs, training=training, return_state=True,
          return_losses=True)
    for loss in losses:
      self.add_loss(loss)
    if training and state:
      functional.assign_state(self.target, functional.all_reduce_state(state))
    return out

  # Keras' own steps; the logs as Keras reduces them over workers (compat.MultiWorkerFit).
  def train_step(self, data):
    return self.step_logs(super().train_step(data))

  def test_step(self, data):
    return self.step_logs(super().test_step(data))

  # -- serialisation --------------------------------------------------------------------
  def save_own_variables(self, store):
    _save_variables(self, compat.seed_states(self.target), store)

  def load_own_variables(self, store):
    _load_variables(self, compat.seed_states(self.target), store)

  def get_config(self):
    if self._kind_config is None:
      raise NotImplementedError(
          "This HyperModel was given a built hypernetwork, which Keras cannot serialise: "
          "build it from a kind name (HyperModel(target, 'chunked', targets=..., "
          "hypernetwork_args=...)) to save it whole, or save its weights with "
          "model.save_weights().")
    config = {"name": self.name, "trainable": self.trainable,
              "target": keras.saving.serialize_keras_object(self.target),
              "train_rest": self.train_rest}
    config.update(self._kind_config)
    return config

  @classmethod
  def from_config(cls, config):
    return cls(**config)


def make_learner(target: keras.Model, learner, loss, **kwargs):
  """The inner-loop learner ``learner`` for ``target``, from the learners' registry
  (:data:`hypernet.meta.LEARNERS`): a registered name (``"maml"``, ``"fomaml"``,
  ``"metasgd"``, ``"anil"``, ``"support_hypernet"``, ``"protonet"``,
  ``"support_adapter"``, ``"imaml"``),
  ``"package.module:Class"``, or a :class:`hypernet.meta.Learner` subclass; ``kwargs``
  go to its constructor.

  Raises:
    ValueError: an unknown name (lists them), a class that is not a learner, or the
      learner's own errors.
  """
  from hypernet import meta  # pylint: disable=g-import-not-at-top
  if isinstance(learner, str) and ":" not in learner and learner not in meta.LEARNERS.names():
    raise ValueError(f"MetaModel(learner={learner!r}) is unknown; use one of "
                     f"{list(meta.LEARNERS.names())}, a hypernet.meta.Learner subclass or "
                     "'package.module:Class'.")
  return meta.LEARNERS.get(learner)(target, loss, **kwargs)


_EPISODE_KEYS = ("support_x", "support_y", "query_x", "query_y")


@keras.saving.register_keras_serializable(package="hypernet")
class MetaModel(compat.MultiWorkerFit, ResumeMidEpoch, AutoStepsPerExecution, keras.Model):
  """A ``keras.Model`` whose ``fit()`` meta-trains an inner-loop learner.

  Data: a ``tf.data`` dataset of meta-batches, dicts with ``support_x`` ``[T, N*K, ...]``,
  ``support_y`` ``[T, N*K]``, ``query_x`` ``[T, N*Q, ...]``, ``query_y`` ``[T, N*Q]``
  (e.g. :func:`hypernet.data.episodes.make_episode_fn` batched by ``T``); ``T`` tasks
  per step summed over replicas.

  * ``train_step``: one meta-step (Finn et al. 2017, Alg. 2): for each task the learner
    adapts to the support set, the query loss is taken at the fast weights, and the
    meta-gradient of the mean query loss over the global meta-batch is accumulated task
    by task (:func:`hypernet.meta.meta_batch.meta_batch_gradients`; second order where
    the learner is) and applied by the compiled optimiser. Logs ``loss`` (mean query loss
    after adaptation) and, for classification, ``accuracy``.
  * ``test_step``: the same tasks adapted without an update (with ``eval_inner_steps``
    inner steps): ``loss``, ``accuracy`` after adaptation and ``loss_before`` /
    ``accuracy_before`` at the initial weights (not for ``"support_hypernet"``,
    ``"protonet"`` and ``"support_adapter"``, whose head is generated per task: the
    target's own head is never used).
  * ``call({"support_x", "support_y", "query_x"})``: the query outputs after adaptation,
    ``[T, N*Q, outputs]`` (``predict``).

  Compile with an optimiser only (``model.compile(optimizer=...)``): the loss is the
  learner's.

  Args:
    target: a built Keras model (or its serialised config); its trainable weights are the
      meta-learned initialisation.
    learner: a registered learner's name (``"maml"``, ``"fomaml"``, ``"metasgd"``,
      ``"anil"``, ``"support_hypernet"``, ``"protonet"``, ``"support_adapter"``,
      ``"imaml"``:
      :data:`hypernet.meta.LEARNERS`), your own :class:`hypernet.meta.Learner`
      subclass, or it as ``"package.module:Class"``.
    loss: ``"sparse_softmax_cross_entropy"`` (classification, adds accuracy) or ``"mse"``.
    learner_args: keyword arguments of the learner (``inner_lr``, ``inner_steps``,
      ``adapt``, ``head``, ...).
    eval_inner_steps: inner steps in ``test_step`` / ``call`` (``None``: the learner's).
    tasks_in_flight: tasks adapted at once in the accumulation loop (``parallel_iterations``).
    **kwargs: ``keras.Model`` arguments.

  Raises:
    ValueError: an unknown learner or loss, or the learner's own errors.
  """

  def __init__(self, target, learner="maml", *, loss="sparse_softmax_cross_entropy",
               learner_args: Optional[dict] = None, eval_inner_steps: Optional[int] = None,
               tasks_in_flight: int = 1, **kwargs):
    super().__init__(**kwargs)
    from hypernet.meta import losses  # pylint: disable=g-import-not-at-top
    if not isinstance(loss, str) or loss not in losses.LOSSES:
      raise ValueError(f"MetaModel(loss={loss!r}); use one of {sorted(losses.LOSSES)}.")
    self.target = _as_model(target, "MetaModel(target=...)")
    from hypernet import meta  # pylint: disable=g-import-not-at-top
    self.loss_name = loss
    self.learner_args = dict(learner_args or {})
    self.learner = make_learner(self.target, learner, loss, **self.learner_args)
    self.learner_name = meta.LEARNERS.name_of(type(self.learner))
    self.classification = loss == "sparse_softmax_cross_entropy"
    self.eval_inner_steps = eval_inner_steps
    self.tasks_in_flight = int(tasks_in_flight)
    # Variables of the learner itself (Meta-SGD's rates, the support generator), which
    # Keras does not track: trained, saved and loaded with the model's own.
    self._learner_variables = list(self.learner.trainable_variables)
    names = ["loss"] + (["accuracy"] if self.classification else [])
    self._trackers = {n: keras.metrics.Mean(name=n) for n in names}
    self._whens = ("after", "before") if self.learner.before_metrics else ("after",)
    # Named apart from the training trackers (the logs keep the plain names): with the
    # same names, Keras' epoch-end logs (``get_metrics_result``, used where its names
    # equal the step's logs: learners without ``*_before`` metrics) took the evaluation
    # trackers' values, 0.0 in fit()'s history.
    self._eval_trackers = {n: keras.metrics.Mean(name=f"evaluation_{n}") for n in names + (
        [f"{n}_before" for n in names] if "before" in self._whens else [])}
    self.built = True

  def compile(self, optimizer="adam", **kwargs):
    """``keras.Model.compile`` with XLA off unless asked for (``jit_compile=True``):
    Keras' ``"auto"`` would compile on a GPU, and second-order meta-gradients of conv /
    max-pool blocks under XLA differed from the float64 reference by up to 6e-3 relative
    (:mod:`hypernet.meta.meta_batch`); the fused CPU block kernel does not compile."""
    if kwargs.get("jit_compile", "auto") == "auto":
      kwargs["jit_compile"] = False
    if "loss" in kwargs and kwargs["loss"] is not None:
      raise ValueError("MetaModel.compile(loss=...): the loss is the learner's "
                       f"({self.loss_name!r}, MetaModel(loss=...)); compile with an "
                       "optimizer only.")
    super().compile(optimizer=optimizer, **kwargs)

  @property
  def trainable_weights(self):
    """The target's trainable weights the learner reads (not a zero-initialised or
    generated head), then the learner's own variables."""
    if not self.trainable:
      return []
    skip = {id(v) for p, v in functional.variable_paths(self.target).items()
            if p in self.learner.untrained_paths}
    return [v for v in self.target.trainable_weights if id(v) not in skip] + \
        list(self._learner_variables)

  @property
  def weights(self):
    """Keras' weights (the target's), then the learner's own variables (Meta-SGD's rates,
    the support generator), which Keras does not track: ``get_weights`` /
    ``set_weights``, ``EarlyStopping(restore_best_weights=True)`` and every other Keras
    mechanism that reads ``weights`` restore them too."""
    return self._with_learner_variables(super().weights)

  @property
  def variables(self):
    """Keras' variables (weights and RNG seed states), then the learner's own."""
    return self._with_learner_variables(super().variables)

  def _with_learner_variables(self, keras_variables):
    seen = {id(v) for v in keras_variables}
    return keras_variables + [v for v in self._learner_variables if id(v) not in seen]

  @property
  def non_trainable_weights(self):
    trained = {id(v) for v in self.trainable_weights}
    return [v for v in self.weights if id(v) not in trained]

  trainable_variables = trainable_weights
  non_trainable_variables = non_trainable_weights

  @property
  def metrics(self):
    return list(self._trackers.values()) + list(self._eval_trackers.values())

  def _episodes(self, data):
    if isinstance(data, tuple) and len(data) == 1:
      data = data[0]
    if not isinstance(data, Mapping) or any(k not in data for k in _EPISODE_KEYS):
      raise ValueError(f"MetaModel takes meta-batches: dicts with keys {list(_EPISODE_KEYS)} "
                       f"(leading axis: tasks); got {type(data).__name__}"
                       + (f" with keys {sorted(data)}" if isinstance(data, Mapping) else "")
                       + ".")
    return {k: data[k] for k in _EPISODE_KEYS}

  @tf.autograph.experimental.do_not_convert
  def train_step(self, data):
    from hypernet.meta import meta_batch  # pylint: disable=g-import-not-at-top
    tasks = self._episodes(data)
    ctx = tf.distribute.get_replica_context()
    replicas = ctx.num_replicas_in_sync if ctx is not None else 1
    # A model with several inputs takes dicts or tuples of [T, ...] tensors.
    local = tf.shape(tf.nest.flatten(tasks["support_x"])[0])[0]
    # Each replica's share of the mean over the global meta-batch; the optimiser sums
    # the replicas' gradients.
    task_weight = 1.0 / tf.cast(local * replicas, tf.float64)
    if self.optimizer is not None and hasattr(self.optimizer, "scale_loss"):
      task_weight = self.optimizer.scale_loss(task_weight)
    variables = self.trainable_weights
    result = meta_batch.meta_batch_gradients(
        self.learner, tasks, variables, task_weight=task_weight,
        parallel_iterations=self.tasks_in_flight)
    missing = [v.path if hasattr(v, "path") else v.name
               for g, v in zip(result.variable_grads, variables) if g is None]
    if missing:
      raise ValueError(f"No meta-gradient reaches {missing}: they do not affect the query "
                       "loss. Exclude them from the target's trainable weights.")
    self.optimizer.apply_gradients(zip(result.variable_grads, variables))
    if result.state:
      functional.assign_state(self.target, functional.all_reduce_state(result.state))
    per_task = result.per_task
    self._trackers["loss"].update_state(per_task["loss"])
    if self.classification:
      self._trackers["accuracy"].update_state(per_task["accuracy"])
    return self.step_logs({n: t.result() for n, t in self._trackers.items()})

  def _eval_options(self):
    """The learner's options in ``test_step`` / ``call``: ``eval_inner_steps``."""
    steps = self.eval_inner_steps
    return {} if steps is None else {"inner_steps": int(steps)}

  @tf.autograph.experimental.do_not_convert
  def test_step(self, data):
    from hypernet.meta import meta_batch  # pylint: disable=g-import-not-at-top
    tasks = self._episodes(data)
    result = meta_batch.meta_batch_loss(self.learner, tasks,
                                        before_metrics="before" in self._whens,
                                        adapt_options=self._eval_options())
    for when in self._whens:
      suffix = "" if when == "after" else "_before"
      self._eval_trackers["loss" + suffix].update_state(result.per_task["loss" + suffix])
      if self.classification:
        self._eval_trackers["accuracy" + suffix].update_state(
            result.per_task["accuracy" + suffix])
    return self.step_logs({n: t.result() for n, t in self._eval_trackers.items()})

  @tf.autograph.experimental.do_not_convert
  def call(self, inputs, training=None):
    """Query outputs after adapting to each task's support set.

    Args:
      inputs: dict with ``support_x`` ``[T, N*K, ...]``, ``support_y`` ``[T, N*K]`` and
        ``query_x`` ``[T, N*Q, ...]``.

    Returns:
      ``[T, N*Q, outputs]``: the target's outputs on the queries at each task's fast
      weights (BatchNorm in training mode, as in meta-training).
    """
    del training
    missing = [k for k in ("support_x", "support_y", "query_x") if k not in inputs]
    if missing:
      raise ValueError(f"MetaModel(inputs) lacks {missing}: give support_x, support_y "
                       "and query_x with a leading task axis.")
    from hypernet import meta  # pylint: disable=g-import-not-at-top
    state = {p: tf.convert_to_tensor(v.value)
             for p, v in functional.variable_paths(self.target, trainable=False).items()}
    options = self._eval_options()

    def one(elems):
      sx, sy, qx = elems
      init = self.learner.initial_weights(None)
      fast, task_state = self.learner.adapt(sx, sy, weights=init, state=state, **options)
      return functional.functional_call(self.target, fast, qx, training=True, state=task_state,
                                        accelerate="meta")

    return control_flow.map_fn(
        one, (inputs["support_x"], inputs["support_y"], inputs["query_x"]),
        fn_output_signature=self.target.outputs[0].dtype if getattr(
            self.target, "outputs", None) else tf.float32)

  # Meta-SGD's rates and the support generator are tf.Variables of the learner: saved
  # after the model's own variables, with the target's RNG seed states.
  def save_own_variables(self, store):
    _save_variables(self, self._learner_variables + compat.seed_states(self.target), store)

  def load_own_variables(self, store):
    _load_variables(self, self._learner_variables + compat.seed_states(self.target), store)

  def get_config(self):
    return {"name": self.name, "trainable": self.trainable,
            "target": keras.saving.serialize_keras_object(self.target),
            "learner": self.learner_name, "loss": self.loss_name,
            "learner_args": dict(self.learner_args),
            "eval_inner_steps": self.eval_inner_steps,
            "tasks_in_flight": self.tasks_in_flight}

  @classmethod
  def from_config(cls, config):
    return cls(**config)
