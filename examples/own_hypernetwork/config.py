"""A hypernetwork kind of the user's own (lowrank_hypernet.py beside this file) trained by
hypernet's command line on the digits:

    cd examples/own_hypernetwork
    python -m hypernet.train --config=config.py --workdir=/tmp/own_hypernet

``config.hypernet.kind`` names the class; the kind's own constructor argument ``rank`` is
a field of ``config.hypernet`` by its own name (``--config.hypernet.rank=8`` works).
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.hypernet.kind = "lowrank_hypernet:LowRankHypernetwork"
  c.hypernet.targets = "*"     # every weight of the digits CNN
  c.hypernet.rank = 8          # LowRankHypernetwork(rank=...)
  c.num_steps = 600
  c.log_every = 100
  c.eval_every = 300
  c.checkpoint_every = 300
  c.optim.lr = 1e-2
  return c
