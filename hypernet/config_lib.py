"""Config validation: fail before any training work, naming the field.

Every experiment config starts from :func:`base_config`, which is also the *schema*
:func:`validate` checks against, then the value ranges and impossible combinations it can
see without building anything. The registries' entries own their fields: the hypernetwork
kinds' and data loaders' arguments, their choices and which of them a run uses are read
from source (``Registry.declared``, TensorFlow-free). Other new fields are added to
:func:`base_config` with their defaults (a ``None`` default as
``ml_collections.config_dict.placeholder(type)``, so that it has a type).
"""
from __future__ import annotations

import copy
import difflib
import math
import numbers
from typing import Any, Dict, List, Optional

from hypernet.core import plugins
from hypernet.core.registry import ConfigError, Registry  # ConfigError: one class for all.
from hypernet.data.base import DATASETS   # TensorFlow-free: read with DATASETS.declared().

# Groups whose fields are the constructor arguments of a registry's classes, by their own
# names: group -> (the field that selects the class, the registry). Read from the source
# (Registry.declared, no import), so validation stays TensorFlow-free. The group's defaults
# are its builder's own fields (_BUILDER_FIELDS) plus the union of every entry's
# constructor arguments; the fields a run uses are the selected entry's. config.meta: the
# learners' (hypernet/meta/, @LEARNERS.register) besides the meta-learning task's own
# episode fields (_meta_defaults).
LEARNERS = Registry("learner", "config.meta.learner", "hypernet.meta",
                    base="hypernet.meta.learner:Learner")
SELECTED_GROUPS = {
    "hypernet": ("kind", Registry("hypernetwork kind", "config.hypernet.kind",
                                  "hypernet.hypernetworks",
                                  base="hypernet.hypernetworks.base:Hypernetwork")),
    "meta": ("learner", LEARNERS),
}
# The built-in tasks (hypernet/tasks/, @TASKS.register), read from source like the kinds.
TASKS = Registry("task", "config.task", "hypernet.tasks", base="hypernet.tasks.protocol:Task")
# Where the entries' constructor defaults differ, or the config starts elsewhere: the
# config's default (tests/test_registries.py checks every disagreement is listed here).
# meta: adapt "" (every trainable weight) and zero_init "" (none) are the constructors'
# None and () as strings of patterns; support_hypernet's constructor defaults to 0 inner
# steps and no hidden generator layer, the config to one step and the experiments' layer.
_GROUP_DEFAULTS = {"hypernet": {"hidden": (64,), "condition_dim": 8},
                   "meta": {"adapt": "", "zero_init": "", "inner_steps": 1,
                            "generator_widths": (64,)}}
# config.meta's learner fields: every built-in learner's constructor fields, by default.
_LEARNER_DEFAULTS = LEARNERS.declared_defaults(_GROUP_DEFAULTS["meta"])
# A group's fields that its builder reads, not the selected class's constructor
# (hypernet/hypernetworks/source.py: build_weight_source, HypernetworkSource).
_BUILDER_FIELDS = {"hypernet": ("kind", "targets", "train_rest", "quantize", "quantize_targets")}
# Fields renamed to the constructors' names: an old name gets "Did you mean" the new one.
RENAMED = {"hypernet": {"chunk_center": "center", "chunk_emb_multiplier": "emb_multiplier",
                        "chunk_head_precondition": "head_precondition",
                        "chunk_condition_per_chunk": "condition_per_chunk",
                        "static_hidden_dim": "hidden_dim", "slice_channels": "slice_in"},
           "meta": {"anil_head": "head", "zero_init_head": "zero_init",
                    "recompute_inner_steps": "recompute", "imaml_lambda": "proximal_lambda",
                    "imaml_cg_steps": "cg_steps", "generator_scale": "scale",
                    "body_gate": "gate"}}
HYPERNET_KINDS = SELECTED_GROUPS["hypernet"][1]

_POSITIVE_INTS = ("num_steps", "batch_size", "eval_batch_size", "log_every",
                  "checkpoint_every", "checkpoint_keep")

# Fields whose values may also have these types besides the default's type.
_ALSO_ALLOWED = {"jit_compile": (bool,)}

_NONFINITE_MODES = ("stop", "skip")
# Fields with a fixed set of values, checked before any work. The modules that act on
# them hold the same lists (tests/test_config_lib.py checks they agree).
CHOICES = {
    "task": TASKS.declared_names(),
    "continual.method": ("hnet", "finetune", "ewc", "independent"),
    "continual.benchmark": ("split", "permuted"),
    "continual.task_inference": ("entropy", "ppca"),
    "distribution": ("auto", "one_device", "mirrored", "multi_worker", "tpu"),
    "jit_compile": ("auto", "true", "false", "True", "False"),
    # The classification step's functional call (hypernet/numerics/accel.py, CONFIG_VALUES).
    "accelerate": ("default", "meta", "off"),
    "dtype_policy": ("float32", "mixed_bfloat16", "mixed_float16"),
    # Omniglot feeds few-shot episodes only (hypernet/tasks/meta_learning.py).
    "data.name": DATASETS.declared_names() + ("omniglot",),
    "model.name": ("cnn", "mobilenet_v2", "conv4"),
    "hypernet.kind": ("none",) + HYPERNET_KINDS.declared_names(),
    # The generator's hidden units (hypernet/hypernetworks/base.py, ACTIVATIONS).
    "hypernet.activation": ("relu", "elu", "gelu", "silu", "tanh", "leaky_relu"),
    "optim.name": ("adam", "fused_adam", "adamw", "sgd"),
    "optim.schedule": ("constant", "cosine", "step"),
    "meta.learner": LEARNERS.declared_names(),
    "meta.body_hypernet": ("none",) + HYPERNET_KINDS.declared_names(),
    "meta.bn_mode": ("transductive", "per_step", "inference"),
    "meta.parallel": ("accumulate", "map_fn", "vectorized_map"),
}


# Plug-ins (hypernet/core/plugins.py, docs/keras.md): these fields may also name user code
# "package.module:attribute", and data.name a TensorFlow Datasets set "tfds:NAME",
# model.name any "keras.applications.<Model>"; checked when the run builds them.
PLUGIN_FIELDS = ("task", "data.name", "model.name", "hypernet.kind", "meta.body_hypernet",
                 "meta.learner")


def is_plugin_value(field: str, value) -> bool:
  """Whether ``value`` of ``field`` names a plug-in rather than one of :data:`CHOICES`."""
  if field not in PLUGIN_FIELDS or not isinstance(value, str):
    return False
  return ":" in value or (field == "model.name" and value.startswith("keras.applications."))


def _is_configdict(value) -> bool:
  import ml_collections  # pylint: disable=g-import-not-at-top
  return isinstance(value, (ml_collections.ConfigDict, dict))


def _expected_type(schema, key):
  """The type a field must have: the default's, or a placeholder's declared type."""
  try:
    declared = schema.get_type(key)
  except (AttributeError, KeyError):
    declared = None
  value = schema[key]
  if value is None:
    return declared if declared is not type(None) else None
  return type(value)


def _type_ok(value, expected, key) -> bool:
  extra = _ALSO_ALLOWED.get(key, ())
  if extra and isinstance(value, extra):
    return True
  if expected is bool:
    return isinstance(value, bool)
  if expected is int:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
  if expected is float:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
  if expected in (tuple, list):
    return isinstance(value, (tuple, list))
  return isinstance(value, expected)


def _type_name(expected, key) -> str:
  names = [getattr(t, "__name__", str(t)) for t in (expected,) + _ALSO_ALLOWED.get(key, ())]
  if expected is float:
    names = ["float (or int)"]
  return " or ".join(names)


