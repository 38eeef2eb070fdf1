"""Meta-learning: inner-loop learners producing fast weights, and meta-batches of tasks.

Learners (weight sources whose context is a support set): :class:`MAML`,
:class:`FirstOrderMAML`, :class:`MetaSGD`, :class:`ANIL`, and :class:`SupportHypernetwork` (the
head generated from the support set's class prototypes). A meta-batch of tasks is
adapted and evaluated by :func:`meta_batch_gradients` (meta-gradients accumulated task by
task: memory of one task) or :func:`meta_batch_loss` (the loss under the caller's tape).
"""
from hypernet.meta.anil import ANIL, split_sequential
from hypernet.meta.conv4 import make_conv4
from hypernet.meta.inner_loop import (FirstOrderMAML, MAML, MetaSGD,
                                      MissingInnerGradientError, inner_sgd)
from hypernet.meta.support_hypernet import SupportHypernetwork
from hypernet.meta.meta_batch import (MetaBatchGradients, MetaBatchResult,
                                      meta_batch_gradients, meta_batch_loss)

__all__ = [
    "ANIL", "FirstOrderMAML", "MAML", "MetaBatchGradients", "MetaBatchResult", "MetaSGD",
    "MissingInnerGradientError", "SupportHypernetwork", "inner_sgd",
    "make_conv4", "meta_batch_gradients", "meta_batch_loss", "split_sequential",
]
