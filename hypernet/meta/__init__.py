"""Meta-learning: inner-loop learners producing fast weights, and meta-batches of tasks.

Learners (:class:`Learner`, registered in :data:`LEARNERS`; weight sources whose context
is a support set): :class:`MAML` (its inner update rule from :mod:`hypernet.meta.rules`:
SGD, Meta-SGD, LSLR, momentum, Adam), :class:`FirstOrderMAML`, :class:`MetaSGD`,
:class:`ANIL`, :class:`PrototypicalNetwork`, :class:`SupportHypernetwork`,
:class:`SupportTargetHypernetwork`, :class:`SupportAdapter`, :class:`ImplicitMAML`;
:class:`PerStepBatchNormalization` is MAML++'s per-step BatchNorm.
A meta-batch of tasks is adapted and evaluated by :func:`meta_batch_gradients`
(meta-gradients accumulated task by task) or :func:`meta_batch_loss` (under your tape).
"""
from hypernet.meta.anil import ANIL, split_sequential
from hypernet.meta.conv4 import make_conv4
from hypernet.meta.implicit import ImplicitMAML
from hypernet.meta.learner import LEARNERS, Learner
from hypernet.meta import rules
from hypernet.meta.inner_loop import (FirstOrderMAML, MAML, MetaSGD,
                                      MissingInnerGradientError, inner_sgd,
                                      inner_sgd_recompute, msl_weights)
from hypernet.meta.per_step_bn import PerStepBatchNormalization
from hypernet.meta.protonet import PrototypicalNetwork
from hypernet.meta.support_adapter import SupportAdapter
from hypernet.meta.support_hypernet import SupportHypernetwork
from hypernet.meta.support_target import SupportTargetHypernetwork
from hypernet.meta.meta_batch import (MetaBatchGradients, MetaBatchResult,
                                      meta_batch_gradients, meta_batch_loss)

__all__ = [
    "ANIL", "FirstOrderMAML", "ImplicitMAML", "LEARNERS", "Learner", "MAML",
    "MetaBatchGradients", "MetaBatchResult", "MetaSGD", "MissingInnerGradientError",
    "PerStepBatchNormalization", "PrototypicalNetwork", "SupportAdapter",
    "SupportHypernetwork", "SupportTargetHypernetwork",
    "inner_sgd", "inner_sgd_recompute", "make_conv4", "meta_batch_gradients",
    "meta_batch_loss", "msl_weights", "rules", "split_sequential",
]
