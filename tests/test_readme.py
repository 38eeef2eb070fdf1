"""The README's commands and every Python block of README.md and docs/*.md run as written.

The blocks of one file run in order in one namespace (a later block may use an earlier
one's names), as a reader pastes them. A block right after the line
``<!-- no-test: REASON -->`` is not run (for blocks that need a long run or data that
the tests do not have); keep them few: ``test_few_blocks_are_skipped`` counts them.
"""
import glob
import linecache
import os
import re

import numpy as np
import pytest
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_MARK = "<!-- no-test:"
MAX_SKIPPED = 3


def _read(rel):
  with open(os.path.join(REPO, rel), encoding="utf-8") as f:
    return f.read()


def _markdown_files():
  docs = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
  return ["README.md"] + docs


def python_blocks(text):
  """``[(code, skipped)]`` for each fenced ```python block of ``text``."""
  out = []
  for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
    before = text[:m.start()].rstrip().splitlines()
    skipped = bool(before) and before[-1].strip().startswith(SKIP_MARK)
    out.append((m.group(1), skipped))
  return out


def run_blocks(rel):
  scope = {"__name__": "__readme__"}
  for i, (code, skipped) in enumerate(python_blocks(_read(rel))):
    if not skipped:
      # Registered as a source file, so that tracebacks and AutoGraph (tf.function reads
      # the source of what it converts) see the block.
      name = os.path.join(REPO, f"{rel}[python block {i + 1}]")
      linecache.cache[name] = (len(code), None, code.splitlines(True), name)
      exec(compile(code, name, "exec"), scope)  # pylint: disable=exec-used
  return scope


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
  bash = re.search(r"```bash\n(.*?)```", _read("README.md"), re.S).group(1)
  commands = [l for l in bash.splitlines() if l and not l.startswith("#")]
  assert commands[0] == ("pip install -e . && python -m hypernet.train "
                         "--config=configs/digits_hyper.py "
                         "--workdir=/tmp/hypernet/digits_hyper")
  assert commands[1] == 'pip install -e ".[test]" && python -m pytest -q'
  assert commands[1] in _read(os.path.join(".ci", "run"))


def test_readme_is_a_front_page():
  text = _read("README.md")
  words = len(re.sub(r"```.*?```", "", text, flags=re.S).split())
  assert words < 1300, words
  for heading in ("## What it adds to Keras", "## Quick start", "## Results", "## Guides",
                  "## Supported versions"):
    assert heading in text
  assert "hn.keras.HyperModel(" in text and ".fit(" in text  # Keras' own loop, shown.


@pytest.mark.parametrize("rel", _markdown_files())
def test_relative_links_exist(rel):
  """mkdocs only reports links outside docs/ (mkdocs.yml); every relative link exists."""
  base = os.path.dirname(os.path.join(REPO, rel))
  for link in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", _read(rel)):
    assert os.path.exists(os.path.normpath(os.path.join(base, link))), (rel, link)


def test_readme_examples_train_a_hypernetwork_and_take_a_maml_step():
  scope = run_blocks("README.md")
  held_out = np.mean(np.argmax(scope["logits"], -1) == scope["y"][1400:])
  assert held_out > 0.8, held_out  # chance: 0.1
  model, grads = scope["model"], scope["grads"]
  assert len(grads) == len(model.trainable_variables)
  assert all(g is not None and np.isfinite(g.numpy()).all() for g in grads)
  assert float(tf.linalg.global_norm(grads)) > 0


# docs/keras.md runs in tests/test_byo_examples.py, in a process of its own and with its
# assertions (its MirroredStrategy() cannot share a process with other tests' strategies).
@pytest.mark.parametrize("rel", [f for f in _markdown_files()
                                 if f not in ("README.md", os.path.join("docs", "keras.md"))])
def test_docs_python_blocks_run(rel):
  run_blocks(rel)


def test_few_blocks_are_skipped():
  skipped = {rel: sum(s for _, s in python_blocks(_read(rel))) for rel in _markdown_files()}
  assert sum(skipped.values()) <= MAX_SKIPPED, skipped
  assert sum(len(python_blocks(_read(rel))) for rel in _markdown_files()) >= 2
