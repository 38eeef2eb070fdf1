"""Registries: name -> class or function, one per family of components, filled by a decorator."""
from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import inspect
import os
import pkgutil
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type

from hypernet.core import plugins


class ConfigError(ValueError):
  """A config field is unknown, missing, of the wrong type or has an impossible value (also
  ``hypernet.config_lib.ConfigError``: one class, so that an error a component's
  constructor raises while a config builds it reads as one line naming the field)."""


class Registry:
  """The classes (or functions) of one family (hypernetwork kinds, data sets, ...), by name.

  A built-in registers itself where it is defined::

      KINDS = Registry("hypernetwork kind", "config.hypernet.kind", "hypernet.hypernetworks")

      @KINDS.register("chunked")
      class ChunkedHypernetwork(Hypernetwork): ...

  The registry imports every module of ``package`` at its first look-up, so a new
  built-in is one file in that package. A user's own class is named
  ``"package.module:Class"`` wherever a registered name is accepted, or passed as the
  class itself.

  An entry may be a function (a data set's loader): it is "constructed" by calling it,
  and its keyword arguments are its fields.

  *Config fields*: an entry's constructor keyword arguments are the fields of its config
  group, by their own names (:meth:`config_fields`), except those the class lists in a
  class attribute ``config_exclude`` or ``register(name, exclude=...)`` names (arguments
  that do not come from a config: a target spec, a seed, a dtype, a name).
  :meth:`declared` reads the same fields from the source files with :mod:`ast`, without
  importing anything (the command line validates configs before TensorFlow is imported);
  every such argument needs a literal default (or none, when the config must give it).

  Args:
    family: what the entries are, for messages (``"hypernetwork kind"``).
    field: the config field that names an entry, for messages
      (``"config.hypernet.kind"``).
    package: the package whose modules define the built-ins (imported lazily).
    base: ``"module:Class"`` every entry must subclass (imported lazily), or ``None``
      (any callable: a class or a function).
    own: how a user names their own entry, for messages.
  """

  _declared = None  # {name: declared config fields}, read once (declared_fields)

  def __init__(self, family: str, field: str, package: str, base: Optional[str] = None,
               own: str = "your own class as 'package.module:Class'"):
    self.family, self.field, self.package, self.base = family, field, package, base
    self.own = own
    self._classes: Dict[str, type] = {}
    self._loaded = False

  def register(self, name: str, exclude: Tuple[str, ...] = ()) -> Callable[[Any], Any]:
    """Decorator: registers the class or function under ``name``; ``exclude``: its
    arguments that are not config fields (added to ``config_exclude``; a literal tuple,
    read from source by :meth:`declared`).

    Raises:
      ValueError: ``name`` is taken by another class or function.
    """
    def decorator(obj):
      known = self._classes.get(name)
      if known is not None and known.__qualname__ != obj.__qualname__:
        raise ValueError(f"{self.family} {name!r} is already registered to "
                         f"{known.__module__}.{known.__qualname__}.")
      self._classes[name] = obj
      obj.registered_name = name
      if exclude:
        obj.config_exclude = tuple(getattr(obj, "config_exclude", ())) + tuple(exclude)
      return obj
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

  def _unknown(self, spec, known) -> plugins.PluginError:
    close = difflib.get_close_matches(str(spec), list(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return plugins.PluginError(f"{self.field}={spec!r} is not a known {self.family}; known: "
                               f"{list(known)}, or {self.own}.{hint}")

  def get(self, spec) -> Type[Any]:
    """The entry for ``spec``: a registered name, ``"package.module:Class"``, or the class
    (function) itself.

    Raises:
      plugins.PluginError (a ValueError): an unknown name (lists the known ones), a
        plug-in that cannot be imported, a class that does not subclass ``base``, or (no
        ``base``) something not callable; each one line naming :attr:`field`.
    """
    if isinstance(spec, str) and not plugins.is_plugin(spec):
      self._load()
      if spec not in self._classes:
        raise self._unknown(spec, self.names())
      return self._classes[spec]
    obj = plugins.load_object(spec, self.field) if isinstance(spec, str) else spec
    base = self._base()
    if not callable(obj) or (base is not None and not (
        isinstance(obj, type) and issubclass(obj, base))):
      what = obj.__name__ if isinstance(obj, type) else type(obj).__name__
      must = f"a subclass of {base.__module__.split('.')[0]}.{base.__qualname__}" if base \
          else "callable"
      raise plugins.PluginError(f"{self.field}={spec!r}: {what} is not {must}.")
    return obj

  def name_of(self, cls: type) -> str:
    """The name that :meth:`get` maps back to ``cls``: its registered name, else
    ``"module:QualName"``."""
    self._load()
    for name, known in self._classes.items():
      if known is cls:
        return name
    return f"{cls.__module__}:{cls.__qualname__}"

  def fields(self, spec) -> Dict[str, Any]:
    """The constructor's (function's) keyword parameters ``{name: default}``
    (``inspect.Parameter.empty`` where required), following ``**kwargs`` into the base
    classes' constructors."""
    obj = self.get(spec)
    out: Dict[str, Any] = {}
    if not isinstance(obj, type):
      return {p.name: p.default for p in inspect.signature(obj).parameters.values()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for klass in obj.__mro__:
      init = klass.__init__  # Only a class's own __init__ (not one it inherits).
      if init is getattr(super(klass, klass), "__init__", None):
        continue
      params = list(inspect.signature(init).parameters.values())[1:]
      for p in params:
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
          out.setdefault(p.name, p.default)
      if not any(p.kind == p.VAR_KEYWORD for p in params):
        break
    return out

  def build(self, spec, group: Mapping[str, Any], /, **given):
    """Constructs ``spec``'s class (calls the function) with the fields of ``group`` its
    constructor names (by their own names; :meth:`config_fields`), then ``given`` (which
    win).

    Args:
      spec: see :meth:`get`.
      group: a config group (``config.hypernet``) or any mapping; fields the
        constructor does not name, or excludes, are left out (a flat group serves every
        kind).
      **given: arguments that do not come from the config (the target spec, a seed).

    Raises:
      plugins.PluginError: see :meth:`get`; a required constructor argument that neither
        ``group`` nor ``given`` holds (names the field to add).
    """
    cls = self.get(spec)
    names, fields = self.fields(cls), self.config_fields(cls)
    kwargs = {k: v for k, v in dict(group).items() if k in fields}
    kwargs.update(given)
    missing = [k for k, d in names.items() if d is inspect.Parameter.empty and k not in kwargs]
    if missing:
      group_name = self.field.rpartition(".")[0]
      raise plugins.PluginError(
          f"{self.field}={spec!r}: {cls.__name__} needs {missing}; add "
          + ", ".join(f"{group_name}.{k}" for k in missing) + " to the config.")
    return cls(**kwargs)

  def config_fields(self, spec) -> Dict[str, Any]:
    """:meth:`fields` without the class's ``config_exclude``: the config group's fields the
    constructor reads (``inspect.Parameter.empty`` where required)."""
    exclude = set(getattr(self.get(spec), "config_exclude", ()))
    return {k: v for k, v in self.fields(spec).items() if k not in exclude}

  # -- the TensorFlow-free side: the same fields, read from the source files ---------------
  def declared(self) -> Dict[str, Dict[str, Any]]:
    """``{name: {field: default}}`` of the built-ins, read from ``package``'s source with
    :mod:`ast` (nothing is imported): the classes and functions decorated
    ``@<anything>.register(name)`` and their :meth:`config_fields`
    (``inspect.Parameter.empty`` where required).

    Raises:
      ValueError: a config argument whose default is not a literal (names the class and
        the argument; give it a literal default or list it in ``config_exclude``).
    """
    if self._declared is None:
      defs, registered = _package_defs(self.package)
      self._declared = {name: _declared_fields(node, {**defs, **own})
                        for name, (node, own) in sorted(registered.items())}
    return self._declared

  def declared_names(self) -> Tuple[str, ...]:
    """:meth:`names` read from the source (TensorFlow-free), sorted."""
    return tuple(self.declared())

  def declared_defaults(self, overrides: Optional[Mapping[str, Any]] = None
                        ) -> Dict[str, Any]:
    """The union of every built-in's config fields that have a default (the first entry's,
    by name, where they differ), then ``overrides``: a config group's defaults."""
    out: Dict[str, Any] = {}
    for fields in self.declared().values():
      for field, default in fields.items():
        if default is not inspect.Parameter.empty:
          out.setdefault(field, default)
    out.update(overrides or {})
    return out

  def declared_fields(self, spec: str) -> Dict[str, Any]:
    """The config fields of ``spec``: a registered name's read from source without
    importing it (see :meth:`declared`); a plug-in ``"package.module:Class"`` is imported
    (the user's module may import TensorFlow) and its constructor read as
    :meth:`config_fields` does, so its own base classes, aliases and re-exports count.

    Raises:
      plugins.PluginError: an unknown name, a plug-in that cannot be imported or is not
        a subclass of ``base``; each one line naming :attr:`field`.
    """
    if not plugins.is_plugin(spec):
      known = self.declared()
      if spec not in known:
        raise self._unknown(spec, known)
      return known[spec]
    return self.config_fields(spec)

  def plugin_schema(self, spec: str, group: Mapping[str, Any]) -> Dict[str, Any]:
    """The schema entries (``{field: default}``, ``None`` for a required one) of the
    plug-in ``spec``'s own fields that the config group ``group`` sets, read from source
    (:meth:`declared_fields`): the group accepts them with the type of their default.

    Raises:
      plugins.PluginError: see :meth:`declared_fields`; a required field that ``group``
        lacks (names it and where to add it).
    """
    group_name = self.field.rpartition(".")[0]
    out = {}
    for key, default in self.declared_fields(spec).items():
      if key in group:
        out[key] = None if default is inspect.Parameter.empty else default
      elif default is inspect.Parameter.empty:
        raise plugins.PluginError(
            f"{group_name}.{key} is missing: {spec} needs it (a constructor argument "
            f"without a default); add it to {group_name}.")
    return out


def _package_defs(package: str):
  """``({name: ClassDef or FunctionDef}, {registered name: (its def, its module's defs)})``
  over ``package``'s modules (not imported: ``find_spec`` imports the parent packages
  only); a registered class's bases are looked up in its own module first (two modules
  may define classes of the same name)."""
  spec = importlib.util.find_spec(package)
  folder = list(spec.submodule_search_locations)[0]
  defs, registered = {}, {}
  for filename in sorted(os.listdir(folder)):
    if filename.endswith(".py"):
      own = _module_defs(os.path.join(folder, filename))
      defs.update(own)
      for node in own.values():
        for name in _registrations(node):
          registered[name] = (node, own)
  return defs, registered


def _module_defs(path: str) -> Dict[str, ast.AST]:
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  return {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}


def _registrations(node) -> Dict[str, Tuple[str, ...]]:
  """``{name: exclude}`` of the ``@<anything>.register("name", exclude=(...))`` decorators
  on a class or function."""
  out = {}
  for d in node.decorator_list:
    if (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
        and d.func.attr == "register" and d.args and isinstance(d.args[0], ast.Constant)
        and isinstance(d.args[0].value, str)):
      out[d.args[0].value] = tuple(next(
          (ast.literal_eval(k.value) for k in d.keywords if k.arg == "exclude"), ()))
  return out


def _bases(node, defs) -> List[ast.ClassDef]:
  """The base classes of ``node`` found in ``defs`` (by their last name: ``base.X``)."""
  names = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", None)
           for b in getattr(node, "bases", ())]
  return [defs[n] for n in names if n in defs and defs[n] is not node]


def _class_attribute(node, name: str, defs):
  """A class attribute's literal value, looked up through the bases like Python does."""
  for stmt in node.body if isinstance(node, ast.ClassDef) else ():
    if isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
      return ast.literal_eval(stmt.value)
  for base in _bases(node, defs):
    value = _class_attribute(base, name, defs)
    if value is not None:
      return value
  return None


def _declared_fields(node, defs) -> Dict[str, Any]:
  """The static twin of :meth:`Registry.config_fields` for one class or function."""
  exclude = set(_class_attribute(node, "config_exclude", defs) or ())
  for names in _registrations(node).values():
    exclude.update(names)
  out: Dict[str, Any] = {}
  chain = [node]
  while chain:
    klass = chain.pop(0)
    init = klass if isinstance(klass, ast.FunctionDef) else next(
        (s for s in klass.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"),
        None)
    if init is None:   # Inherits its constructor.
      chain = _bases(klass, defs)[:1]
      continue
    a = init.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    pairs = list(zip(positional, defaults))[len(a.posonlyargs):]
    if init is not klass:   # A method: skip self.
      pairs = pairs[1:]
    for arg, default in pairs + list(zip(a.kwonlyargs, a.kw_defaults)):
      if arg.arg in exclude or arg.arg in out:
        continue
      if default is None:
        out[arg.arg] = inspect.Parameter.empty
        continue
      try:
        out[arg.arg] = ast.literal_eval(default)
      except ValueError:
        raise ValueError(f"{klass.name} argument {arg.arg!r}: its default is not a "
                         "literal, so the config schema cannot read it without importing "
                         "the module; give it a literal default or list it in "
                         "config_exclude.") from None
    chain = _bases(klass, defs)[:1] if a.kwarg is not None else []
  return out
