"""experiments/digits_sweep.py writes the table, the JSON and the PNG plots, and its
listed commands reproduce its runs' configs exactly."""
import importlib
import json
import os
import shlex
import sys

from absl import flags
from ml_collections import config_flags
import numpy as np
from PIL import Image
import pytest

from experiments import digits_sweep
from hypernet import config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def assert_commands_give_the_runs_configs(rows, monkeypatch):
  """Each row's ``command``, parsed as ``hypernet.train`` parses it, gives the config
  saved in its first workdir."""
  for r in rows:
    parts = shlex.split(r["command"])
    assert parts[:3] == ["python", "-m", "hypernet.train"]
    assert parts[4] == f"--workdir={r['workdirs'][0]}"
    argv = ["train", parts[3].replace("configs/", f"{REPO}/configs/")] + parts[5:]
    monkeypatch.setattr(sys, "argv", argv)
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, flag_values=fv, lock_config=True)
    fv(argv)
    with open(os.path.join(r["workdirs"][0], "config.json")) as f:
      saved = config_lib.config_from_dict(json.load(f))
    assert config_lib.flatten(saved) == config_lib.flatten(fv.config), r["command"]


def test_smoke_sweep_writes_table_and_plots(tmp_path, monkeypatch):
  rows = digits_sweep.run_sweep(str(tmp_path), "smoke", steps=40, seeds=[0])
  paths = digits_sweep.write_outputs(rows, str(tmp_path))
  assert [r["name"] for r in rows] == ["plain_8-16", "hyper_c128"]
  assert [r["kind"] for r in rows] == ["plain", "hypernetwork"]

  table = open(paths["table"]).read()
  for r in rows:
    with open(os.path.join(r["workdirs"][0], "final_metrics.json")) as f:
      final = json.load(f)
    assert final["step"] == 40
    assert r["trainable"] == final["params/trainable"] and r["accuracy"] == final["accuracy"]
    assert (f"| {r['name']} | {r['kind']} | {final['params/trainable']:,} | "
            f"{final['params/target']:,} | {final['params/target'] / final['params/trainable']:.2f}"
            f" | {100 * final['accuracy']:.2f} |") in table
    steps = [s for s, _ in r["curves"]["eval_accuracy"]]
    assert steps == list(range(0, 41, 4))  # Eval at step 0 too.
    assert r["curves"]["eval_accuracy"][-1][1] == np.float32(final["accuracy"])
  assert rows[0]["trainable"] == rows[0]["target"]  # plain: every target weight trained
  assert rows[1]["target"] > 5 * rows[1]["trainable"]  # hypernetwork: compresses
  assert json.load(open(paths["json"]))[1]["trainable"] == rows[1]["trainable"]

  for key in ("accuracy_vs_params", "learning_curves"):
    image = np.asarray(Image.open(paths[key]).convert("L"), np.float32)
    assert image.shape[0] >= 400 and image.shape[1] >= 700
    assert image.std() > 10  # Drawn on, not blank.

  assert_commands_give_the_runs_configs(rows, monkeypatch)

  # A rerun reuses the finished runs.
  mtime = os.path.getmtime(os.path.join(rows[1]["workdirs"][0], "final_metrics.json"))
  again = digits_sweep.run_sweep(str(tmp_path), "smoke", steps=40, seeds=[0])
  assert [r["accuracy"] for r in again] == [r["accuracy"] for r in rows]
  assert os.path.getmtime(os.path.join(rows[1]["workdirs"][0], "final_metrics.json")) == mtime


@pytest.mark.parametrize("script", ["digits_sweep", "compression_frontier", "continual",
                                    "chunked_diagnostics", "meta_seeds", "omniglot_standard",
                                    "omniglot_learners", "fewshot_transformer"])
