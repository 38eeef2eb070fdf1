"""ANIL on Omniglot's standard split, 5-way 1-shot, at a 2-CPU-core budget.

``configs/omniglot_standard_maml.py`` (split, evaluation, 5,000 meta-steps x meta-batch
8) with the change ``configs/omniglot_anil.py`` makes to ``omniglot_maml.py``: only the
head is adapted in the inner loop (Raghu et al. 2020), second order, XLA off. Raghu et
al. train with MAML's Omniglot settings: configs/omniglot_standard_anil_full.py.

    python -m hypernet.train --config=configs/omniglot_standard_anil.py \
        --workdir=/tmp/hypernet/omniglot_standard_anil \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_maml")
  c.meta.learner = "anil"
  return c
