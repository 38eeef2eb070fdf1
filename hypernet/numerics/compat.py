"""Every private TensorFlow / Keras hook hypernet still relies on, in one place.

Each hook checks itself at first use with a canary that computes a known value (run once
per process in a thread of its own, :func:`canary_report`) and falls back to exact public
code or raises one clear line. Also here: the per-thread switches (:class:`Switch`,
counted where entered: eagerly or in the ``tf.function`` being traced) and
:func:`install_dispatcher`, through which the other numerics modules change what a Keras
layer computes inside hypernet's calls. ``docs/numerics.md`` ("The switches");
``ARCHITECTURE.md`` ("Private dependencies") lists each hook and its canary."""
from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import os
import sys
import tempfile
import threading
from typing import Callable, Dict, Iterator, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from hypernet.numerics import versions

versions.notice_once(tf.__version__, keras.__version__)  # Once, outside the tested range.


class UnsupportedVersionError(RuntimeError):
  """A private hook hypernet needs is missing or no longer computes what it must.

  ``detail``: what changed, without the advice to install a supported version (for the
  callers that only lose speed and say so instead)."""

  def __init__(self, message: str, detail: Optional[str] = None):
    super().__init__(message)
    self.detail = detail if detail is not None else message


ADVICE = "install a Keras version hypernet supports (README, 'Supported versions')."


def unsupported(detail: str) -> UnsupportedVersionError:
  """An :class:`UnsupportedVersionError` for ``detail`` (one line, what changed) with the
  advice to install a supported Keras appended."""
  return UnsupportedVersionError(f"{detail}; {ADVICE}", detail)


# ---------------------------------------------------------------------------------------
# Canaries: each runs once per process, in a thread of its own.
# ---------------------------------------------------------------------------------------

_canary_lock = threading.Lock()
_canary_results: Dict[str, Optional[str]] = {}  # name -> None (passed) or the reason
_canary_threads = set()  # idents of threads running a canary (they skip the others)
_warned = set()


def warn_once(key: str, message: str, *args) -> None:
  """Logs ``message % args`` as a warning the first time ``key`` is seen."""
  if key not in _warned:
    _warned.add(key)
    logging.warning("hypernet: " + message, *args)


# Not converted by AutoGraph when a traced function reaches it: TensorFlow 2.22.0rc0's
# AutoGraph calls the converted check with an extra argument (a TypeError in every
# second-order meta-step that ran a canary inside its trace).
@tf.autograph.experimental.do_not_convert
def run_canary(name: str, check: Callable[[], Optional[str]]) -> Optional[str]:
  """Runs ``check()`` once per process in a fresh thread; returns ``None`` if it passed,
  else the reason (a string). ``check`` returns ``None`` or a reason, or raises (the
  exception's first line is the reason). Inside a canary's own thread every canary
  counts as passed (a canary uses the hooks it checks)."""
  if name in _canary_results:  # the fast path: a dict read
    return _canary_results[name]
  if threading.get_ident() in _canary_threads:
    return None
  with _canary_lock:
    if name in _canary_results:
      return _canary_results[name]
    outcome = []

    def target():
      _canary_threads.add(threading.get_ident())
      try:
        outcome.append(check())
      except Exception as e:  # pylint: disable=broad-except
        text = str(e).strip().splitlines()
        outcome.append(f"{type(e).__name__}: {text[0] if text else ''}")
      finally:
        _canary_threads.discard(threading.get_ident())

    thread = threading.Thread(target=target, name=f"hypernet-canary-{name}", daemon=True)
    thread.start()
    thread.join()
    _canary_results[name] = outcome[0] if outcome else "the canary thread died"
    return _canary_results[name]


def canary_report() -> Dict[str, Optional[str]]:
  """``{canary name: None if it passed, else why not}`` for the canaries run so far."""
  with _canary_lock:
    return dict(_canary_results)


def reset_canary(name: str) -> None:
  """Forgets a canary's outcome, so that the next use runs it again (for tests)."""
  with _canary_lock:
    _canary_results.pop(name, None)


# ---------------------------------------------------------------------------------------
# AutoGraph's conversion rules: hypernet's own code is traced as written.
# ---------------------------------------------------------------------------------------

def _autograph_rules():
  try:
    from tensorflow.python.autograph.core import config, config_lib  # pylint: disable=g-import-not-at-top
    return config, config_lib
  except ImportError:
    return None


def exempt_from_autograph(package: str = "hypernet") -> Optional[str]:
  """Adds ``package`` to AutoGraph's ``CONVERSION_RULES`` as not converted, as TensorFlow
  lists ``keras`` and ``tensorflow`` there: a user's ``tf.function`` that calls hypernet
  (``functional_call``, a learner's ``adapt``, ``meta_batch_loss``, ...) traces
  hypernet's code as written instead of converting each function it reaches. hypernet's
  code needs no conversion (the train loop traces it with ``autograph=False``); the
  first call of a user's step is 1.7-2.3x faster (``benchmarks/user_trace.py``).
  Functions a user hands to hypernet (a ``loss_fn``, a ``task_fn``) are then traced as
  written too, as in ``Model.fit`` and in the train loop: branch on tensors with
  ``tf.cond``, or wrap the function in ``tf.function`` (which converts it). There is no
  public way to exempt a package (``tf.autograph.experimental.do_not_convert`` marks one
  function).

  Self-check: after the change, the rules must answer "do not convert" for this module
  (AutoGraph follows the first rule that matches). Returns ``None`` when the rule is in
  place, else the reason; a missing rule costs only tracing time (AutoGraph converts
  hypernet's functions as before, same values), and a warning says so.
  """
  found = _autograph_rules()
  reason = "tensorflow.python.autograph.core.config(_lib) is missing"
  if found is not None:
    config, config_lib = found
    try:
      rules = tuple(config.CONVERSION_RULES)
      if not any(isinstance(r, config_lib.DoNotConvert) and r.matches(package)
                 for r in rules):
        config.CONVERSION_RULES = (config_lib.DoNotConvert(package),) + rules
      # AutoGraph follows the first rule that names a module's action.
      module = sys.modules[__name__]
      action = next((a for a in (r.get_action(module) for r in config.CONVERSION_RULES)
                     if a != config_lib.Action.NONE), config_lib.Action.NONE)
      if action == config_lib.Action.DO_NOT_CONVERT:
        return None
      reason = f"the rules answer {action} for {__name__}"
    except (AttributeError, TypeError) as e:
      reason = f"{type(e).__name__}: {e}"
  warn_once("autograph_rules", "cannot exempt %s from AutoGraph in TensorFlow %s (%s): "
            "traces convert its functions (slower traces, same values).", package,
            tf.__version__, reason)
  return reason


