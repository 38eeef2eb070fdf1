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
  # Permuted, seed 0, 2,000 steps per task (final / during / forgetting, CL1). Tasks 0-2:
  # lambda 1e4 81.02 / 85.80 / 4.78; 1e5 80.92 / 86.75 / 5.83. All 10 tasks: lambda 1e4
  # 60.77 / 79.23 / 18.46; 1e5 61.77 / 78.96 / 17.19; 1e6 59.13 / 77.46 / 18.33 (Split
  # Fashion-MNIST, seed 0, forgetting for lambda 1e2 / 1e3 / 1e4 / 1e5: 23.3 / 17.9 /
  # 10.2 / 7.9). The forgetting hardly moves over lambda 1e4-1e6 (see RESULTS_continual.md).
  c.continual.ewc_lambda = 1e5
  return c
