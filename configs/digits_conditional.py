"""Conditional chunked hypernetwork, multi-task: 4 tasks on digits, task t relabels class
y as (y + t) mod 10; each batch is split among the tasks and the 4 generated weight sets
run in one batched forward pass (tasks.MultiTaskClassificationTask).

    python -m hypernet.train --config=configs/digits_conditional.py --workdir=/tmp/digits_cond
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "digits_hyper_relu")
  c.task = "multitask_classification"
  c.multitask.label_shift = True   # task t relabels class y as (y + t) mod 10
  c.hypernet.num_conditions = 4
  c.hypernet.condition_dim = 8
  c.hypernet.hidden = (64,)
  c.optim.lr = 1e-3            # its own setting (digits_hyper's chunked network uses 5e-3)
  return c