exempt_from_autograph()


# ---------------------------------------------------------------------------------------
# Keras' backend modules, across Keras' layouts.
# ---------------------------------------------------------------------------------------

# Where Keras keeps its TensorFlow backend modules: since 3.16 under ``ops``.
_BACKEND_PATHS = ("keras.src.backend.{}", "keras.src.backend.tensorflow.ops.{}",
                  "keras.src.backend.tensorflow.{}")


def keras_backend(name: str, function: str):
  """Keras' TensorFlow backend module ``name`` (``"nn"``, ``"numpy"``) as ``keras.ops``
  reaches it (``keras.src.backend.<name>``), else as Keras >= 3.16 (``...tensorflow.ops``)
  or <= 3.15 (``...tensorflow``) lays it out; it must have ``function``.

  Raises:
    UnsupportedVersionError: no layout has it (one line, with the Keras version).
  """
  if keras.backend.backend() != "tensorflow":
    raise UnsupportedVersionError(
        f"hypernet needs Keras' TensorFlow backend; KERAS_BACKEND is "
        f"{keras.backend.backend()!r}: set KERAS_BACKEND=tensorflow before importing keras.")
  for pattern in _BACKEND_PATHS:
    path = pattern.format(name)
    head, _, attr = path.rpartition(".")
    try:
      module = getattr(importlib.import_module(head), attr, None)
      if not inspect.ismodule(module):
        module = importlib.import_module(path)
    except ImportError:
      continue
    if callable(getattr(module, function, None)):
      return module
  raise unsupported(
      f"Keras {keras.__version__} has no TensorFlow backend function {name}.{function} "
      f"(looked in {', '.join(p.format(name) for p in _BACKEND_PATHS)})")


def defining_module(fn):
  """The module whose globals ``fn`` reads (where a function it calls by name can be
  replaced)."""
  module = sys.modules.get(getattr(fn, "__module__", None) or "")
  namespace = getattr(fn, "__globals__", None)
  if module is not None and (namespace is None or vars(module) is namespace):
    return module
  for candidate in list(sys.modules.values()):  # registered under another name
    if candidate is not None and getattr(candidate, "__dict__", None) is namespace:
      return candidate
  raise unsupported(f"Keras {keras.__version__}: cannot find the module of {fn!r}")


# ---------------------------------------------------------------------------------------
# Per-thread switches on Keras methods.
# ---------------------------------------------------------------------------------------

def _graph_root_walk():
  """The outermost ``tf.function`` graph being built (``None`` eagerly)."""
  if tf.executing_eagerly():
    return None
  graph = tf.compat.v1.get_default_graph()
  while True:
    outer = getattr(graph, "outer_graph", None)  # FuncGraph: the graph it is built in
    if outer is None or not hasattr(outer, "outer_graph"):
      return graph
    graph = outer


def _trace_root_canary() -> Optional[str]:
  seen = {}

  @tf.function(autograph=False)
  def inner(x):
    seen["inner"] = _graph_root_walk()
    return x + 1.0

  @tf.function(autograph=False)
  def outer(x):
    seen["outer"] = _graph_root_walk()
    branch = tf.cond(x > 0, lambda: seen.__setitem__("cond", _graph_root_walk()) or x,
                     lambda: x)
    return inner(branch)

  @tf.function(autograph=False)
  def other(x):
    seen["other"] = _graph_root_walk()
    return x

  outer(tf.constant(1.0))
  other(tf.constant(1.0))
  if _graph_root_walk() is not None:
    return "an eager context is reported as a trace"
  if not (seen["outer"] is seen["cond"] is seen["inner"]):
    return "a tf.cond branch or a nested tf.function is not traced inside its caller's graph"
  if seen["other"] is seen["outer"]:
    return "two tf.functions report the same graph"
  return None


def trace_root():
  """The graph a switch entry belongs to: ``None`` eagerly, else the outermost
  ``tf.function`` graph being built (its ``tf.cond`` / ``tf.while_loop`` bodies and the
  functions traced inside it belong to it too).

  Private: ``FuncGraph.outer_graph``. Canary: eagerly ``None``; a ``tf.cond`` branch and
  a nested ``tf.function`` inside a traced function report its graph; another function
  another graph. On failure: one shared root for everything (switches entered outside a
  trace reach into it, and a trace then depends on them: a warning says so).
  """
  if run_canary("trace_root", _trace_root_canary) is not None:
    warn_once("trace_root", "switches cannot tell traces apart on TensorFlow %s (%s); a "
              "tf.function traced inside a switch keeps its state.", tf.__version__,
              _canary_results["trace_root"])
    return None
  return _graph_root_walk()


