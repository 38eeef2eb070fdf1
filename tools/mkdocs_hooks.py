"""mkdocs hook (mkdocs.yml ``hooks:``): the repository files the guides link to.

The guides link to files outside ``docs/`` (``../examples/...``, ``../experiments/...``,
``../ARCHITECTURE.md``) for readers of the repository. mkdocs builds only ``docs/``, so
after the build this copies those files into the site at the same relative place: a
link that works on the repository works in the built site too
(``tests/test_docs.py`` checks every relative link of the site).
"""
import os
import re
import shutil

_LINK = re.compile(r"\]\(\.\./([^)#\s]+)")


def on_post_build(config, **kwargs):
  del kwargs
  docs, site = config["docs_dir"], config["site_dir"]
  repo = os.path.dirname(os.path.abspath(docs))
  targets = set()
  for root, _, files in os.walk(docs):
    for name in files:
      if name.endswith(".md"):
        with open(os.path.join(root, name), encoding="utf-8") as f:
          depth = os.path.relpath(root, docs).count(os.sep) + (root != docs)
          for link in _LINK.findall(f.read()):
            # ../x from docs/ is the repository's x; from docs/api/, ../../x.
            targets.add(link.split("../", depth)[-1] if depth else link)
  for link in sorted(targets):
    source = os.path.normpath(os.path.join(repo, link))
    if not source.startswith(repo + os.sep) or not os.path.exists(source):
      continue
    dest = os.path.join(site, os.path.relpath(source, repo))
    if os.path.isdir(source):
      shutil.copytree(source, dest, dirs_exist_ok=True,
                      ignore=shutil.ignore_patterns("__pycache__"))
    else:
      os.makedirs(os.path.dirname(dest), exist_ok=True)
      shutil.copy2(source, dest)
      if link.endswith(".md"):  # Its own images (experiments/*.md show PNGs beside them).
        for image in re.findall(r"\]\(([^)#\s:]+\.png)\)", open(source, encoding="utf-8").read()):
          image_source = os.path.normpath(os.path.join(os.path.dirname(source), image))
          if image_source.startswith(repo + os.sep) and os.path.exists(image_source):
            image_dest = os.path.join(site, os.path.relpath(image_source, repo))
            os.makedirs(os.path.dirname(image_dest), exist_ok=True)
            shutil.copy2(image_source, image_dest)