def _add_plugin_fields(config, schema) -> None:
  """Adds to ``schema`` the fields of a plug-in class a selected group names
  (``config.hypernet.kind = "pkg.mod:Class"``) that the config sets (read without
  importing it; see :meth:`Registry.plugin_schema`).

  Raises:
    ConfigError: the plug-in cannot be found, or lacks a required field.
  """
  for group, (selector, registry) in SELECTED_GROUPS.items():
    value = config.get(group, {}).get(selector)
    if plugins.is_plugin(value):
      try:
        fields = registry.plugin_schema(value, config[group])
      except ValueError as e:
        raise ConfigError(str(e)) from e
      for key, default in fields.items():
        if key not in schema[group]:
          schema[group][key] = default


def _check_schema(config, schema, prefix: str) -> None:
  for key in config.keys():
    if key not in schema:
      close = ([RENAMED[prefix[:-1]][key]] if key in RENAMED.get(prefix[:-1], {}) else
               difflib.get_close_matches(key, list(schema.keys()), n=1))
      hint = f" Did you mean config.{prefix}{close[0]}?" if close else ""
      group = prefix[:-1]
      where = (f"an argument of the constructor config.{group}.{SELECTED_GROUPS[group][0]} "
               "names, or a field" if group in SELECTED_GROUPS else "A new field is")
      raise ConfigError(
          f"config{'.' if prefix else ''}{prefix}{key} is not a known field.{hint} Known "
          f"fields{' of config.' + prefix[:-1] if prefix else ''}: {sorted(schema.keys())}. "
          f"{where[0].upper() + where[1:]} added to "
          "hypernet/config_lib.py:base_config() with its default.")
  for key in schema.keys():
    name = f"config.{prefix}{key}"
    if key not in config:
      raise ConfigError(f"{name} is missing: build configs from config_lib.base_config() "
                        "and override what differs.")
    value, default = config[key], schema[key]
    if _is_configdict(default):
      if not _is_configdict(value):
        raise ConfigError(f"{name} must be a ConfigDict of fields, got {value!r}.")
      _check_schema(value, default, f"{prefix}{key}.")
      continue
    expected = _expected_type(schema, key)
    if expected is None:  # An untyped None default: anything goes.
      continue
    if value is None and default is None:  # An optional (placeholder) field left unset.
      continue
    if value is None:
      raise ConfigError(f"{name} is None; it needs a value of type "
                        f"{_type_name(expected, key)} (default {default!r}).")
    if not _type_ok(value, expected, key):
      raise ConfigError(f"{name}={value!r} has type {type(value).__name__}; it must be "
                        f"{_type_name(expected, key)} (default {default!r}).")


def _check_values(config) -> None:
  flat = flatten(config)
  for field, allowed in CHOICES.items():
    value = flat.get(field)
    if field in flat and (isinstance(value, bool) and field == "jit_compile"):
      continue
    if field in flat and value not in allowed and not is_plugin_value(field, value):
      plugin = (" or a plug-in 'package.module:attribute'" if field in PLUGIN_FIELDS else "")
      raise ConfigError(f"config.{field}={value!r} is not one of {list(allowed)}{plugin}.")
  for name in _POSITIVE_INTS:
    value = config.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
      raise ConfigError(f"config.{name} must be a positive integer, got {value!r}.")
  if config.task == "continual" and config.continual.task_inference == "ppca" and (
      config.continual.ppca_components < 1):
    raise ConfigError(f"config.continual.ppca_components must be a positive integer (the "
                      f"principal components per task, e.g. 20), got "
                      f"{config.continual.ppca_components!r}.")
  if config.console_every < 0 or config.console_every % config.log_every:
    raise ConfigError(f"config.console_every={config.console_every} must be a multiple of "
                      f"config.log_every={config.log_every} (0: about ten lines a run).")
  if not isinstance(config.eval_every, int) or config.eval_every < 0:
    raise ConfigError(f"config.eval_every must be an integer >= 0 (0: only at the end), got "
                      f"{config.eval_every!r}.")
  s = config.summaries
  for field in ("every", "kernel_images", "profile_start", "profile_steps"):
    if s[field] < 0:
      raise ConfigError(f"config.summaries.{field} must be >= 0, got {s[field]}.")
  if s.max_filters <= 0:
    raise ConfigError(f"config.summaries.max_filters must be positive, got {s.max_filters}.")
  if s.profile_steps and s.profile_start + s.profile_steps > config.num_steps:
    raise ConfigError(
        f"config.summaries.profile_start={s.profile_start} + profile_steps={s.profile_steps} "
        f"runs past config.num_steps={config.num_steps}: the trace would never end. Trace "
        "earlier steps or fewer.")
  f = config.fault
  if f.nonfinite not in _NONFINITE_MODES:
    raise ConfigError(f"config.fault.nonfinite={f.nonfinite!r}; use one of "
                      f"{list(_NONFINITE_MODES)}.")
  if f.max_skips < 0 or (f.nonfinite == "skip" and f.max_skips == 0):
    raise ConfigError(f"config.fault.max_skips={f.max_skips}: must be >= 0, and > 0 when "
                      "config.fault.nonfinite='skip'.")
  if config.hypernet.kind != "none" and not str(config.hypernet.targets).strip():
    raise ConfigError("config.hypernet.targets is empty, so the hypernetwork "
                      f"(config.hypernet.kind={config.hypernet.kind!r}) has nothing to "
                      "generate; give patterns such as 'conv*/kernel' or set kind='none'.")
  _check_ranges(config)


# Omniglot has 20 drawings of every character (hypernet/data/omniglot.py).
OMNIGLOT_DRAWINGS = 20
_IMAGE_TASKS = ("classification", "multitask_classification", "continual")
_META_TASKS = ("few_shot", "sinusoid")


def _finite(value) -> bool:
  return isinstance(value, numbers.Real) and math.isfinite(value)


def _positive_ints(config, group: str, names, least: int = 1, hint: str = "") -> None:
  for name in names:
    value = config[group][name]
    if value < least:
      raise ConfigError(f"config.{group}.{name} must be an integer >= {least}, got "
                        f"{value!r}.{hint}")


def _check_ranges(config) -> None:
  """Value ranges of the fields the run reads (per task and model; a hypernetwork kind's
  own ranges are checked by its constructor, :func:`hypernet.hypernetworks.source.
  build_hypernetwork`, naming the same field)."""
  if not 0 <= config.seed < 2 ** 32:
    raise ConfigError(f"config.seed must be in [0, 2**32) (NumPy's seed range), got "
                      f"{config.seed}.")
  o = config.optim
  if not _finite(o.lr) or o.lr <= 0:
    raise ConfigError(f"config.optim.lr must be a positive finite number, got {o.lr!r}.")
  if o.warmup_steps < 0:
    raise ConfigError(f"config.optim.warmup_steps must be >= 0 (0: no warm-up), got "
                      f"{o.warmup_steps}.")
  if not _finite(o.grad_clip_norm) or o.grad_clip_norm < 0:
    raise ConfigError(f"config.optim.grad_clip_norm must be a finite number >= 0 (0: no "
                      f"clipping), got {o.grad_clip_norm!r}.")
  for name in ("weight_decay", "momentum"):
    if not _finite(o[name]) or o[name] < 0:
      raise ConfigError(f"config.optim.{name} must be a finite number >= 0, got {o[name]!r}.")
  if o.schedule == "step":
    _check_step_schedule(o)
  if config.data.augment_shift < 0:
    raise ConfigError(f"config.data.augment_shift must be >= 0 pixels (0: no shifts), got "
                      f"{config.data.augment_shift}.")
  _check_augment(config)
  if config.task != "sinusoid":
    _check_model(config)
  if config.task in _META_TASKS:
    _check_meta(config)
  if config.task == "continual":
    _check_continual(config)


