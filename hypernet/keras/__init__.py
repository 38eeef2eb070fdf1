"""Keras-native training of hypernetworks and meta-learners: ``compile()`` / ``fit()``.

:class:`HyperModel` (a hypernetwork generating a target model's weights) and
:class:`MetaModel` (an inner-loop learner whose ``train_step`` is one meta-step) are
``keras.Model`` s: Keras callbacks, ``model.save()`` / ``keras.models.load_model()`` and
``tf.distribute`` scopes work as for any Keras model. Guide: ``docs/keras.md``.
"""
from hypernet.keras.models import HyperModel, MetaModel, make_learner

__all__ = ["HyperModel", "MetaModel", "make_learner"]
