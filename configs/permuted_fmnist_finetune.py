"""Baseline for permuted_fmnist_hnet.py in the same loop and setting: method "finetune".

    python -m hypernet.train --config=configs/permuted_fmnist_finetune.py \
        --workdir=/tmp/hypernet/permuted_finetune --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "permuted_fmnist_hnet")
  c.continual.method = "finetune"
  c.hypernet.kind = "none"
  c.optim.lr = 1e-3            # (the HNET config trains its hypernetwork at 3e-3)
  return c
