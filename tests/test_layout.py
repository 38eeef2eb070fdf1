"""The package's layers: no import cycles, no import from a lower layer to a higher one,
and every module imports alone (with only TensorFlow already loaded).

Layers, lowest first (ARCHITECTURE.md, "Layers"): a module may import modules of its own
layer or of lower ones, at the top of the file or inside a function alike.
"""
import ast
import functools
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "hypernet"

# Folder (or top-level module) under hypernet/ -> layer rank.
LAYERS = {
    "numerics": 0,
    "core": 1,
    "data": 1,
    "config_lib": 1.5,  # The config schema, assembled from the registries (TF-free).
    "hypernetworks": 2,
    "meta": 2,
    "continual": 2,
    "keras": 2.5,  # Keras models over the weight sources; below the training loop.
    "tasks": 2.75,  # What the loop trains: weight source, target, objective, data.
    "training": 3,
    "train": 4,
    "evaluate": 4,
}


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def _modules():
  """Every module of the package, sorted. Read once: the checks below ask for it per
  imported name (315 folder walks a test otherwise, which once took 55 s in a full run
  against 1 s alone)."""
  return tuple(sorted(_module_name(p) for p in PACKAGE.rglob("*.py")))


def _rank(module: str):
  """The layer of ``hypernet.X...`` (``None`` for the root ``hypernet``, the public
  surface, which may name anything lazily)."""
  parts = module.split(".")
  if len(parts) == 1:
    return None
  if parts[1] not in LAYERS:
    raise AssertionError(f"{module}: hypernet/{parts[1]} has no layer; add it to LAYERS "
                         "in tests/test_layout.py and to ARCHITECTURE.md.")
  return LAYERS[parts[1]]


def _imports(module: str):
  """Every ``hypernet`` module that ``module`` imports, anywhere in the file."""
  path = PACKAGE.parent / (module.replace(".", "/") + ".py")
  if not path.exists():
    path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
  tree = ast.parse(path.read_text())
  package = module if path.name == "__init__.py" else module.rpartition(".")[0]
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names if a.name.startswith("hypernet"))
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                        + ([node.module] if node.module else []))
      if not base.startswith("hypernet"):
        continue
      for alias in node.names:
        candidate = f"{base}.{alias.name}"
        found.add(candidate if candidate in _modules() else base)
  found.discard(module)
  return found


def test_every_folder_has_a_layer():
  for module in _modules():
    _rank(module)


def test_no_import_runs_up_the_layers():
  wrong = []
  for module in _modules():
    rank = _rank(module)
    if rank is None:
      continue
    for imported in _imports(module):
      other = _rank(imported)
      if other is not None and other > rank:
        wrong.append(f"{module} (layer {rank}) imports {imported} (layer {other})")
  assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
  nodes = set(_modules())
  graph = {m: {i for i in _imports(m) if i in nodes} for m in nodes}
  # A package's __init__ that only re-exports its own modules is not a cycle with them.
  for module, deps in graph.items():
    graph[module] = {d for d in deps if not module.startswith(d + ".")}
  state, stack, cycles = {}, [], []

  def visit(node):
    state[node] = 1
    stack.append(node)
    for nxt in sorted(graph[node]):
      if state.get(nxt) == 1:
        cycles.append(stack[stack.index(nxt):] + [nxt])
      elif nxt not in state:
        visit(nxt)
    stack.pop()
    state[node] = 2

  for node in sorted(graph):
    if node not in state:
      visit(node)
  assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_layer_check_sees_nested_imports():
  """The check reads imports inside functions too (a lazy import is still an arrow)."""
  assert "hypernet.training.export" in _imports("hypernet.training.cli")  # In user_errors().


_IMPORT_EACH_ALONE = """
import os, sys, traceback
import keras, tensorflow  # Not ours: loaded once, before the fork.
failed = []
for module in sys.argv[1:]:
  pid = os.fork()
  if pid == 0:  # A child with no hypernet module loaded imports just this one.
    try:
      __import__(module)
    except BaseException:
      traceback.print_exc()
      os._exit(1)
    os._exit(0)
  if os.waitpid(pid, 0)[1] != 0:
    failed.append(module)
print("FAILED:" + ",".join(failed))
"""