def _check_model(config) -> None:
  m = config.model
  if m.name == "conv4" and config.task in _IMAGE_TASKS:
    raise ConfigError(f"config.model.name='conv4' is the meta-learning target (config.task="
                      f"'few_shot'); config.task={config.task!r} trains 'cnn' or "
                      "'mobilenet_v2'.")
  if m.name == "mobilenet_v2" or is_plugin_value("model.name", m.name):
    return
  widths = tuple(m.conv_widths) + (tuple(m.dense_widths) if m.name == "cnn" else ())
  if any(not isinstance(w, numbers.Integral) or w <= 0 for w in widths):
    field = "conv_widths and config.model.dense_widths" if m.name == "cnn" else "conv_widths"
    raise ConfigError(f"config.model.{field} must be positive integers, got "
                      f"{tuple(m.conv_widths)}, {tuple(m.dense_widths)}.")
  if m.name == "cnn":
    if not _finite(m.dropout) or not 0 <= m.dropout < 1:
      raise ConfigError(f"config.model.dropout must be in [0, 1) (0: no dropout), got "
                        f"{m.dropout!r}.")
    if m.kernel_size <= 0:
      raise ConfigError(f"config.model.kernel_size must be positive, got {m.kernel_size}.")


def _check_step_schedule(o) -> None:
  if o.decay_every < 1:
    raise ConfigError(f"config.optim.decay_every must be >= 1 step with "
                      f"schedule='step', got {o.decay_every}.")
  if not _finite(o.decay_rate) or not 0 < o.decay_rate <= 1:
    raise ConfigError(f"config.optim.decay_rate must be in (0, 1] with schedule='step', "
                      f"got {o.decay_rate!r}.")
  if o.warmup_steps:
    raise ConfigError(f"config.optim.warmup_steps={o.warmup_steps} with schedule='step': "
                      "the step decay has no warm-up; set it to 0 or use 'cosine'.")


def _check_augment(config) -> None:
  d = config.data
  for name, top in (("augment_rotation", 180.0), ("augment_scale", 1.0),
                    ("augment_shear", float("inf"))):
    value = d.get(name, 0.0)
    if not _finite(value) or not 0 <= value < top:
      bound = "a finite number >= 0" if top == float("inf") else f"a number in [0, {top:g})"
      raise ConfigError(f"config.data.{name} must be {bound} (0: none), got {value!r}.")
    if value and config.task == "sinusoid":
      raise ConfigError(f"config.data.{name}={value!r} distorts images, and task "
                        "'sinusoid' has none; set it to 0.")


# Learners that write the head per task from the support set's class prototypes
# (hypernet/meta/support_hypernet.py, protonet.py, support_adapter.py): trained at more
# ways than tested (meta.train_ways, the head masks the classes an episode lacks), no
# 'before' metrics, no single target to export.
_PROTOTYPE_HEAD_LEARNERS = ("support_hypernet", "protonet", "support_adapter")
PROTOTYPE_HEAD_LEARNERS = _PROTOTYPE_HEAD_LEARNERS   # Public: hypernet.evaluate --set.


def _check_meta(config) -> None:
  mc = config.meta
  # The support-conditioned hypernetwork may skip the inner loop (0 inner steps).
  least = 0 if mc.learner == "support_hypernet" else 1
  names = ("num_shots", "num_queries", "eval_queries", "eval_episodes")
  _positive_ints(config, "meta", (("num_ways",) if config.task == "few_shot" else ()) + names)
  _positive_ints(config, "meta", ("inner_steps",), least,
                 " (support_hypernet alone may take 0 inner steps.)" if least else "")
  _positive_ints(config, "meta", ("eval_inner_steps", "parallel_iterations"), 0,
                 " (0: the default.)")
  if any(k < least for k in mc.eval_steps_sweep):
    raise ConfigError(f"config.meta.eval_steps_sweep={tuple(mc.eval_steps_sweep)}: inner "
                      f"step counts must be >= {least}.")
  if not _finite(mc.inner_lr) or mc.inner_lr <= 0:
    raise ConfigError(f"config.meta.inner_lr must be a positive finite number (the inner "
                      f"loop's step size), got {mc.inner_lr!r}.")
  _positive_ints(config, "meta", ("train_ways",), 0, " (0: num_ways.)")
  if mc.get("train_ways", 0) and (mc.learner not in _PROTOTYPE_HEAD_LEARNERS
                                  or config.task != "few_shot"):
    raise ConfigError(
        f"config.meta.train_ways={mc.train_ways} needs config.meta.learner "
        f"{' or '.join(map(repr, _PROTOTYPE_HEAD_LEARNERS))} on task 'few_shot' (got "
        f"{mc.learner!r}, {config.task!r}): other learners adapt an N-way head; set "
        "train_ways=0.")
  if mc.get("train_before_metrics", False) and mc.learner in _PROTOTYPE_HEAD_LEARNERS:
    raise ConfigError(
        f"config.meta.train_before_metrics=True with config.meta.learner={mc.learner!r}: "
        "its head is generated per task, so there is no 'before' to log; set it to False.")
  _check_meta_algorithms(config)
  check_learner_fields(config)
  if config.task != "few_shot" or config.data.name != "omniglot":
    return
  needed = mc.num_shots + max(mc.num_queries, mc.eval_queries)
  if needed > OMNIGLOT_DRAWINGS:
    raise ConfigError(
        f"config.meta.num_shots + max(num_queries, eval_queries) = {mc.num_shots} + "
        f"{max(mc.num_queries, mc.eval_queries)} = {needed} drawings per class, but Omniglot "
        f"has {OMNIGLOT_DRAWINGS} per character; lower num_shots or the query counts.")
  check_omniglot_split(config)


# The zips whose alphabets Lake et al.'s one-shot runs (all_runs.zip) are drawn from.
ONE_SHOT_RUNS_ALPHABETS = ("images_evaluation",)


def omniglot_zip_names(config) -> List[str]:
  """The file names of ``config.data.omniglot_zips`` (comma-separated), stripped."""
  return [z.strip() for z in str(config.data.omniglot_zips).split(",") if z.strip()]


def check_omniglot_split(config) -> None:
  """Omniglot's held-out characters, and Lake et al.'s protocol for the one-shot runs:
  meta-training must not read the evaluation alphabets the runs are drawn from
  (:data:`ONE_SHOT_RUNS_ALPHABETS`).

  Raises:
    ConfigError: ``config.data.omniglot_zips`` names ``images_evaluation.zip`` while
      ``config.meta.one_shot_runs`` is set (the leak, with the fix); no held-out
      characters (``num_test_characters=0``) without the runs; a negative count.
  """
  dc, runs = config.data, str(config.meta.one_shot_runs).strip()
  leaked = [z for z in omniglot_zip_names(config)
            if z.replace("\\", "/").rsplit("/", 1)[-1].startswith(ONE_SHOT_RUNS_ALPHABETS)]
  if runs and leaked:
    raise ConfigError(
        f"config.meta.one_shot_runs={runs!r} scores Lake et al.'s runs, whose characters "
        f"come from the evaluation alphabets, but config.data.omniglot_zips reads "
        f"{leaked[0]} for meta-training: a leak of the test characters; meta-train on "
        "config.data.omniglot_zips='images_background.zip' only "
        "(configs/omniglot_lake_support_hypernet.py) or set one_shot_runs=''.")
  if dc.num_test_characters == 0 and not runs:
    raise ConfigError("config.data.num_test_characters=0 holds out no characters, so there "
                      "is nothing to evaluate on: hold some out (>= 1) or score the one-shot "
                      "runs alone (config.meta.one_shot_runs='all_runs.zip').")
  if dc.num_test_characters < 0:
    raise ConfigError(f"config.data.num_test_characters must be >= 1 (0: none held out, "
                      f"with config.meta.one_shot_runs), got {dc.num_test_characters}.")


