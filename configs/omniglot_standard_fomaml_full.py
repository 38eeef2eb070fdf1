"""First-order MAML on Omniglot's standard split at Finn et al. 2017's budget (a GPU's).

``configs/omniglot_standard_maml_full.py`` (meta-batch 32, 60,000 meta-steps, one inner
step of 0.4, one query per class; what differs from the paper is said there) with the
first-order learner of ``configs/omniglot_standard_fomaml.py``. Finn et al. report
98.3 +- 0.5% (5-way 1-shot, first order). Not run here.

    python -m hypernet.train --config=configs/omniglot_standard_fomaml_full.py \
        --workdir=/tmp/hypernet/omniglot_standard_fomaml_full \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_maml_full")
  c.meta.learner = "fomaml"
  c.jit_compile = "auto"             # first order: XLA agreed exactly with the plain graph
  return c
