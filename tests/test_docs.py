"""The API reference builds from the docstrings with no warning and covers the public API.

``mkdocs build --strict`` (mkdocs.yml: the guides in docs/ and the mkdocstrings pages in
docs/api/) fails on any warning, griffe's docstring warnings included (a documented
parameter the signature lacks, ...).
"""
import os
import re
import subprocess
import sys

import hypernet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_api_reference_builds_strict_and_documents_every_public_name(tmp_path):
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  site = tmp_path / "site"
  proc = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "WARNING" not in proc.stderr, proc.stderr
  broken = _broken_links(site)
  assert not broken, broken
  ids = set()
  for root, _, files in os.walk(site / "api"):
    for f in files:
      if f.endswith(".html"):
        with open(os.path.join(root, f), encoding="utf-8") as fh:
          ids |= set(re.findall(r'id="(hypernet\.[\w.]+)"', fh.read()))
  documented = {i.rsplit(".", 1)[-1] for i in ids}
  subpackages = {"core", "numerics", "data", "hypernetworks", "meta", "continual", "training",
                 "keras"}
  missing = [n for n in hypernet.__all__ if n not in subpackages and n not in documented]
  assert not missing, missing
  for package in ("core", "data", "hypernetworks", "meta", "continual", "keras"):
    names = getattr(hypernet, package).__all__
    undocumented = [n for n in names if f"hypernet.{package}.{n}" not in ids]
    assert not undocumented, (package, undocumented)


def test_api_index_table_lists_every_public_name():
  """docs/api/index.md says that what it does not list is implementation: it lists every
  name of ``hn.__all__``."""
  with open(os.path.join(REPO, "docs", "api", "index.md"), encoding="utf-8") as f:
    rows = [line for line in f if line.startswith("| `")]
  listed = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
  missing = [n for n in hypernet.__all__ if n not in listed]
  assert not missing, missing


def _broken_links(site):
  """``[(page, href)]`` for every relative link of the built site whose target is not
  in the site (the guides' links to examples/ and experiments/ included)."""
  broken = []
  for root, _, files in os.walk(site):
    for name in files:
      if not name.endswith(".html") or name == "404.html":
        continue
      with open(os.path.join(root, name), encoding="utf-8") as f:
        hrefs = re.findall(r'href="([^"]+)"', f.read())
      for href in hrefs:
        target = href.split("#", 1)[0].split("?", 1)[0]
        if not target or re.match(r"^[a-z]+:", target) or target.startswith("/"):
          continue
        path = os.path.normpath(os.path.join(root, target))
        if not (os.path.isfile(path) or os.path.isdir(path)):
          broken.append((os.path.relpath(os.path.join(root, name), site), href))
  return broken
