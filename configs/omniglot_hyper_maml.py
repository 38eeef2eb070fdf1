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
  c = config_lib.base_config()
  c.task = "few_shot"
  c.data.name = "omniglot"
  c.data.data_dir = ""
  c.data.omniglot_zips = "images_background.zip,images_evaluation.zip"
  c.data.num_test_characters = 423
  c.model.name = "conv4"
  c.model.conv_widths = (64, 64, 64, 64)
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "conv*/kernel,head/kernel"  # 111,488 generated scalars
  c.hypernet.train_rest = True  # biases and BatchNorm gamma/beta trained directly
  c.hypernet.chunk_size = 4096
  c.hypernet.chunk_emb_dim = 32
  c.hypernet.hidden = (32,)
  c.num_steps = 6000
  c.batch_size = 16
  c.eval_batch_size = 50
  c.log_every = 100
  c.eval_every = 1000
  c.checkpoint_every = 500
  c.jit_compile = "false"      # second order (see configs/omniglot_maml.py)
  c.meta.learner = "maml"
  c.meta.num_ways = 5
  c.meta.num_shots = 1
  c.meta.num_queries = 5
  c.meta.eval_queries = 5
  c.meta.inner_lr = 0.4
  c.meta.inner_steps = 1
  c.meta.eval_inner_steps = 3
  c.meta.eval_episodes = 600
  c.optim.lr = 1e-3
  c.optim.schedule = "constant"
  return c
