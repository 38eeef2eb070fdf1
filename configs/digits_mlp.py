"""Full MLP hypernetwork (one output head per target tensor) generating every weight of
the digits CNN of digits_plain.py.

    python -m hypernet.train --config=configs/digits_mlp.py --workdir=/tmp/digits_mlp
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "digits_hyper_relu")
  c.hypernet.kind = "mlp"
  c.hypernet.embedding_dim = 8
  c.hypernet.hidden = (32,)
  c.optim.lr = 1e-3            # its own setting (digits_hyper's chunked network uses 5e-3)
  return c
