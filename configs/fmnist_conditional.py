"""Conditional MLP hypernetwork, multi-task Fashion-MNIST: 4 tasks, task t relabels
class y as (y + t) mod 10; every batch is split among the tasks (16 examples each) and the
4 generated weight sets run in one batched forward pass
(tasks.MultiTaskClassificationTask). Each task is as hard as Fashion-MNIST itself, so the
mean accuracy compares with ``configs/fmnist_plain.py --config.num_steps=6000``. (A
conditional chunked hypernetwork reached 83.2% at 3000 steps; the MLP kind 87.4% at 3000
and 89.12% at 6000: experiments/RESULTS_hypernets.md.)

    python -m hypernet.train --config=configs/fmnist_conditional.py \
      --workdir=/tmp/fmnist_conditional --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fmnist_plain")
  c.num_steps = 6000
  c.task = "multitask_classification"
  c.multitask.label_shift = True
  c.hypernet.kind = "mlp"
  c.hypernet.targets = "conv*/*,dense*/*,head/*"
  c.hypernet.embedding_dim = 8
  c.hypernet.hidden = (16,)
  c.hypernet.num_conditions = 4
  c.hypernet.condition_dim = 8
  return c