class Switch:
  """A per-thread, re-entrant on/off switch that counts only where it is entered.

  ``with switch():`` adds one to this thread's count for the current :func:`trace_root`
  (eager code, or the ``tf.function`` being traced); :meth:`on` is true while that count
  is positive. An entry made eagerly around a call of a ``tf.function`` does not reach
  the function's trace (tracing warns once if it would have): enter the switch inside
  the traced function.
  """

  def __init__(self, name: str, eager_reaches_traces: bool = False):
    """``eager_reaches_traces``: entries made eagerly count inside traces too, for a
    switch whose "on" is right in every trace (exact moments: the same values and first
    derivatives, exact second ones), so that a trace made under it is never wrong."""
    self.name = name
    self.eager_reaches_traces = eager_reaches_traces
    self._local = threading.local()

  def _counts(self) -> Dict[int, int]:
    counts = getattr(self._local, "counts", None)
    if counts is None:
      counts = self._local.counts = {}
    return counts

  @contextlib.contextmanager
  def __call__(self) -> Iterator[None]:
    key = id(trace_root())
    counts = self._counts()
    counts[key] = counts.get(key, 0) + 1
    try:
      yield
    finally:
      counts[key] -= 1
      if not counts[key]:
        del counts[key]

  def count(self) -> int:
    """This thread's entries in the current trace (or eagerly)."""
    counts = self._counts()
    if not counts:
      return 0
    root = trace_root()
    here = counts.get(id(root), 0)
    if root is not None and self.eager_reaches_traces:
      return here + counts.get(id(None), 0)
    if not here and root is not None and counts.get(id(None), 0):
      warn_once(f"switch:{self.name}", "%s was entered outside the tf.function being "
                "traced, so it does not apply inside it (a trace is reused whatever the "
                "switches around its call): enter it inside the traced function.",
                self.name)
    return here

  def count_all(self) -> int:
    """This thread's entries, wherever they were made."""
    return sum(self._counts().values())

  def on(self) -> bool:
    """Whether the switch is on in this thread, here (eagerly or in this trace)."""
    return self.count() > 0


_install_lock = threading.Lock()
_installed: Dict[tuple, Callable] = {}  # (id(owner), name) -> the original


def _qualified_name(owner, name: str) -> str:
  """``package.module.name`` for a module owner, ``package.module.Class.name`` for a
  class."""
  if inspect.ismodule(owner):
    return f"{owner.__name__}.{name}"
  module = getattr(owner, "__module__", None)
  qualified = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", repr(owner))
  return f"{module}.{qualified}.{name}" if module else f"{qualified}.{name}"


def install_dispatcher(owner, name: str, dispatcher: Callable,
                       parameters: Optional[Sequence[str]] = None) -> Callable:
  """Puts ``dispatcher`` in place of ``owner.<name>`` (a Keras class's method or backend
  function) once per process, thread-safely, and returns what was there before (the
  original, which the dispatcher calls when its switch is off).

  Installed once: when another library wraps the same attribute later, its wrapper
  calls this dispatcher, which calls the original saved here, and nothing is wrapped
  twice (no recursion). When someone puts the saved original back, the dispatcher is put
  in place again.

  Args:
    owner: the class or module.
    name: the attribute.
    dispatcher: the replacement, with the original's signature.
    parameters: the original's parameter names, checked before installing.

  Raises:
    UnsupportedVersionError: ``owner`` has no ``name``, or its parameters differ from
      ``parameters`` (the Keras method changed: the dispatcher would mis-call it).
  """
  with _install_lock:
    key = (id(owner), name)
    current = getattr(owner, name, None)
    if key in _installed:
      original = _installed[key]
      if current is original:  # put back (e.g. by a test's monkeypatch): reinstall
        setattr(owner, name, dispatcher)
      return original
    where = _qualified_name(owner, name)
    if current is None:
      raise unsupported(f"Keras {keras.__version__} has no {where}, which hypernet "
                        "replaces inside its calls")
    if parameters is not None:
      found = inspect.signature(current).parameters.values()
      got = [p.name for p in found]
      variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in found)
      if got != list(parameters) and not variadic:  # (a wrapper's *args: cannot tell)
        raise unsupported(f"Keras {keras.__version__}'s {where} takes ({', '.join(got)}), "
                          f"not ({', '.join(parameters)}) as hypernet expects")
    dispatcher.original = current
    setattr(owner, name, dispatcher)
    _installed[key] = current
    return current


def normalize_hook(dispatcher: Callable) -> Callable:
  """Puts ``dispatcher`` in place of the private ``_normalize`` that ``keras.ops.normalize``
  (``UnitNormalization``) calls by name in its own module, once per process; returns
  Keras' original.

  Private: ``keras.src.ops.nn._normalize``, parameters ``(x, axis, order, epsilon)``
  (checked before installing: a new parameter would make every ``keras.ops.normalize``
  call of the process fail). Canary: :func:`hypernet.numerics.second_order`'s
  ``"normalize"`` (the dispatcher is reached and keeps Keras' values).

  Raises:
    UnsupportedVersionError: ``keras.ops.normalize``'s module has no ``_normalize``, or
      its parameters differ (nothing is installed).
  """
  module = defining_module(keras.ops.normalize)  # keras.ops' own module
  return install_dispatcher(module, "_normalize", dispatcher,
                            ["x", "axis", "order", "epsilon"])


# ---------------------------------------------------------------------------------------
# TensorFlow's gradient registry (second-order learners refuse non-differentiable ops).
# ---------------------------------------------------------------------------------------

def _gradient_lookup():
  try:
    from tensorflow.python.framework import ops as tf_ops  # pylint: disable=g-import-not-at-top
    return tf_ops.get_gradient_function
  except (ImportError, AttributeError):
    return None


def _lookup_missing(lookup, op) -> bool:
  try:
    return lookup(op) is None
  except LookupError:
    return True


def _gradient_lookup_canary() -> Optional[str]:
  lookup = _gradient_lookup()
  if lookup is None:
    return "tensorflow.python.framework.ops.get_gradient_function is missing"
  graph = tf.Graph()
  with graph.as_default():
    a = tf.constant([[1.0]])
    product = tf.matmul(a, a)
    resize_grad = tf.raw_ops.ResizeBilinearGrad(grads=tf.zeros([1, 2, 2, 1]),
                                                original_image=tf.zeros([1, 1, 1, 1]))
  if _lookup_missing(lookup, product.op) or not _lookup_missing(lookup, resize_grad.op):
    return ("MatMul / ResizeBilinearGrad are not reported as differentiable / not "
            "differentiable")
  return None


