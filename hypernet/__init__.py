"""hypernet: hypernetworks and meta-learners for TensorFlow 2 / Keras 3.

The core idea: a *weight source* (identity, hypernetwork or inner-loop learner) produces
the weights of a *target network* as tensors, the target runs on them through a
functional call (:func:`hypernet.functional.functional_call`), and the outer optimiser
differentiates through everything with ``tf.GradientTape``.
"""
import os as _os

# Keras 3 must run on TensorFlow here: the whole package is built on tf.GradientTape.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"
