"""Any Keras model as a target: Sequential, Functional, subclassed, nested, a
keras.applications MobileNetV2; generated weights chosen by patterns, the rest trained
directly or frozen; BatchNorm state carried in training and inference mode."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.tasks import targets
from hypernet.hypernetworks import source as sources
from hypernet.hypernetworks.chunked import ChunkedHypernetwork
from hypernet.hypernetworks.mlp import MLPHypernetwork


def sequential():
  return keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(4, 3, activation="relu", name="conv"),
      keras.layers.Flatten(),
      keras.layers.Dense(3, name="head"),
  ], name="seq")


def functional_model():
  x = keras.Input((8, 8, 1))
  a = keras.layers.Conv2D(4, 3, padding="same", name="conv_a")(x)
  b = keras.layers.Conv2D(4, 1, name="conv_b")(x)
  h = keras.layers.Add()([a, b])
  h = keras.layers.GlobalAveragePooling2D()(h)
  return keras.Model(x, keras.layers.Dense(3, name="head")(h), name="func")


class Subclassed(keras.Model):

  def __init__(self):
    super().__init__(name="sub")
    self.conv = keras.layers.Conv2D(4, 3, name="conv")
    self.pool = keras.layers.GlobalAveragePooling2D()
    self.head = keras.layers.Dense(3, name="head")

  def call(self, x, training=None):  # main's functional_call always passes training=
    del training
    return self.head(self.pool(tf.nn.relu(self.conv(x))))


def subclassed():
  m = Subclassed()
  m(tf.zeros((1, 8, 8, 1)))
  return m


def nested():
  backbone = keras.Sequential([keras.Input((8, 8, 1)),
                               keras.layers.Conv2D(4, 3, name="conv"),
                               keras.layers.GlobalAveragePooling2D()], name="backbone")
  x = keras.Input((8, 8, 1))
  return keras.Model(x, keras.layers.Dense(3, name="head")(backbone(x)), name="outer")


BUILDERS = {"sequential": sequential, "functional": functional_model,
            "subclassed": subclassed, "nested": nested}


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("train_rest", [True, False])
def test_generated_weights_drive_any_keras_model(name, train_rest):
  model = BUILDERS[name]()
  paths = list(functional.variable_paths(model, trainable=True))
  spec = functional.weight_spec(model, "*conv*/kernel")     # conv kernels only
  assert spec and all("conv" in p and p.endswith("kernel") for p in spec)
  hnet = ChunkedHypernetwork(spec, chunk_size=16, chunk_emb_dim=4, hidden=(8,))
  source = sources.HypernetworkSource(model, hnet, train_rest=train_rest)
  rest = [p for p in paths if p not in spec]
  direct = functional.variable_paths(model, trainable=True)
  assert [v.path for v in source.direct_target_variables] == \
      ([direct[p].path for p in rest] if train_rest else [])
  x = tf.random.stateless_normal((2, 8, 8, 1), [0, 1])
  with tf.GradientTape() as tape:
    w = source.weights()
    y = functional.functional_call(model, w, x)
    loss = tf.reduce_sum(y ** 2)
  grads = tape.gradient(loss, source.trainable_variables)
  assert all(g is not None and float(tf.reduce_max(tf.abs(tf.convert_to_tensor(g)))) > 0
             for g in grads)
  # Same output as the model itself with those values written into its variables.
  variables = functional.variable_paths(model)
  saved = {p: variables[p].numpy() for p in w}
  for p, t in w.items():
    variables[p].assign(t)
  np.testing.assert_allclose(y.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
  for p, v in saved.items():
    variables[p].assign(v)


def test_nested_paths_and_unknown_pattern():
  model = nested()
  paths = list(functional.variable_paths(model, trainable=True))
  assert any(p.endswith("conv/kernel") for p in paths) and "head/kernel" in paths
  with pytest.raises(ValueError, match=r"Pattern 'backbone/dense\*' matches no .*Available"):
    functional.weight_spec(model, "backbone/dense*")


def test_mobilenet_v2_target_with_generated_kernels():
  model = targets.make_mobilenet_v2((28, 28, 1), 10, alpha=0.35, image_size=32)
  assert any(isinstance(l, keras.Model) for l in model.layers)        # nested application
  spec = functional.weight_spec(model, "re:(?!head/).*kernel")
  conv_layers = [l for l in model.get_layer(index=2).layers
                 if isinstance(l, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D))]
  assert len(spec) == len(conv_layers) == 52
  values = {p: v.numpy() for p, v in functional.variable_paths(model).items() if p in spec}
  hnet = ChunkedHypernetwork(spec, target_values=values, chunk_size=2048, chunk_emb_dim=16,
                             hidden=(32,))
  source = sources.HypernetworkSource(model, hnet)
  # Depthwise kernels [3, 3, C, 1] start with the He variance of fan_in = 9. They fill
  # about 12 of the 187 chunks, whose generator features (32 hidden units) differ in
  # size: over hypernetwork seeds 0-5 the ratio measured 0.94-1.32 (1.20 for seed 0;
  # 0.95-1.27 before the generator's features were centred).
  w = source.weights()
  dw = np.concatenate([w[p].numpy().ravel() for p in spec if "depthwise" in p])
  assert 0.7 < np.var(dw) / (2 / 9) < 1.4
  x = tf.random.stateless_uniform((4, 28, 28, 1), [2, 3])
  with tf.GradientTape() as tape:
    logits, state = functional.functional_call(model, source.weights(), x, training=True,
                                               return_state=True)
    loss = tf.reduce_sum(logits ** 2)
  assert logits.shape == (4, 10) and np.all(np.isfinite(logits.numpy()))
  grads = tape.gradient(loss, source.trainable_variables)
  assert all(g is not None for g in grads)
  means = {p: v for p, v in state.items() if p.endswith("moving_mean")}
  assert len(means) == 52 and not np.allclose(means["bn_Conv1/moving_mean"], 0.0)
  _, state_inf = functional.functional_call(model, w, x, training=False, return_state=True)
  for p, v in functional.variable_paths(model, trainable=False).items():
    np.testing.assert_array_equal(state_inf[p].numpy(), v.numpy())


# ----------------------------------------------------------------------------------------
# BatchNorm in targets: generated gamma/beta, moving statistics carried as state.
# ----------------------------------------------------------------------------------------

def bn_model():
  return keras.Sequential([keras.Input((1,)),
                           keras.layers.BatchNormalization(momentum=0.99, epsilon=1e-3,
                                                           name="bn")], name="bn_target")


def bn_source(model):
  spec = functional.weight_spec(model, "bn/gamma,bn/beta")
  values = {p: v.numpy() for p, v in functional.variable_paths(model).items() if p in spec}
  hnet = MLPHypernetwork(spec, target_values=values, embedding_dim=2, hidden=(4,))
  # W = gain * (H h + b) + mean with H = b = 0: gamma 1, beta 0.
  hnet.head.kernel.assign(tf.zeros_like(hnet.head.kernel))
  return sources.HypernetworkSource(model, hnet), hnet


def test_batchnorm_exact_values_with_generated_gamma_beta():
  model = bn_model()
  source, hnet = bn_source(model)
  w = source.weights()
  assert float(w["bn/gamma"][0]) == 1.0 and float(w["bn/beta"][0]) == 0.0
  x = tf.constant([[2.0], [2.0]])

  y, state = functional.functional_call(model, w, x, training=True, return_state=True)
  np.testing.assert_allclose(y.numpy(), [[0.0], [0.0]], atol=1e-7)
  np.testing.assert_allclose(state["bn/moving_mean"].numpy(), [0.02], rtol=1e-6)
  np.testing.assert_allclose(state["bn/moving_variance"].numpy(), [0.99], rtol=1e-6)

  y, same = functional.functional_call(model, w, x, training=False, return_state=True)
  np.testing.assert_allclose(y.numpy(), [[2 / np.sqrt(1.001)]] * 2, rtol=1e-6)
  np.testing.assert_array_equal(same["bn/moving_mean"].numpy(), [0.0])
  np.testing.assert_array_equal(same["bn/moving_variance"].numpy(), [1.0])

  # Feeding the state back continues the moving averages ...
  _, state2 = functional.functional_call(model, w, x, training=True, return_state=True,
                                         state=state)
  np.testing.assert_allclose(state2["bn/moving_mean"].numpy(), [0.99 * 0.02 + 0.01 * 2],
                             rtol=1e-6)
  np.testing.assert_allclose(state2["bn/moving_variance"].numpy(), [0.99 * 0.99], rtol=1e-6)
  # ... and once applied, inference uses them.
  functional.assign_state(model, state2)
  y = functional.functional_call(model, w, x, training=False)
  np.testing.assert_allclose(y.numpy(), [[(2 - 0.0398) / np.sqrt(0.9801 + 0.001)]] * 2,
                             rtol=1e-6)


def test_batchnorm_gradient_reaches_hypernetwork_exactly():
  model = bn_model()
  source, hnet = bn_source(model)
  x = tf.constant([[2.0], [2.0]])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(functional.functional_call(model, source.weights(), x))
  g_bias = tape.gradient(loss, hnet.head.bias).numpy()
  g_gamma_bias = g_bias[hnet.head_columns("bn/gamma")]
  g_beta_bias = g_bias[hnet.head_columns("bn/beta")]
  gain_gamma, gain_beta = hnet._gain.numpy()  # pylint: disable=protected-access
  # d loss / d gamma = sum_i x_i / sqrt(1.001); d loss / d beta = 2; times each gain.
  np.testing.assert_allclose(g_gamma_bias, [gain_gamma * 4 / np.sqrt(1.001)], rtol=1e-6)
  np.testing.assert_allclose(g_beta_bias, [gain_beta * 2.0], rtol=1e-6)


def test_batchnorm_state_per_weight_set():
  from hypernet.hypernetworks.batched import batched_functional_call  # pylint: disable=g-import-not-at-top
  model = bn_model()
  w = {"bn/gamma": tf.ones((2, 1)), "bn/beta": tf.zeros((2, 1))}
  x = tf.constant([[[2.0], [2.0]], [[0.0], [4.0]]])           # [S=2, B=2, 1]
  y, state = batched_functional_call(model, w, x, training=True, return_state=True)
  np.testing.assert_allclose(y.numpy()[0], [[0.0], [0.0]], atol=1e-7)
  np.testing.assert_allclose(y.numpy()[1], [[-2 / np.sqrt(4.001)], [2 / np.sqrt(4.001)]],
                             rtol=1e-5)
  np.testing.assert_allclose(state["bn/moving_mean"].numpy(), [[0.02], [0.02]], rtol=1e-6)
  np.testing.assert_allclose(state["bn/moving_variance"].numpy(), [[0.99], [0.99 + 0.04]],
                             rtol=1e-6)