def gradient_function_missing(op) -> Optional[bool]:
  """Whether TensorFlow has no gradient function for the graph op ``op`` (registered as
  not differentiable, e.g. ``ResizeBilinearGrad``, or not registered at all), through
  TensorFlow's private ``ops.get_gradient_function`` (no public lookup exists; it also
  honours ``tf.custom_gradient``'s per-op overrides). ``None`` when the lookup is missing
  or its canary fails (MatMul has a gradient, ResizeBilinearGrad none): the caller then
  cannot check, and a one-time warning says so."""
  reason = run_canary("gradient_lookup", _gradient_lookup_canary)
  if reason is not None:
    warn_once("gradient_lookup", "cannot ask TensorFlow %s which ops have gradients (%s); "
              "second-order learners cannot refuse a non-differentiable op in a target "
              "(a first-order term could be missing silently).", tf.__version__, reason)
    return None
  return _lookup_missing(_gradient_lookup(), op)


# ---------------------------------------------------------------------------------------
# TensorFlow's tape queries.
# ---------------------------------------------------------------------------------------

def _tape_query():
  try:
    from tensorflow.python import pywrap_tfe  # pylint: disable=g-import-not-at-top
    return pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes
  except (ImportError, AttributeError):
    return None


def _tape_query_canary() -> Optional[str]:
  query = _tape_query()
  if query is None:
    return "tensorflow.python.pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes is missing"
  x = tf.constant(1.0)
  with tf.GradientTape() as t1:
    t1.watch(x)
    one = query([x])
    with tf.GradientTape() as t2:
      t2.watch(x)
      two = query([x])
  zero = query([x])
  if (zero, one, two) != (0, 1, 2):
    return f"no tape / one tape / nested tapes give {zero}/{one}/{two}, not 0/1/2"
  return None


def possible_gradient_types() -> Optional[Callable]:
  """TensorFlow's ``TFE_Py_TapeSetPossibleGradientTypes`` (0: no tape records the
  tensors, 1: first order only, 2: higher order possible), or ``None`` when it is
  missing or its canary fails (no tape / one / nested: 0 / 1 / 2): then the caller must
  assume higher order (exact moments always)."""
  reason = run_canary("tape_query", _tape_query_canary)
  if reason is not None:
    warn_once("tape_query", "cannot ask TensorFlow %s how often a tape may differentiate "
              "(%s); normalisation moments stay exact everywhere (slower first-order "
              "steps, same values).", tf.__version__, reason)
    return None
  return _tape_query()


def _record_query():
  try:
    from tensorflow.python.eager import record  # pylint: disable=g-import-not-at-top
    return record.should_record_backprop
  except (ImportError, AttributeError):
    return None


def _record_query_canary() -> Optional[str]:
  query = _record_query()
  if query is None:
    return "tensorflow.python.eager.record.should_record_backprop is missing"
  x = tf.constant(1.0)
  before = bool(query([x]))
  with tf.GradientTape() as tape:
    tape.watch(x)
    inside = bool(query([x]))
  if (before, inside) != (False, True):
    return f"outside / inside a tape give {before}/{inside}, not False/True"
  return None


def should_record_backprop() -> Optional[Callable]:
  """TensorFlow's ``record.should_record_backprop`` (whether an active tape records
  operations on the given tensors), or ``None`` when missing or its canary fails
  (outside / inside a tape: False / True): a warning then says what goes unchecked."""
  reason = run_canary("record_query", _record_query_canary)
  if reason is not None:
    warn_once("record_query", "cannot ask TensorFlow %s whether a tape records a tensor "
              "(%s): second-order learners cannot check that the outer tape sees their "
              "inner gradients.", tf.__version__, reason)
    return None
  return _record_query()


def pfor_module():
  """``tensorflow.python.ops.parallel_for.pfor`` (the converters of
  ``tf.vectorized_map``), or ``None`` when TensorFlow has none there."""
  try:
    from tensorflow.python.ops.parallel_for import pfor  # pylint: disable=g-import-not-at-top
    return pfor
  except ImportError:
    return None


def pfor_converter_registry() -> Optional[dict]:
  """pfor's converter registry ``{op type: converter(pfor_input)}`` (private:
  ``pfor._pfor_converter_registry``), or ``None`` when this TensorFlow lacks it, its
  ``Conv2D`` / ``DepthwiseConv2dNative`` entries, ``wrap`` or ``_create_op``. Canary:
  :mod:`hypernet.hypernetworks.batched`'s ``"pfor_converters"`` (a grouped convolution
  through the patched converter against a loop); on failure kernels batch by im2col."""
  pfor = pfor_module()
  registry = getattr(pfor, "_pfor_converter_registry", None)  # pylint: disable=protected-access
  if not isinstance(registry, dict) or not callable(getattr(pfor, "wrap", None)) or not (
      callable(getattr(pfor, "_create_op", None))):  # pylint: disable=protected-access
    return None
  if "Conv2D" not in registry or "DepthwiseConv2dNative" not in registry:
    return None
  return registry


def pfor_create_op(op_type: str, inputs, dtypes, attrs):
  """``pfor._create_op``: a graph op of ``op_type`` on ``inputs`` with ``attrs`` (a
  converter's ``pfor_input.op.node_def.attr``) and output ``dtypes``, created the way
  pfor's own converters create theirs. Only called by converters installed after
  :func:`pfor_converter_registry` answered."""
  return pfor_module()._create_op(op_type, inputs, dtypes, attrs=attrs)  # pylint: disable=protected-access


# ---------------------------------------------------------------------------------------
# Keras layer internals.
# ---------------------------------------------------------------------------------------

def instance_attributes(layer) -> dict:
  """``{name: value}`` of the attributes set on the instance ``layer`` (``vars``: Keras
  keeps tracked variables and sublayers there under the names the layer gave them)."""
  return dict(vars(layer))


def _public_sublayers(layer) -> list:
  found = []
  for value in instance_attributes(layer).values():
    items = value if isinstance(value, (list, tuple)) else (
        value.values() if isinstance(value, dict) else (value,))
    for item in items:
      if isinstance(item, keras.layers.Layer) and item is not layer and all(
          item is not f for f in found):
        found.append(item)
  return found


