"""The small PyTorch classifier of chapter 03's batch inference, and its file format.

Chapter 03, exercise data03 and its grader share this module:

- :func:`train_classifier` fits a two-layer perceptron (PyTorch, CPU) on a feature matrix and
  returns a :class:`Classifier`: the model plus the training mean and standard deviation that
  every input must be standardized with.
- :func:`save_classifier` writes it to one file; :func:`load_classifier` reads it back. Loading
  is the *expensive set-up* of a batch-inference actor (for a real model: downloading weights,
  building the graph, moving it to a GPU), so every call is recorded as a set-up event
  (:func:`raydata_course.chapters.ch03_actor_pools.record_setup`).

Importing this module imports neither Ray nor PyTorch; the functions import them when called.

Examples:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> features = rng.normal(size=(60, 2)).astype(np.float32)
    >>> labels = (features[:, 0] > 0).astype(np.int64)
    >>> clf = train_classifier(features, labels, num_classes=2, epochs=60, seed=0)
    >>> clf.num_features, clf.num_classes
    (2, 2)
    >>> proba = clf.probabilities((features - clf.mean) / clf.std)
    >>> proba.shape, proba.dtype.name
    ((60, 2), 'float32')
    >>> bool((proba.argmax(axis=1) == labels).mean() > 0.9)
    True
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from raydata_course.chapters.ch03_actor_pools import record_setup

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["Classifier", "train_classifier", "save_classifier", "load_classifier"]

_FILE_FORMAT = 1


# ------------------------------------------------------------------------------ the model


@dataclass
class Classifier:
    """A trained classifier and the feature scaling it was trained with.

    Attributes:
        model: a ``torch.nn.Module`` in eval mode, mapping standardized features of shape
            ``(n, num_features)`` (``float32``) to logits of shape ``(n, num_classes)``.
        mean: per-feature training mean, ``float32``, shape ``(num_features,)``.
        std: per-feature training standard deviation (``ddof=0``), ``float32``, shape
            ``(num_features,)``; a feature that never varied in training has ``std`` 1, so
            dividing by it is always safe.
        feature_names: the name of each feature, in the model's input order.
        class_names: the name of each class, in logit order.
    """

    model: "torch.nn.Module"
    mean: np.ndarray
    std: np.ndarray
    feature_names: tuple[str, ...]
    class_names: tuple[str, ...]

    @property
    def num_features(self) -> int:
        """Number of input features."""
        return int(self.mean.shape[0])

    @property
    def num_classes(self) -> int:
        """Number of classes (logits per row)."""
        return len(self.class_names)

    def probabilities(self, standardized: np.ndarray) -> np.ndarray:
        """Class probabilities for already standardized features.

        Args:
            standardized: ``(features - mean) / std``, shape ``(n, num_features)``; any real
                dtype (converted to ``float32``); may be read-only (it is copied).

        Returns:
            Softmax probabilities, ``float32``, shape ``(n, num_classes)``; rows sum to 1.

        Raises:
            ValueError: if the input is not 2-D with ``num_features`` columns.
        """
        import torch

        x = np.array(standardized, dtype=np.float32, copy=True)
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise ValueError(
                f"expected standardized features of shape (n, {self.num_features}), got {x.shape}."
            )
        with torch.no_grad():
            logits = self.model(torch.from_numpy(x))
            return torch.softmax(logits, dim=1).numpy()


def _build_model(num_features: int, num_classes: int, hidden_units: int) -> "torch.nn.Module":
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(num_features, hidden_units),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden_units, num_classes),
    )


def _checked_training_data(features, labels, num_classes, feature_names, class_names):
    """``train_classifier``'s arguments as ``(x float32 (n, d), y int64 (n,), names, classes)``.

    Raises:
        ValueError: if the shapes disagree, there are no rows, or a label is out of range.
    """
    x = np.asarray(features, dtype=np.float32)
    y = np.asarray(labels).astype(np.int64)
    if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(
            f"features must be (n, d) and labels (n,) with n > 0; got {x.shape} and {y.shape}."
        )
    num_classes = int(y.max()) + 1 if num_classes is None else int(num_classes)
    if y.min() < 0 or y.max() >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), got {int(y.min())}..{int(y.max())}.")
    names = tuple(feature_names) if feature_names is not None else tuple(f"f{i}" for i in range(x.shape[1]))
    classes = tuple(class_names) if class_names is not None else tuple(str(i) for i in range(num_classes))
    if len(names) != x.shape[1] or len(classes) != num_classes:
        raise ValueError(
            f"got {len(names)} feature names for {x.shape[1]} features and {len(classes)} class "
            f"names for {num_classes} classes."
        )
    return x, y, names, classes


def train_classifier(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int | None = None,
    feature_names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    hidden_units: int = 32,
    epochs: int = 200,
    learning_rate: float = 0.01,
    seed: int = 0,
) -> Classifier:
    """Train a two-layer perceptron (``Linear → ReLU → Linear``) with full-batch Adam.

    Features are standardized with their own mean and standard deviation first; the
    returned :class:`Classifier` keeps both, because every later input must be scaled the same
    way. Training is deterministic for a given ``seed`` on one machine.

    Args:
        features: shape ``(n, d)``, any real dtype.
        labels: shape ``(n,)``, integers in ``[0, num_classes)``.
        num_classes: number of classes; default ``labels.max() + 1``.
        feature_names: ``d`` names; default ``f0 … f{d-1}``.
        class_names: ``num_classes`` names; default ``"0" …``.
        hidden_units: width of the hidden layer.
        epochs: full-batch optimizer steps.
        learning_rate: Adam's step size.
        seed: seeds PyTorch's generator for the initial weights.

    Returns:
        A :class:`Classifier` with the model in eval mode.

    Raises:
        ValueError: if the shapes disagree, there are no rows, or a label is out of range.
    """
    import torch

    x, y, names, classes = _checked_training_data(features, labels, num_classes, feature_names, class_names)
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std == 0] = 1.0
    torch.manual_seed(seed)
    model = _build_model(x.shape[1], len(classes), hidden_units)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    inputs = torch.from_numpy((x - mean) / std)
    targets = torch.from_numpy(y)
    # One thread: for a model this small, more threads only add synchronization, and on a
    # busy 2-core machine they make training many times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.train()
        for _ in range(epochs):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return Classifier(model, mean.astype(np.float32), std.astype(np.float32), names, classes)


def save_classifier(classifier: Classifier, path: str | os.PathLike) -> Path:
    """Write ``classifier`` (weights, scaling, names) to one file with ``torch.save``.

    Args:
        classifier: what to save.
        path: the file to write; its folder must exist.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    import torch

    linear_in = classifier.model[0]
    payload = {
        "format": _FILE_FORMAT,
        "state_dict": classifier.model.state_dict(),
        "hidden_units": int(linear_in.out_features),
        "mean": torch.from_numpy(classifier.mean.copy()),
        "std": torch.from_numpy(classifier.std.copy()),
        "feature_names": list(classifier.feature_names),
        "class_names": list(classifier.class_names),
    }
    path = Path(path)
    torch.save(payload, path)
    return path


