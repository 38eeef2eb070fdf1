"""Continual learning: the regularisers that keep earlier tasks (von Oswald et al. 2020's
hypernetwork output regulariser; online EWC, Kirkpatrick et al. 2017, with its diagonal
Fisher) and CL3's task inference from per-task input densities (probabilistic PCA,
Tipping & Bishop 1999). The continual task that runs them in sequence is
:class:`hypernet.tasks.continual_learning.ContinualTask` (``config.task="continual"``)."""
from hypernet.continual.regularizers import (diagonal_fisher, ewc_penalty, flatten_weights,
                                             output_regularizer)
from hypernet.continual.task_inference import ppca_fit, ppca_log_likelihood

__all__ = ["diagonal_fisher", "ewc_penalty", "flatten_weights", "output_regularizer",
           "ppca_fit", "ppca_log_likelihood"]
