"""First-order MAML (Finn et al. 2017, Sec. 5.2), Omniglot 5-way 1-shot, conv4.

As configs/omniglot_maml.py but the inner gradient is treated as a constant: no second
derivatives, so XLA is allowed ("auto": on for GPU/TPU, off on CPU).

    python -m hypernet.train --config=configs/omniglot_fomaml.py \
        --workdir=/tmp/hypernet/omniglot_fomaml --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.jit_compile = "auto"       # first order: XLA agreed exactly with the plain graph
  c.meta.learner = "fomaml"
  return c
