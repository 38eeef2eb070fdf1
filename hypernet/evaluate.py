"""Evaluate a training workdir's checkpoint; optionally export the target network.

    python -m hypernet.evaluate --workdir=/tmp/hypernet/digits_hyper
    python -m hypernet.evaluate --workdir=DIR --checkpoint=2000 --export=/tmp/target.keras

Rebuilds the run from ``workdir/config.json``, restores the latest (or the named)
checkpoint, runs the task's evaluation (classification and few-shot tasks alike: the
same ``Trainer.evaluate`` as the train loop), prints the metrics as a table and writes
them as JSON to ``workdir/eval_step<N>.json``. ``--export`` also writes the target
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
                              "WORKDIR/eval_step<N>.json.")


def load_config(workdir: str):
  """The config a workdir was trained with (``workdir/config.json``), validated.

  Raises:
    NotADirectoryError: ``workdir`` is a file.
    FileNotFoundError: ``workdir`` holds no ``config.json`` (not a training workdir).
    ConfigError: the file does not fit this version's config schema.
  """
  return cli.read_workdir_config(workdir)


def evaluate(workdir: str, checkpoint: Union[None, int, str] = None,
             export_path: Optional[str] = None, condition: Optional[int] = None,
             output: Optional[str] = None, data_dir: Optional[str] = None,
             softmax: bool = False) -> Dict[str, Any]:
  """Restores a checkpoint of ``workdir``, evaluates it and optionally exports the target.

  Args:
    workdir: a training workdir.
    checkpoint: ``None`` (latest), a step number, or a checkpoint prefix.
    export_path: if given, a ``.keras`` file for the target network.
    condition: conditional hypernetworks: the condition to export (default 0).
    output: metrics JSON path (default ``workdir/eval_step<N>.json``; ``""``: none).
    data_dir: overrides ``config.data.data_dir``.
    softmax: the exported model outputs probabilities instead of logits.

  Returns:
    The task's evaluation metrics (e.g. ``loss`` in nats, ``accuracy`` in [0, 1]) plus
    ``step``, ``checkpoint`` and, when exporting, ``export``.

  Raises:
    FileNotFoundError: no config or no (such) checkpoint, or the folder of
      ``export_path`` does not exist (checked before any work).
    ConfigError: an incompatible ``config.json``.
    ExportConditionError (a ValueError): exporting a ``condition`` the run's weight
      source does not have (checked before any work).
    NotExportableError (a ValueError): exporting a run with no single target network
      (the support-conditioned hypernetwork; checked before any work).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.training import checkpoints, export, loop  # pylint: disable=g-import-not-at-top
  if export_path:
    export.check_export_path(export_path)
  config = load_config(workdir)
  if export_path:
    export.check_exportable(config)
    export.check_condition(config, condition)
  if data_dir is not None:
    config.data.data_dir = data_dir
  path = checkpoints.resolve_checkpoint(workdir, checkpoint)
  try:
    trainer = loop.Trainer(config, workdir)
  except FileNotFoundError as e:
    if data_dir is not None:
      raise
    # The run's config.json keeps its data_dir as given (perhaps relative to where it ran).
    raise FileNotFoundError(f"{e} Here, pass the data folder as --data_dir=PATH (the run's "
                            f"config.data.data_dir is {config.data.data_dir!r}).") from e
  trainer.checkpoint.restore(path).assert_existing_objects_matched()
  step = int(trainer.step.read_value())
  result: Dict[str, Any] = dict(trainer.evaluate())
  result.update(step=step, checkpoint=path)
  if export_path:
    model = export.export_target(trainer.task, export_path, condition, softmax)
    result["export"] = export_path
    result["export_contract"] = export.input_contract(trainer.task, model, softmax)
  if output is None:
    output = Workdir(workdir).eval_metrics(step)
  if output:
    with tf.io.gfile.GFile(output, "w") as f:
      json.dump(result, f, indent=2)
  return result


def report(result: Dict[str, Any], output: Optional[str] = None) -> str:
  """The table ``python -m hypernet.evaluate`` prints for :func:`evaluate`'s result.

  Example (digits, with ``--export``)::

    Evaluated step 3000 (/tmp/wd/checkpoints/ckpt-3000):
      accuracy   98.61%
      loss       0.08103
      metrics:   /tmp/wd/eval_step3000.json
    Exported the target network to /tmp/digits_target.keras
      input:     float32 [batch, 8, 8, 1]: raw pixel values 0..16 as the data set ...
      output:    logits [batch, 10] (apply a softmax for probabilities, or ...)
      load:      keras.models.load_model(path): Keras alone, no hypernet import
  """
  from hypernet.training import console  # pylint: disable=g-import-not-at-top
  skip = ("step", "checkpoint", "export", "export_contract")
  metrics = {k: v for k, v in result.items() if k not in skip}
  order = sorted(metrics, key=lambda k: (not k.startswith("accuracy"), "accuracy" not in k))
  width = max([len(k) for k in order] + [8]) + 2
  lines = [f"Evaluated step {result['step']} ({result['checkpoint']}):"]
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
    config = cli.read_workdir_config(workdir)
    if _EXPORT.value:
      export.check_exportable(config)
      export.check_condition(config, _CONDITION.value)
    cli.check_checkpoint_exists(workdir, checkpoint)
    logging.info("Evaluating %s (loading TensorFlow) ...", workdir)
    cli.quiet_startup(sys.argv)
    result = evaluate(workdir, checkpoint, _EXPORT.value or None, _CONDITION.value,
                      _OUTPUT.value or None, _DATA_DIR.value, _SOFTMAX.value)
    output = _OUTPUT.value or Workdir(workdir).eval_metrics(result["step"])
    print(report(result, output), flush=True)

  cli.run_main(run, interrupted="stopped by Ctrl-C; nothing more was written.")


if __name__ == "__main__":
  cli.run_entry_point(main)
