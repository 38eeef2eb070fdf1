"""Chunked hypernetwork generating every weight of the fmnist_plain.py CNN.

6000 steps: the chunked hypernetwork learns more slowly than direct training (at 3000
steps it was 2.6 points behind fmnist_plain.py at 3000; at 6000, 1.4 behind
fmnist_plain.py run for 6000: experiments/RESULTS_hypernets.md). Compare with
``--config=configs/fmnist_plain.py --config.num_steps=6000``.

    python -m hypernet.train --config=configs/fmnist_chunked.py --workdir=/tmp/fmnist_chunked \
      --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fmnist_plain")
  c.num_steps = 6000
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "conv*/*,dense*/*,head/*"
  c.hypernet.chunk_size = 1024
  c.hypernet.chunk_emb_dim = 32
  c.hypernet.hidden = (64,)
  return c