def _sublayers_canary() -> Optional[str]:
  inner = keras.Sequential([keras.layers.Dense(2, name="d1")], name="inner")
  x = keras.Input((3,))
  model = keras.Model(x, keras.layers.Dense(1, name="d2")(inner(x)), name="outer")
  names = [l.name for l in _flatten(model, getattr)]
  for want in ("inner", "d1", "d2"):
    if want not in names:
      return f"Layer._layers misses {want!r} ({names})"
  return None


def _flatten(layer, get) -> list:
  """Keras' ``_flatten_layers(include_self=True, recursive=True)`` order, over ``get``."""
  layers, seen = [layer], set()
  queue = list(get(layer, "_layers", None) or [])
  while queue:
    item = queue.pop(0)
    if id(item) in seen:
      continue
    seen.add(id(item))
    layers.append(item)
    queue[:0] = list(reversed(get(item, "_layers", None) or []))
  return layers


def sublayers(layer) -> list:
  """The layers ``layer`` tracks directly (its children), in Keras' order.

  Private: ``Layer._layers``. Canary: a nested model's layers are all found. On failure:
  the layers among the instance's attributes (lists, tuples, dicts of layers too).
  """
  if run_canary("sublayers", _sublayers_canary) is None:
    return list(getattr(layer, "_layers", None) or [])
  warn_once("sublayers", "Keras %s's layer tracking changed (%s); layers are found "
            "among their parents' attributes.", keras.__version__,
            _canary_results["sublayers"])
  return _public_sublayers(layer)


def flatten_layers(layer) -> list:
  """``layer`` and every layer nested in it, each once (Keras' own traversal order)."""
  return _flatten(layer, lambda l, _, __: sublayers(l))


def instance_attribute(layer, name: str):
  """``(True, value)`` when ``layer`` has an instance attribute ``name`` of its own (one
  that shadows the class's method), else ``(False, None)``."""
  own = vars(layer)
  return (name in own, own.get(name))


def set_instance_attribute(layer, name: str, value) -> None:
  """Sets ``layer.<name> = value`` on the instance, past Keras' attribute tracking
  (``object.__setattr__``: nothing about the layer but this one attribute changes)."""
  object.__setattr__(layer, name, value)


def delete_instance_attribute(layer, name: str) -> None:
  """Removes the instance attribute ``name`` that :func:`set_instance_attribute` set."""
  object.__delattr__(layer, name)


def redefines_batch_norm_moments(cls) -> bool:
  """Whether the ``BatchNormalization`` subclass ``cls`` redefines Keras' private
  ``_moments`` (then it computes something else, and the fused path leaves it alone).
  Where Keras has no ``_moments``, nothing is redefined (the fused path's canary
  compares it with Keras' own call)."""
  return getattr(cls, "_moments", None) is not getattr(  # pylint: disable=protected-access
      keras.layers.BatchNormalization, "_moments", None)


def _instance_call_canary() -> Optional[str]:
  layer = keras.layers.Dense(1, kernel_initializer="ones", bias_initializer="zeros")
  layer.build((1, 2))
  original = layer.call
  set_instance_attribute(layer, "call", lambda *a, **k: original(*a, **k) + 10.0)
  try:
    got = float(layer(tf.ones([1, 2]))[0, 0])
  finally:
    delete_instance_attribute(layer, "call")
  return None if got == 12.0 else f"an instance-level call gives {got}, not 12.0"


def check_instance_call() -> None:
  """Raises unless Keras honours an instance attribute ``call`` (how
  ``override_layer_outputs`` wraps one layer of a model). Canary: a Dense layer whose
  instance ``call`` adds 10 gives 12 on ``[1, 1]`` with unit weights.

  Raises:
    UnsupportedVersionError: Keras ignores it (overrides would silently do nothing).
  """
  reason = run_canary("instance_call", _instance_call_canary)
  if reason is not None:
    raise unsupported(f"Keras {keras.__version__} ignores a layer's instance-level call "
                      f"({reason}), so overrides= cannot replace layer outputs")


def _convolution_op_canary() -> Optional[str]:
  layer = keras.layers.Conv2D(1, 1, kernel_initializer="ones", bias_initializer="zeros")
  layer.build((1, 2, 2, 1))
  set_instance_attribute(layer, "convolution_op", lambda inputs, kernel: inputs * 0.0 + 5.0)
  try:
    got = float(layer(tf.ones([1, 2, 2, 1]))[0, 0, 0, 0])
  finally:
    delete_instance_attribute(layer, "convolution_op")
  return None if got == 5.0 else f"an instance-level convolution_op gives {got}, not 5.0"


def check_instance_convolution_op() -> None:
  """Raises unless Keras' Conv1D / Conv2D / Conv3D call ``self.convolution_op(inputs,
  kernel)`` through the instance (how ``batched_functional_call(conv="im2col")`` batches
  kernels). Canary: a 1x1 Conv2D whose instance ``convolution_op`` returns 5 gives 5.

  Raises:
    UnsupportedVersionError: Keras ignores it (the batched call would have no converter
      for the per-set kernels, or convolve with the variables' kernels).
  """
  reason = run_canary("convolution_op", _convolution_op_canary)
  if reason is not None:
    raise UnsupportedVersionError(
        f"Keras {keras.__version__}'s convolution layers ignore an instance-level "
        f"convolution_op ({reason}), so conv='im2col' cannot batch their kernels: use "
        "parallel='map_fn', or conv='grouped' where grouped convolutions run.", reason)


class _OwnVariableCanaryLayer(keras.layers.Layer):
  def build(self, input_shape):
    self.own = self.add_weight(shape=(1,), initializer="ones", name="own")
    self.inner = keras.layers.Dense(1)
    self.inner.build(input_shape)

  def call(self, x):
    return self.inner(x) * self.own


def _public_own_variables(layer) -> list:
  store = {}
  keras.layers.Layer.save_own_variables(layer, store)
  return [store[f"{i}"] for i in range(len(store))]


