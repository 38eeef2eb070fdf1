"""Keras-native training of hypernetworks and meta-learners: ``compile()`` / ``fit()``.

:class:`HyperModel` (a hypernetwork generating a target model's weights) and
:class:`MetaModel` (an inner-loop learner whose ``train_step`` is one meta-step) are
``keras.Model`` s: Keras callbacks, ``model.save()`` / ``keras.models.load_model()`` and
``tf.distribute`` scopes work as for any Keras model. A saved model loads in a new
process after ``import hypernet`` alone (:mod:`hypernet.keras.serialization`). Guide:
``docs/keras.md``.

The names load on first use, so importing this package imports no TensorFlow.
"""
import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:  # For type checkers and the API reference; loaded lazily below.
  from hypernet.keras.models import HyperModel, MetaModel, make_learner  # pylint: disable=g-import-not-at-top

__all__ = ["HyperModel", "MetaModel", "make_learner"]


def __getattr__(name: str):
  if name not in __all__:
    raise AttributeError(f"module 'hypernet.keras' has no attribute {name!r}")
  value = getattr(_importlib.import_module("hypernet.keras.models"), name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))
