"""Permuted MNIST-10 with the task-conditioned hypernetwork of permuted_mnist_hnet.py,
the regulariser a tenth as strong and dropout before the target's head.

Two fields differ from permuted_mnist_hnet.py (every other setting, and what differs
from von Oswald et al. 2020, is in its docstring):

- ``continual.beta = 0.01`` (von Oswald et al.'s value for split MNIST; 0.1 in
  permuted_mnist_hnet.py, their permuted value): the later tasks are learned 1-2 points
  better, and without dropout 0.12 points are forgotten;
- ``model.dropout = 0.2``: one dropout layer before the head of the generated
  784-1000-1000-10 network, against the gap between the later tasks' training accuracy
  (98.6-99.8%) and their test accuracy; it holds the forgetting under 0.1 points.

Measured (experiments/RESULTS_continual.md), seeds 0-2: CL1 96.26% (96.16 / 96.46 /
96.17), 0.03 points forgotten (0.04 / -0.07 / 0.10), each task learned to 94.5-98.1%;
without dropout (beta 0.01) 95.98% and 0.12; online EWC in the same loop 96.08% and
1.60; von Oswald et al.'s HNET 97.57%. Dropout 0.5 learned the first six tasks no
better (seed 0); nor did lr 1e-3 (``--config.optim.lr=1e-3``, seeds 0-1: 96.12 / 95.99)
or a generator with a 50-wide last layer and chunks of 34,000 (seed 0, three tasks), nor
von Oswald et al.'s PyTorch init (``--config.hypernet.init=pytorch``, seed 0: at their lr
1e-4 the first three tasks 95.40 / 94.20 / 92.95, at 1e-3 the first four 97.00 / 97.35 /
96.20 / 95.35, against 97.90 / 97.30 / 97.45 / 95.70). Seeds 1 and 2 took 6,013-6,028 s at once beside other trainings on 2
cores of an Intel Xeon (Sapphire Rapids class).

    python -m hypernet.train --config=configs/permuted_mnist_hnet_dropout.py \
        --workdir=/tmp/hypernet/permuted_mnist_hnet_dropout \
        --config.data.data_dir=../shared/data/mnist --config.seed=0
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "permuted_mnist_hnet")
  c.continual.beta = 0.01      # permuted_mnist_hnet's 0.1: 94.26% (seeds 0-2), 0.01 forgotten
  c.model.dropout = 0.2        # without: 95.98% (seeds 0-2), 0.12 forgotten
  return c
