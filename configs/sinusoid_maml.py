"""MAML on the sinusoid regression tasks of Finn et al. 2017 (Sec. 5.1, Fig. 2).

A 1 -> 40 -> 40 -> 1 ReLU MLP, K = 10 support points, one inner step with alpha = 0.01,
meta-batch 25, Adam 1e-3, as in the paper (which trains 70,000 meta-steps). Meta-test:
600 fixed tasks, 10-shot adaptation, MSE on 100 query points, before and after the
inner step. No data files needed.

    python -m hypernet.train --config=configs/sinusoid_maml.py --workdir=/tmp/hypernet/sinusoid
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.task = "sinusoid"
  c.num_steps = 20000
  c.batch_size = 25            # tasks per meta-batch
  c.eval_batch_size = 100      # tasks per evaluation step
  c.log_every = 500
  c.eval_every = 5000
  c.checkpoint_every = 5000
  c.jit_compile = "false"      # second order (XLA measured 6e-3 relative error on CPU)
  c.meta.learner = "maml"
  c.meta.num_shots = 10        # support points
  c.meta.num_queries = 10      # query points in meta-training
  c.meta.eval_queries = 100    # query points in meta-testing
  c.meta.inner_lr = 0.01
  c.meta.inner_steps = 1
  c.meta.eval_episodes = 600
  c.meta.mlp_widths = (40, 40)
  c.optim.lr = 1e-3
  c.optim.schedule = "constant"
  return c