def test_each_module_imports_alone():
  """Each module imports in a process where no other hypernet module was loaded first
  (one forked child per module, after TensorFlow and Keras are loaded: not ours)."""
  out = subprocess.run([sys.executable, "-c", _IMPORT_EACH_ALONE, *_modules()],
                       capture_output=True, text=True, cwd=PACKAGE.parent, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  failed = out.stdout.strip().rpartition("FAILED:")[2]
  assert not failed, f"{failed} failed to import alone:\n{out.stderr[-3000:]}"


def test_import_hypernet_and_the_command_line_load_no_tensorflow():
  """``import hypernet`` is lazy, and the command line parses flags TensorFlow-free."""
  for entry in ("hypernet.train", "hypernet.evaluate"):  # Each defines its own flags.
    code = (f"import sys, hypernet, hypernet.training.cli, {entry}; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip() == "False", entry


def test_public_surface():
  import hypernet as hn  # pylint: disable=import-outside-toplevel
  for name in hn.__all__:
    assert getattr(hn, name) is not None, name
  assert hn.hypernetworks.ChunkedHypernetwork is hn.ChunkedHypernetwork
  assert hn.meta.MAML.__name__ == "MAML"
  assert "functional_call" in dir(hn)
  with pytest.raises(AttributeError, match="no attribute 'nope'"):
    hn.nope  # pylint: disable=pointless-statement


def test_no_package_export_hides_a_module():
  """A name a package ``__init__`` exports must not be one of its own modules' names:
  ``from hypernet.core import weight_roles`` would then get the function, not the module."""
  clashes = []
  for init in PACKAGE.rglob("__init__.py"):
    modules = {p.stem for p in init.parent.glob("*.py")} | {
        p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
    for node in ast.walk(ast.parse(init.read_text())):
      if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for alias in node.names:
          name = alias.asname or alias.name
          if name in modules and node.module != f"{_module_name(init)}":
            clashes.append(f"{_module_name(init)} exports {name!r} from {node.module}")
  assert not clashes, "\n".join(clashes)


def _function_lengths(folder: str):
  """``(lines, "module:function")`` for every function under ``hypernet/<folder>``."""
  out = []
  for path in sorted((PACKAGE / folder).rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        out.append((node.end_lineno - node.lineno + 1,
                    f"{_module_name(path)}:{node.name}"))
  return out


@pytest.mark.parametrize("folder", ["training", "meta", "tasks"])
def test_no_long_functions_in_the_top_floors(folder):
  """The floors a user extends read in screenfuls: no function over 80 lines."""
  long = sorted(f for f in _function_lengths(folder) if f[0] > 80)
  assert not long, "\n".join(f"{name}: {n} lines" for n, name in long)


def test_the_training_floor_stays_small():
  """hypernet/training/ (loop, actions, checkpoints, summaries, config, command line) is at
  most a quarter of the package: components live in their own floors."""
  lines = lambda paths: sum(len(p.read_text().splitlines()) for p in paths)
  training = lines((PACKAGE / "training").rglob("*.py"))
  total = lines(PACKAGE.rglob("*.py"))
  assert training <= 0.25 * total, f"training/ holds {training} of {total} lines"


_REFLECTION = ("getattr", "setattr", "hasattr", "delattr")


def _own_private_names() -> set:
  """The ``_names`` hypernet defines itself (functions, classes, attributes it assigns):
  reading one of them on another object is not a private TensorFlow / Keras use."""
  own = set()
  for path in PACKAGE.rglob("*.py"):
    for n in ast.walk(ast.parse(path.read_text())):
      if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
        own.add(n.name)
      elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
        own.add(n.id)
      elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(
          n.value, ast.Name) and n.value.id in ("self", "cls"):
        own.add(n.attr)
  return {name for name in own if name.startswith("_")}


def _private_uses(tree: ast.AST, own=frozenset()) -> list:
  """Private TensorFlow / Keras / TensorBoard uses in a module (``(line, what)``): private
  modules imported (``tensorflow.python``, ``keras.src``, TensorBoard's ``compat.proto``),
  a ``._name`` read on anything but ``self`` / ``cls``, a ``"_name"`` reached through
  getattr / setattr / hasattr / delattr or ``object.__setattr__``, and ``vars(...)`` /
  ``.__dict__``: the rules of the portability audit's scanner. ``own``: hypernet's own
  private names (:func:`_own_private_names`), allowed."""
  found = []
  for n in ast.walk(tree):
    if isinstance(n, (ast.Import, ast.ImportFrom)):
      names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
      found += [(n.lineno, m) for m in names
                if m.startswith(("tensorflow.python", "keras.src", "tensorboard.compat"))]
    elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(
        ("keras.src.", "tensorflow.python.")):
      found.append((n.lineno, n.value))
    elif isinstance(n, ast.Attribute):
      if n.attr == "__dict__" or (n.attr.startswith("_") and not n.attr.startswith("__")
                                  and n.attr not in own):
        found.append((n.lineno, f".{n.attr}"))
    elif isinstance(n, ast.Call):
      fn = ast.unparse(n.func)
      if fn == "vars":
        found.append((n.lineno, "vars(...)"))
      elif (fn in _REFLECTION or fn.startswith("object.__")) and len(n.args) >= 2 and \
          isinstance(n.args[1], ast.Constant) and str(n.args[1].value).startswith("_") and \
          not str(n.args[1].value).startswith("__"):
        found.append((n.lineno, f"{fn}(..., {n.args[1].value!r})"))
  return found


def test_private_uses_live_in_numerics_compat_only():
  """Every private TensorFlow / Keras / TensorBoard use is in numerics/compat.py, each with
  a canary there (ARCHITECTURE.md, "Private dependencies")."""
  outside, own = {}, _own_private_names()
  for path in sorted(PACKAGE.rglob("*.py")):
    if path.relative_to(PACKAGE).as_posix() == "numerics/compat.py":
      continue
    uses = _private_uses(ast.parse(path.read_text()), own)
    if uses:
      outside[path.relative_to(PACKAGE).as_posix()] = uses
  assert not outside, outside
  # The check sees each kind of use (it would not pass by seeing nothing).
  probe = ast.parse("import keras.src.ops\nx = layer._kernel\ny = vars(m)\n"
                    "z = getattr(o, '_layers')\nw = o.__dict__\nself._own = 1\n")
  assert sorted(u for _, u in _private_uses(probe, own | {"_own"})) == sorted([
      "keras.src.ops", "._kernel", "vars(...)", "getattr(..., '_layers')", ".__dict__"])
