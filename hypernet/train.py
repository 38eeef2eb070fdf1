"""Training entry point.

    python -m hypernet.train --config=configs/digits_hyper.py --workdir=/tmp/digits
    hypernet-train --config=configs/digits_hyper.py --workdir=/tmp/digits  # the same

A ``--config=configs/NAME.py`` that is not in the working directory is looked up among
hypernet's configs (installed with the wheel; ``hypernet.training.cli.find_config``).
Overrides: ``--config.optim.lr=3e-4`` (also in a ``--flagfile``; a later flag wins).
Rerunning the same command resumes from the latest checkpoint. Exit status: 0 done, 1 a
user error (one line) or a bug, 130 Ctrl-C, 143 stopped early: rerun to resume
(docs/distributed.md).
"""
import sys
import time

from absl import app
from absl import flags
from ml_collections import config_flags

from hypernet.training import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "Folder for checkpoints, TensorBoard "
                               "events and final metrics.", required=True)
_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file "
                                          "(configs/*.py with get_config()).",
                                          lock_config=True)
_TRACEBACK = flags.DEFINE_bool("traceback", False, "Show the Python traceback of "
                               "configuration, data and workdir errors too.")
flags.mark_flags_as_required(["config"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config, workdir = _CONFIG.value, _WORKDIR.value

  def run():
    from absl import logging  # pylint: disable=g-import-not-at-top
    # What needs no TensorFlow first (the config's values, the workdir, data files): a
    # user error is reported in a second, not after the TensorFlow import.
    cli.check_train_args(config, workdir)
    logging.info("Training %s%s for %d steps in %s (loading TensorFlow) ...",
                 config_flags.get_config_filename(flags.FLAGS["config"]),
                 cli.plugins_in(config), config.num_steps, workdir)
    overrides = config_flags.get_override_values(flags.FLAGS["config"])
    for notice in cli.plugin_notices(config) + cli.unread_override_notices(config, overrides):
      logging.warning(notice)
    start = time.time()
    cli.quiet_startup(sys.argv)
    from hypernet.training import export, loop  # pylint: disable=g-import-not-at-top
    cli.freeze_imported_objects()
    logging.info("Loaded TensorFlow in %.1f s; loading the data and building the model ...",
                 time.time() - start)
    result = loop.train_and_evaluate(config, workdir)
    print(cli.closing_summary(result, workdir, export.exportable(config)), flush=True)

  cli.run_main(run, _TRACEBACK.value, interrupted="stopped by Ctrl-C before a checkpoint "
               "was saved; rerun the same command to start again.")


def entry_point():
  """The ``hypernet-train`` console script (the same as ``python -m hypernet.train``)."""
  cli.run_entry_point(main)


if __name__ == "__main__":
  entry_point()
