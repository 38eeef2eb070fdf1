"""Meta-learning tasks for the one train loop: few-shot classification and sinusoids.

:class:`MetaLearningTask` implements the task interface of :mod:`hypernet.tasks.classification` for an
inner-loop learner of :mod:`hypernet.meta` (MAML, first-order MAML, Meta-SGD, ANIL):

* a *batch* is a meta-batch of tasks (``config.batch_size`` tasks summed over replicas;
  each replica gets its contiguous slice), each with a support and a query set;
* the loss is the query loss after adaptation, averaged over the *global* meta-batch
  (``tf.nn.compute_average_loss``), so 1 and R replicas take the same step; the tasks of
  a replica's slice run in one graph, no Python loop per task: by default
  (``config.meta.parallel="accumulate"``) a ``tf.while_loop`` whose iteration takes one
  task's meta-gradient and adds it to the sum
  (:func:`hypernet.meta.meta_batch.meta_batch_gradients`, memory of one task), else
  ``tf.map_fn`` / ``tf.vectorized_map`` under one tape
  (:func:`hypernet.meta.meta_batch_loss`);
* the initial weights come from the weight source of ``config.hypernet``: the target's
  own variables (``kind="none"``), or a hypernetwork's output (hypernetwork-initialised
  MAML: the meta-gradient flows through the inner loop into the hypernetwork);
* evaluation adapts to a fixed, finite set of ``config.meta.eval_episodes`` meta-test
  tasks (held-out classes; the same tasks at every evaluation) and reports the mean
  post-adaptation query accuracy (or MSE) with its 95% confidence interval over tasks,
  and, with ``config.meta.one_shot_runs``, the error rate on the 20 official 20-way
  one-shot runs of Lake et al. 2015 (the runs alone where no character is held out,
  ``config.data.num_test_characters = 0``).

Task families (``config.task``):

``"few_shot"``: N-way K-shot classification (Vinyals et al. 2016; Finn et al. 2017 Sec.
5.2) from ``config.data.name``: ``"omniglot"`` (zips in ``config.data.data_dir``, split by
character, classes augmented by rotations after the split, so meta-test characters are
never seen in meta-training), or ``"digits"`` / ``"fashion_mnist"`` / ``"mnist"`` (train
episodes from the train images, test episodes from the test images of the *same*
classes: these have too few classes for a class split). Target: ``config.model.name``
``"conv4"`` (Finn et al.'s four conv-BN-ReLU-pool blocks, ``config.model.conv_widths``
equal widths, one per block) or ``"cnn"`` (:func:`hypernet.tasks.targets.make_target`).

``"sinusoid"``: regression on ``y = A sin(x - phi)`` (Finn et al. 2017 Sec. 5.1), K =
``config.meta.num_shots`` support points; an MLP with ``config.meta.mlp_widths`` ReLU
hidden layers (40, 40 in the paper).

Metrics: training (per step, averaged over the logged steps): ``loss`` / ``accuracy``
(query set after adaptation), with ``config.meta.train_before_metrics`` also
``loss_before`` / ``accuracy_before`` (query set at the initial weights: one more forward
pass per task, off by default; none for the support-conditioned hypernetwork, whose head
is generated per task) and, for Meta-SGD, ``inner_lr/<path>``: the mean learned inner learning
rate of each adapted tensor. Evaluation: the same plus ``accuracy_ci95`` (``loss_ci95``
for sinusoids) and ``one_shot_error``.

BatchNorm (``config.meta.bn_mode``, docs/meta_learning_bn.md) runs in training mode on
support and query sets in meta-training (batch statistics, as in Finn et al.'s
implementation). At meta-test time ``"transductive"`` (default) keeps batch statistics:
predictions on a query set depend on the other queries of the task, as in the MAML
papers; ``"inference"`` uses the running statistics kept in meta-training and
``"per_step"`` MAML++'s per-step running statistics
(:class:`hypernet.meta.per_step_bn.PerStepBatchNormalization`): each query is then
classified on its own.

MAML++ (Antoniou et al. 2019) switches, each usable alone: ``config.meta.lslr``,
``multi_step_loss`` (weights annealed over ``msl_anneal_steps`` meta-steps),
``first_order_steps`` (derivative-order annealing), ``bn_mode="per_step"``,
``per_step_bn_weights``, and ``config.optim.schedule="cosine"``. Implicit MAML:
``config.meta.learner="imaml"`` with ``proximal_lambda`` and ``cg_steps``.
``config.meta.recompute``: second order with memory flat in inner steps.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, List, Optional, Tuple

import keras
import ml_collections
import numpy as np
import tensorflow as tf

from hypernet.core import functional
from hypernet.core.registry import ConfigError
from hypernet.hypernetworks import source as sources
from hypernet.tasks import targets, protocol
from hypernet.data import episodes, sinusoid
from hypernet import config_lib, meta
from hypernet.meta import conv4, inner_loop, meta_batch, support_hypernet, support_target

# config.meta.bn_mode (docs/meta_learning_bn.md): batch statistics everywhere; MAML++'s
# per-step running statistics, used at meta-test; one set of running statistics used at
# meta-test.
BN_MODES = ("transductive", "per_step", "inference")
TASKS = ("few_shot", "sinusoid")
_CLASSIFICATION_LOSS = "sparse_softmax_cross_entropy"


def _layout(global_batch_size: int, input_context) -> Tuple[int, int, int]:
  """``(tasks per replica, local replicas, first slot)`` for this input pipeline."""
  if input_context is None:
    return global_batch_size, 1, 0
  n = input_context.num_replicas_in_sync
  if global_batch_size % n:
    raise ValueError(f"The meta-batch size {global_batch_size} (config.batch_size or "
                     f"config.eval_batch_size) must be divisible by the number of replicas "
                     f"({n}).")
  local = n // input_context.num_input_pipelines
  return global_batch_size // n, local, input_context.input_pipeline_id * local


def _with_options(ds: tf.data.Dataset) -> tf.data.Dataset:
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
  options.deterministic = True
  return ds.with_options(options)


def task_stream(task_fn, global_batch_size: int, start_step: int = 0,
                input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
  """Endless meta-batches: step ``s`` holds tasks ``s*T .. s*T+T-1`` (T global).

  With ``input_context`` this pipeline yields, for each step, the slices of its local
  replicas in turn (replica ``r`` gets tasks ``s*T + r*t .. s*T + (r+1)*t - 1``, t = T /
  replicas), so any number of replicas trains on the same global meta-batch; resuming at
  ``start_step`` rebuilds exactly the meta-batches an uninterrupted run would see.

  Args:
    task_fn: scalar int64 task index -> dict of tensors (one task); plain TensorFlow,
      traced without AutoGraph.
    global_batch_size: T, tasks per step summed over replicas.
    start_step: the first step.
    input_context: from ``distribute_datasets_from_function``, or ``None``.

  Returns:
    A ``tf.data.Dataset`` of dicts with a leading axis of ``t`` tasks.
  """
  t, local, first = _layout(global_batch_size, input_context)

  @tf.autograph.experimental.do_not_convert
  def indices(k):
    step, slot = k // local, first + k % local
    return step * global_batch_size + slot * t + tf.range(t, dtype=tf.int64)

  stop = np.iinfo(np.int64).max // max(global_batch_size * local, 1)
  ds = tf.data.Dataset.range(start_step * local, stop).map(indices).unbatch()
  # Episodes drawn one at a time and one meta-batch ready while a step runs: a meta-step
  # takes far longer than drawing its episodes, and parallel calls and an autotuned
  # prefetch buffer held several meta-batches, so memory grew with the meta-batch size
  # (benchmarks/meta_bench.py).
  # Each task carries its global index: index // global_batch_size is the meta-step
  # (MAML++'s schedules over meta-steps read it).
  ds = ds.map(tf.autograph.experimental.do_not_convert(
      lambda i: dict(task_fn(i), task_index=i)))
  return _with_options(ds.batch(t, drop_remainder=True).prefetch(1))


def fixed_tasks(task_fn, num_tasks: int, global_batch_size: int,
                input_context: Optional[tf.distribute.InputContext] = None,
                extra=None) -> tf.data.Dataset:
  """One pass over tasks ``0 .. num_tasks-1`` (then ``extra``), padded to whole batches.

  Every task gets ``weight`` (float32 1, 0 for padding) and ``extra_weight`` (1 for the
  tasks of ``extra``); padding repeats task 0 with both weights 0, so every replica runs
  the same number of evaluation steps and each task counts once.

  Args:
    task_fn: scalar int64 index -> task dict (traced without AutoGraph).
    num_tasks: the number of ``task_fn`` tasks.
    global_batch_size: tasks per evaluation step summed over replicas.
    input_context: as :func:`task_stream`.
    extra: optional ``(extra_fn, num_extra)``: ``extra_fn(j)`` for ``j < num_extra`` gives
      a task with the same structure and shapes (e.g. the official one-shot runs).
  """
  num_extra = extra[1] if extra else 0
  n = num_tasks + num_extra
  num_batches = -(-n // global_batch_size)
  t, local, first = _layout(global_batch_size, input_context)
  order = (np.arange(num_batches)[:, None, None] * global_batch_size
           + (first + np.arange(local))[None, :, None] * t
           + np.arange(t)[None, None, :]).ravel()

  @tf.autograph.experimental.do_not_convert
  def element(k):
    task = task_fn(tf.minimum(k, num_tasks - 1))
    if extra:
      other = extra[0](tf.clip_by_value(k - num_tasks, 0, num_extra - 1))
      task = {key: tf.where(k < num_tasks, task[key], other[key]) for key in task}
    task["weight"] = tf.cast(k < num_tasks, tf.float32)
    task["extra_weight"] = tf.cast((k >= num_tasks) & (k < n), tf.float32)
    return task

  ds = tf.data.Dataset.from_tensor_slices(order.astype(np.int64)).map(
      element, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return _with_options(ds.batch(t).prefetch(tf.data.AUTOTUNE))


def _load_few_shot_data(config):
  """(meta-train, meta-test) class-indexed images from ``config.data``, and the
  meta-train classes' group ids for within-alphabet episodes (Omniglot: alphabet and
  rotation, :func:`hypernet.data.omniglot.alphabet_groups`; ``None`` otherwise)."""
  dc = config.data
  if dc.name == "omniglot":
    from hypernet.data import omniglot  # pylint: disable=g-import-not-at-top
    config_lib.check_omniglot_split(config)  # Also where no validate() ran: before loading.
    folder = omniglot_dir(config)
    zips = [z.strip() for z in str(dc.omniglot_zips).split(",") if z.strip()]
    if not zips:
      raise ConfigError("config.data.omniglot_zips is empty; name the image "
                                   "zips, e.g. 'images_background.zip'.")
    images = omniglot.load_omniglot(zips, data_dir=folder, image_size=dc.image_size)
    if not 0 <= dc.num_test_characters < images.num_classes:
      raise ConfigError(
          f"config.data.num_test_characters={dc.num_test_characters} leaves no meta-train "
          f"or meta-test characters: {', '.join(zips)} hold {images.num_classes} characters; "
          f"pick 1..{images.num_classes - 1} (0 with config.meta.one_shot_runs).")
    if dc.num_test_characters == 0:  # Every character meta-trained; the runs evaluate.
      rotations = tuple(dc.rotations)
      train = (omniglot.rotate_classes(images, rotations) if rotations not in ((), (0,))
               else images)
      del images
      return (episodes.class_indexed(train.images, train.labels), None,
              omniglot.alphabet_groups(train.class_names))
    train, test = omniglot.split_by_character(
        images, dc.split_seed, num_test_characters=dc.num_test_characters,
        rotations=tuple(dc.rotations) or None)
    return (episodes.class_indexed(train.images, train.labels),
            episodes.class_indexed(test.images, test.labels),
            omniglot.alphabet_groups(train.class_names))
  if dc.name in ("digits", "fashion_mnist", "mnist"):
    from hypernet import data as data_lib  # pylint: disable=g-import-not-at-top
    d = data_lib.load_classification(dc)
    scale = np.float32(d.pixel_scale)
    return (episodes.class_indexed(d.x_train.astype(np.float32) * scale, d.y_train),
            episodes.class_indexed(d.x_test.astype(np.float32) * scale, d.y_test), None)
  raise ValueError(f"config.data.name={dc.name!r} cannot be used for config.task='few_shot'; "
                   "use 'omniglot', 'digits', 'fashion_mnist' or 'mnist'.")


def _check_episodes_fit(config, train_data, test_data) -> None:
  """Raises ConfigError (naming the field) when an episode asks for more classes, or
  more examples of a class, than the meta-train or meta-test data hold."""
  mc = config.meta
  for side, data, queries, name, ways, ways_name in (
      ("meta-train", train_data, mc.num_queries, "num_queries", train_ways(config),
       "train_ways" if mc.get("train_ways", 0) else "num_ways"),
      ("meta-test", test_data, mc.eval_queries, "eval_queries", mc.num_ways, "num_ways")):
    if data is None:  # No held-out classes: the one-shot runs alone evaluate.
      continue
    if ways > data.num_classes:
      raise ConfigError(
          f"config.meta.{ways_name}={ways} exceeds the {data.num_classes} {side} classes "
          f"of config.data.name={config.data.name!r}; lower {ways_name}" + (
              " or config.data.num_test_characters." if config.data.name == "omniglot"
              else "."))
    fewest = int(np.min(data.class_counts))
    if mc.num_shots + queries > fewest:
      raise ConfigError(
          f"config.meta.num_shots + {name} = {mc.num_shots} + {queries} exceeds the {fewest} "
          f"examples of the smallest {side} class; lower num_shots or {name}.")


def omniglot_dir(config) -> str:
  """``config.data.data_dir``, user-expanded.

  Raises:
    ConfigError (a ValueError): the field is empty.
  """
  folder = os.path.expanduser(str(config.data.data_dir).strip())
  if not folder:
    from hypernet.data import omniglot  # pylint: disable=g-import-not-at-top
    raise ConfigError(
        "config.data.data_dir is empty: set it to the folder holding the Omniglot zips "
        f"({config.data.omniglot_zips}; and all_runs.zip for config.meta.one_shot_runs), "
        f"e.g. --config.data.data_dir=~/data/omniglot. Get them from {omniglot.OMNIGLOT_URL} "
        "(folder python/).")
  return folder


# The classes of a meta-training episode (train_ways, or num_ways where that is 0) and
# the target head's outputs (the larger of the two); TensorFlow-free in config_lib, where
# python -m hypernet.evaluate --set checks a setting against the trained head.
train_ways = config_lib.train_ways
head_ways = config_lib.head_ways


def make_meta_target(config, input_shape, num_outputs: int) -> keras.Model:
  """The target network of a meta-learning config (built, a ``keras.Sequential``).

  ``config.task == "sinusoid"``: an MLP ``1 -> mlp_widths (ReLU) -> num_outputs``.
  Otherwise ``config.model.name``: ``"conv4"`` (:func:`hypernet.meta.make_conv4`, one
  block per entry of ``config.model.conv_widths``, all equal) or ``"cnn"``.

  Raises:
    ValueError: unequal conv4 widths or an unknown model name.
  """
  if config.task == "sinusoid":
    layers = [keras.Input(tuple(input_shape))]
    for i, width in enumerate(config.meta.mlp_widths):
      layers.append(keras.layers.Dense(width, activation="relu", name=f"dense{i + 1}"))
    layers.append(keras.layers.Dense(num_outputs, name="head"))
    return keras.Sequential(layers, name="mlp")
  mc = config.model
  if mc.name == "conv4":
    widths = tuple(mc.conv_widths)
    if not widths or len(set(widths)) != 1:
      raise ValueError(f"config.model.conv_widths={widths} for conv4: give one equal width "
                       "per block, e.g. (64, 64, 64, 64).")
    meta = config.meta
    per_step_stats = meta.get("bn_mode", "transductive") == "per_step"
    per_step_weights = bool(meta.get("per_step_bn_weights", False))
    # One row per inner step (meta-training or meta-test, the more) and the query pass.
    rows = max(int(meta.inner_steps), int(meta.eval_inner_steps)) + 1
    return conv4.make_conv4(num_outputs, tuple(input_shape), filters=int(widths[0]),
                            num_blocks=len(widths), per_step_rows=rows,
                            per_step_statistics=per_step_stats,
                            per_step_weights=per_step_weights)
  if mc.name == "cnn":
    if mc.get("kernel_l2", 0.0):
      raise ValueError(
          f"config.model.kernel_l2={mc.kernel_l2}: meta-learning tasks do not add the "
          "target's regularizer penalties to the inner or outer loss yet; set it to 0 "
          "(or regularise through config.optim.weight_decay with optim.name='adamw').")
    return targets.make_target(mc, tuple(input_shape), num_outputs)
  raise ValueError(f"config.model.name={mc.name!r} for meta-learning; use 'conv4' or 'cnn'.")


def _body_hypernetwork(config, target: keras.Model):
  """The hypernetwork of kind ``config.meta.body_hypernet`` generating the body weights
  ``config.meta.body_targets`` from a ``[D]`` task embedding (D: the head's input
  width), sized by the ``config.hypernet`` fields of that kind."""
  mc = config.meta
  spec = functional.weight_spec(target, str(mc.body_targets))
  head = functional.weight_spec(target, str(mc.head))
  dims = [int(s.shape[0]) for s in head.values() if len(s.shape) == 2]
  if len(dims) != 1:
    raise ValueError(f"config.meta.head={mc.head!r} must select one Dense head "
                     f"(one [D, N] kernel) for config.meta.body_hypernet; got {list(head)}.")
  values = {p: v.numpy() for p, v in functional.variable_paths(target).items() if p in spec}
  hc = ml_collections.ConfigDict(config.hypernet.to_dict())
  hc.kind, hc.num_conditions = str(mc.body_hypernet), 0
  return sources.build_hypernetwork(hc, spec, values, seed=int(config.seed) + 17,
                                    condition_dim=dims[0])


def make_learner(config, target: keras.Model, loss) -> meta.Learner:
  """The inner-loop learner named by ``config.meta.learner`` for ``target``, from the
  learners' registry (:data:`hypernet.meta.LEARNERS`): a built-in name (``"maml"``,
  ``"fomaml"``, ``"metasgd"``, ``"anil"``, ``"support_hypernet"``, ``"protonet"``,
  ``"support_adapter"``, ``"imaml"``) or your
  own :class:`hypernet.meta.Learner` subclass as ``"package.module:Class"``, whose
  constructor gets ``model``, ``loss_fn``, ``seed`` (``config.seed``, where it takes one)
  and the ``config.meta`` fields of its other arguments' names. ``"support_hypernet"``
  with ``config.meta.body_hypernet`` is :class:`hypernet.meta.SupportTargetHypernetwork`.

  Raises:
    ConfigError (a ValueError): a learner field set that the learner does not read.
    ValueError: an unknown learner (lists the known ones), or the learner's own errors.
  """
  mc = config.meta
  config_lib.check_learner_fields(config)
  cls = meta.LEARNERS.get(mc.learner)
  given = {}
  if cls is support_hypernet.SupportHypernetwork and mc.body_hypernet != "none":
    cls = support_target.SupportTargetHypernetwork
    given["hypernetwork"] = _body_hypernetwork(config, target)
  if "seed" in meta.LEARNERS.fields(cls):
    given["seed"] = int(config.seed)
  return meta.learner.build_learner(cls, mc, target, loss, **given)


def _check_meta_fields(mc, min_steps: int) -> None:
  """Raises ValueError (naming the field) for a bad count, ``parallel`` or ``bn_mode``."""
  for name in ("num_ways", "num_shots", "num_queries", "eval_queries", "inner_steps",
               "eval_episodes", "parallel_iterations"):
    value = mc[name]
    least = (min_steps if name == "inner_steps" else 0 if name == "parallel_iterations"
             else 1)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
      raise ValueError(f"config.meta.{name} must be an int >= {least}, got {value!r}.")
  if mc.parallel not in meta_batch.STRATEGIES:
    raise ValueError(f"config.meta.parallel={mc.parallel!r}; use one of "
                     f"{list(meta_batch.STRATEGIES)}.")
  bn_mode = str(mc.get("bn_mode", "transductive"))
  if bn_mode not in BN_MODES:
    raise ValueError(f"config.meta.bn_mode={bn_mode!r}; use one of {list(BN_MODES)}.")


@protocol.TASKS.register("few_shot")
@protocol.TASKS.register("sinusoid")
class MetaLearningTask(protocol.Task):
  """Meta-learning (few-shot classification or sinusoid regression) for the train loop.

  Batches (leading axis: the replica's ``t`` tasks): few-shot ``support_x`` float32
  ``[t, N*K, H, W, C]``, ``support_y`` int32 ``[t, N*K]``, ``query_x`` ``[t, N*Q, H, W,
  C]``, ``query_y`` ``[t, N*Q]``; sinusoid ``[t, K, 1]`` / ``[t, Q, 1]`` float32.
  Evaluation batches add ``weight`` and ``extra_weight`` float32 ``[t]`` (see
  :func:`fixed_tasks`; ``extra_weight`` marks the official one-shot runs).

  Args:
    config: the experiment config (``config.task`` in :data:`TASKS`).
    data: optional ``(train, test)`` :class:`~hypernet.data.episodes.ClassIndexed` to use
      instead of loading ``config.data`` (few-shot only; tests, benchmarks), optionally
      with a third element: the train classes' group ids for
      ``config.meta.within_alphabet``.
    runs: optional list of :class:`~hypernet.data.omniglot.OneShotRun` to use instead of
      loading ``config.meta.one_shot_runs``.

  Few-shot attributes: ``num_train_classes`` / ``num_test_classes`` (the meta-train and
  meta-test classes, rotations counted), ``runs`` (the one-shot runs, maybe empty). With
  ``config.data.num_test_characters = 0`` (Omniglot, every character meta-trained: Lake
  et al.'s protocol) the runs are the only meta-test tasks (``num_test_classes`` 0,
  ``config.meta.eval_episodes`` unused): ``accuracy`` is theirs and ``one_shot_error``
  = 1 - ``accuracy``. The
  images live in the episode functions only (8-bit coded where that is exact).

  Raises:
    ValueError: a bad ``config.meta`` field (named). ConfigError (a ValueError): an
      empty Omniglot data folder, episodes that need more classes or examples per class
      than the data hold, too many held-out Omniglot characters, one-shot runs with a
      config that is not 20-way 1-shot with one query per class at meta-test time.
  """

  _phase = None  # the phase being traced (tracing_phase), else None

  def __init__(self, config, data=None, runs=None):
    if config.task not in TASKS:
      raise ValueError(f"config.task={config.task!r} is not a meta-learning task; known: "
                       f"{list(TASKS)}.")
    self.config = config
    mc = config.meta
    learner_cls = meta.LEARNERS.get(mc.learner)
    # E.g. the support-conditioned hypernetwork may skip the inner loop (0 inner steps).
    min_steps = learner_cls.min_inner_steps
    _check_meta_fields(mc, min_steps)
    self.bn_mode = str(mc.get("bn_mode", "transductive"))
    self.first_order_steps = int(mc.get("first_order_steps", 0))
    self.msl_anneal_steps = int(mc.get("msl_anneal_steps", 1000))
    # The query set at the initial weights (``*_before``): none worth reporting where the
    # head is generated per task (the target's own head variable is never used).
    self.before_metrics = learner_cls.before_metrics
    self.train_before_metrics = (bool(mc.get("train_before_metrics", False))
                                 and self.before_metrics)
    self.eval_inner_steps = int(mc.eval_inner_steps) or int(mc.inner_steps)
    self.eval_steps_sweep = tuple(int(k) for k in mc.eval_steps_sweep)
    if any(k < min_steps for k in self.eval_steps_sweep):
      raise ValueError(f"config.meta.eval_steps_sweep={tuple(mc.eval_steps_sweep)}: inner "
                       f"step counts must be >= {min_steps}.")
    self.classification = config.task == "few_shot"
    self.runs = []
    if self.classification:
      loss = self._init_few_shot(config, data, runs)
    else:
      loss = self._init_sinusoid(config)
    self.source = sources.build_weight_source(config, self.target)
    self.learner = make_learner(config, self.target, loss)
    # Tasks in flight in the accumulate loop (config.meta.parallel_iterations, 0: 2).
    # Two keep both cores busy. Second-order tasks are staggered (config.meta.staggered):
    # one query pass at a time, beside the previous task's second-order pass, so memory
    # stays near one task's.
    self.tasks_in_flight = int(mc.parallel_iterations) or 2
    self.staggered = bool(mc.get("staggered", True)) and not self.learner.first_order
    self.inner_lr_names = [f"inner_lr/{p}" for p in self.learner.inner_lrs]
    base = ["loss", "accuracy", "loss_before", "accuracy_before"] if self.classification \
        else ["loss", "loss_before"]
    self.metric_names: List[str] = [n for n in base if self.before_metrics or
                                    "_before" not in n] + self.inner_lr_names
    # Training logs the _before metrics only with config.meta.train_before_metrics.
    self.train_metric_names: List[str] = [
        n for n in self.metric_names if self.train_before_metrics or "_before" not in n]

  def _init_few_shot(self, config, data, runs) -> str:
    """Few-shot episodes, target and one-shot runs; returns the loss's name."""
    mc = config.meta
    groups = None
    if data is not None:
      train_data, test_data = data[:2]
      groups = data[2] if len(data) > 2 else None
    else:
      train_data, test_data, groups = _load_few_shot_data(config)
    if mc.within_alphabet and groups is None:
      raise ValueError(
          "config.meta.within_alphabet=True needs class groups (alphabets): use "
          f"config.data.name='omniglot' (got {config.data.name!r}) or set it to False.")
    _check_episodes_fit(config, train_data, test_data)
    image_shape = train_data.images.shape[1:]
    self.target = make_meta_target(config, image_shape, head_ways(config))
    # The episode functions hold the images (8-bit coded where exact); the arrays
    # loaded here are not kept (on the Omniglot subset: 58 MB less resident memory).
    self._train_fn = episodes.make_episode_fn(
        train_data, num_ways=train_ways(config), num_shots=mc.num_shots,
        num_queries=mc.num_queries, seed=config.seed,
        class_groups=groups if mc.within_alphabet else None,
        augment=episodes.few_shot_augment(
            shift=config.data.augment_shift, rotation=config.data.augment_rotation,
            scale=config.data.augment_scale, shear=config.data.augment_shear,
            flip=config.data.augment_flip))
    # No held-out classes (data.num_test_characters=0, Lake et al.'s protocol): the
    # one-shot runs are the meta-test tasks.
    self._eval_fn = None if test_data is None else episodes.make_episode_fn(
        test_data, num_ways=mc.num_ways, num_shots=mc.num_shots,
        num_queries=mc.eval_queries, seed=mc.eval_seed)
    self.num_train_classes = train_data.num_classes
    self.num_test_classes = 0 if test_data is None else test_data.num_classes
    del train_data, test_data, data
    if runs is not None or mc.one_shot_runs:
      self.runs = list(runs) if runs is not None else self._load_runs()
      self._check_runs(image_shape)
    elif self._eval_fn is None:
      raise ConfigError("config.data.num_test_characters=0 holds out no characters: score "
                        "the one-shot runs (config.meta.one_shot_runs='all_runs.zip') or "
                        "hold some out.")
    return _CLASSIFICATION_LOSS

  def _init_sinusoid(self, config) -> str:
    """Sinusoid tasks and the MLP target; returns the loss's name."""
    mc = config.meta
    self.target = make_meta_target(config, (1,), 1)
    self._train_fn = sinusoid.make_sinusoid_task_fn(
        num_support=mc.num_shots, num_query=mc.num_queries, seed=config.seed)
    self._eval_fn = sinusoid.make_sinusoid_task_fn(
        num_support=mc.num_shots, num_query=mc.eval_queries, seed=mc.eval_seed)
    return "mse"

  # -- data ---------------------------------------------------------------------------
  def _load_runs(self):
    from hypernet.data import omniglot  # pylint: disable=g-import-not-at-top
    path = os.path.join(omniglot_dir(self.config), str(self.config.meta.one_shot_runs))
    return omniglot.load_one_shot_runs(path, image_size=self.config.data.image_size)

  def _check_runs(self, image_shape) -> None:
    mc = self.config.meta
    if not self.runs:
      raise ConfigError("config.meta.one_shot_runs gave no runs.")
    ways = len(self.runs[0].support_x)
    if (mc.num_ways, mc.num_shots, mc.eval_queries) != (ways, 1, 1):
      raise ConfigError(
          f"config.meta.one_shot_runs: the official runs are {ways}-way 1-shot with one "
          f"query per class, so they need num_ways={ways}, num_shots=1, eval_queries=1 "
          f"(got {mc.num_ways}, {mc.num_shots}, {mc.eval_queries}): meta-train a "
          f"{ways}-way model (configs/omniglot_20way_maml.py) or set one_shot_runs=''.")
    if tuple(self.runs[0].support_x.shape[1:]) != tuple(image_shape):
      raise ConfigError(
          f"One-shot run images {self.runs[0].support_x.shape[1:]} differ from the "
          f"training images {tuple(image_shape)}; use the same config.data.image_size.")

  def _run_fn(self):
    sx = tf.constant(np.stack([r.support_x for r in self.runs]))
    qx = tf.constant(np.stack([r.query_x for r in self.runs]))
    qy = tf.constant(np.stack([r.query_y for r in self.runs]).astype(np.int32))
    sy = tf.range(sx.shape[1], dtype=tf.int32)  # support image j is class j
    return lambda j: {"support_x": tf.gather(sx, j), "support_y": sy,
                      "query_x": tf.gather(qx, j), "query_y": tf.gather(qy, j)}

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    """Meta-training batches (tasks drawn with ``config.seed``; ``seed`` is the same)."""
    del seed  # The task functions were built with config.seed.
    return task_stream(self._train_fn, global_batch_size, start_step, input_context)

  def eval_dataset(self, global_batch_size, input_context=None):
    """The ``config.meta.eval_episodes`` meta-test tasks, then the one-shot runs; only
    the runs where no class is held out (``config.data.num_test_characters=0``)."""
    if self._eval_fn is None:
      return fixed_tasks(self._run_fn(), len(self.runs), global_batch_size, input_context)
    extra = (self._run_fn(), len(self.runs)) if self.runs else None
    return fixed_tasks(self._eval_fn, self.config.meta.eval_episodes, global_batch_size,
                       input_context, extra=extra)

  # -- the loop's interface -----------------------------------------------------------
  @property
  def trainable_variables(self):
    # Target weights the learner never reads (a generated or zero-initialised head)
    # are not trained.
    target_vars = functional.variable_paths(self.target)
    seen = {id(target_vars[p]) for p in self.learner.untrained_paths}
    out = []
    for v in list(self.source.trainable_variables) + list(self.learner.trainable_variables):
      if id(v) not in seen:
        seen.add(id(v))
        out.append(v)
    return out

  def trackables(self) -> Dict[str, object]:
    return dict(self.source.trackables(), learner=self.learner)

  def _meta_batch(self, batch, before_metrics=True, query_training=True, **kwargs):
    tasks = {k: batch[k] for k in meta_batch.BATCH_KEYS}
    parallel = self.config.meta.parallel
    return meta_batch.meta_batch_loss(
        self.learner, tasks, weights=self.source.weights() or None,
        parallel="map_fn" if parallel == "accumulate" else parallel,
        before_metrics=before_metrics, query_training=query_training, **kwargs)

  # -- phases (the Trainer traces one step function per phase) ------------------------
  def phase_boundaries(self):
    """Steps at which the traced step changes form: ``config.meta.first_order_steps``
    (derivative-order annealing: first-order steps before it, second-order after)."""
    return (self.first_order_steps,) if self.first_order_steps else ()

  def phase_at(self, step: int):
    """The phase of global step ``step`` (0-based): ``"first_order"`` or
    ``"second_order"``, ``None`` without derivative-order annealing."""
    if not self.first_order_steps:
      return None
    return "first_order" if step < self.first_order_steps else "second_order"

  @contextlib.contextmanager
  def tracing_phase(self, phase):
    """While the Trainer calls the step function of ``phase`` (traced on its first call):
    the phase's derivative order is a Python bool in the graph, so the first-order steps
    carry no second-order work (a tensor switch kept both, and the first-order steps ran
    slower than second-order ones)."""
    self._phase = phase
    try:
      yield
    finally:
      self._phase = None

  def _schedule(self, batch, global_batch_size) -> Dict[str, object]:
    """MAML++'s schedules over meta-steps for a training step (the meta-step from the
    tasks' global indices), as :mod:`hypernet.meta.meta_batch` arguments: derivative-order
    annealing (``adapt_options["first_order"]``: first order for the first
    ``config.meta.first_order_steps``) and the multi-step loss's ``msl_weights``."""
    learner = self.learner
    if not (self.first_order_steps or learner.multi_step_loss) or "task_index" not in batch:
      return {}
    step = tf.cast(batch["task_index"][0], tf.int64) // global_batch_size
    out = {}
    if self.first_order_steps:
      phase = self._phase
      # Traced per phase by the Trainer: a Python bool; elsewhere (hn.keras, one traced
      # step for the whole run) the step decides in the graph.
      out["adapt_options"] = {"first_order": (phase == "first_order" if phase is not None
                                              else step < self.first_order_steps)}
    if learner.multi_step_loss:
      out["msl_weights"] = inner_loop.msl_weights(step, self.msl_anneal_steps,
                                                  learner.inner_steps)
    return out

  def _train_sums(self, per_task):
    """``{name: (sum, count)}`` of the training metrics from ``[t]`` per-task values."""
    per_task = {k: tf.cast(tf.stop_gradient(v), tf.float32) for k, v in per_task.items()}
    count = tf.cast(tf.size(per_task["loss"]), tf.float32)
    sums = {}
    for when in ("after", "before") if self.train_before_metrics else ("after",):
      suffix = "" if when == "after" else "_before"
      sums["loss" + suffix] = (tf.reduce_sum(per_task["loss" + suffix]), count)
      if self.classification:
        sums["accuracy" + suffix] = (tf.reduce_sum(per_task["accuracy" + suffix]), count)
    if self.inner_lr_names:  # Meta-SGD: one value per step, shared over replicas.
      share = 1.0 / tf.distribute.get_replica_context().num_replicas_in_sync
      for name, rate in zip(self.inner_lr_names, self.learner.inner_lrs.values()):
        sums[name] = (tf.reduce_mean(tf.cast(rate, tf.float32)) * share, tf.constant(share))
    return sums

  def train_loss(self, batch, global_batch_size):
    """This replica's share of the mean post-adaptation query loss over the global
    meta-batch (differentiable: one tape over all the replica's tasks), metric sums and
    the new BatchNorm state. Training itself uses :meth:`train_gradients`."""
    result = self._meta_batch(batch, before_metrics=self.train_before_metrics,
                              **self._schedule(batch, global_batch_size))
    after = result.per_task.get("msl_objective", result.per_task["loss"])
    loss = tf.nn.compute_average_loss(after, global_batch_size=global_batch_size)
    return loss, self._train_sums(result.per_task), result.state

  def train_gradients(self, batch, global_batch_size, variables, scale_loss=None):
    """This replica's loss share, metric sums, new state and gradients (the task
    interface's optional gradient method, :mod:`hypernet.tasks.classification`).

    With ``config.meta.parallel="accumulate"`` the meta-gradient is accumulated task by
    task (:func:`hypernet.meta.meta_batch.meta_batch_gradients`: memory of one task);
    generated initial weights are produced once under a tape and their summed gradient
    chained through the hypernetwork once per step. Otherwise one tape over
    :meth:`train_loss`.

    Args:
      batch: this replica's meta-batch (class doc).
      global_batch_size: tasks per step summed over replicas.
      variables: the trained variables, in the order the gradients are returned.
      scale_loss: optional linear loss scaling (mixed precision) applied to what is
        differentiated; the returned loss is unscaled.

    Returns:
      ``(loss, sums, state, grads)``: ``grads[i]`` for ``variables[i]``, ``None`` where
      the loss does not depend on it.
    """
    if self.config.meta.parallel != "accumulate":
      with tf.GradientTape() as tape:
        loss, sums, state = self.train_loss(batch, global_batch_size)
        scaled = scale_loss(loss) if scale_loss is not None else loss
      return loss, sums, state, tape.gradient(scaled, variables)
    tasks = {k: batch[k] for k in meta_batch.BATCH_KEYS}
    with tf.GradientTape() as tape:
      weights = self.source.weights() or {}
    task_weight = tf.constant(1.0 / global_batch_size, tf.float32)
    if scale_loss is not None:
      task_weight = scale_loss(task_weight)
    result = meta_batch.meta_batch_gradients(
        self.learner, tasks, variables, weights=weights or None, task_weight=task_weight,
        before_metrics=self.train_before_metrics, parallel_iterations=self.tasks_in_flight,
        staggered=self.staggered, **self._schedule(batch, global_batch_size))
    grads = list(result.variable_grads)
    if weights:
      paths = list(weights)
      chained = tape.gradient([weights[p] for p in paths], variables,
                              output_gradients=[result.weight_grads[p] for p in paths])
      grads = [meta_batch.sum_gradients(a, b) for a, b in zip(grads, chained)]
    after = result.per_task["loss"]
    loss = tf.reduce_sum(after) / tf.cast(global_batch_size, after.dtype)
    return loss, self._train_sums(result.per_task), result.state, grads

  def eval_sums(self, batch):
    """Metric sums over the batch's real tasks: ``loss``, ``loss_before`` (and
    ``accuracy``, ``accuracy_before``; no ``_before`` for the support-conditioned
    hypernetwork), sums of squares ``accuracy_sq`` (``loss_sq`` for
    sinusoids) for the 95% interval, ``one_shot_error`` over the official runs, and for
    each ``k`` of ``config.meta.eval_steps_sweep`` the same tasks after ``k`` inner
    steps: ``loss_steps_k`` (``accuracy_steps_k``) with ``_sq`` companions (Finn et al.
    2017, Fig. 3: MSE after 1..10 steps)."""
    result = self._adapted_meta_batch(batch, self.eval_inner_steps,
                                      before_metrics=self.before_metrics)
    pt = {k: tf.cast(v, tf.float32) for k, v in result.per_task.items()}
    w, rw = batch["weight"], batch["extra_weight"]
    n = tf.reduce_sum(w)
    total = lambda x, weight=w: tf.reduce_sum(weight * x)
    sweep = {}
    for k in self.eval_steps_sweep:  # The same tasks adapted with k inner steps.
      sweep_pt = pt if k == self.eval_inner_steps else {
          name: tf.cast(v, tf.float32) for name, v in
          self._adapted_meta_batch(batch, k, before_metrics=False).per_task.items()}
      for name in ("loss", "accuracy") if self.classification else ("loss",):
        value = sweep_pt[name]
        sweep[f"{name}_steps_{k}"] = (total(value), n)
        sweep[f"{name}_steps_{k}_sq"] = (total(tf.square(value)), n)
    sums = {"loss": (total(pt["loss"]), n)}
    if self.before_metrics:
      sums["loss_before"] = (total(pt["loss_before"]), n)
    if self.classification:
      acc = pt["accuracy"]
      sums.update(accuracy=(total(acc), n), accuracy_sq=(total(tf.square(acc)), n))
      if self.before_metrics:
        sums["accuracy_before"] = (total(pt["accuracy_before"]), n)
      if self.runs:
        rw = w if self._eval_fn is None else rw   # Runs alone: every task is a run.
        sums["one_shot_error"] = (total(1.0 - acc, rw), tf.reduce_sum(rw))
    else:
      sums["loss_sq"] = (total(tf.square(pt["loss"])), n)
    sums.update(sweep)
    return sums

  def _eval_options(self, inner_steps: int) -> Dict[str, object]:
    """The learner's options at meta-test time: ``inner_steps``, and
    ``config.meta.bn_mode``'s BatchNorm mode (running statistics, per step or not, else
    the batch statistics of each support and query set: transductive)."""
    return {"inner_steps": inner_steps, "inner_training": self.bn_mode == "transductive"}

  def _adapted_meta_batch(self, batch, inner_steps: int, before_metrics: bool = True):
    """:meth:`_meta_batch` with ``inner_steps`` inner steps (the graph has that many)."""
    options = self._eval_options(inner_steps)
    return self._meta_batch(batch, before_metrics=before_metrics,
                            query_training=options["inner_training"],
                            adapt_options=options)

  def apply_state(self, state):
    """Writes the new BatchNorm state ``{path: tensor}`` (empty: nothing to write)."""
    if state:
      functional.assign_state(self.target, state)

  def describe(self) -> Dict[str, float]:
    """Parameter counts: ``trainable`` (everything the outer optimiser trains), those of
    the weight source, Meta-SGD's ``inner_lrs``, the support-conditioned ``generator``."""
    counts = dict(self.source.parameter_counts())
    size = lambda variables: sum(int(np.prod(v.shape)) for v in variables)
    counts["trainable"] = size(self.trainable_variables)
    counts["inner_lrs"] = size(self.learner.inner_lrs.values())
    counts.update(self.learner.parameter_counts())
    return counts

  # -- evaluation outside the loop ----------------------------------------------------
  def one_shot_error_rate(self) -> float:
    """The error rate on the official runs through
    :func:`hypernet.data.omniglot.one_shot_error_rate`: each run adapted eagerly on its
    20 support drawings (``eval_inner_steps``), queries predicted by the fast weights.
    The same number as the ``one_shot_error`` evaluation metric, computed independently.

    Raises:
      ValueError: the task has no one-shot runs.
    """
    from hypernet.data import omniglot  # pylint: disable=g-import-not-at-top
    if not self.runs:
      raise ValueError("No one-shot runs: set config.meta.one_shot_runs='all_runs.zip'.")
    learner = self.learner

    def classify(support_x, query_x):
      options = self._eval_options(self.eval_inner_steps)
      weights = learner.initial_weights(self.source.weights() or None)
      state = {p: tf.convert_to_tensor(v.value) for p, v in
               functional.variable_paths(self.target, trainable=False).items()}
      fast, state = learner.adapt(support_x, tf.range(len(support_x), dtype=tf.int32),
                                  weights=weights, state=state, **options)
      logits = functional.functional_call(self.target, fast, query_x,
                                          training=options["inner_training"], state=state,
                                          accelerate="meta")
      return np.argmax(logits.numpy(), axis=-1).astype(np.int32)

    return omniglot.one_shot_error_rate(classify, self.runs)
