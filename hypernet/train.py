"""Training entry point.

    python -m hypernet.train --config=configs/digits_hyper.py --workdir=/tmp/digits

Overrides: ``--config.optim.lr=3e-4``, ``--config.num_steps=500``; in a flagfile too
(``--flagfile=f.txt``, one flag per line), combined with the command line by absl's
rule: a later flag wins (a later ``--config`` replaces an earlier one, and every
``--config.FIELD`` override applies to it, in order). Rerunning the same command with
the same workdir resumes from the latest checkpoint; rerunning a finished one prints its
summary again. The run ends with a summary (test metrics, steps, wall time, where the
results are, the TensorBoard command). Exit status: 0 done; 1 a user error (one line:
the flag, field, file or folder and what to do) or a bug (a traceback); 130 stopped by
Ctrl-C (after saving a checkpoint); 143 stopped early, rerun the same command to resume
(SIGTERM to any worker: every worker stopped at the same step and the chief saved it;
or a lost peer worker: the rerun resumes from the chief's latest checkpoint), see
docs/distributed.md. ``--verbosity=0`` shows TensorFlow's own log lines too.
"""
import sys

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
  # TensorFlow is imported only now, after the flags parsed (a flag error is immediate).
  cli.configure_logging(cli.quiet_startup(sys.argv))
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top

  def run():
    cli.check_workdir_is_folder(_WORKDIR.value)
    result = loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    print(cli.closing_summary(result, _WORKDIR.value), flush=True)

  cli.run_main(run, _TRACEBACK.value)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