def test_help_exits_0(script):
  """Every experiment script starts (its flags do not clash with those of a script it
  imports: compression_frontier imports digits_sweep)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  out = subprocess.run([sys.executable, "-m", f"experiments.{script}", "--help"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "--" in out.stdout + out.stderr


def test_hyper_c128_starts_at_a_chance_level_loss():
  """The sweep's smallest hypernetwork (128-scalar chunks, 16 hidden units) started at a
  digits training loss of ~45 nats: the mean of its ReLU features was one pattern
  repeated in every chunk. Centred at init, each raw output position has mean 0 over the
  chunks and the loss starts near chance (ln 10 = 2.3; measured 3.6, 2.6, 2.4)."""
  import keras  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import protocol# pylint: disable=g-import-not-at-top
  name, config_name, overrides = digits_sweep.PRESETS["full"][4]
  assert name == "hyper_c128"
  for seed in (0, 1, 2):
    config = digits_sweep.load_config(config_name)
    config.update_from_flattened_dict(dict(overrides, seed=seed))
    keras.utils.set_random_seed(seed)
    task = protocol.build_task(config)
    hnet = task.source.hypernetwork
    raw = hnet.output_head(hnet._features()).numpy().astype(np.float64)  # [chunks, 128]
    np.testing.assert_allclose(raw.mean(axis=0), 0.0, atol=1e-5)
    assert 0.9 < raw.std() < 1.1  # Unit variance, as the hyperfan init intends.
    batch = next(iter(task.train_dataset(256, seed, 0)))
    loss, _, _ = task.train_loss(batch, 256)
    assert float(loss) < 4.0, (seed, float(loss))


def test_meta_seeds_table_gives_each_seed_its_interval_and_the_mean_over_seeds(tmp_path):
  from experiments import meta_seeds, seed_runs
  runs = {0: {"accuracy": 0.9, "accuracy_ci95": 0.006, "one_shot_error": 0.0875,
              "wall_time_sec": 480.0},
          1: {"accuracy": 0.92, "accuracy_ci95": 0.005, "one_shot_error": 0.0625,
              "wall_time_sec": 600.0}}
  text = meta_seeds.table({"omniglot_20way_support_hypernet": runs})
  # 1.96 sqrt(p (1 - p) / 400) at p = 0.0875: 2.77 points; 35 of 400 queries.
  assert "| 0 | 90.00% +- 0.60 | 8.75% +- 2.77 (35 of 400) | 8.0 min |" in text
  # mean +- sample sd: 91.00 +- 1.41 and 7.50 +- 1.77.
  assert "**91.00 +- 1.41** | **7.50 +- 1.77**" in text
  assert seed_runs.train_command("omniglot_support_hypernet", "/w", 2, "/d", ["--x=1"])[-3:] \
      == ["--config.data.data_dir=/d", "--config.seed=2", "--x=1"]
  with pytest.raises(FileNotFoundError, match="omniglot_support_hypernet_s1 has no final"):
    meta_seeds.run("omniglot_support_hypernet", 1, str(tmp_path), "/d", execute=False)


def _fake_standard_run(root, name, seed, accuracies, config, start_step=0):
  """A finished run's files as python -m hypernet.train and hypernet.evaluate leave them:
  config.json, final_metrics.json (the config's own setting), eval_<setting>.json for
  the other settings, and the eval/ TensorBoard events of its held-out accuracy."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from experiments import omniglot_standard  # pylint: disable=g-import-not-at-top
  workdir = os.path.join(root, f"{name}_s{seed}")
  os.makedirs(workdir)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort())
  own = (config.meta.num_ways, config.meta.num_shots)
  for (setting, ways, shots), (acc, ci) in zip(omniglot_standard.SETTINGS, accuracies):
    if (ways, shots) == own:
      own_accuracy = acc
      with open(os.path.join(workdir, "final_metrics.json"), "w") as f:
        json.dump({"accuracy": acc, "accuracy_ci95": ci, "step": 5000,
                   "start_step": start_step, "wall_time_sec": 600.0 * (seed + 1)}, f)
    else:
      with open(os.path.join(workdir, f"eval_{setting}.json"), "w") as f:
        json.dump({"accuracy": acc, "accuracy_ci95": ci, "eval_wall_time_sec": 30.0}, f)
  with tf.summary.create_file_writer(os.path.join(workdir, "eval")).as_default():
    for step in (0, 1000, 5000):
      tf.summary.scalar("accuracy", own_accuracy * step / 5000, step=step)


