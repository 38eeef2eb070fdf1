"""Baseline for permuted_mnist_hnet.py in the same loop and setting (target
784-1000-1000, 5,000 steps per task, batch 128, Adam at its lr decayed by a cosine over
each task): method "independent" (see hypernet/tasks/continual_learning.py). Seeds 0-2:
CL1 98.10% (98.03 / 98.16 / 98.11), nothing forgotten; seeds 1 and 2 took 2,128-2,149 s
at once on 2 cores (experiments/RESULTS_continual.md).

    python -m hypernet.train --config=configs/permuted_mnist_independent.py \
        --workdir=/tmp/hypernet/permuted_mnist_independent --config.data.data_dir=../shared/data/mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "permuted_mnist_hnet")
  c.continual.method = "independent"
  c.hypernet.kind = "none"
  return c
