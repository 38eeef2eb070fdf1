"""The command lines of the experiment and benchmark scripts: documented commands parse,
``--help`` exits 0 and lists the flags, bad input is one line and a non-zero exit status,
and the continual table skips unfinished runs. Fast: parsing, a 2-step run, fake workdirs.
"""
import json
import os
import subprocess
import sys

import pytest

from experiments import digits_sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Runs a module as __main__ with matplotlib absent (``import matplotlib`` fails).
NO_MATPLOTLIB = ("import runpy, sys; sys.modules['matplotlib'] = None; "
                 "mod = sys.argv[1]; sys.argv = [mod] + sys.argv[2:]; "
                 "runpy.run_module(mod, run_name='__main__', alter_sys=True)")


def _run(args, timeout=180, cwd=REPO):
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=timeout)


# -- experiments/chunked_diagnostics.py --------------------------------------------------
def test_chunked_diagnostics_parses_documented_commands(tmp_path):
  """``--config`` is a name from configs/ (not a config file): the module doc's and
  RESULTS_hypernets.md's commands, and no --config (digits_hyper), parse; from any
  working directory."""
  code = """if True:
    import sys
    from absl import flags
    from experiments import chunked_diagnostics as cd
    for argv in (
        ["cd", "--config=digits_hyper", "--steps=20", "--every=10", "--chunk_size=256",
         "--chunk_emb_dim=16", "--hidden=32", "--variants=direct:1e-3,chunked:1e-3"],
        ["cd", "--config=fmnist_chunked", "--data_dir=/data", "--variants="],
        ["cd"],
        ["cd", "--config=configs/digits_plain.py"]):
      flags.FLAGS.unparse_flags()
      assert cd.parse_flags(argv) == ["cd"], argv
      print(cd.config_path(flags.FLAGS.config), flags.FLAGS.variants,
            cd.load_config(flags.FLAGS.config).hypernet.kind)
  """
  out = _run(["-c", code], timeout=120, cwd=REPO)
  assert out.returncode == 0, out.stderr[-2000:]
  lines = out.stdout.splitlines()
  assert lines[0] == (f"{REPO}/configs/digits_hyper.py ['direct:1e-3', 'chunked:1e-3'] "
                      "chunked")
  assert lines[1] == f"{REPO}/configs/fmnist_chunked.py [] chunked"
  assert lines[2] == (f"{REPO}/configs/digits_hyper.py ['direct:1e-3', 'chunked:1e-3', "
                      "'chunked:3e-3'] chunked")  # The defaults.
  assert lines[3] == "configs/digits_plain.py ['direct:1e-3', 'chunked:1e-3', " \
                     "'chunked:3e-3'] none"


@pytest.mark.parametrize("arg, message", [
    ("--config=digits_hyperr", "--config=digits_hyperr: no config configs/digits_hyperr.py. "
                               "Did you mean digits_hyper?"),
    ("--bogus=1", "Unknown command line flag 'bogus'"),
])
def test_chunked_diagnostics_bad_flag_is_one_line(arg, message):
  out = _run(["-m", "experiments.chunked_diagnostics", arg], timeout=120)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-1] == f"chunked_diagnostics: error: {message}"
  assert "Traceback" not in out.stderr