def test_omniglot_standard_tables_each_seed_in_four_settings_against_the_targets(tmp_path):
  """experiments/omniglot_standard.py --no-run on fake finished runs: each seed's
  accuracy +- CI95 per setting, the mean +- sample sd (NumPy), the target and the
  signed gap, the published numbers, the commands and the learning-curve PNG."""
  from experiments import omniglot_standard  # pylint: disable=g-import-not-at-top
  name = "omniglot_standard_support_hypernet"
  config = config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))
  assert omniglot_standard._own_setting(json.loads(config.to_json_best_effort()), 5, 1)
  accs = {0: [(0.9955, 0.0010), (0.9990, 0.0003), (0.9760, 0.0015), (0.9940, 0.0005)],
          1: [(0.9945, 0.0011), (0.9994, 0.0002), (0.9790, 0.0014), (0.9930, 0.0006)]}
  for seed, values in accs.items():   # Seed 1 resumed at step 1,000.
    _fake_standard_run(str(tmp_path / "root"), name, seed, values, config, 1000 * seed)
  out = tmp_path / "out"
  omniglot_standard.main(["--no-run", f"--root={tmp_path / 'root'}", "--seeds=0,1",
                          f"--out={out}", "--data_dir=/d"])
  text = (out / "omniglot_standard.md").read_text()
  assert "| 0 | 99.55 +- 0.10 | 99.90 +- 0.03 | 97.60 +- 0.15 | 99.40 +- 0.05 | 10.0 min " \
         "| 1.5 min |" in text
  assert "| 1 | 99.45 +- 0.11 | 99.94 +- 0.02 | 97.90 +- 0.14 | 99.30 +- 0.06 | 20.0 min " \
         "(steps 1,000-5,000) | 1.5 min |" in text
  means = [100 * np.mean([accs[s][i][0] for s in accs]) for i in range(4)]
  sds = [100 * np.std([accs[s][i][0] for s in accs], ddof=1) for i in range(4)]
  assert "| mean +- sd (2 seeds) | " + " | ".join(
      f"**{m:.2f} +- {sd:.2f}**" for m, sd in zip(means, sds)) + " | | |" in text
  assert "| target (above MAML++) | >= 99.5 | >= 99.93 | >= 97.7 | >= 99.35 | | |" in text
  # 99.50 - 99.5 = +0.00 met; 99.92 - 99.93 missed by 0.01; 97.75 met; 99.35 met.
  assert "| mean - target | +0.00 (met) | -0.01 (missed) | +0.05 (met) | +0.00 (met) |" \
         in text
  assert "| MAML++ (Antoniou et al. 2019) | 99.47 | 99.93 | 97.65 | 99.33 |" in text
  assert "| Prototypical Networks (Snell et al. 2017) | 98.8 | 99.7 | 96 | 98.9 |" in text
  assert f"--config=configs/{name}.py" in text and "--set=meta.num_ways=20" in text
  image = np.asarray(Image.open(out / f"{name}_seeds.png").convert("L"), np.float32)
  assert image.std() > 10  # Drawn on, not blank.
  # The evaluation command a missing setting gets; --no-run names the missing file.
  assert omniglot_standard.eval_command("/w", 20, 5, "/w/e.json", "/d", 10)[3:] == [
      "--workdir=/w", "--output=/w/e.json", "--data_dir=/d", "--set=meta.num_ways=20",
      "--set=meta.num_shots=5", "--set=meta.eval_episodes=1000", "--set=meta.eval_queries=15",
      "--set=eval_batch_size=10"]
  # 50 episodes x 5 ways x 16 images = 4,000 images a batch: 20-way 5-shot takes 10.
  assert omniglot_standard.eval_batch_size(json.loads(config.to_json_best_effort()), 20, 5) \
      == 10
  os.remove(tmp_path / "root" / f"{name}_s1" / "eval_20w1s.json")
  with pytest.raises(FileNotFoundError, match=r"eval_20w1s\.json does not exist: evaluate"):
    omniglot_standard.main(["--no-run", f"--root={tmp_path / 'root'}", "--seeds=0,1",
                            f"--out={out}"])