def _check_meta_algorithms(config) -> None:
  """Recomputed inner steps, MAML++ parts and BatchNorm modes (issue 30); a learner's
  own ranges (proximal_lambda, cg_steps, scale, ...) are checked by its constructor,
  naming the same field."""
  mc = config.meta
  _positive_ints(config, "meta", ("msl_anneal_steps",))
  _positive_ints(config, "meta", ("first_order_steps",), 0, " (0: second order throughout.)")
  plain = mc.learner in ("maml", "fomaml")
  _check_inner_rule(config)
  for name in ("lslr", "multi_step_loss", "recompute"):
    if mc[name] and not plain:
      raise ConfigError(f"config.meta.{name}=True needs config.meta.learner 'maml' or "
                        f"'fomaml' (got {mc.learner!r}); set it to False.")
  # One name per algorithm: first-order MAML is learner 'fomaml' (MAML's constructor
  # argument first_order stays False from the config).
  if mc.first_order and mc.learner != "support_hypernet":
    fix = ("use config.meta.learner='fomaml'" if mc.learner == "maml" else
           "first-order variants: learner 'fomaml'")
    raise ConfigError(f"config.meta.first_order=True is for learner 'support_hypernet' "
                      f"only; for learner {mc.learner!r} {fix}, or set first_order=False.")
  if mc.body_hypernet != "none" and (mc.learner != "support_hypernet"
                                     or config.hypernet.kind != "none"):
    raise ConfigError(f"config.meta.body_hypernet={mc.body_hypernet!r} generates the body "
                      "from the support set for learner 'support_hypernet' with "
                      "config.hypernet.kind='none' (got learner "
                      f"{mc.learner!r}, hypernet.kind {config.hypernet.kind!r}); set it to "
                      "'none' or change those.")
  if mc.first_order_steps and mc.learner != "maml":
    raise ConfigError(f"config.meta.first_order_steps={mc.first_order_steps} (derivative-order "
                      f"annealing) needs config.meta.learner='maml' (got {mc.learner!r}); "
                      "set it to 0.")
  if (mc.bn_mode == "per_step" or mc.per_step_bn_weights) and (
      config.task != "few_shot" or config.model.name != "conv4" or not plain):
    raise ConfigError("config.meta.bn_mode='per_step' / per_step_bn_weights=True need "
                      "config.model.name='conv4' with learner 'maml' or 'fomaml'; use "
                      "bn_mode='transductive' or 'inference' otherwise.")


def check_learner_fields(config) -> None:
  """Refuses a learner field (another learner's constructor argument) set away from its
  default that ``config.meta.learner`` does not read: it would be silently ignored.

  Raises:
    ConfigError: naming the field, the learner's own fields and the default.
  """
  _check_unread(config.meta, "meta", "learner", config.meta.learner, _LEARNER_DEFAULTS)


def _check_unread(group, name: str, selector: str, value, defaults) -> None:
  own = _selected_fields(name, value)
  for field, default in defaults.items():
    current = tuple(group[field]) if isinstance(group[field], list) else group[field]
    if field in group and field not in own and current != default:
      raise ConfigError(f"config.{name}.{field}={group[field]!r} is not read by {selector} "
                        f"{value!r} (its fields: {sorted(own)}); set it back to "
                        f"{default!r}.")


def _check_inner_rule(config) -> None:
  """``config.meta.inner_rule`` and its hyperparameters (hypernet/meta/rules.py)."""
  mc = config.meta
  rule = mc.get("inner_rule", "sgd")
  if rule not in ("sgd", "momentum", "adam"):
    raise ConfigError(f"config.meta.inner_rule={rule!r}; use 'sgd', 'momentum' or 'adam' "
                      "(Meta-SGD's learned rates: learner 'metasgd'; LSLR: meta.lslr).")
  if rule == "sgd":   # Learners without an inner_rule: check_learner_fields.
    return
  if mc.lslr or mc.recompute:
    raise ConfigError(f"config.meta.inner_rule={rule!r} keeps state across inner steps; "
                      "config.meta.lslr and recompute need inner_rule='sgd'.")
  for name in ("inner_momentum", "inner_beta1", "inner_beta2"):
    if not _finite(mc[name]) or not 0 <= mc[name] < 1:
      raise ConfigError(f"config.meta.{name} must be a number in [0, 1), got {mc[name]!r}.")
  if not _finite(mc.inner_epsilon) or mc.inner_epsilon <= 0:
    raise ConfigError(f"config.meta.inner_epsilon must be a positive number, got "
                      f"{mc.inner_epsilon!r}.")


def _check_continual(config) -> None:
  cc = config.continual
  _positive_ints(config, "continual", ("num_tasks", "steps_per_task", "classes_per_task"))
  total = cc.num_tasks * cc.steps_per_task
  if config.num_steps > total:
    raise ConfigError(
        f"config.num_steps={config.num_steps} is more than config.continual.num_tasks * "
        f"steps_per_task = {cc.num_tasks} * {cc.steps_per_task} = {total}, the whole task "
        f"sequence; set --config.num_steps={total}.")


def validate(config) -> None:
  """Checks a config against :func:`base_config` and the ranges every config shares.

  Runs in microseconds and touches nothing: call it before any training work.

  Args:
    config: an ``ml_collections.ConfigDict`` built from :func:`base_config`.

  Raises:
    ConfigError (a ValueError): naming the bad field and what it must be: an unknown
      field (with the closest known name), a missing field, a wrong type (ints are
      accepted for floats, lists for tuples), ``None`` where the default is not, a value
      out of range, or an impossible combination (a profiler window past
      ``num_steps``, a hypernetwork with no target patterns, ...).
  """
  schema = base_config()
  _add_plugin_fields(config, schema)
  _check_schema(config, schema, "")
  _check_values(config)


def flatten(config, prefix: str = "") -> Dict[str, Any]:
  """``{"optim.lr": 0.001, "model.conv_widths": (32, 64), ...}``: every leaf by dotted path."""
  out: Dict[str, Any] = {}
  for key in config.keys():
    value = config[key]
    if _is_configdict(value):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def train_ways(config) -> int:
  """The classes of a few-shot meta-training episode: ``config.meta.train_ways``, or
  ``config.meta.num_ways`` where that is 0 (trained as tested)."""
  return int(config.meta.get("train_ways", 0)) or int(config.meta.num_ways)


def head_ways(config) -> int:
  """The target head's outputs for a few-shot config: ``config.meta.num_ways``, or
  ``config.meta.train_ways`` where that is larger (the support-conditioned hypernetwork
  and Prototypical Networks write the head from the support set's prototypes per task
  and mask the classes an episode does not have; for them the head is no parameter)."""
  return max(int(config.meta.num_ways), train_ways(config))


# -- one field set from text (python -m hypernet.evaluate --set FIELD=VALUE) ------------
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _parse_value(text: str, expected, current):
  """``text`` as a value of type ``expected`` (the field's); raises ValueError."""
  import ast  # pylint: disable=g-import-not-at-top
  if expected is bool:
    if text.lower() in _TRUE + _FALSE:
      return text.lower() in _TRUE
    raise ValueError("not a bool (true or false)")
  if expected is int:
    return int(text)
  if expected is float:
    return float(text)
  if expected in (tuple, list):
    value = ast.literal_eval(text) if text.strip() else ()
    value = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    kinds = {type(v) for v in current or ()}
    if kinds and not all(type(v) in kinds or (float in kinds and isinstance(v, int))
                         for v in value):
      raise ValueError("other element types")
    return value
  if expected is str:
    return text
  raise ValueError(f"fields of type {getattr(expected, '__name__', expected)} cannot be set "
                   "from text")


