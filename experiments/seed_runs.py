"""One training run of a committed config per seed, as the seed scripts launch it.

``experiments/digits_seeds.py``, ``continual.py`` and ``meta_seeds.py`` each run
``configs/<name>.py`` once per seed with ``python -m hypernet.train`` in a workdir of its
own, and read the run's ``final_metrics.json``; a workdir that already has one is read,
not trained again, so an interrupted table resumes where it stopped.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def check_out(parser, args) -> None:
  """Refuses (``parser.error``, one line) a run with further flags (``args.set``) that
  would write its tables into the parser's default ``--out``, the folder of the committed
  tables: a lever's runs are not the committed configs' and must not replace their results.

  Raises:
    SystemExit: ``args.set`` is not empty and ``args.out`` is the default.
  """
  default = parser.get_default("out")
  if args.set and os.path.abspath(args.out) == os.path.abspath(default):
    parser.error(f"--set changes the runs, so their tables must not replace the committed "
                 f"ones in {os.path.relpath(default, REPO)}/: pass --out=DIR.")


def train_command(name: str, workdir: str, seed: int, data_dir: Optional[str] = None,
                  extra: Sequence[str] = ()) -> List[str]:
  """The ``python -m hypernet.train`` command line of ``configs/<name>.py`` for one seed
  (``--config.data.data_dir`` where ``data_dir`` is given; ``extra`` flags last)."""
  return [sys.executable, "-m", "hypernet.train", f"--config=configs/{name}.py",
          f"--workdir={workdir}",
          *([f"--config.data.data_dir={data_dir}"] if data_dir is not None else []),
          f"--config.seed={seed}", *extra]


def train_or_read(name: str, workdir: str, seed: int, data_dir: Optional[str] = None,
                  extra: Sequence[str] = (), execute: bool = True) -> Dict:
  """``workdir/final_metrics.json``, training ``configs/<name>.py`` there first (from the
  repository root, printing its wall time) when the file is missing and ``execute``.

  Raises:
    FileNotFoundError: no final metrics and ``execute`` is False (names the workdir).
    subprocess.CalledProcessError: the run failed.
  """
  path = os.path.join(workdir, "final_metrics.json")
  if not os.path.exists(path):
    if not execute:
      raise FileNotFoundError(f"{workdir} has no final_metrics.json: run it (drop --no-run).")
    t0 = time.time()
    subprocess.run(train_command(name, workdir, seed, data_dir, extra), cwd=REPO, check=True)
    print(f"{name} seed {seed}: {time.time() - t0:.0f} s", flush=True)
  with open(path) as f:
    return json.load(f)
