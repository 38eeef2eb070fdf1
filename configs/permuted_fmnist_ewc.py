"""Baseline for permuted_fmnist_hnet.py in the same loop and setting: method "ewc".

    python -m hypernet.train --config=configs/permuted_fmnist_ewc.py \
        --workdir=/tmp/hypernet/permuted_ewc --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "permuted_fmnist_hnet")
  c.continual.method = "ewc"
  c.hypernet.kind = "none"
  c.optim.lr = 1e-3            # (the HNET config trains its hypernetwork at 3e-3)
  # Permuted, tasks 0-2 of seed 0 at 2,000 steps per task (final / during / forgetting,
  # CL1): lambda 1e4 81.02 / 85.80 / 4.78; 1e5 80.92 / 86.75 / 5.83 (split Fashion-MNIST,
  # seed 0, forgetting for lambda 1e2 / 1e3 / 1e4 / 1e5: 23.3 / 17.9 / 10.2 / 7.9).
  c.continual.ewc_lambda = 1e4
  return c
