"""ANIL (Raghu et al. 2020): only the head is adapted in the inner loop; Omniglot
5-way 1-shot, conv4.

As configs/omniglot_maml.py, adapting only "head/*"; the conv body runs once per task
on the support set and is meta-trained through the query loss. Second order, XLA off.

    python -m hypernet.train --config=configs/omniglot_anil.py \
        --workdir=/tmp/hypernet/omniglot_anil --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.meta.learner = "anil"      # second order: XLA stays off (see omniglot_maml.py)
  return c
