"""The whole target generated from the support set (hypernet/meta/support_target.py).

Exact checks: with the gate at 0 the learner is the head-only support-conditioned
hypernetwork (same fast weights); with a gate the body weights follow
``w0 + gamma H(z)`` with ``z`` the support set's mean body feature (numpy); the
meta-gradient through the task embedding, the body's hypernetwork and the generated head
matches float64 central finite differences; the config trains in the one loop on real
few-shot episodes (scikit-learn digits) above chance and refuses wrong combinations.
"""
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.hypernetworks import MLPHypernetwork
from hypernet.meta import support_hypernet, support_target
from hypernet import config_lib
from hypernet.training import loop
from tests.test_meta import central_fd, small_bn_net
from tests.test_support_hypernet import LOSS, _query_loss, _task


def _learner(model, gate=0.0, **kwargs):
  hnet = MLPHypernetwork(functional.weight_spec(model, "body/kernel"), embedding_dim=2,
                         hidden=(3,), condition_dim=4, seed=5, dtype="float64")
  return support_target.SupportTargetHypernetwork(
      model, LOSS, hypernetwork=hnet, gate=gate, generator_widths=(3,), **kwargs)


def test_a_closed_gate_is_the_head_only_learner():
  model = small_bn_net()
  learner = _learner(model)
  head_only = support_hypernet.SupportHypernetwork(model, LOSS, generator_widths=(3,))
  sx, sy, _, _ = _task(0)
  fast, _ = learner.adapt(sx, sy)
  ref, _ = head_only.adapt(sx, sy)
  assert sorted(fast) == sorted(list(ref) + ["body/kernel"])
  for p in ref:
    np.testing.assert_allclose(fast[p].numpy(), ref[p].numpy(), rtol=1e-12, atol=1e-14)
  np.testing.assert_array_equal(fast["body/kernel"].numpy(),
                                model.get_layer("body").kernel.numpy())


def test_the_body_follows_w0_plus_gate_times_the_hypernetwork_of_the_task_embedding():
  model = small_bn_net()
  learner = _learner(model, gate=0.4)
  sx, sy, _, _ = _task(1)
  features = functional.functional_call(learner.body, {}, sx, training=True).numpy()
  z = features.mean(0)
  np.testing.assert_allclose(learner.task_embedding(sx).numpy(), z, rtol=1e-12)
  generated = learner.hypernetwork(tf.constant(z))["body/kernel"].numpy()
  fast, _ = learner.adapt(sx, sy)
  np.testing.assert_allclose(fast["body/kernel"].numpy(),
                             model.get_layer("body").kernel.numpy() + 0.4 * generated,
                             rtol=1e-12)
  # The head is generated from the prototypes of the task's own body.
  sub = {s: fast[f] for s, f in learner.split.body_paths.items() if f == "body/kernel"}
  own = functional.functional_call(learner.body, sub, sx, training=True)
  head = learner.generate_head(own, sy)
  np.testing.assert_allclose(fast["head/kernel"].numpy(), head["head/kernel"].numpy(),
                             rtol=1e-12)


@pytest.mark.parametrize("inner_steps", [0, 1])
def test_meta_gradient_matches_finite_differences(inner_steps):
  model = small_bn_net()
  learner = _learner(model, gate=0.5, inner_steps=inner_steps, inner_lr=0.3)
  rng = np.random.default_rng(2)
  for w, b in learner.generator:
    w.assign(0.3 * rng.normal(size=w.shape))
    b.assign(0.3 * rng.normal(size=b.shape))
  trained = [v for p, v in functional.variable_paths(model, trainable=True).items()
             if p not in learner.generated_paths]
  variables = trained + list(learner.trainable_variables)
  names = [v.name for v in learner.trainable_variables]
  assert "body_gate" in " ".join(names) and len(learner.hypernetwork.trainable_variables) > 0
  f = _query_loss(learner, _task(3))
  with tf.GradientTape() as tape:
    loss = f()
  grads = tape.gradient(loss, variables)
  fd = central_fd(tf.function(f), variables)  # Traced: the same values, ~10x less CPU.
  for v, g, n in zip(variables, grads, fd):
    assert g is not None, v.name
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-8, err_msg=v.name)


def test_wrong_hypernetworks_and_configs_are_refused():
  model = small_bn_net()
  outside = MLPHypernetwork(functional.weight_spec(model, "head/kernel"), condition_dim=4,
                            dtype="float64")
  with pytest.raises(ValueError, match=r"generates \['head/kernel'\], which are not "
                                       r"weights of the body"):
    support_target.SupportTargetHypernetwork(model, LOSS, hypernetwork=outside)
  wrong_dim = MLPHypernetwork(functional.weight_spec(model, "body/kernel"), condition_dim=3,
                              dtype="float64")
  with pytest.raises(ValueError, match=r"condition_dim=4, num_conditions=0\), got "
                                       r"condition_dim=3"):
    support_target.SupportTargetHypernetwork(model, LOSS, hypernetwork=wrong_dim)
  c = config_lib.base_config()
  c.task, c.data.name, c.model.name = "few_shot", "digits", "conv4"
  c.meta.body_hypernet = "chunked"
  with pytest.raises(config_lib.ConfigError, match=r"config\.meta\.body_hypernet='chunked' "
                                                   r".*got learner 'maml'"):
    config_lib.validate(c)


def test_trains_in_the_one_loop_on_digits_episodes(tmp_path):
  """5-way 1-shot on scikit-learn digits: the generated body and head learn, the gate
  opens, and the body's hypernetwork is sized by the config.hypernet fields."""
  c = config_lib.base_config()
  c.task, c.data.name = "few_shot", "digits"
  c.model.name, c.model.conv_widths = "conv4", (16, 16)
  c.meta.learner, c.meta.inner_steps = "support_hypernet", 0
  c.meta.body_hypernet, c.meta.body_targets = "chunked", "conv*/kernel"
  c.hypernet.chunk_size, c.hypernet.hidden = 256, (16,)
  c.meta.num_queries, c.meta.eval_queries, c.meta.eval_episodes = 3, 3, 40
  c.batch_size, c.eval_batch_size = 4, 20
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 40, 40, 0, 40
  c.optim.lr, c.optim.schedule, c.jit_compile = 3e-3, "constant", "false"
  config_lib.validate(c)
  assert "hypernet.chunk_size" in config_lib.used_fields(c)
  assert "hypernet.targets" not in config_lib.used_fields(c)
  trainer = loop.Trainer(c, str(tmp_path))
  learner = trainer.task.learner
  assert isinstance(learner, support_target.SupportTargetHypernetwork)
  assert learner.generated_body_paths == ["conv1/kernel", "conv2/kernel"]
  assert learner.hypernetwork.chunk_size == 256
  hnet_ids = {id(v) for v in learner.hypernetwork.trainable_variables}
  assert hnet_ids <= {id(v) for v in trainer.variables}
  before = trainer.evaluate()
  trainer.train_chunk(trainer.train_iterator(0), 40)
  after = trainer.evaluate()
  assert after["accuracy"] > before["accuracy"] + 0.1 and after["accuracy"] > 0.8
  assert abs(float(learner.gate.numpy())) > 0  # the generated body is used
  trainer.step.assign(40)
  trainer.manager.save(checkpoint_number=40)
  restored = loop.Trainer(c, str(tmp_path))
  assert restored.restore() == 40
  for a, b in zip(restored.task.learner.hypernetwork.trainable_variables,
                  learner.hypernetwork.trainable_variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert float(restored.task.learner.gate.numpy()) == float(learner.gate.numpy())
