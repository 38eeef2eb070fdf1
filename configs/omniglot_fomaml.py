"""First-order MAML (Finn et al. 2017, Sec. 5.2), Omniglot 5-way 1-shot, conv4.

As configs/omniglot_maml.py but the inner gradient is treated as a constant: no second
derivatives, so XLA is allowed ("auto": on for GPU/TPU, off on CPU).

    python -m hypernet.train --config=configs/omniglot_fomaml.py \
        --workdir=/tmp/hypernet/omniglot_fomaml --config.data.data_dir=PATH/TO/omniglot
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
  c.num_steps = 6000
  c.batch_size = 16
  c.eval_batch_size = 50
  c.log_every = 100
  c.eval_every = 1000
  c.checkpoint_every = 500
  c.jit_compile = "auto"       # first order: XLA agreed exactly with the plain graph
  c.meta.learner = "fomaml"
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
