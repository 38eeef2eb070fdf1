"""Conditional chunked hypernetwork, multi-task: 4 tasks on digits, task t relabels class
y as (y + t) mod 10; each batch is split among the tasks and the 4 generated weight sets
run in one batched forward pass (tasks.MultiTaskClassificationTask).

    python -m hypernet.train --config=configs/digits_conditional.py --workdir=/tmp/digits_cond
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.task = "multitask_classification"
  c.multitask.label_shift = True
  c.data.name = "digits"
  c.data.augment_shift = 1
  c.num_steps = 3000
  c.batch_size = 64
  c.eval_every = 1000
  c.checkpoint_every = 1000
  c.model.conv_widths = (32, 64)
  c.model.dense_widths = (64,)
  c.model.dropout = 0.3
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "conv*/*,dense*/*,head/*"
  c.hypernet.chunk_size = 1024
  c.hypernet.chunk_emb_dim = 32
  c.hypernet.hidden = (64,)
  c.hypernet.num_conditions = 4
  c.hypernet.condition_dim = 8
  c.optim.lr = 1e-3
  return c
