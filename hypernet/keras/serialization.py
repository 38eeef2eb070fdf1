"""``keras.models.load_model`` finds hypernet's models (and a model's ``hn.FusedAdam``)
after ``import hypernet`` alone.

Keras resolves a saved custom class by its registered name (``"hypernet>HyperModel"``)
in :func:`keras.saving.get_custom_objects`, which holds a class only once the module
defining it has run. ``import hypernet`` loads its names lazily and imports neither
Keras nor TensorFlow (the command line prints its first line before that import), so
the classes are registered as *deferred* entries instead: each resolves to the real
class (importing :mod:`hypernet.keras.models`, which then registers itself and replaces
them) the first time Keras deserialises one. They are put in Keras' registry when Keras
is imported: at once if it already is, else right after its first import (a
``sys.meta_path`` finder that wraps the loader of the top-level ``keras`` module and
removes itself once it has fired).

This module imports no TensorFlow, no Keras and no other hypernet module at import time.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading
from typing import Dict

# Registered name -> "module:attribute" of the class it resolves to.
SERIALIZABLES: Dict[str, str] = {
    "hypernet>HyperModel": "hypernet.keras.models:HyperModel",
    "hypernet>MetaModel": "hypernet.keras.models:MetaModel",
    "hypernet>FusedAdam": "hypernet.numerics.fused_adam:FusedAdam",
}


def resolve(registered_name: str):
  """The class registered as ``registered_name`` (importing its module)."""
  module, _, attribute = SERIALIZABLES[registered_name].partition(":")
  return getattr(importlib.import_module(module), attribute)


class _Deferred:
  """Stands in Keras' registry for a hypernet class until its module is imported:
  Keras calls ``from_config`` on what the registry holds (and checks only that it has
  one), so this resolves the real class there and delegates."""

  def __init__(self, registered_name: str):
    self.registered_name = registered_name
    self.__name__ = registered_name.partition(">")[2]

  def from_config(self, config, *args, **kwargs):
    return resolve(self.registered_name).from_config(config, *args, **kwargs)

  def __repr__(self):
    return f"<deferred {SERIALIZABLES[self.registered_name]}>"


def register_deferred() -> None:
  """Puts the deferred entries in Keras' registry (Keras must be imported); a name the
  real class already holds is left alone."""
  import keras  # pylint: disable=g-import-not-at-top
  registry = keras.saving.get_custom_objects()
  for name in SERIALIZABLES:
    registry.setdefault(name, _Deferred(name))


class _AfterLoader(importlib.abc.Loader):
  """The top-level ``keras`` module's own loader, then :func:`register_deferred`."""

  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    self._loader.exec_module(module)
    register_deferred()

  def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader.
    return getattr(self._loader, name)


class _KerasImportHook(importlib.abc.MetaPathFinder):
  """Finds the top-level ``keras`` module with the other finders and wraps its loader."""

  _lock = threading.Lock()

  def find_spec(self, fullname, path=None, target=None):
    if fullname != "keras":
      return None
    with self._lock:
      if self not in sys.meta_path:
        return None
      sys.meta_path.remove(self)  # Fires once; the search below skips it.
    spec = importlib.util.find_spec("keras")
    if spec is None or spec.loader is None:
      return None
    spec.loader = _AfterLoader(spec.loader)
    return spec


def install() -> None:
  """Registers the deferred classes now if Keras is imported, else right after it is
  (idempotent)."""
  if "keras" in sys.modules and hasattr(sys.modules["keras"], "saving"):
    register_deferred()
  elif not any(isinstance(f, _KerasImportHook) for f in sys.meta_path):
    sys.meta_path.insert(0, _KerasImportHook())