def _find_field(config, field: str, text: str, flag: str):
  """``(group, key)`` of the leaf field ``field`` (dotted) of ``config``; raises
  ConfigError (``{flag} {text}: ...``, with the closest name) if there is none."""
  node, done, parent = config, "config", None
  for part in field.split("."):
    keys = list(node.keys()) if _is_configdict(node) else []
    if part not in keys:
      close = difflib.get_close_matches(part, keys, n=1)
      hint = f" Did you mean {done}.{close[0]}?" if close else ""
      what = f"{done} has no field {part!r}." if keys else f"{done} is not a group of fields."
      raise ConfigError(f"{flag} {text}: {what}{hint}")
    parent, node, done = node, node[part], f"{done}.{part}"
  if _is_configdict(node):
    raise ConfigError(f"{flag} {text}: {done} is a group of fields; set one of them "
                      f"({', '.join(sorted(node.keys()))}).")
  return parent, field.rsplit(".", 1)[-1]


def parse_override(config, text: str, flag: str = "--set"):
  """``"meta.num_ways=20"`` -> ``("meta.num_ways", 20)``: a field of ``config`` by its
  dotted path and the value after ``=`` parsed to that field's type (``true`` / ``false``
  for bools, Python literals such as ``(1, 5)`` or ``1,5`` for tuples, text as is for
  strings). TensorFlow-free.

  Raises:
    ConfigError: ``text`` has no ``=``, names no field of ``config`` (with the closest
      name) or a group, or its value does not parse to the field's type; the message
      starts with ``{flag} {text}:``.
  """
  field, sep, raw = str(text).partition("=")
  field, raw = field.strip(), raw.strip()
  if not sep or not field:
    raise ConfigError(f"{flag} {text}: give FIELD=VALUE, e.g. {flag} meta.num_ways=20.")
  group, key = _find_field(config, field, text, flag)
  expected = _expected_type(group, key) or str
  try:
    value = _parse_value(raw, expected, group[key])
  except (ValueError, SyntaxError, TypeError):
    kind = _type_name(expected, key)
    raise ConfigError(f"{flag} {text}: config.{field} takes a{'n' * (kind[0] in 'aeiou')} "
                      f"{kind} (now {group[key]!r}); {raw!r} is not one.") from None
  return field, value


def with_overrides(config, assignments, flag: str = "--set"):
  """A copy of ``config`` with ``assignments`` (``"FIELD=VALUE"`` texts, see
  :func:`parse_override`, or a ``{field: value}`` mapping) applied in order, validated.

  Returns:
    ``(config, {field: value})``: the new config and the values set, in order.

  Raises:
    ConfigError: a bad assignment (:func:`parse_override`) or a config that does not
      validate with the new values (:func:`validate`'s message after ``{flag} ...:``).
  """
  if isinstance(assignments, dict):
    items = list(assignments.items())
    for field, value in items:
      _find_field(config, field, f"{field}={_text(value)}", flag)
  else:
    items = [parse_override(config, a, flag) for a in assignments]
  new = copy.deepcopy(config)
  applied: Dict[str, Any] = {}
  for field, value in items:
    group, key = _find_field(new, field, field, flag)
    group[key] = value
    applied[field] = value
  try:
    validate(new)
  except ConfigError as e:
    shown = " ".join(f"{flag} {k}={_text(v)}" for k, v in applied.items())
    raise ConfigError(f"{shown}: {e}") from None
  return new, applied


def _text(value) -> str:
  """A value as :func:`parse_override` reads it back."""
  if isinstance(value, bool):
    return str(value).lower()
  if isinstance(value, tuple):
    return ",".join(str(v) for v in value) + ("," if len(value) == 1 else "")
  return str(value)


# The HParams table shows these first (TensorBoard displays the first five columns by
# default; the others are one click away in its "Hyperparameters" list).
HPARAMS_FIRST = ("optim.lr", "hypernet.kind", "hypernet.chunk_size", "batch_size", "num_steps",
                 "seed")
# Fields that steer how a run is executed, observed or saved, not what it learns.
_NOT_HPARAMS = ("summaries.", "fault.", "log_every", "console_every", "eval_every",
                "checkpoint_every",
                "checkpoint_keep", "deterministic", "jit_compile", "accelerate",
                "eval_batch_size",
                "data.data_dir", "meta.parallel")
_MODEL_FIELDS = {
    "cnn": ("conv_widths", "kernel_size", "pool", "dense_widths", "batch_norm", "dropout",
            "kernel_l2"),
    "mobilenet_v2": ("alpha", "image_size", "bn_momentum"),
    "conv4": ("conv_widths",),
}
_LOADER_FIELDS = tuple(DATASETS.declared_defaults())
_OMNIGLOT_DATA = ("omniglot_zips", "num_test_characters", "split_seed", "rotations",
                  "image_size")


# The tasks that read a group at all.
_GROUP_TASKS = {"continual": ("continual",), "meta": _META_TASKS,
                "multitask": ("multitask_classification",)}


def _field_used(config, field: str, hparams_only: bool = True) -> bool:
  """Whether the run that ``config`` describes reads ``field`` (see :func:`hparams`);
  ``hparams_only``: fields that steer execution (:data:`_NOT_HPARAMS`) count as unused."""
  if field.startswith(_NOT_HPARAMS):
    if hparams_only:
      return False
    return _execution_field_used(config, field)
  group, _, name = field.partition(".")
  meta = config.task in _GROUP_TASKS["meta"]
  if group in _GROUP_TASKS and config.task not in _GROUP_TASKS[group]:
    return False   # Another task's group.
  if group == "meta":
    return _meta_field_used(config, name)
  if group == "multitask":
    return True
  if group == "continual":
    method = config.continual.method
    return {"beta": method == "hnet", "past_tasks_per_step": method == "hnet",
            "lookahead": method == "hnet", "refresh_targets": method == "hnet",
            "classes_per_task": config.continual.benchmark == "split",
            "ewc_lambda": method == "ewc", "ewc_gamma": method == "ewc",
            "fisher_samples": method == "ewc",
            "ppca_components": config.continual.task_inference == "ppca"}.get(name, True)
  if group == "data":
    if config.task == "sinusoid":
      return False
    if name in _OMNIGLOT_DATA:
      return config.data.name == "omniglot"
    if name in _LOADER_FIELDS:
      return name in DATASETS.declared().get(config.data.name, ())
    if name in ("tfds_train_split", "tfds_test_split"):
      return str(config.data.name).startswith("tfds:")
    # Augmentation: the classification pipeline and few-shot meta-training episodes.
    return name == "name" or not meta or (config.task == "few_shot"
                                          and name.startswith("augment_"))
  if group == "model":
    if config.task == "sinusoid":
      return False
    if str(config.model.name).startswith("keras.applications."):
      return name in ("name", "image_size")
    return name == "name" or name in _MODEL_FIELDS.get(config.model.name, ())
  if group == "hypernet":
    return _hypernet_field_used(config, name)
  if group == "optim":
    return {"weight_decay": config.optim.name == "adamw",
            "momentum": config.optim.name == "sgd",
            "decay_every": config.optim.schedule == "step",
            "decay_rate": config.optim.schedule == "step"}.get(name, True)
  return True


def _selected_fields(group: str, value) -> Dict[str, Any]:
  """The constructor fields of the class ``value`` selects in ``group`` (none if it cannot
  be read: validation has said so already)."""
  try:
    return SELECTED_GROUPS[group][1].declared_fields(value)
  except ValueError:
    return {}


# The meta-learning task's own fields that few-shot classification alone reads.
_FEW_SHOT_FIELDS = ("num_ways", "one_shot_runs", "within_alphabet",
                    "train_ways", "body_hypernet", "body_targets", "gate")


def _meta_field_used(config, name: str) -> bool:
  """Whether the meta-learning run reads ``config.meta.<name>``: the chosen learner's
  constructor fields (a plug-in's own, read from source), not the other learners', and
  the task's episode fields that apply."""
  mc = config.meta
  if name in _selected_fields("meta", mc.learner):
    return True
  if name in _LEARNER_DEFAULTS:
    return False
  if name in _FEW_SHOT_FIELDS and config.task != "few_shot":
    return False
  if name == "train_ways":
    return mc.learner in _PROTOTYPE_HEAD_LEARNERS
  if name == "body_hypernet":
    return mc.learner == "support_hypernet"
  if name in ("body_targets", "gate"):   # SupportTargetHypernetwork's.
    return mc.learner == "support_hypernet" and mc.body_hypernet != "none"
  if name == "msl_anneal_steps":
    return bool(mc.get("multi_step_loss", False))
  return name != "mlp_widths" or config.task == "sinusoid"


