"""User code named in a config: ``"package.module:attribute"`` plug-ins.

``config.model.name``, ``config.data.name`` and ``config.task`` may name a function or
class of the user's own module instead of a built-in (``"my_lab.nets:make_resnet"``);
the module is imported from ``sys.path`` (the working directory, ``PYTHONPATH``, an
installed package). What is wrong with it is one line naming the config field.
"""
from __future__ import annotations

import difflib
import importlib
import inspect


class PluginError(ValueError):
  """A plug-in named in the config cannot be imported or returns the wrong thing."""


def is_plugin(name) -> bool:
  """Whether a config value names user code: ``"package.module:attribute"``."""
  return isinstance(name, str) and ":" in name and not name.startswith("tfds:")


def load_object(spec: str, field: str):
  """Imports ``"package.module:attribute"`` (the attribute may be dotted: ``"m:Cls.make"``).

  Args:
    spec: the config value.
    field: the config field that holds it, for messages (``"config.model.name"``).

  Returns:
    The attribute (a function or class).

  Raises:
    PluginError (a ValueError): a malformed spec, a module that fails to import (with its
      own error), or a missing attribute; each one line naming ``field``.
  """
  module_name, _, attribute = str(spec).partition(":")
  if not module_name or not attribute:
    raise PluginError(f"{field}={spec!r}: write a plug-in as 'package.module:attribute', e.g. "
                      "'my_models:make_model'.")
  try:
    module = importlib.import_module(module_name)
  except Exception as e:  # pylint: disable=broad-except
    missing = isinstance(e, ModuleNotFoundError) and e.name is not None and (
        module_name == e.name or module_name.startswith(e.name + "."))
    fix = ("put it on PYTHONPATH or install it" if missing else
           "the module was found, but importing it failed: fix that error")
    raise PluginError(f"{field}={spec!r}: cannot import module {module_name!r} "
                      f"({type(e).__name__}: {e}); {fix}.") from e
  value = module
  for part in attribute.split("."):
    if not hasattr(value, part):
      near = difflib.get_close_matches(part, [n for n in dir(value) if not n.startswith("_")],
                                       n=1)
      raise PluginError(f"{field}={spec!r}: module {module_name!r} has no attribute "
                        f"{attribute!r}" + (f"; did you mean {near[0]!r}?" if near else "."))
    value = getattr(value, part)
  if not callable(value):
    raise PluginError(f"{field}={spec!r}: {attribute!r} is a {type(value).__name__}, not a "
                      "function or class.")
  return value


def call(obj, spec: str, field: str, expected: str, *args, **kwargs):
  """Calls the plug-in ``obj`` (loaded from ``spec``) with ``args`` / ``kwargs``, first
  checking that its signature accepts them.

  Args:
    obj: the loaded function or class.
    spec: the config value, for messages.
    field: the config field that holds it (``"config.model.name"``).
    expected: how hypernet calls it, for messages (``"make(input_shape, num_classes)"``).
    *args, **kwargs: the arguments.

  Returns:
    What ``obj`` returns.

  Raises:
    PluginError (a ValueError): a signature that cannot take the arguments: one line
      naming ``field``, the plug-in's signature and the call hypernet makes. Errors raised
      inside the plug-in itself propagate unchanged (they are the user's code's).
  """
  try:
    signature = inspect.signature(obj)
  except (TypeError, ValueError):  # A builtin without a signature: just call it.
    return obj(*args, **kwargs)
  try:
    signature.bind(*args, **kwargs)
  except TypeError as e:
    name = getattr(obj, "__qualname__", type(obj).__name__)
    raise PluginError(f"{field}={spec!r}: {name}{signature} cannot be called as {expected} "
                      f"({e}).") from e
  return obj(*args, **kwargs)
