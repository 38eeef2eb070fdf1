"""Registries: name -> class, one per family of components, filled by a decorator."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Type

from hypernet.core import plugins


class Registry:
  """The classes of one family (hypernetwork kinds, learners, ...), by name.

  A built-in registers itself where it is defined::

      KINDS = Registry("hypernetwork kind", "config.hypernet.kind", "hypernet.hypernetworks")

      @KINDS.register("chunked")
      class ChunkedHypernetwork(Hypernetwork): ...

  The registry imports every module of ``package`` at its first look-up, so a new
  built-in is one file in that package. A user's own class is named
  ``"package.module:Class"`` wherever a registered name is accepted, or passed as the
  class itself.

  Args:
    family: what the entries are, for messages (``"hypernetwork kind"``).
    field: the config field that names an entry, for messages
      (``"config.hypernet.kind"``).
    package: the package whose modules define the built-ins (imported lazily).
    base: ``"module:Class"`` every entry must subclass (imported lazily), or ``None``.
  """

  def __init__(self, family: str, field: str, package: str, base: Optional[str] = None):
    self.family, self.field, self.package, self.base = family, field, package, base
    self._classes: Dict[str, type] = {}
    self._loaded = False

  def register(self, name: str) -> Callable[[type], type]:
    """Class decorator: registers the class under ``name``.

    Raises:
      ValueError: ``name`` is taken by another class.
    """
    def decorator(cls: type) -> type:
      known = self._classes.get(name)
      if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"{self.family} {name!r} is already registered to "
                         f"{known.__module__}.{known.__qualname__}.")
      self._classes[name] = cls
      cls.registered_name = name
      return cls
    return decorator

  def _load(self) -> None:
    if self._loaded:
      return
    self._loaded = True
    package = importlib.import_module(self.package)
    for info in pkgutil.iter_modules(package.__path__):
      importlib.import_module(f"{self.package}.{info.name}")

  def names(self) -> Tuple[str, ...]:
    """The registered names, sorted."""
    self._load()
    return tuple(sorted(self._classes))

  def items(self):
    """``(name, class)`` pairs, sorted by name."""
    self._load()
    return sorted(self._classes.items())

  def _base(self) -> Optional[type]:
    return plugins.load_object(self.base, "base") if self.base else None

  def get(self, spec) -> Type[Any]:
    """The class for ``spec``: a registered name, ``"package.module:Class"``, or a class.

    Raises:
      plugins.PluginError (a ValueError): an unknown name (lists the known ones), a
        plug-in that cannot be imported, or a class that does not subclass ``base``;
        each one line naming :attr:`field`.
    """
    if isinstance(spec, str) and not plugins.is_plugin(spec):
      self._load()
      if spec not in self._classes:
        raise plugins.PluginError(
            f"{self.field}={spec!r} is not a known {self.family}; known: "
            f"{list(self.names())}, or your own class as 'package.module:Class'.")
      return self._classes[spec]
    cls = plugins.load_object(spec, self.field) if isinstance(spec, str) else spec
    base = self._base()
    if not isinstance(cls, type) or (base is not None and not issubclass(cls, base)):
      what = cls.__name__ if isinstance(cls, type) else type(cls).__name__
      must = f"a subclass of {base.__module__.split('.')[0]}.{base.__qualname__}" if base \
          else "a class"
      raise plugins.PluginError(f"{self.field}={spec!r}: {what} is not {must}.")
    return cls

  def name_of(self, cls: type) -> str:
    """The name that :meth:`get` maps back to ``cls``: its registered name, else
    ``"module:QualName"``."""
    self._load()
    for name, known in self._classes.items():
      if known is cls:
        return name
    return f"{cls.__module__}:{cls.__qualname__}"

  def fields(self, spec) -> Dict[str, Any]:
    """The constructor's keyword parameters ``{name: default}`` (``inspect.Parameter.empty``
    where required), following ``**kwargs`` into the base classes' constructors."""
    out: Dict[str, Any] = {}
    for klass in self.get(spec).__mro__:
      init = klass.__dict__.get("__init__")
      if init is None:
        continue
      params = list(inspect.signature(init).parameters.values())[1:]
      for p in params:
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
          out.setdefault(p.name, p.default)
      if not any(p.kind == p.VAR_KEYWORD for p in params):
        break
    return out

  def build(self, spec, group: Mapping[str, Any], /, **given):
    """Constructs ``spec``'s class with the fields of ``group`` its constructor names (by
    their own names), then ``given`` (which win).

    Args:
      spec: see :meth:`get`.
      group: a config group (``config.hypernet``) or any mapping; fields the
        constructor does not name are left out (a flat group serves every kind).
      **given: arguments that do not come from the config (the target spec, a seed).

    Raises:
      plugins.PluginError: see :meth:`get`; a required constructor argument that neither
        ``group`` nor ``given`` holds (names the field to add).
    """
    cls = self.get(spec)
    names = self.fields(cls)
    kwargs = {k: v for k, v in dict(group).items() if k in names}
    kwargs.update(given)
    missing = [k for k, d in names.items() if d is inspect.Parameter.empty and k not in kwargs]
    if missing:
      group_name = self.field.rpartition(".")[0]
      raise plugins.PluginError(
          f"{self.field}={spec!r}: {cls.__name__} needs {missing}; add "
          + ", ".join(f"{group_name}.{k}" for k in missing) + " to the config.")
    return cls(**kwargs)
