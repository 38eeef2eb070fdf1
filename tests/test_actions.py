"""The outer loop's periodic actions, one at a time (the loop end to end: test_train.py,
test_fault_tolerance.py), and the Workdir layout and distribute.Runtime they use."""
import subprocess
import sys
import types

import pytest

from hypernet import config_lib

from hypernet.training import actions, distribute
from hypernet.training.workdir import Workdir


class _Writer:
  def __init__(self):
    self.points = []

  def scalars(self, step, values, split="train"):
    self.points.append((split, step, dict(values)))


def _state(step=0, total=100, **config):
  c = config_lib.base_config()
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = total, 10, 0, 50
  c.update_from_flattened_dict(config)
  trainer = types.SimpleNamespace(learning_rate=lambda: 0.5, saved=[],
                                  save=lambda s: trainer.saved.append(s))
  return c, actions.LoopState(trainer, c, Workdir("/w"), _Writer(), start=step, counts={},
                              t0=0.0, step=step)


def test_next_event_is_the_next_multiple_capped_at_the_end():
  assert [actions.next_event(s, 10, 25) for s in (0, 9, 10, 19, 20, 24)] == \
      [10, 10, 20, 20, 25, 25]
  assert actions.next_event(3, 0, 25) == 25  # Off: only the end.


def test_log_point_averages_every_step_since_the_last_and_a_rewind_drops_them():
  config, state = _state()
  log = actions.LogScalars(config)
  for step, sums in ((4, {"loss": (8.0, 4.0)}), (10, {"loss": (30.0, 6.0)})):
    state.step, state.now, state.chunk_sums = step, float(step), sums
    log.on_chunk(state)
    assert log.due(state) == (step == 10)
  log.last_t, log.last_step = 5.0, 5
  log(state)
  split, step, values = state.writer.points[-1]
  assert (split, step) == ("train", 10) and values["loss"] == pytest.approx(38.0 / 10)
  assert values["speed/steps_per_sec"] == pytest.approx(1.0)  # 5 steps in 5 s.
  assert values["optimizer/learning_rate"] == 0.5 and state.train_metrics["loss"] == 3.8
  state.chunk_sums = {"loss": (1e9, 1.0)}
  log.on_chunk(state)
  state.step = 12
  log.on_rewind(state)  # A skipped step: what was pending is dropped.
  assert log.pending == {} and log.last_step == 12


def test_checkpoint_and_evaluation_are_due_on_their_multiples_and_at_the_end():
  config, state = _state(eval_every=30)
  checkpoint, evaluate = actions.SaveCheckpoint(config, 0), actions.Evaluate(config)
  due = [s for s in range(1, 101) if (setattr(state, "step", s) or checkpoint.due(state))]
  assert due == [50, 100]
  assert [s for s in range(1, 101) if (setattr(state, "step", s) or evaluate.due(state))] \
      == [30, 60, 90, 100]
  state.step = 50
  checkpoint(state)
  assert state.trainer.saved == [50] and checkpoint.saved_step == 50
  state.step = 37
  checkpoint.on_rewind(state)  # The non-finite guard saved the skipped step.
  assert checkpoint.saved_step == 37


def test_console_pauses_nowhere_and_shows_lines_at_its_interval():
  config, state = _state(total=3000, log_every=100, eval_every=200)
  line = actions.ConsoleLine(config, ["loss"])
  assert line.every == 400 and line.next_stop(state) == 3000
  state.step = 300
  assert not line.due(state)
  state.train_metrics = {"loss": 1.0}
  assert line.due(state)


def test_workdir_layout_needs_no_tensorflow():
  code = ("import sys; from hypernet.training.workdir import Workdir; w = Workdir('/r'); "
          "print(w.config, w.final_metrics, w.checkpoint(30), w.unreadable, w.lock, "
          "w.run('eval'), w.run(''), w.resumed_config(20), w.eval_metrics(3), "
          "'tensorflow' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True).stdout.split()
  assert out == ["/r/config.json", "/r/final_metrics.json", "/r/checkpoints/ckpt-30",
                 "/r/checkpoints/unreadable", "/r/lock", "/r/eval", "/r",
                 "/r/config_resumed_at_20.json", "/r/eval_step3.json", "False"]


def test_runtime_owns_the_strategy_and_the_chief_writes_in_the_workdir(tmp_path):
  config = config_lib.base_config()
  config.distribution = "mirrored"  # conftest: two logical CPUs.
  runtime = distribute.Runtime(config, str(tmp_path))
  assert runtime.num_replicas == 2 and runtime.is_chief and not runtime.multi_worker
  assert runtime.write_dir == str(tmp_path) and runtime.cluster == []
  assert runtime.agree_stop(15) == [15] and runtime.agree_stop(None) == [0]
  config.dtype_policy = "float16"
  with pytest.raises(ValueError, match="config.dtype_policy='float16' is unsupported"):
    distribute.Runtime(config, str(tmp_path))
