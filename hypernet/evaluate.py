"""Evaluate a training workdir's checkpoint; optionally export the target network.

    python -m hypernet.evaluate --workdir=/tmp/hypernet/digits_hyper
    hypernet-evaluate --workdir=/tmp/hypernet/digits_hyper    # the same, installed
    python -m hypernet.evaluate --workdir=DIR --checkpoint=2000 --export=/tmp/target.keras
    python -m hypernet.evaluate --workdir=DIR --set meta.num_ways=20 --set meta.num_shots=5

Rebuilds the run from ``workdir/config.json``, restores the latest (or the named)
checkpoint, runs the task's evaluation (classification and few-shot tasks alike: the
same ``Trainer.evaluate`` as the train loop), prints the metrics as a table and writes
them as JSON to ``workdir/eval_step<N>.json``. ``--set FIELD=VALUE`` (repeatable)
evaluates in another setting: a few-shot run in other N-way K-shot episodes, with more
episodes or queries (:data:`EVAL_FIELDS`; values parsed to the field's type); the JSON is
then ``eval_step<N>_<setting>.json`` (e.g. ``eval_step5000_num_ways20_num_shots5.json``)
and records the fields set. A field that would change the trained parameters' shapes is
refused in one line (MAML's 5-way head asked for 20-way episodes); the
support-conditioned hypernetwork and Prototypical Networks serve any N up to their head's
width (``config.meta.train_ways``). ``--export`` also writes the target
network with its produced weights as a plain ``.keras`` model
(:mod:`hypernet.training.export`) and prints its input contract: it takes the stored
pixels (it scales them as training did) and outputs logits, or probabilities with
``--export_softmax``. What needs no TensorFlow (the workdir, its config and checkpoint,
the export folder and ``--condition``) is checked before TensorFlow is imported.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, Optional, Union

from absl import app
from absl import flags

from hypernet.training import cli
from hypernet.training.workdir import Workdir

# The fields --set may change: what the meta-test episodes are and how the evaluation
# runs. None of them changes the trained parameters or which characters were held out
# (data.num_test_characters, split_seed and omniglot_zips would: a meta-test character
# could have been trained on).
EVAL_FIELDS = ("meta.num_ways", "meta.num_shots", "meta.eval_queries", "meta.eval_episodes",
               "meta.eval_seed", "meta.eval_inner_steps", "meta.eval_steps_sweep",
               "meta.one_shot_runs", "eval_batch_size", "data.data_dir")
# Fields that change how the evaluation runs, not its result: not in the JSON's name.
_EXECUTION_FIELDS = ("eval_batch_size", "data.data_dir")

_WORKDIR = flags.DEFINE_string("workdir", None, "A training workdir (holds config.json and "
                               "checkpoints/).", required=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", "", "Step number or checkpoint prefix; "
                                  "empty: the latest.")
_EXPORT = flags.DEFINE_string("export", "", "Write the target network with its produced "
                              "weights to this .keras file.")
_SOFTMAX = flags.DEFINE_bool("export_softmax", False, "The exported model ends in a softmax "
                              "(class probabilities instead of logits).")
_CONDITION = flags.DEFINE_integer("condition", 0, "Conditional hypernetworks: the condition "
                                  "(task id) whose target network is exported.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Override config.data.data_dir (a workdir "
                                "evaluated on another machine).")
_OUTPUT = flags.DEFINE_string("output", "", "Metrics JSON file; default "
                              "WORKDIR/eval_step<N>.json (with --set: "
                              "WORKDIR/eval_step<N>_<setting>.json).")
_SET = flags.DEFINE_multi_string(
    "set", [], "FIELD=VALUE (repeatable): evaluate with this config field changed, e.g. "
    "--set meta.num_ways=20 --set meta.num_shots=5 --set meta.eval_episodes=1000; fields: "
    + ", ".join(EVAL_FIELDS) + ".")


def load_config(workdir: str, step=None):
  """The config that trained a workdir's checkpoint ``step`` (``workdir/config.json``, or
  the ``config_resumed_at_<N>.json`` a resume with a changed config wrote before
  ``step``; ``None``: the latest), validated.

  Raises:
    NotADirectoryError: ``workdir`` is a file.
    FileNotFoundError: ``workdir`` holds no ``config.json`` (not a training workdir).
    ConfigError: the file does not fit this version's config schema.
  """
  return cli.read_workdir_config(workdir, step=step)


def eval_config(config, overrides=()):
  """``config`` with the evaluation ``overrides`` applied (``python -m hypernet.evaluate
  --set``); TensorFlow-free.

  Args:
    config: a run's config (``workdir/config.json``, :func:`load_config`).
    overrides: ``"FIELD=VALUE"`` texts (values parsed to the field's type,
      :func:`hypernet.config_lib.parse_override`) or a ``{field: value}`` mapping; fields
      of :data:`EVAL_FIELDS` only.

  Returns:
    ``(config, {field: value})``: a new config (``config`` is not changed) and the values
    set. A learner that writes its head per task (the support-conditioned hypernetwork,
    Prototypical Networks) asked for fewer ways than its head has keeps the head
    (``config.meta.train_ways`` set to the head's width; unused classes masked).

  Raises:
    ConfigError: one line naming the field: not a field, a value that does not parse or
      validate, a field not in :data:`EVAL_FIELDS`, or a setting the trained parameters
      cannot serve (a head of other width: other learners adapt an N-way head; per-step
      BatchNorm statistics for another number of inner steps).
  """
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  if not overrides:
    return config, {}
  if isinstance(overrides, dict):
    texts = {field: f"{field}={value}" for field, value in overrides.items()}
  else:
    texts = {config_lib.parse_override(config, a, "--set")[0]: a for a in overrides}
    overrides = dict(config_lib.parse_override(config, a, "--set") for a in texts.values())
  for field in overrides:
    if field not in EVAL_FIELDS:
      raise config_lib.ConfigError(
          f"--set {texts[field]}: config.{field} is not an evaluation field (it changes "
          "the trained model, its training or the held-out characters); --set takes "
          f"{', '.join(EVAL_FIELDS)}.")
  new, applied = config_lib.with_overrides(config, overrides, "--set")
  _check_trained_shapes(config, new, applied)
  return new, applied


def _and(names) -> str:
  """``'a', 'b' and 'c'``."""
  quoted = [repr(n) for n in names]
  return " and ".join([", ".join(quoted[:-1])] + quoted[-1:]) if len(quoted) > 1 else (
      "".join(quoted))


def _check_trained_shapes(config, new, applied) -> None:
  """Raises ConfigError when ``new`` needs parameters of other shapes than ``config``
  trained; keeps the head width of a learner that writes it per task (sets train_ways)."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  if config.task != "few_shot":
    return
  head, asked = config_lib.head_ways(config), int(new.meta.num_ways)
  learner = config.meta.learner
  if config_lib.head_ways(new) != head:
    per_task = learner in config_lib.PROTOTYPE_HEAD_LEARNERS
    if per_task and asked <= head:
      new.meta.train_ways = head
    elif per_task:
      raise config_lib.ConfigError(
          f"--set meta.num_ways={asked}: the run's per-task head has {head} outputs "
          f"(config.meta.train_ways={config.meta.train_ways}, num_ways="
          f"{config.meta.num_ways} when trained), so it serves up to {head}-way episodes; "
          f"meta-train with --config.meta.train_ways={asked} or more.")
    else:
      raise config_lib.ConfigError(
          f"--set meta.num_ways={asked}: learner {learner!r} adapts the run's {head}-way "
          f"head (config.meta.num_ways={config.meta.num_ways} when trained), so it "
          f"evaluates {head}-way episodes only; learners "
          f"{_and(config_lib.PROTOTYPE_HEAD_LEARNERS)} (a head "
          "written per task) with config.meta.train_ways >= N serve any N-way.")
  rows = lambda c: max(int(c.meta.inner_steps), int(c.meta.eval_inner_steps))
  per_step = config.meta.bn_mode == "per_step" or config.meta.per_step_bn_weights
  if per_step and config.model.name == "conv4" and rows(new) != rows(config):
    raise config_lib.ConfigError(
        f"--set meta.eval_inner_steps={new.meta.eval_inner_steps}: the run's per-step "
        f"BatchNorm (config.meta.bn_mode={config.meta.bn_mode!r}, per_step_bn_weights="
        f"{config.meta.per_step_bn_weights}) holds one set per inner step up to "
        f"{rows(config)} (max(inner_steps, eval_inner_steps) when trained); keep that "
        "maximum.")


def setting_tag(applied) -> str:
  """The name part of an evaluation's setting: ``{"meta.num_ways": 20, "meta.num_shots":
  5}`` -> ``"num_ways20_num_shots5"`` (fields in :data:`EVAL_FIELDS` order, whatever the
  order given; fields that change only how the evaluation runs left out)."""
  import re  # pylint: disable=g-import-not-at-top
  parts = []
  for field in EVAL_FIELDS:
    if field in applied and field not in _EXECUTION_FIELDS:
      value = applied[field]
      text = "-".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
      parts.append(field.rsplit(".", 1)[-1] + re.sub(r"[^A-Za-z0-9.+-]", "", text))
  return "_".join(parts)


def evaluate(workdir: str, checkpoint: Union[None, int, str] = None,
             export_path: Optional[str] = None, condition: Optional[int] = None,
             output: Optional[str] = None, data_dir: Optional[str] = None,
             softmax: bool = False, overrides=()) -> Dict[str, Any]:
  """Restores a checkpoint of ``workdir``, evaluates it and optionally exports the target.

  Args:
    workdir: a training workdir.
    checkpoint: ``None`` (latest), a step number, or a checkpoint prefix.
    export_path: if given, a ``.keras`` file for the target network.
    condition: conditional hypernetworks: the condition to export (default 0).
    output: metrics JSON path (default ``workdir/eval_step<N>.json``, with
      ``overrides`` ``workdir/eval_step<N>_<setting>.json``; ``""``: none).
    data_dir: overrides ``config.data.data_dir``.
    softmax: the exported model outputs probabilities instead of logits.
    overrides: evaluate in another setting: ``"FIELD=VALUE"`` texts or a ``{field:
      value}`` mapping of :data:`EVAL_FIELDS` (:func:`eval_config`), e.g.
      ``["meta.num_ways=20", "meta.num_shots=5"]``.

  Returns:
    The task's evaluation metrics (e.g. ``loss`` in nats, ``accuracy`` in [0, 1]) plus
    ``step``, ``checkpoint``, with ``overrides`` ``overrides`` (the fields set) and, when
    exporting, ``export``.

  Raises:
    FileNotFoundError: no config or no (such) checkpoint, or the folder of
      ``export_path`` does not exist (checked before any work).
    ConfigError: an incompatible ``config.json``; a bad override (:func:`eval_config`,
      checked before TensorFlow work).
    ExportConditionError (a ValueError): exporting a ``condition`` the run's weight
      source does not have (checked before any work).
    NotExportableError (a ValueError): exporting a run with no single target network
      (the support-conditioned hypernetwork; checked before any work).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  from hypernet.training import checkpoints, export, loop  # pylint: disable=g-import-not-at-top
  if export_path:
    export.check_export_path(export_path)
  named = int(checkpoint) if str(checkpoint or "").isdigit() else None
  config, applied = eval_config(load_config(workdir, named), overrides)
  if export_path:
    export.check_exportable(config)
    export.check_condition(config, condition)
  path = checkpoints.resolve_checkpoint(workdir, checkpoint)
  step = checkpoints.step_of(path)
  if Workdir(workdir).config_at(step) != Workdir(workdir).config_at(named):
    # The latest checkpoint predates the latest resume (which stopped before saving).
    config, applied = eval_config(load_config(workdir, step), overrides)
  if data_dir is not None:
    config.data.data_dir = data_dir
  try:
    trainer = loop.Trainer(config, workdir)
  except FileNotFoundError as e:
    if data_dir is not None:
      raise
    # The run's config.json keeps its data_dir as given (perhaps relative to where it ran).
    raise FileNotFoundError(f"{e} Here, pass the data folder as --data_dir=PATH (the run's "
                            f"config.data.data_dir is {config.data.data_dir!r}).") from e
  try:
    trainer.checkpoint.restore(path).assert_existing_objects_matched()
  except (ValueError, AssertionError) as e:
    if not applied:
      raise
    shown = " ".join(f"--set {k}={v}" for k, v in applied.items())
    raise config_lib.ConfigError(f"{shown}: the run's checkpoint does not fit the config "
                                 f"with these fields ({str(e).strip().splitlines()[0]}); "
                                 "evaluate the setting it was trained for.") from None
  step = int(trainer.step.read_value())
  result: Dict[str, Any] = dict(trainer.evaluate())
  result.update(step=step, checkpoint=path)
  if applied:
    result["overrides"] = dict(applied)
  if export_path:
    model = export.export_target(trainer.task, export_path, condition, softmax)
    result["export"] = export_path
    result["export_contract"] = export.input_contract(trainer.task, model, softmax)
  if output is None:
    output = Workdir(workdir).eval_metrics(step, setting_tag(applied))
  if output:
    with tf.io.gfile.GFile(output, "w") as f:
      json.dump(result, f, indent=2)
  return result


def report(result: Dict[str, Any], output: Optional[str] = None) -> str:
  """The table ``python -m hypernet.evaluate`` prints for :func:`evaluate`'s result.

  Example (digits, with ``--export``)::

    Evaluated step 10000 (/tmp/wd/checkpoints/ckpt-10000):
      accuracy   98.33%
      loss       0.08423
      metrics:   /tmp/wd/eval_step10000.json
    Exported the target network to /tmp/digits_target.keras
      input:     float32 [batch, 8, 8, 1]: values 0..16 as the data set stores them ...
      output:    logits [batch, 10] (apply a softmax for probabilities, or ...)
      load:      keras.models.load_model(path): Keras alone, no hypernet import
  """
  from hypernet.training import console  # pylint: disable=g-import-not-at-top
  skip = ("step", "checkpoint", "export", "export_contract", "overrides")
  metrics = {k: v for k, v in result.items() if k not in skip}
  order = sorted(metrics, key=lambda k: (not k.startswith("accuracy"), "accuracy" not in k))
  width = max([len(k) for k in order] + [8]) + 2
  lines = [f"Evaluated step {result['step']} ({result['checkpoint']}):"]
  if result.get("overrides"):
    lines.append(f"  {'setting:':<{width}} " + ", ".join(
        f"{k}={v}" for k, v in result["overrides"].items()))
  lines += [f"  {k:<{width}} {console.metric_value(k, metrics[k])}" for k in order]
  if output:
    lines.append(f"  {'metrics:':<{width}} {output}")
  if result.get("export"):
    lines.append(f"Exported the target network to {result['export']}")
    for k, v in result.get("export_contract", {}).items():
      lines.append(f"  {k + ':':<{width}} {v}")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")

  def run():
    from absl import logging  # pylint: disable=g-import-not-at-top
    workdir, checkpoint = _WORKDIR.value, _CHECKPOINT.value or None
    # What needs no TensorFlow first: a user error is reported in a second.
    if _EXPORT.value:
      from hypernet.training import export  # pylint: disable=g-import-not-at-top
      export.check_export_path(_EXPORT.value)
    named = int(checkpoint) if str(checkpoint or "").isdigit() else None
    config, applied = eval_config(cli.read_workdir_config(workdir, step=named), _SET.value)
    if _EXPORT.value:
      export.check_exportable(config)
      export.check_condition(config, _CONDITION.value)
    cli.check_checkpoint_exists(workdir, checkpoint)
    logging.info("Evaluating %s (loading TensorFlow) ...", workdir)
    cli.quiet_startup(sys.argv)
    from hypernet.training import loop  # pylint: disable=g-import-not-at-top,unused-import
    cli.freeze_imported_objects()
    result = evaluate(workdir, checkpoint, _EXPORT.value or None, _CONDITION.value,
                      _OUTPUT.value or None, _DATA_DIR.value, _SOFTMAX.value, applied)
    output = _OUTPUT.value or Workdir(workdir).eval_metrics(result["step"],
                                                            setting_tag(applied))
    print(report(result, output), flush=True)

  cli.run_main(run, interrupted="stopped by Ctrl-C; nothing more was written.")


def entry_point():
  """The ``hypernet-evaluate`` console script (the same as ``python -m hypernet.evaluate``)."""
  cli.run_entry_point(main)


if __name__ == "__main__":
  entry_point()