def load_classifier(path: str | os.PathLike) -> Classifier:
    """Read a classifier written by :func:`save_classifier`, and record the set-up.

    This is the expensive set-up of a batch-inference UDF: call it in a callable class's
    ``__init__``, so that each actor runs it once. Every call records a set-up event
    (:func:`~raydata_course.chapters.ch03_actor_pools.record_setup`), so a driver can count
    the calls.

    Args:
        path: a file written by :func:`save_classifier`. On a multi-node cluster it must be
            readable on every node (shared storage), since each actor opens it.

    Returns:
        A :class:`Classifier` with the model in eval mode.

    Raises:
        FileNotFoundError: if ``path`` is not a file.
        ValueError: if the file is not a classifier saved by this module.
    """
    import torch

    t0 = time.perf_counter()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no classifier file at {str(path)!r} (write one with save_classifier).")
    payload = torch.load(path, weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != _FILE_FORMAT:
        raise ValueError(f"{str(path)!r} is not a classifier saved by raydata_course.chapters.ch03_classifier.save_classifier.")
    mean = payload["mean"].numpy().astype(np.float32)
    model = _build_model(mean.shape[0], len(payload["class_names"]), payload["hidden_units"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    classifier = Classifier(
        model, mean, payload["std"].numpy().astype(np.float32),
        tuple(payload["feature_names"]), tuple(payload["class_names"]),
    )
    record_setup("load_classifier", time.perf_counter() - t0, detail=str(path.resolve()))
    return classifier
