"""Evaluate a training workdir's checkpoint; optionally export the target network.

    python -m hypernet.evaluate --workdir=/tmp/hypernet/digits_hyper
    python -m hypernet.evaluate --workdir=DIR --checkpoint=2000 --export=/tmp/target.keras

Rebuilds the run from ``workdir/config.json``, restores the latest (or the named)
checkpoint, runs the task's evaluation (classification and few-shot tasks alike: the
same ``Trainer.evaluate`` as the train loop), prints the metrics as JSON and writes them
to ``workdir/eval_step<N>.json``. ``--export`` also writes the target network with its
produced weights as a plain ``.keras`` model (:mod:`hypernet.training.export`) that takes the
stored pixels (it scales them as training did) and outputs logits, or probabilities with
``--export_softmax``.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Optional, Union

from absl import app
from absl import flags

from hypernet.training import cli

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
    FileNotFoundError: ``workdir`` holds no ``config.json`` (not a training workdir).
    ConfigError: the file does not fit this version's config schema.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.training import config_lib  # pylint: disable=g-import-not-at-top
  path = os.path.join(workdir, "config.json")
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{path} does not exist: --workdir must be a folder written by "
                            "python -m hypernet.train.")
  with tf.io.gfile.GFile(path) as f:
    return config_lib.config_from_dict(json.load(f))


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
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.training import checkpoints, export, loop  # pylint: disable=g-import-not-at-top
  if export_path:
    export.check_export_path(export_path)
  config = load_config(workdir)
  if export_path:
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
    export.export_target(trainer.task, export_path, condition, softmax)
    result["export"] = export_path
  if output is None:
    output = os.path.join(workdir, f"eval_step{step}.json")
  if output:
    with tf.io.gfile.GFile(output, "w") as f:
      json.dump(result, f, indent=2)
  return result


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  cli.configure_logging(cli.quiet_startup(sys.argv))  # Imports TensorFlow.

  def run():
    cli.check_workdir_is_folder(_WORKDIR.value)
    result = evaluate(_WORKDIR.value, _CHECKPOINT.value or None, _EXPORT.value or None,
                      _CONDITION.value, _OUTPUT.value or None, _DATA_DIR.value,
                      _SOFTMAX.value)
    print(json.dumps(result, indent=2))
  cli.run_main(run, traceback=False)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
