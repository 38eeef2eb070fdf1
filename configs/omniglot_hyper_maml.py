"""Hypernetwork-initialised MAML: a chunked hypernetwork generates the conv4 weights that
MAML adapts; Omniglot 5-way 1-shot.

The hypernetwork's output is MAML's initial weights (theta_0 = H(phi)): the inner loop
adapts the generated tensors on the support set, and the outer optimiser trains the
hypernetwork's parameters phi (and the target's BatchNorm scales and shifts, which are
not generated) through the second-order meta-gradient. Otherwise as
configs/omniglot_maml.py.

    python -m hypernet.train --config=configs/omniglot_hyper_maml.py \
        --workdir=/tmp/hypernet/omniglot_hyper_maml --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "conv*/kernel,head/kernel"  # 111,488 generated scalars
  c.hypernet.train_rest = True  # biases and BatchNorm gamma/beta trained directly
  c.hypernet.chunk_size = 4096
  c.hypernet.chunk_emb_dim = 32
  c.hypernet.hidden = (32,)
  return c