def _hypernet_field_used(config, name: str) -> bool:
  """Whether the run reads ``config.hypernet.<name>``: the builder's fields, and the
  chosen kind's constructor arguments (the condition ones when conditional)."""
  kind = config.hypernet.kind
  if kind == "none" and config.task in _META_TASKS and (
      config.meta.learner == "support_hypernet" and config.meta.body_hypernet != "none"):
    kind = config.meta.body_hypernet   # Its fields size the body's hypernetwork.
    if name in _BUILDER_FIELDS["hypernet"] or name in ("num_conditions", "condition_dim"):
      return name == "kind"
  if name == "kind" or kind == "none":
    return name == "kind"
  if name in _BUILDER_FIELDS["hypernet"]:
    return name != "quantize_targets" or config.hypernet.quantize != "none"
  if name.startswith("condition_"):   # Conditional runs only.
    conditional = config.hypernet.num_conditions > 0 or config.task == "continual"
    return conditional and name in _selected_fields("hypernet", kind)
  return name in _selected_fields("hypernet", kind)


# -- console: the fields a run uses (TensorBoard's Text tab) -----------------------------
def _execution_field_used(config, field: str) -> bool:
  """Whether a field that steers execution (:data:`_NOT_HPARAMS`) applies to this run."""
  s, f = config.summaries, config.fault
  if field.startswith("meta."):  # meta.parallel, meta.parallel_iterations
    return config.task in ("few_shot", "sinusoid")
  return {"summaries.kernel_images": bool(s.every), "summaries.max_filters": bool(s.every),
          "summaries.profile_start": bool(s.profile_steps),
          "fault.max_skips": f.nonfinite == "skip",
          "accelerate": config.task == "classification",
          "data.data_dir": config.task != "sinusoid" and "data_dir" in DATASETS.declared().get(
              config.data.name, {"data_dir": ""}),   # Omniglot and plug-ins read it too.
          }.get(field, True)


def used_fields(config) -> Dict[str, Any]:
  """Every field the run that ``config`` describes reads, by dotted path in schema order:
  :func:`hparams`' fields plus those that steer execution (intervals, summaries, fault
  handling), without the groups and fields of other tasks, models, hypernetwork kinds
  and optimisers. Values as in the config (tuples stay tuples).

  Returns:
    ``{"seed": 0, "task": "classification", "num_steps": 3000, ...}``.
  """
  return {k: v for k, v in flatten(config).items() if _field_used(config, k, False)}


# What decides, per group, whether a run reads a field of it: named in the notice.
_DECIDED_BY = {"optim.decay_every": ("optim.schedule",), "optim.decay_rate": ("optim.schedule",),
               "optim": ("optim.name",), "model": ("task", "model.name"),
               "hypernet": ("hypernet.kind",), "continual": ("continual.method",),
               "meta": ("meta.learner",), "multitask": ("task",),
               "data": ("task", "data.name"), "summaries": ("summaries.every",),
               "fault": ("fault.nonfinite",)}


def unread_fields(config, fields) -> List[str]:
  """One notice per field of ``fields`` (dotted names, e.g. the command line's
  ``--config.X=V`` overrides) that the run ``config`` describes does not read, so that
  setting it changes nothing: ``optim.weight_decay`` under ``optim.name='adam'``, a
  ``meta.*`` field in a classification run, ``accelerate`` outside classification.

  Args:
    config: the run's config (after the overrides).
    fields: iterable of dotted field names, without the ``config.`` prefix.

  Returns:
    Lines such as ``"--config.optim.weight_decay=0.0001 is not read by this run
    (config.optim.name='adam'), so it changes nothing."``; empty when every field is read.
  """
  flat = flatten(config)
  lines = []
  for field in fields:
    if field not in flat or _field_used(config, field, hparams_only=False):
      continue
    group = field.partition(".")[0] if "." in field else ""
    deciders = _DECIDED_BY.get(field, _DECIDED_BY.get(group, ("task",)))
    if config.task not in _GROUP_TASKS.get(group, (config.task,)):
      deciders = ("task",)    # Another task's group: the task decides, not its fields.
    deciders = [d for d in deciders if d in flat and d != field]
    why = ", ".join(f"config.{d}={flat[d]!r}" for d in deciders)
    lines.append(f"--config.{field}={flat[field]!r} is not read by this run ({why}), so it "
                 "changes nothing.")
  return lines


def hparams(config) -> Dict[str, Any]:
  """The fields the run's kind uses, for TensorBoard's HParams table, in display order.

  Leaves out what the run does not read (``meta.*`` for a classification run, Omniglot
  fields for digits, other hypernetwork kinds' and models' fields, the optimiser fields of
  other optimisers) and fields that steer execution rather than learning (``summaries.*``,
  ``fault.*``, logging / checkpoint intervals, ``jit_compile``, ``data.data_dir``).
  :data:`HPARAMS_FIRST` come first, then the rest in schema order.

  Returns:
    ``{"optim.lr": 0.001, ...}``; tuples become strings (the plugin takes bool, int,
    float and str).
  """
  flat = {k: v for k, v in flatten(config).items() if _field_used(config, k)}
  order = [k for k in HPARAMS_FIRST if k in flat] + [k for k in flat if k not in HPARAMS_FIRST]
  return {k: (flat[k] if isinstance(flat[k], (bool, int, float, str)) else str(flat[k]))
          for k in order}


def _renamed_fields(values: Dict[str, Any]) -> Dict[str, Any]:
  """``values`` with the :data:`RENAMED` fields under their new names; the former
  ``meta.zero_init_head`` (bool) becomes ``meta.zero_init``, the head's patterns or "",
  and ``hypernet.slice_channels`` (two ints) ``hypernet.slice_in`` / ``slice_out``."""
  out = dict(values)
  for group, renames in RENAMED.items():
    fields = values.get(group)
    if not isinstance(fields, dict) or not set(fields) & set(renames):
      continue
    fields = dict(fields)
    if "zero_init_head" in fields:
      head = fields.get("anil_head", fields.get("head", _LEARNER_DEFAULTS["head"]))
      fields.setdefault("zero_init", str(head) if fields.pop("zero_init_head") else "")
    if "slice_channels" in fields:
      slice_in, slice_out = (int(c) for c in fields.pop("slice_channels"))
      fields.setdefault("slice_in", slice_in)
      fields.setdefault("slice_out", slice_out)
    for old, new in renames.items():
      if old in fields:
        fields.setdefault(new, fields.pop(old))
    out[group] = fields
  return out


def config_from_dict(values: Dict[str, Any], filled: Optional[List[str]] = None):
  """Rebuilds a config from ``config.to_dict()`` or its JSON (``workdir/config.json``).

  Fields take the types of :func:`base_config` (JSON lists become tuples again). Fields of
  the schema that ``values`` lacks (a workdir written before they existed) take their
  defaults, which keep the behaviour of the code that wrote it; their names are appended
  to ``filled`` when a list is given. Fields written under a former name (:data:`RENAMED`)
  are read under the new one.

  Raises:
    ConfigError: as :func:`validate`, for fields that are not in the schema.
  """
  import ml_collections  # pylint: disable=g-import-not-at-top
  values = _renamed_fields(values)

  def convert(values, schema, prefix):
    out = ml_collections.ConfigDict()
    for key, value in values.items():
      default = schema[key] if key in schema else None
      if isinstance(value, dict):
        out[key] = convert(value, default if _is_configdict(default) else {}, f"{prefix}{key}.")
      elif isinstance(value, list):
        out[key] = tuple(tuple(v) if isinstance(v, list) else v for v in value)
      else:
        out[key] = value
    if _is_configdict(schema):
      for key in schema:
        if key not in values:
          out[key] = copy.deepcopy(schema[key])
          if filled is not None:
            filled.extend([f"{prefix}{key}"] if not _is_configdict(schema[key]) else
                          [f"{prefix}{key}.{k}" for k in flatten(schema[key])])
    return out

  config = convert(values, base_config(), "")
  validate(config)
  return config