def test_omniglot_learners_tables_each_learner_and_draws_a_curve_per_learner(tmp_path,
                                                                           monkeypatch):
  """experiments/omniglot_learners.py --no-run on fake finished runs of the four CPU
  configs (two seeds of MAML): each run's accuracy +- CI95, its own meta-steps x
  meta-batch and meta-test (its config.json), the wall time, MAML's mean +- sample sd
  (NumPy), the published numbers with the full-budget configs, the commands; one PNG
  with a line per seed of each learner and, dashed, the reference runs that are finished
  (the hypernetwork's here; ProtoNets' is missing and left out)."""
  from experiments import omniglot_learners, plots  # pylint: disable=g-import-not-at-top
  root, refs, out = tmp_path / "root", tmp_path / "refs", tmp_path / "out"
  accs = {"omniglot_standard_maml": {0: (0.9412, 0.0051), 1: (0.9388, 0.0049)},
          "omniglot_standard_fomaml": {0: (0.9301, 0.0055)},
          "omniglot_standard_anil": {0: (0.9123, 0.0061)},
          "omniglot_standard_mamlpp": {0: (0.9607, 0.0046)}}
  for name, by_seed in accs.items():
    config = config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))
    for seed, (acc, ci) in by_seed.items():
      _fake_standard_run(str(root), name, seed, [(acc, ci)], config)
  hnet = "omniglot_standard_support_hypernet"
  _fake_standard_run(str(refs), hnet, 0, [(0.9928, 0.0012)], config_lib.load_config_file(
      os.path.join(REPO, "configs", f"{hnet}.py")))
  drawn = []
  real = plots.heldout_accuracy_curves
  monkeypatch.setattr(plots, "heldout_accuracy_curves",
                      lambda lines, *a: drawn.append(lines) or real(lines, *a))
  omniglot_learners.main(["--no-run", f"--root={root}", "--seeds=0,1", f"--out={out}",
                          f"--references_root={refs}", "--data_dir=/d",
                          "--configs=omniglot_standard_maml"])
  text = (out / "omniglot_learners.md").read_text()
  # _fake_standard_run's wall time: 600 s x (seed + 1).
  assert ("| MAML, second order (Finn et al. 2017) (`omniglot_standard_maml`) | 1 | 5,000 x 8 "
          "| 93.88 +- 0.49 | 1,000 episodes x 15 queries | 20.0 min | 98.7 "
          "(`omniglot_standard_maml_full`) |") in text
  mean, sd = 100 * np.mean([0.9412, 0.9388]), 100 * np.std([0.9412, 0.9388], ddof=1)
  assert f"| mean +- sd (2) | | **{mean:.2f} +- {sd:.2f}** |" in text
  assert ("--config=configs/omniglot_standard_maml.py "
          f"--workdir={root}/omniglot_standard_maml_sSEED --config.data.data_dir=/d "
          "--config.seed=SEED") in text
  assert [(l["label"], len(l["workdirs"]), l.get("dashed", False)) for l in drawn[0]] == [
      ("MAML, second order (Finn et al. 2017) (8 x 5-way a step)", 2, False),
      ("support-conditioned hypernetwork (2 x 60-way a step)", 1, True)]

  omniglot_learners.main(["--no-run", f"--root={root}", "--seeds=0", f"--out={out}",
                          f"--references_root={refs}", "--data_dir=/d"])
  text = (out / "omniglot_learners.md").read_text()
  assert ("| MAML++ (Antoniou et al. 2019) (`omniglot_standard_mamlpp`) | 0 | 1,000 x 8 | "
          "96.07 +- 0.46 | 1,000 episodes x 15 queries | 10.0 min | 99.47 "
          "(`omniglot_standard_mamlpp_full`) |") in text
  assert "| ANIL (Raghu et al. 2020) (`omniglot_standard_anil`) | 0 | 5,000 x 8 | 91.23 +- " \
         "0.61 | 1,000 episodes x 15 queries | 10.0 min |  |" in text
  assert "mean +- sd" not in text  # One seed: no spread to state.
  assert [l["label"] for l in drawn[1]] == [
      "MAML, second order (Finn et al. 2017) (8 x 5-way a step)",
      "first-order MAML (Finn et al. 2017) (8 x 5-way a step)",
      "ANIL (Raghu et al. 2020) (8 x 5-way a step)",
      "MAML++ (Antoniou et al. 2019) (8 x 5-way a step)",
      "support-conditioned hypernetwork (2 x 60-way a step)"]
  image = np.asarray(Image.open(out / "omniglot_learners.png").convert("L"), np.float32)
  assert image.std() > 10  # Drawn on, not blank.
  with pytest.raises(FileNotFoundError, match="omniglot_standard_maml_s2 has no final"):
    omniglot_learners.main(["--no-run", f"--root={root}", "--seeds=2", f"--out={out}"])


