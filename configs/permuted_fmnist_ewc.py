"""Baseline for permuted_fmnist_hnet.py in the same loop and setting: method "ewc".

    python -m hypernet.train --config=configs/permuted_fmnist_ewc.py \
        --workdir=/tmp/hypernet/permuted_ewc --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "permuted_fmnist_hnet")
  c.continual.method = "ewc"
  c.hypernet.kind = "none"
  return c