def load_config_file(path: str):
  """``get_config()`` of the config file at ``path`` (configs are loaded by path, not as
  a package, so any working directory works).

  Raises:
    FileNotFoundError: no file at ``path``.
  """
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  if not os.path.exists(path):
    raise FileNotFoundError(f"No config file {path}.")
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(f"hypernet_config_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def sibling_config(config_file: str, name: str):
  """``get_config()`` of ``configs/<name>.py`` beside ``config_file`` (a config's ``__file__``).

  Lets a variant config start from the one it varies (``omniglot_fomaml`` from
  ``omniglot_maml``) whatever the working directory.

  Raises:
    FileNotFoundError: no ``<name>.py`` beside ``config_file``.
  """
  import os  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(os.path.abspath(config_file)), f"{name}.py")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{config_file} builds on {path}, which does not exist.")
  return load_config_file(path)


def base_config():
  """The fields every experiment shares, with their defaults (configs/*.py start here).

  Returns:
    An ``ml_collections.ConfigDict``; experiment files override what differs.
  """
  import ml_collections  # pylint: disable=g-import-not-at-top
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.task = "classification"   # classification | multitask_classification
  c.num_steps = 1000
  c.batch_size = 64
  c.eval_batch_size = 256
  c.log_every = 100
  c.eval_every = 100           # also at step 0 and at the end
  c.checkpoint_every = 500
  c.checkpoint_keep = 3
  c.distribution = "auto"      # auto | one_device | mirrored | multi_worker | tpu
  c.jit_compile = "auto"       # auto (on for GPU/TPU, off on CPU) | true | false
  # classification: the target's functional call (hypernet/numerics/accel.py). default:
  # Keras' bias adds and blocks (the committed results' rounding); meta: on CPU the fused
  # blocks and plain bias adds, as the meta-learners' calls (docs/performance.md: the
  # hypernetwork step 1.38x with BatchNorm; rounding differs); off: Keras' own code.
  c.accelerate = "default"
  c.dtype_policy = "float32"   # float32 | mixed_bfloat16 | mixed_float16 (loss scaling)
  _data_and_model_defaults(c)
  c.hypernet = _hypernet_defaults()
  _continual_defaults(c)
  _meta_defaults(c)
  _optim_and_run_defaults(c)
  return c


def _data_and_model_defaults(c) -> None:
  import ml_collections  # pylint: disable=g-import-not-at-top
  c.data = ml_collections.ConfigDict()
  c.data.name = "digits"       # a registered data set (hypernet/data: DATASETS) | omniglot
  # The loaders' arguments by their own names (read from source): data_dir (IDX, tfds,
  # Omniglot folder; "" searches /usr/share/datasets/<name>), test_fraction (digits).
  c.data.update(DATASETS.declared_defaults())
  c.data.augment_shift = 0     # random translation by up to this many pixels
  c.data.augment_flip = False  # random left-right flips
  # Each training image's (few-shot: each drawing's) own random affine map (Koch et al.
  # 2015 Sec. 4.3: 10 degrees, scale 0.2, shear 0.3), then the shift and the flip.
  c.data.augment_rotation = 0.0  # largest rotation in degrees
  c.data.augment_scale = 0.0   # largest relative scale change per axis, in [0, 1)
  c.data.augment_shear = 0.0   # largest shear factor
  # Plug-ins: data.name "tfds:NAME" (TensorFlow Datasets, from data_dir) or
  # "package.module:function"; model.name "keras.applications.<Model>" (weights=None,
  # resized to model.image_size) or "package.module:factory"; task "package.module:Class"
  # (hypernet/core/plugins.py, docs/keras.md).
  c.data.tfds_train_split = "train"  # tfds: the training split
  c.data.tfds_test_split = "test"    # tfds: the evaluation split

  c.model = ml_collections.ConfigDict()
  c.model.name = "cnn"         # cnn | mobilenet_v2 (keras.applications, weights=None)
  c.model.conv_widths = (32, 64)
  c.model.kernel_size = 3
  c.model.pool = "max"
  c.model.dense_widths = (64,)
  c.model.batch_norm = False
  c.model.dropout = 0.0
  c.model.kernel_l2 = 0.0      # cnn: L2(c) on every kernel used (classification, continual)
  c.model.alpha = 0.35         # mobilenet_v2: width multiplier
  c.model.image_size = 32      # mobilenet_v2: images are resized to this (>= 32)
  c.model.bn_momentum = 0.0    # mobilenet_v2: BatchNorm momentum (0: the application's 0.999)



def _continual_defaults(c) -> None:
  import ml_collections  # pylint: disable=g-import-not-at-top
  # task = "multitask_classification": the batch is split among num_conditions tasks;
  # task t relabels class y as (y + t) mod num_classes when label_shift is set.
  c.multitask = ml_collections.ConfigDict()
  c.multitask.label_shift = True

  # Continual learning (config.task = "continual"; hypernet/tasks/continual_learning.py):
  # num_steps = num_tasks * steps_per_task learns every task; fewer stops inside the
  # sequence (with a warning; a rerun with more steps resumes), more is an error.
  c.continual = ml_collections.ConfigDict()
  c.continual.method = "hnet"          # hnet | finetune | ewc | independent
  c.continual.benchmark = "split"      # split (classes 2t, 2t+1) | permuted (pixels)
  c.continual.num_tasks = 5
  c.continual.classes_per_task = 2     # split
  c.continual.steps_per_task = 1000
  c.continual.beta = 0.01              # hnet: output regulariser strength
  c.continual.past_tasks_per_step = 0  # hnet: random past tasks per step (0: all)
  c.continual.lookahead = False        # hnet: penalty at Theta + a step of the task loss
  c.continual.refresh_targets = True   # hnet: after each task re-store every past task's
                                       # outputs (paper); False: each task's own, once
  c.continual.ewc_lambda = 100.0       # ewc: penalty strength
  c.continual.ewc_gamma = 1.0          # ewc: online Fisher decay
  c.continual.fisher_samples = 500     # ewc: examples per task for the Fisher
  c.continual.eval_examples_per_task = 0  # 0: the whole test set of every task
  c.continual.task_inference = "entropy"  # CL3: entropy (HNET+ENT; heads' arg-max for
                                       # finetune / ewc) | ppca (per-task input densities)
  c.continual.ppca_components = 20     # ppca: principal components per task
  c.continual.freeze_base_after = 0    # hnet with hypernet.kind lora, train_base: the
                                       # adapters' base W_0 trains on the first this many
                                       # tasks, then stays frozen (0: never frozen)