def test_fewshot_transformer_runs_on_omniglot_and_tables_it(tmp_path, data_dir):
  """experiments/fewshot_transformer.py on real Omniglot drawings (the 20-alphabet
  images_background_small1.zip, 20 characters held out, to stay fast), a tiny
  transformer: two meta-steps of Prototypical Networks, then the support-set adapters
  on its frozen base; each scored on two episodes. The table has a row per run with its
  parameters and the command; the frozen run trains the generator alone (its saved base
  is protonet's, bit for bit); the history is the query loss (not MetaModel's old 0.0);
  a second call reads the finished runs."""
  from experiments import fewshot_transformer as ft  # pylint: disable=g-import-not-at-top
  root, out = tmp_path / "root", tmp_path / "out"
  tiny = dict(width=16, heads=2, blocks=1, mlp_width=16)
  argv = [f"--data_dir={data_dir / 'omniglot'}", f"--root={root}", f"--out={out}",
          "--methods=protonet,frozen_adapter", "--steps=2", "--log_every=1",
          "--meta_batch=2", "--eval_episodes=2", "--eval_batch=2", "--eval_queries=2",
          "--rank=1", "--generator_widths=4", "--zips=images_background_small1.zip",
          "--num_test_characters=20"] + [f"--{k}={v}" for k, v in tiny.items()]
  results = ft.main(argv)
  proto, frozen = results["protonet"][0], results["frozen_adapter"][0]
  for r in (proto, frozen):
    assert r["steps"] == 2 and r["curve"]["step"] == [1, 2]
    assert min(r["curve"]["loss"]) > 0.1
    assert r["5w1s"]["episodes"] == r["5w5s"]["episodes"] == 2
    assert 0 <= r["5w1s"]["accuracy"] <= 1
  head = 16 * 5 + 5
  assert proto["trainable_parameters"] == proto["target_parameters"] - head
  assert frozen["trainable_parameters"] == frozen["generator_parameters"] > 0
  weights = []
  for method in ("protonet", "frozen_adapter"):
    model, _ = ft.make_transformer(**tiny, seed=1)
    model.load_weights(str(root / f"{method}_s0" / "base.weights.h5"))
    weights.append([v.numpy() for v in model.weights])
  for a, b in zip(*weights):
    np.testing.assert_array_equal(a, b)
  text = (out / "fewshot_transformer.md").read_text()
  assert f"| {ft.LABELS['protonet']} (`protonet`) | 0 | {100 * proto['5w1s']['accuracy']:.2f}" \
      in text
  assert f"| {frozen['trainable_parameters']:,} |" in text
  assert ("python experiments/fewshot_transformer.py "
          f"--data_dir={data_dir / 'omniglot'} --root={root} "
          "--methods=protonet,frozen_adapter --seeds=0 --steps=2 --meta_batch=2") in text
  assert len(frozen["5w1s"]["per_episode"]) == 2
  assert (root / "frozen_adapter_s0" / "meta.weights.h5").exists()   # With the generator.
  mean, _ = ft.paired(frozen["5w1s"]["per_episode"], proto["5w1s"]["per_episode"])
  assert f"| (3) - (1) (= (3) - its base with adapters off) | 0 | {100 * mean:+.2f} +- " \
      in text
  assert ft.paired([1.0, 0.5, 1.0], [0.5, 0.5, 0.0])[0] == pytest.approx(0.5)
  stats = frozen["adapter_stats"]
  assert stats["episodes"] == 2 and stats["relative_update"] > 0
  assert 0 < stats["task_specific_share"] <= 1 and stats["embedding_spread"] > 0
  assert "adapter_stats" not in proto
  assert f"| `frozen_adapter` | 0 | {stats['relative_update']:.4f} |" in text
  assert ft.main(argv + ["--no-run"]) == results
  with pytest.raises(FileNotFoundError, match="support_adapter_s0 has no result.json"):
    ft.main(argv + ["--no-run", "--methods=support_adapter"])


