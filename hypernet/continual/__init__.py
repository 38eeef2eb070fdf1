"""Continual learning: the regularisers that keep earlier tasks (von Oswald et al. 2020's
hypernetwork output regulariser; online EWC, Kirkpatrick et al. 2017, with its diagonal
Fisher). The continual task that runs them in sequence is
:class:`hypernet.training.continual_tasks.ContinualTask` (``config.task="continual"``)."""
from hypernet.continual.regularizers import (diagonal_fisher, ewc_penalty, flatten_weights,
                                             output_regularizer)

__all__ = ["diagonal_fisher", "ewc_penalty", "flatten_weights", "output_regularizer"]
