"""Second-order MAML with Finn et al. 2017's 20-way Omniglot settings (Sec. 5.2 and
Appendix A.1): 20-way 1-shot, inner learning rate 0.1, 5 inner steps in meta-training
(and 10 at meta-test), meta-batch 16, conv4 with 64 filters; scored on the official
one-shot runs like configs/omniglot_20way.py, meta-trained within alphabets as the runs
are (``meta.within_alphabet``), with the head starting every task at zero (Kao et al.
2022's zeroing trick, ``meta.zero_init = "head/*"``: experiments/RESULTS_meta.md shows
why).

Not run to the end on 2 CPU cores: five second-order inner steps over 16 tasks of 20
classes per meta-step are far beyond the 90-minute budget there; the measured learner
on these benchmarks is configs/omniglot_20way_support_hypernet.py.

    python -m hypernet.train --config=configs/omniglot_20way_maml.py \
        --workdir=/tmp/hypernet/omniglot_20way_maml --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_20way")
  c.jit_compile = "false"      # second order (see omniglot_maml.py)
  c.meta.learner = "maml"
  c.meta.inner_lr = 0.1
  c.meta.inner_steps = 5
  c.meta.eval_inner_steps = 10
  c.meta.within_alphabet = True
  c.meta.zero_init = "head/*"  # the head's patterns (config.meta.head)
  c.batch_size = 16
  return c