def test_chunked_diagnostics_documented_command_runs_2_steps():
  out = _run(["-m", "experiments.chunked_diagnostics", "--config=digits_hyper", "--steps=2",
              "--every=1", "--chunk_size=256", "--chunk_emb_dim=16", "--hidden=32",
              "--variants=direct:1e-3,chunked:1e-3"], timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "| layer | direct:1e-3 | chunked:1e-3 |" in out.stdout
  assert "digits_hyper, 2 steps, seed 0" in out.stdout


# -- benchmarks ----------------------------------------------------------------------------
@pytest.mark.parametrize("script, expected", [
    ("trace_profile.py", ["--data_dir", "META_BATCH", "{second,first}"]),
    ("step_graph_ops.py", ["usage: step_graph_ops.py"]),
    ("step_breakdown.py", ["--steps:", "--repeats:", "--batch_size:"]),
    ("user_trace.py", ["--repeats", "--steps", "as shipped"]),
])
def test_benchmark_help_exits_0(script, expected, tmp_path):
  """--help prints the usage and exits 0 without running the benchmark, from any folder,
  and without importing TensorFlow (step_breakdown's once took 8 s for it); step_breakdown's
  flags (step_ratio's) show under --help, not only --helpfull."""
  out = _run(["-X", "importtime", os.path.join(REPO, "benchmarks", script), "--help"],
             cwd=tmp_path)
  imported = [l.rpartition("|")[2].strip() for l in out.stderr.splitlines()
              if l.startswith("import time:")]
  stderr = "\n".join(l for l in out.stderr.splitlines() if not l.startswith("import time:"))
  assert out.returncode == 0, stderr[-2000:]
  for text in expected:
    assert text in out.stdout
  assert " ops " not in out.stdout and "vars" not in out.stdout  # Did not run.
  assert "absl.flags" in imported or "argparse" in imported, imported[-20:]  # Recorded.
  assert "tensorflow" not in imported and "keras" not in imported, script


def test_each_benchmark_uses_only_what_its_sibling_modules_define():
  """``module.name`` in a benchmark, where ``module`` is another file of benchmarks/
  (``timing``, ``step_ratio``, ``torch_reference``, ...), names a top-level function,
  class or assignment of that file: a helper moved or renamed in one script fails here,
  not in the middle of a long run (step_breakdown.py once called a removed
  ``step_ratio._interleaved``)."""
  import ast  # pylint: disable=g-import-not-at-top
  folder = os.path.join(REPO, "benchmarks")
  scripts = {f[:-3]: os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")}
  defined = {}
  for name, path in scripts.items():
    names = set()
    for node in ast.parse(open(path).read()).body:
      if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        names.add(node.name)
      elif isinstance(node, (ast.Assign, ast.AnnAssign)):
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
          names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
      elif isinstance(node, (ast.Import, ast.ImportFrom)):
        names.update((a.asname or a.name).split(".")[0] for a in node.names)
    defined[name] = names
  missing, checked = [], 0
  for name, path in scripts.items():
    tree = ast.parse(open(path).read())
    imported = {(a.asname or a.name) for node in ast.walk(tree) if isinstance(node, ast.Import)
                for a in node.names if a.name in scripts and a.name != name}
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in imported):
        checked += 1
        if node.attr not in defined[node.value.id]:
          missing.append(f"{name}.py: {node.value.id}.{node.attr}")
  assert checked > 20 and not missing, missing


def test_trace_profile_without_arguments_prints_usage():
  out = _run([os.path.join(REPO, "benchmarks", "trace_profile.py")], timeout=60)
  assert out.returncode == 2
  assert "IndexError" not in out.stderr
  assert "the following arguments are required: order, META_BATCH" in out.stderr


# -- experiments/continual.py ----------------------------------------------------------------
def _fake_run(root, name, step, num_tasks=5, steps_per_task=1000, finished=True):
  workdir = os.path.join(root, f"{name}_s0")
  os.makedirs(workdir)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"num_steps": step, "continual": {
        "num_tasks": num_tasks, "steps_per_task": steps_per_task, "benchmark": "split",
        "classes_per_task": 2, "eval_examples_per_task": 0}}, f)
  metrics = {"accuracy": 0.9, "step": step, "wall_time_sec": 12.0,
             "params/compression_ratio": 0.0}
  if finished:
    matrix = [[0.99 if k <= t else -1.0 for k in range(num_tasks)] for t in range(num_tasks)]
    metrics.update({"cl1/final_accuracy": 0.95, "cl1/during_accuracy": 0.99,
                    "cl1/forgetting": 0.04, "cl3/final_accuracy": 0.5,
                    "cl3/forgetting": 0.3, "cl1/matrix": matrix,
                    "cl3/matrix": [[0.5 * max(v, -2) for v in row] for row in matrix]})
  with open(os.path.join(workdir, "final_metrics.json"), "w") as f:
    json.dump(metrics, f)
  return workdir