def _own_variables_canary() -> Optional[str]:
  layer = _OwnVariableCanaryLayer()
  layer.build((1, 2))
  found = _public_own_variables(layer)
  if len(found) != 1 or found[0] is not layer.own:
    return (f"Layer.save_own_variables stores {[getattr(v, 'path', type(v)) for v in found]}, "
            f"not the layer's own variable {layer.own.path!r}")
  return None


def own_variables(layer) -> list:
  """The variables ``layer`` tracks itself (not its sublayers'), in the order Keras'
  own ``Layer.save_own_variables`` saves them: for a ``save_own_variables`` /
  ``load_own_variables`` override that adds variables after Keras' own.

  Public route: ``keras.layers.Layer.save_own_variables`` into a dict (Keras stores
  the variables themselves there). Canary: a layer with one weight and a Dense sublayer
  stores exactly that weight.

  Raises:
    UnsupportedVersionError: Keras saves something else (a model saved or loaded here
      could not be restored exactly).
  """
  reason = run_canary("own_variables", _own_variables_canary)
  if reason is not None:
    raise unsupported(f"Keras {keras.__version__} saves a layer's own variables "
                      f"differently ({reason}), so hypernet's models cannot be saved or "
                      "loaded")
  return _public_own_variables(layer)


def _optimizer_sum_canary() -> Optional[str]:
  optimizer = keras.optimizers.SGD(0.1)
  if not callable(getattr(type(optimizer), "_all_reduce_sum_gradients", None)):
    return "keras optimizers have no _all_reduce_sum_gradients"
  v = keras.Variable([1.0])
  optimizer.build([v])
  hits = []
  original = optimizer._all_reduce_sum_gradients  # pylint: disable=protected-access

  def counting(grads_and_vars):
    hits.append(1)
    return original(grads_and_vars)

  optimizer._all_reduce_sum_gradients = counting  # pylint: disable=protected-access
  optimizer.apply([tf.constant([1.0])], [v])
  if not hits:
    return "Optimizer.apply no longer sums gradients through _all_reduce_sum_gradients"
  if abs(float(v.numpy()[0]) - 0.9) > 1e-6:
    return f"SGD(0.1) on gradient 1 moved 1.0 to {float(v.numpy()[0])}, not 0.9"
  return None


def switch_off_optimizer_sum(optimizer, num_replicas: Optional[int] = None) -> bool:
  """Makes ``optimizer.apply`` skip its own sum over replicas (the train step sums).

  Private: ``Optimizer._all_reduce_sum_gradients``. Canary: ``SGD.apply`` calls it (and
  moves a weight by ``lr * g``). On failure, for one replica nothing is switched (Keras'
  sum over one replica is the gradient itself: nothing to skip, no warning); for more
  replicas this raises: summing twice would scale the gradient by the number of
  replicas without a word.

  Args:
    optimizer: a Keras optimizer (the inner one of a ``LossScaleOptimizer``).
    num_replicas: the replicas its ``apply`` runs on (default: the current
      ``tf.distribute`` strategy's ``num_replicas_in_sync``).

  Returns:
    Whether the optimizer's own sum was switched off.

  Raises:
    UnsupportedVersionError: more than one replica, and the method is missing or no
      longer where Keras sums.
  """
  reason = run_canary("optimizer_sum", _optimizer_sum_canary)
  if reason is not None:
    if num_replicas is None:
      num_replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if num_replicas <= 1:
      return False
    raise unsupported(
        f"Keras {keras.__version__} sums gradients over replicas elsewhere ({reason}); "
        f"hypernet's train step sums them itself and would sum twice over {num_replicas} "
        "replicas (one device is unaffected)")
  optimizer._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)  # pylint: disable=protected-access
  return True


def _adam_slots_canary() -> Optional[str]:
  optimizer = keras.optimizers.Adam(0.1)
  v = keras.Variable([1.0, -2.0])
  optimizer.build([v])
  names = ("_momentums", "_velocities", "_get_variable_index")
  missing = [n for n in names if not hasattr(optimizer, n)]
  if missing:
    return f"keras.optimizers.Adam has no {' / '.join(missing)}"
  optimizer.apply([tf.constant([0.5, -1.0])], [v])
  m, velocity = adam_slots(optimizer, v)
  # One step from zero: m = (1 - 0.9) g, v = (1 - 0.999) g^2.
  if not (np.allclose(m.numpy(), [0.05, -0.1]) and
          np.allclose(velocity.numpy(), [0.00025, 0.001])):
    return (f"after one step Adam's slots for a variable hold {m.numpy().tolist()} and "
            f"{velocity.numpy().tolist()}, not its momentum and velocity")
  return None


def adam_slots(optimizer, variable):
  """``(momentum, velocity)``: the slot variables of ``variable`` in a built
  :class:`keras.optimizers.Adam` (or subclass), or ``None`` where this Keras keeps them
  elsewhere (one warning; :class:`hypernet.numerics.fused_adam.FusedAdam` then runs
  Keras' own update: speed only).

  Private: ``Adam._momentums``, ``Adam._velocities``, ``Optimizer._get_variable_index``
  (Keras has no public lookup of a variable's slots). Canary: one ``Adam`` step from
  zero leaves ``(1 - beta_1) g`` and ``(1 - beta_2) g^2`` in the slots found.
  """
  reason = run_canary("adam_slots", _adam_slots_canary)
  if reason is not None:
    warn_once("adam_slots", "Keras %s keeps Adam's slot variables elsewhere (%s): "
              "FusedAdam runs Keras' own Adam update (speed only).", keras.__version__,
              reason)
    return None
  i = optimizer._get_variable_index(variable)  # pylint: disable=protected-access
  return optimizer._momentums[i], optimizer._velocities[i]  # pylint: disable=protected-access


def is_seed_state_path(path: str) -> bool:
  """Whether a variable path is a Keras ``SeedGenerator``'s state (its variable name
  ``seed_generator_state``, checked by :func:`check_seed_state`'s canary)."""
  return path.endswith("seed_generator_state")