def test_fewshot_transformer_pools_paired_differences_over_seeds():
  """With several seeds the differences table has each seed's row, the mean +- sd over
  the seeds' mean differences and the seeds pooled: the per-episode difference averaged
  over the seeds, its CI95 over the (shared) episodes."""
  from experiments import fewshot_transformer as ft  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)

  def run(p):
    return {n: {"per_episode": list((rng.random(50) < p).astype(float))}
            for n, _, _ in ft.SETTINGS}

  results = {"protonet": {s: run(0.5) for s in (0, 1, 2)},
             "protonet_continued": {s: run(0.8) for s in (0, 1, 2)}}
  text = ft.differences(results)
  label = "(1) continued - (1)"
  n = "5w1s"
  per_seed = [np.subtract(results["protonet_continued"][s][n]["per_episode"],
                          results["protonet"][s][n]["per_episode"]) for s in (0, 1, 2)]
  means = [d.mean() for d in per_seed]
  for s in (0, 1, 2):
    assert f"| {label} | {s} | {100 * means[s]:+.2f} +- " in text
  assert (f"| {label}: mean +- sd | 3 seeds | **{100 * np.mean(means):+.2f} +- "
          f"{100 * np.std(means, ddof=1):.2f}** |") in text
  mean, ci = ft.pooled(per_seed)
  assert mean == pytest.approx(np.mean(means))
  pooled_d = np.mean(per_seed, axis=0)
  assert ci == pytest.approx(1.96 * pooled_d.std(ddof=1) / np.sqrt(50), rel=1e-4)
  assert f"| {label}: seeds pooled, +- CI95 | 3 seeds x 50 episodes | {100 * mean:+.2f} +- " \
      f"{100 * ci:.2f} |" in text
  assert "(2) - (1)" not in text    # No support_adapter runs: no such rows.


@pytest.mark.parametrize("script", ["meta_seeds", "omniglot_learners", "omniglot_standard"])
def test_a_lever_run_never_writes_over_the_committed_tables(script, tmp_path, capsys):
  """With further flags (``--set``) and the default ``--out`` (the committed tables'
  folder) the scripts refuse in one line naming ``--out`` before running or reading
  anything; with ``--out`` given they go on (here: to the missing runs' error)."""
  module = importlib.import_module(f"experiments.{script}")
  args = ["--no-run", f"--root={tmp_path / 'root'}", "--seeds=0",
          "--set=--config.num_steps=20"]
  with pytest.raises(SystemExit):
    module.main(args)
  err = capsys.readouterr().err
  assert "--set changes the runs" in err and "pass --out=DIR" in err
  with pytest.raises(FileNotFoundError):
    module.main(args + [f"--out={tmp_path / 'out'}"])
  assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
