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
  ids = set()
  for root, _, files in os.walk(site / "api"):
    for f in files:
      if f.endswith(".html"):
        with open(os.path.join(root, f), encoding="utf-8") as fh:
          ids |= set(re.findall(r'id="(hypernet\.[\w.]+)"', fh.read()))
  documented = {i.rsplit(".", 1)[-1] for i in ids}
  subpackages = {"core", "numerics", "data", "hypernetworks", "meta", "continual", "training"}
  missing = [n for n in hypernet.__all__ if n not in subpackages and n not in documented]
  assert not missing, missing
  for package in ("core", "data", "hypernetworks", "meta", "continual"):
    names = getattr(hypernet, package).__all__
    undocumented = [n for n in names if f"hypernet.{package}.{n}" not in ids]
    assert not undocumented, (package, undocumented)