def seed_states(model) -> list:
  """The RNG seed-state variables of ``model`` (dropout streams), which Keras' ``.keras``
  files do not hold. Canary: :func:`check_seed_state`'s. On failure, ``[]`` with one
  warning: a reloaded model's dropout stream then restarts."""
  reason = run_canary("seed_state", _seed_state_canary)
  if reason is not None:
    warn_once("seed_states", "Keras %s keeps random-seed state differently (%s): saved "
              "models do not hold their dropout streams, which restart when reloaded.",
              keras.__version__, reason)
    return []
  return [v for v in model.non_trainable_variables if is_seed_state_path(v.path)]


def _seed_state_canary() -> Optional[str]:
  generator = keras.random.SeedGenerator(7)
  state = generator.state
  if not is_seed_state_path(state.path) or tuple(state.shape) != (2,):
    return f"a SeedGenerator's state is {state.path!r} of shape {tuple(state.shape)}"
  before = state.numpy().tolist()
  keras.random.uniform([2], seed=generator)
  after = state.numpy().tolist()
  if before[0] != after[0] or before[1] == after[1] or before[0] != 7:
    return f"a draw takes the state from {before} to {after}, not [7, c] to [7, c']"
  return None


def check_seed_state() -> None:
  """Raises unless Keras' seed generators keep their state as a variable named
  ``seed_generator_state`` laid out ``[seed, counter]`` (how ``functional_call`` gives
  each ``tf.distribute`` replica its own dropout stream). Canary: a ``SeedGenerator(7)``
  has it, and a draw changes the counter only. Called inside multi-replica calls only.

  Raises:
    UnsupportedVersionError: otherwise (every replica would draw the same masks).
  """
  reason = run_canary("seed_state", _seed_state_canary)
  if reason is not None:
    raise unsupported(f"Keras {keras.__version__} keeps random-seed state differently "
                      f"({reason}), so replicas would draw the same dropout masks")


# ---------------------------------------------------------------------------------------
# Keras' fit() under MultiWorkerMirroredStrategy.
# ---------------------------------------------------------------------------------------
def multi_worker(strategy) -> bool:
  """Whether ``strategy`` runs replicas on several workers (a
  ``MultiWorkerMirroredStrategy`` with more replicas in sync than local devices)."""
  return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
          and strategy.num_replicas_in_sync > len(strategy.extended.worker_devices))


def _first_local(strategy, value):
  if isinstance(value, tf.distribute.DistributedValues):
    return strategy.experimental_local_results(value)[0]
  return value


def _symbolic_build_canary() -> Optional[str]:
  method = getattr(keras.Model, "_maybe_symbolic_build", None)
  if not callable(method):
    return "keras.Model has no _maybe_symbolic_build"
  params = list(inspect.signature(method).parameters)
  if params != ["self", "iterator", "data_batch"]:
    return f"keras.Model._maybe_symbolic_build takes {params}"
  return None


def _multi_worker_logs_canary() -> Optional[str]:
  reduce = getattr(defining_module(keras.Model.make_train_function), "reduce_per_replica",
                   None)
  if not callable(reduce):
    return "Keras' TensorFlow trainer has no reduce_per_replica"
  if '"MEAN", v, axis=0' not in inspect.getsource(reduce):
    return "reduce_per_replica no longer reduces a multi-worker mean along axis 0"
  return None


class MultiWorkerFit:
  """Mixin for a ``keras.Model``: Keras' ``fit()`` / ``evaluate()`` under a
  ``MultiWorkerMirroredStrategy`` over several workers, which Keras 3.15 on TensorFlow
  2.21 fails for any model at two places (a plain ``Sequential`` too):

  * ``fit()`` first takes one batch to build the compiled metrics and averages it over
    the replicas with ``strategy.reduce("MEAN", (x, y))``, which the multi-worker
    strategy cannot do for a structure ("Attempt to convert a value (PerReplica...) to a
    Tensor"). Here the batch is this worker's first replica's (only its shapes and
    dtypes are used). Private: ``keras.Model._maybe_symbolic_build(iterator,
    data_batch)``; canary: it exists with those parameters, else Keras' own, warned.
  * each step's logs are averaged over the workers by ``reduce_per_replica`` with
    ``strategy.reduce("MEAN", v, axis=0)``, which fails for the scalar metrics ("Invalid
    reduction dimension 0 for input with 0 dimensions"): :meth:`step_logs` gives them
    the axis as ``[1]`` tensors (the mean of one value per replica is the same scalar).
    Canary: the trainer's ``reduce_per_replica`` reduces so (its source), else the logs
    are left scalar, warned.
  """

  def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    strategy = self.distribute_strategy
    if iterator is not None and data_batch is None and multi_worker(strategy):
      reason = run_canary("symbolic_build", _symbolic_build_canary)
      if reason is None:
        for _, _, batches in iterator:
          data_batch = tf.nest.map_structure(lambda v: _first_local(strategy, v),
                                             next(batches))
          break
        iterator = None
      else:
        warn_once("symbolic_build", "Keras %s builds a model's metrics differently (%s): "
                  "fit() under MultiWorkerMirroredStrategy runs Keras' own code.",
                  keras.__version__, reason)
    return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

  def step_logs(self, logs):
    """``logs`` of a train / test step as Keras' multi-worker reduction needs them."""
    if not multi_worker(tf.distribute.get_strategy()):
      return logs
    reason = run_canary("multi_worker_logs", _multi_worker_logs_canary)
    if reason is not None:
      warn_once("multi_worker_logs", "Keras %s reduces step logs differently (%s): they "
                "are passed on unchanged under MultiWorkerMirroredStrategy.",
                keras.__version__, reason)
      return logs
    return {k: tf.reshape(v, [1]) if tf.is_tensor(v) and v.shape.rank == 0 else v
            for k, v in logs.items()}


# ---------------------------------------------------------------------------------------
# BackupAndRestore's progress file.
# ---------------------------------------------------------------------------------------
_BACKUP_METADATA = "training_metadata.json"


