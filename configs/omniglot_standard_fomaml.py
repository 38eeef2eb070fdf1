"""First-order MAML on Omniglot's standard split, 5-way 1-shot, at a 2-CPU-core budget.

``configs/omniglot_standard_maml.py`` (split, evaluation, 5,000 meta-steps x meta-batch
8) with the change ``configs/omniglot_fomaml.py`` makes to ``omniglot_maml.py``: the
inner gradient a constant (Finn et al. 2017's first-order approximation, Sec. 5.2), so
no second derivatives and XLA allowed. Finn et al.'s budget:
configs/omniglot_standard_fomaml_full.py.

    python -m hypernet.train --config=configs/omniglot_standard_fomaml.py \
        --workdir=/tmp/hypernet/omniglot_standard_fomaml \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_maml")
  c.meta.learner = "fomaml"
  c.jit_compile = "auto"             # first order: XLA agreed exactly with the plain graph
  return c