def test_continual_no_run_skips_unfinished_runs_and_creates_out(tmp_path):
  root = str(tmp_path / "root")
  _fake_run(root, "split_fmnist_finetune", 5000)
  stopped = _fake_run(root, "split_fmnist_hnet", 20, finished=False)
  out_dir = tmp_path / "new" / "plots"  # Does not exist yet.
  out = _run(["experiments/continual.py", "--no-run", f"--root={root}",
              f"--out={out_dir}"], timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "KeyError" not in out.stderr
  assert (f"skipping unfinished run {stopped}: stopped at step 20, 4980 of its 5000 steps "
          "missing") in out.stderr
  assert "| fine-tuning | 95.00 | 99.00 | 4.00 | 50.00 | 30.00 | – | – | 12 |" in out.stdout
  # Each seed with its binomial CI95 over 5 x 2,000 test images: 1.96 sqrt(.95 .05 / 1e4).
  assert "| fine-tuning | 95.00 ± 0.43 | 50.00 ± 0.98 |" in out.stdout
  assert "HNET" not in out.stdout
  assert os.path.getsize(out_dir / "continual_matrices_split.png") > 1000
  assert os.path.getsize(out_dir / "continual_curves_split.png") > 1000


def test_continual_mnist_reads_the_mnist_configs_runs(tmp_path):
  """``--dataset=mnist`` reads ``split_mnist_*`` runs (not the Fashion-MNIST ones), names
  MNIST in the table and writes its own plots; each seed's CI95 is over the MNIST test
  images of the tasks: at most 2,000 of each task's classes {0,1} 2,115, {2,3} 2,042,
  {4,5} 1,874, {6,7} 1,986, {8,9} 1,983 (the t10k label counts): 9,843."""
  root = str(tmp_path / "root")
  workdir = _fake_run(root, "split_mnist_finetune", 5000)
  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  config["continual"]["eval_examples_per_task"] = 2000
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump(config, f)
  _fake_run(root, "split_fmnist_hnet", 5000)
  out_dir = tmp_path / "plots"
  out = _run(["experiments/continual.py", "--no-run", "--dataset=mnist", f"--root={root}",
              f"--out={out_dir}"], timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "### split MNIST (seeds per method: 1)" in out.stdout
  assert "HNET" not in out.stdout            # The Fashion-MNIST run is not read.
  half = 196 * (0.5 * 0.5 / 9843) ** 0.5     # CL3 0.5 over 9,843 images: 0.988 points
  assert f"| fine-tuning | 95.00 ± 0.43 | 50.00 ± {half:.2f} |" in out.stdout
  assert f"{half:.2f}" != f"{196 * (0.25 / 10000) ** 0.5:.2f}"   # Not the 10,000 of F-MNIST.
  assert sorted(os.listdir(out_dir)) == ["continual_curves_mnist_split.png",
                                         "continual_matrices_mnist_split.png"]


def test_continual_no_run_on_an_empty_root_fails(tmp_path):
  out = _run(["experiments/continual.py", "--no-run", f"--root={tmp_path}",
              f"--out={tmp_path}"], timeout=60)
  assert out.returncode == 1
  assert f"no finished runs under {tmp_path}" in out.stderr
  assert not out.stdout.strip()


# -- matplotlib missing ------------------------------------------------------------------------
def test_digits_sweep_without_matplotlib_fails_before_training(tmp_path):
  out_dir = tmp_path / "sweep"
  out = _run(["-c", NO_MATPLOTLIB, "experiments.digits_sweep", f"--out={out_dir}",
              "--preset=smoke"], timeout=120)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-1] == (
      'digits_sweep: error: the plots need matplotlib, which is not installed: '
      'pip install -e ".[plots]"')
  assert not out_dir.exists()  # Nothing trained.


def test_continual_without_matplotlib_fails_before_training(tmp_path):
  out = _run(["-c", NO_MATPLOTLIB, "experiments.continual", f"--root={tmp_path}",
              "--benchmarks=split", "--methods=finetune"], timeout=60)
  assert out.returncode == 1
  assert 'pip install -e ".[plots]"' in out.stderr.strip().splitlines()[-1]
  assert not os.listdir(tmp_path)


def test_digits_sweep_writes_table_and_json_before_plotting(tmp_path, monkeypatch):
  row = dict(name="plain_8-16", kind="plain", trainable=100, target=100, compression=1.0,
             accuracy=0.9, accuracy_std=0.0, loss=0.3, wall_time_sec=1.0,
             command="python -m hypernet.train", curves={}, workdirs=[], steps=2, seeds=[0])
  # Plotting fails, also when an earlier test imported experiments.plots already.
  import experiments  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(sys.modules, "experiments.plots", None)
  monkeypatch.delattr(experiments, "plots", raising=False)
  with pytest.raises(ImportError):
    digits_sweep.write_outputs([row], str(tmp_path))
  assert "| plain_8-16 | plain | 100 | 100 | 1.00 | 90.00 |" in (
      tmp_path / "results.md").read_text()
  assert json.loads((tmp_path / "results.json").read_text())[0]["name"] == "plain_8-16"