def _read_backup_metadata(backup_dir: str) -> Optional[dict]:
  path = os.path.join(backup_dir, _BACKUP_METADATA)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "r") as f:
    return json.loads(f.read())


def _backup_progress_canary() -> Optional[str]:
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
  model.compile(keras.optimizers.SGD(0.1), "mse", steps_per_execution=1)
  with tempfile.TemporaryDirectory() as folder:
    backup = keras.callbacks.BackupAndRestore(folder, save_freq=2, delete_checkpoint=False)
    model.fit(tf.zeros([3, 1]), tf.zeros([3, 1]), batch_size=1, epochs=1, verbose=0,
              callbacks=[backup])  # 3 batches: one backup, after the second.
    found = _read_backup_metadata(folder)
  if not isinstance(found, dict) or found.get("epoch") != 0 or found.get("batch") != 1:
    return (f"BackupAndRestore(save_freq=2) after 2 of 3 batches wrote {found!r} to "
            f"{_BACKUP_METADATA}, not {{'epoch': 0, 'batch': 1}}")
  return None


def backup_progress(backup_dir: str) -> Optional[tuple]:
  """``(epoch, batches of it done)`` of the latest backup a batch-level
  ``keras.callbacks.BackupAndRestore(backup_dir, save_freq=N)`` wrote, ``None`` without
  one: how far into the epoch it resumes the backup was taken.

  Private: Keras' ``training_metadata.json`` in ``backup_dir``, ``{"epoch": e, "batch":
  b}`` with ``b`` the 0-based index of the last batch done. Canary: a backup after 2 of
  3 batches says ``{"epoch": 0, "batch": 1}``. On failure ``None``, warned (a resumed
  epoch then trains its first batches again, as Keras does).
  """
  if not tf.io.gfile.exists(backup_dir):  # No backup: a fit() from the start.
    return None
  reason = run_canary("backup_progress", _backup_progress_canary)
  if reason is not None:
    warn_once("backup_progress", "Keras %s records BackupAndRestore's progress "
              "differently (%s): a fit() resumed from a mid-epoch backup trains the "
              "epoch's first batches again.", keras.__version__, reason)
    return None
  found = _read_backup_metadata(backup_dir)
  return None if found is None else (int(found["epoch"]), int(found["batch"]) + 1)


# ---------------------------------------------------------------------------------------
# TensorBoard's hparams plugin.
# ---------------------------------------------------------------------------------------

def hparams_api():
  """TensorBoard's public hparams API, ``tensorboard.plugins.hparams.api`` (``hp``)."""
  from tensorboard.plugins.hparams import api as hp  # pylint: disable=g-import-not-at-top
  return hp


def _hparams_plugin_data():
  try:
    from tensorboard.plugins.hparams import plugin_data_pb2  # pylint: disable=g-import-not-at-top
    return plugin_data_pb2.HParamsPluginData
  except (ImportError, AttributeError):
    return None


def _mark_differs(pb, names) -> Optional[str]:
  """Sets ``differs`` on the hyperparameters of the config summary ``pb`` named in
  ``names`` (in place); returns why not, or ``None``."""
  plugin_data = _hparams_plugin_data()
  if plugin_data is None:
    return "tensorboard.plugins.hparams.plugin_data_pb2.HParamsPluginData is missing"
  content = pb.value[0].metadata.plugin_data
  data = plugin_data.FromString(content.content)
  infos = list(data.experiment.hparam_infos)
  if not infos:
    return "the hparams config summary holds no hyperparameters"
  for info in infos:
    info.differs = info.name in names
  content.content = data.SerializeToString()
  return None


def _hparams_canary() -> Optional[str]:
  hp = hparams_api()
  pb = hp.hparams_config_pb([hp.HParam("a"), hp.HParam("b")], [hp.Metric("m")])
  reason = _mark_differs(pb, {"b"})
  if reason is not None:
    return reason
  data = _hparams_plugin_data().FromString(pb.value[0].metadata.plugin_data.content)
  got = [(i.name, i.differs) for i in data.experiment.hparam_infos]
  metrics = [m.name.tag for m in data.experiment.metric_infos]
  if got != [("a", False), ("b", True)] or metrics != ["m"]:
    return f"the config reads back as {got}, metrics {metrics}"
  return None


def hparams_config_summary(hparams, metrics, first=()):
  """TensorBoard's hparams config summary (``hp.hparams_config_pb(hparams, metrics)``,
  public) with the hyperparameters named in ``first`` marked "differs", which the
  HParams table lists first (and shows by default).

  Private: ``tensorboard.plugins.hparams.plugin_data_pb2.HParamsPluginData`` (the
  summary's content; no public API sets ``differs``). Canary: a config of hparams
  ``a``, ``b`` with ``b`` marked reads back as such. On failure: the unmarked config,
  with one warning (the table shows its first columns by name).

  Returns:
    A ``Summary`` proto (``.SerializeToString()`` for ``write_raw_pb``).
  """
  pb = hparams_api().hparams_config_pb(list(hparams), list(metrics))
  reason = run_canary("hparams_config", _hparams_canary)
  if reason is None:
    reason = _mark_differs(pb, set(first))
  if reason is not None:
    warn_once("hparams_config", "cannot mark the key hyperparameters for TensorBoard's "
              "HParams table (%s); it lists them by name.", reason)
  return pb


def onednn_enabled() -> Optional[bool]:
  """Whether TensorFlow runs its CPU kernels on oneDNN in this process (fixed at its
  import: ``TF_ENABLE_ONEDNN_OPTS`` or TensorFlow's default for the CPU,
  :mod:`hypernet.numerics.onednn`). Private: TensorFlow has no public query;
  ``tensorflow.python.util._pywrap_util_port.IsMklEnabled``. ``None`` where it is gone
  (its canary: the name exists and returns a bool)."""
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
    value = _pywrap_util_port.IsMklEnabled()
  except (ImportError, AttributeError):
    return None
  return value if isinstance(value, bool) else None