def _meta_defaults(c) -> None:
  import ml_collections  # pylint: disable=g-import-not-at-top

  # Meta-learning (config.task = "few_shot" | "sinusoid"; hypernet/tasks/meta_learning.py).
  # config.batch_size is then the meta-batch size (tasks per step), eval_batch_size the
  # tasks per evaluation batch.
  c.data.omniglot_zips = "images_background.zip"  # comma-separated, in data.data_dir
  c.data.num_test_characters = 200  # Omniglot characters held out for meta-testing
  c.data.split_seed = 0        # seed of the train/test character split
  c.data.rotations = (0, 90, 180, 270)  # class augmentation (Finn et al. 2017)
  c.data.image_size = 28
  c.meta = ml_collections.ConfigDict()
  c.meta.learner = "maml"      # a registered learner (CHOICES) | pkg.mod:Class
  c.meta.num_ways = 5          # N (few_shot)
  c.meta.train_ways = 0        # N of meta-training episodes (0: num_ways); more than
  # num_ways trains with higher way (Snell et al. 2017), the head sized for both
  # (support_hypernet, protonet and support_adapter)
  c.meta.num_shots = 1         # K: support examples per class (sinusoid: support points)
  c.meta.num_queries = 1       # query examples per class in meta-training (sinusoid: points)
  c.meta.eval_queries = 1      # query examples per class in meta-testing
  c.meta.eval_inner_steps = 0  # inner steps at meta-test time; 0: inner_steps
  c.meta.eval_steps_sweep = ()  # also evaluate after each of these inner step counts
  # (metrics loss_steps_K, accuracy_steps_K with their _ci95), e.g. (1, 5, 10)
  # support_hypernet: the body's weights generated per task too (hypernet/meta/
  # support_target.py): a hypernetwork of this kind (none | mlp | chunked | static), sized
  # by the config.hypernet fields of that kind (config.hypernet.kind stays "none"),
  # maps the support set's mean body feature (the task embedding) to the body weights
  # body_targets as w0 + gate * H(z); the gate is learned and starts at meta.gate.
  c.meta.body_hypernet = "none"
  c.meta.body_targets = "conv*/kernel"
  c.meta.gate = 0.0
  c.meta.eval_episodes = 600   # fixed meta-test tasks on held-out classes
  c.meta.eval_seed = 12345     # seed of those tasks
  c.meta.one_shot_runs = ""    # e.g. "all_runs.zip" in data.data_dir: 20-way runs
  c.meta.within_alphabet = False  # Omniglot meta-training episodes from one alphabet (and
  # rotation), as the official one-shot runs are (Lake et al. 2015)
  # Meta-batch strategy: accumulate (a while loop over tasks, each task's meta-gradient
  # taken in its iteration and summed: memory of one task) | map_fn | vectorized_map
  # (one tape over all tasks; hypernet/meta/meta_batch.py).
  c.meta.parallel = "accumulate"
  c.meta.parallel_iterations = 0  # accumulate: tasks in flight at once; 0: 2
  c.meta.staggered = True  # second order, > 1 task in flight: a task's query pass waits
  # for the previous task's query gradient, so one query pass's activations are alive
  # while the previous task's pass back through its inner loop runs beside it (+7-12%
  # for ~25 MB; unstaggered +15% for ~90 MB). First order is never staggered.
  # (benchmarks/meta_bench.py, experiments/RESULTS_meta.md)
  c.meta.fused_blocks = True  # CPU: each BatchNorm -> ReLU -> 2x2 max-pool block of the
  # target on one kernel (hypernet/numerics/norm_relu_pool.py; values equal up to rounding, exact
  # second order);
  # False: TensorFlow's separate ops. Off under jit_compile (XLA cannot compile it).
  c.meta.train_before_metrics = False  # also log loss/accuracy_before in training (one
  # more query pass per task); evaluation always reports them
  c.meta.mlp_widths = (40, 40)  # sinusoid regressor (ReLU), Finn et al. 2017 Sec. 5.1
  _meta_algorithm_defaults(c)


def _meta_algorithm_defaults(c) -> None:
  # The learners' own fields: every registered learner's constructor arguments by their
  # own names (hypernet/meta/*.py, read from source; SELECTED_GROUPS), _GROUP_DEFAULTS
  # where the config starts elsewhere. Their meaning is in the constructors' docstrings:
  # inner_lr, inner_steps, adapt, zero_init (patterns of adapted weights that start
  # every task at zero, e.g. "head/*": Kao et al. 2022's zeroing trick), inner_rule
  # (sgd | momentum | adam, hypernet/meta/rules.py) and its inner_momentum / inner_beta1 /
  # inner_beta2 / inner_epsilon, first_order, recompute, lslr, multi_step_loss (MAML,
  # inner_loop.py); head (ANIL's adapted, support_hypernet's generated head); scale,
  # generator_widths (support_hypernet.py); proximal_lambda, cg_steps (imaml,
  # implicit.py).
  c.meta.update(_LEARNER_DEFAULTS)
  # MAML++ (Antoniou et al. 2019) beside the learner's lslr and multi_step_loss:
  c.meta.msl_anneal_steps = 1000  # meta-steps over which the MSL weights move to the last
  c.meta.first_order_steps = 0  # derivative-order annealing: first order for the first
  # N meta-steps, then second order
  c.meta.bn_mode = "transductive"  # transductive (batch statistics everywhere, also at
  # meta-test) | per_step (MAML++ per-step running statistics, used at meta-test) |
  # inference (running statistics at meta-test)
  c.meta.per_step_bn_weights = False  # conv4: per-step BatchNorm gamma/beta (MAML++)
  # (Cosine annealing of the meta learning rate: config.optim.schedule = "cosine".)


def _optim_and_run_defaults(c) -> None:
  import ml_collections  # pylint: disable=g-import-not-at-top

  c.optim = ml_collections.ConfigDict()
  c.optim.name = "adam"        # adam | fused_adam (one kernel a variable) | adamw | sgd
  c.optim.lr = 1e-3
  c.optim.schedule = "cosine"  # constant | cosine | step
  c.optim.warmup_steps = 0
  c.optim.decay_every = 2000   # step: the rate times decay_rate every decay_every steps
  c.optim.decay_rate = 0.5     # (Snell et al. 2017: halved every 2,000 episodes)
  c.optim.weight_decay = 0.0
  c.optim.momentum = 0.9
  c.optim.grad_clip_norm = 0.0

  # Observability and fault tolerance (hypernet/training/summaries.py, hypernet/training/checkpoints.py).
  c.deterministic = False      # enable TF op determinism: bitwise-identical CPU reruns
  # Console (hypernet/training/loop.py): a progress line every console_every steps (a
  # multiple of log_every); 0: about ten lines a run.
  c.console_every = 0
  c.summaries = ml_collections.ConfigDict()
  c.summaries.every = 500      # weight histograms, kernel images, norms (0: off)
  c.summaries.kernel_images = 1  # draw the first N conv kernels as filter grids
  c.summaries.max_filters = 64   # filters per grid
  c.summaries.hparams = True   # hparams plugin: flattened config and final metrics
  c.summaries.profile_start = 0  # first step of a profiler trace
  c.summaries.profile_steps = 0  # steps to trace (0: no trace)
  c.fault = ml_collections.ConfigDict()
  c.fault.nonfinite = "stop"   # NaN/inf loss or gradient: stop | skip (the bad step)
  c.fault.max_skips = 10       # skip mode: stop after this many skipped steps
  c.fault.handle_signals = True  # SIGTERM/SIGINT: save a checkpoint, then exit
  c.fault.lock_workdir = True  # refuse a second training job on the same workdir


def _hypernet_defaults():
  """``config.hypernet``: the weight source's own fields, then every hypernetwork kind's
  constructor arguments by their own names (hypernet/hypernetworks/*.py, read from
  source; :data:`SELECTED_GROUPS`), with :data:`_GROUP_DEFAULTS` where the config starts
  elsewhere. A kind reads the fields its constructor names (docs/hypernetworks.md)."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  h = ml_collections.ConfigDict()
  h.kind = "none"        # none | a registered kind (CHOICES) | pkg.mod:Class
  h.targets = "*"        # glob/regex patterns of generated target weights
  h.train_rest = True    # train target weights that are not generated
  h.quantize = "none"    # none | binary | ternary | int8 (straight-through)
  h.quantize_targets = "*kernel"  # generated paths that are quantised
  h.update(HYPERNET_KINDS.declared_defaults(_GROUP_DEFAULTS["hypernet"]))
  return h
