"""Training entry point.

    python -m hypernet.train --config=configs/digits_hyper.py --workdir=/tmp/digits

Overrides: ``--config.optim.lr=3e-4``, ``--config.num_steps=500``; in a flagfile too
(``--flagfile=f.txt``, one flag per line), combined with the command line by absl's
rule: a later flag wins (a later ``--config`` replaces an earlier one, and every
``--config.FIELD`` override applies to it, in order). Rerunning the same command with
the same workdir resumes from the latest checkpoint; rerunning a finished one prints its
summary again. The run ends with a summary (test metrics, steps, wall time, where the
results are, the commands to evaluate / export it and to open TensorBoard). Console
lines carry a short time stamp; the first comes before the TensorFlow import. Exit
status: 0 done; 1 a user error (one line ``train.py: error: ...`` naming the flag,
field, file or folder and what to do; what needs no TensorFlow is checked before
importing it) or a bug (a traceback); 130 stopped by Ctrl-C (after saving a checkpoint
once training runs; one line during start-up); 143 stopped early, rerun the same command
to resume (SIGTERM to any worker: every worker stopped at the same step and the chief
saved it; or a lost peer worker: the rerun resumes from the chief's latest checkpoint),
see docs/distributed.md. ``--verbosity=0`` shows TensorFlow's own log lines and absl's
format too.
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
    logging.info("Training %s for %d steps in %s (loading TensorFlow) ...",
                 config_flags.get_config_filename(flags.FLAGS["config"]), config.num_steps, workdir)
    start = time.time()
    cli.quiet_startup(sys.argv)
    from hypernet.training import export, loop  # pylint: disable=g-import-not-at-top
    logging.info("Loaded TensorFlow in %.1f s; loading the data and building the model ...",
                 time.time() - start)
    result = loop.train_and_evaluate(config, workdir)
    print(cli.closing_summary(result, workdir, export.exportable(config)), flush=True)

  cli.run_main(run, _TRACEBACK.value, interrupted="stopped by Ctrl-C before a checkpoint "
               "was saved; rerun the same command to start again.")


if __name__ == "__main__":
  cli.run_entry_point(main)
