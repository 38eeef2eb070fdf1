"""MAML on sinusoids with Finn et al. 2017's K = 5 protocol (Sec. 5.1, Fig. 3 / Table).

As configs/sinusoid_maml.py (1 -> 40 -> 40 -> 1 ReLU MLP, one inner step of alpha = 0.01
in meta-training, meta-batch 25, Adam 1e-3) with K = 5 support and 5 query points per
task in meta-training (the paper's K-shot for both sets), trained for the paper's
70,000 meta-steps. Meta-test: 600 fixed tasks with 5 support points, MSE on 100 query
points after 1, 5 and 10 inner steps of the same alpha (``loss_steps_K`` metrics, 95%
intervals over tasks).

    python -m hypernet.train --config=configs/sinusoid_maml_k5.py \
        --workdir=/tmp/hypernet/sinusoid_maml_k5
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "sinusoid_maml")
  c.num_steps = 70000
  c.eval_every = 10000
  c.checkpoint_every = 10000
  c.log_every = 2000
  c.meta.num_shots = 5
  c.meta.num_queries = 5
  c.meta.eval_steps_sweep = (1, 5, 10)
  return c
