"""Training entry point.

    python -m hypernet.train --config=configs/digits_hyper.py --workdir=/tmp/digits

Overrides: ``--config.optim.lr=3e-4``, ``--config.num_steps=500``. Rerunning the same
command with the same workdir resumes from the latest checkpoint.
"""
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from hypernet import train_lib

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
  logging.set_verbosity(logging.INFO)
  train_lib.run_main(lambda: train_lib.train_and_evaluate(_CONFIG.value, _WORKDIR.value),
                     _TRACEBACK.value)


if __name__ == "__main__":
  app.run(main)
