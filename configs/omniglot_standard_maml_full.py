"""Second-order MAML on Omniglot's standard split at Finn et al. 2017's budget (a GPU's).

``configs/omniglot_standard_maml.py`` (split, learner, evaluation) with Finn et al.'s
5-way 1-shot meta-training (Sec. 5.2 and their code, github.com/cbfinn/maml): meta-batch
32, 60,000 meta-steps, one inner step of 0.4 (three at meta-test), Adam at 1e-3, one
query drawing per class (their code samples 2K drawings per class: K support, K query).
What differs from the paper: the conv4 max-pools where their Omniglot network strides
its convolutions; their code meta-trains on 1,100 of the 1,200 characters (100 for
validation) by its own seeded shuffle, here the 1,200 of ``data.split_seed=0``; the
meta-test is 1,000 episodes of 15 queries per class (as every standard config here).
Finn et al. report 98.7 +- 0.4%. Meant for a GPU (1.9M meta-training tasks, 48x the CPU
config's); not run here.

    python -m hypernet.train --config=configs/omniglot_standard_maml_full.py \
        --workdir=/tmp/hypernet/omniglot_standard_maml_full \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_maml")
  c.meta.num_queries = 1             # K query drawings per class, K = 1 (their code)
  c.batch_size = 32
  c.num_steps = 60000
  c.eval_every = 5000
  c.checkpoint_every = 1000
  return c
