"""The numerics behind the functional call (implementation; nothing here is needed to use
hypernet): the acceleration policy (:mod:`.accel`) over the fused BatchNorm
(:mod:`.fused_norm`), plain bias adds (:mod:`.plain_bias`) and the fused BatchNorm -> ReLU
-> max-pool kernel (:mod:`.norm_relu_pool`); exact second-order moments
(:mod:`.second_order`); device facts (:mod:`.devices`); every private TensorFlow / Keras
hook, each checked at first use (:mod:`.compat`). The lowest layer: it imports only
TensorFlow and Keras. ``docs/numerics.md`` explains each."""
