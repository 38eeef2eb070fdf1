"""Full MLP hypernetwork (one head per tensor) generating every weight of the
fmnist_plain.py CNN.

    python -m hypernet.train --config=configs/fmnist_mlp.py --workdir=/tmp/fmnist_mlp \
      --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fmnist_plain")
  c.hypernet.kind = "mlp"
  c.hypernet.targets = "conv*/*,dense*/*,head/*"
  c.hypernet.embedding_dim = 8
  c.hypernet.hidden = (16,)
  return c
