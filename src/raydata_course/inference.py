"""Batch inference with a small PyTorch classifier, and a cluster-wide log of set-up calls.

Chapter 03 and exercise data03 share this module:

- :func:`train_classifier` fits a two-layer perceptron (PyTorch, CPU) on a feature matrix and
  returns a :class:`Classifier`: the model plus the training mean and standard deviation that
  every input must be standardized with.
- :func:`save_classifier` writes it to one file; :func:`load_classifier` reads it back. Loading
  is the *expensive set-up* of a batch-inference actor (for a real model: downloading weights,
  building the graph, moving it to a GPU), so every call is recorded as a :class:`SetupEvent`.
- :func:`start_setup_log` starts a named Ray actor that collects those events from every
  process of the job, so a driver can count how often the set-up ran, and in which actors,
  while a ``map_batches`` actor pool runs. :func:`setup_events` reads them back.

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
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "SETUP_LOG_NAMESPACE",
    "Classifier",
    "SetupEvent",
    "train_classifier",
    "save_classifier",
    "load_classifier",
    "record_setup",
    "local_setup_events",
    "start_setup_log",
    "setup_log_running",
    "setup_events",
    "stop_setup_log",
    "compute_strategies",
]

#: Ray namespace of the set-up log actor (its name carries the job id, see :func:`start_setup_log`).
SETUP_LOG_NAMESPACE = "raydata_course"
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
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std == 0] = 1.0
    torch.manual_seed(seed)
    model = _build_model(x.shape[1], num_classes, hidden_units)
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
    ``__init__``, so that each actor runs it once. Every call appends a :class:`SetupEvent`
    (see :func:`record_setup`), so a driver can count the calls.

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
        raise ValueError(f"{str(path)!r} is not a classifier saved by raydata_course.inference.save_classifier.")
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


# -------------------------------------------------------------------------- the set-up log


@dataclass(frozen=True)
class SetupEvent:
    """One run of an expensive set-up step.

    Attributes:
        what: which step ran, e.g. ``"load_classifier"``.
        pid: the process that ran it.
        actor_id: the Ray actor it ran in (hex), or None outside an actor (a driver or a task).
        duration_s: how long the step took, in seconds.
        wall_time_s: when it finished, as ``time.time()`` (seconds since the epoch).
        detail: what the step worked on, e.g. the model file ``load_classifier`` read
            (absolute path); lets a check count only its own pipeline's loads when actors
            of an earlier pipeline are still starting.
    """

    what: str
    pid: int
    actor_id: str | None
    duration_s: float
    wall_time_s: float
    detail: str = ""


_local_events: list[SetupEvent] = []
_local_lock = threading.Lock()
# The driver's handles to its set-up logs, by job id. Ray ends a non-detached actor, named or
# not, when its creator drops the handle it got at creation (a handle found by name later does
# not keep it alive), so start_setup_log keeps that first handle here.
_log_handles: dict[str, Any] = {}


def _current_actor_id() -> str | None:
    import ray

    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_actor_id()


def _setup_log_name() -> str:
    import ray

    return f"setup-log-{ray.get_runtime_context().get_job_id()}"


def _setup_log_handle():
    """The running set-up log of this job, or None (Ray not running, or no log started)."""
    import ray

    if not ray.is_initialized():
        return None
    try:
        return ray.get_actor(_setup_log_name(), namespace=SETUP_LOG_NAMESPACE)
    except ValueError:  # no actor of that name
        return None


def record_setup(what: str, duration_s: float = 0.0, detail: str = "") -> SetupEvent:
    """Record that an expensive set-up step ran in this process.

    The event is kept in this process (see :func:`local_setup_events`) and, when this job has
    a set-up log running (:func:`start_setup_log`), also sent to it and waited for, so the
    driver sees it as soon as the step returns.

    Args:
        what: a short name for the step.
        duration_s: how long it took, in seconds.
        detail: what it worked on (see :class:`SetupEvent`).

    Returns:
        The :class:`SetupEvent` recorded.
    """
    event = SetupEvent(what, os.getpid(), _current_actor_id(), float(duration_s), time.time(), detail)
    with _local_lock:
        _local_events.append(event)
    log = _setup_log_handle()
    if log is not None:
        import ray

        ray.get(log.record.remote(event))
    return event


def local_setup_events(what: str | None = None) -> list[SetupEvent]:
    """The set-up events recorded in *this* process, oldest first (``what`` filters by step)."""
    with _local_lock:
        return [e for e in _local_events if what is None or e.what == what]


class _SetupLog:
    """Body of the set-up log actor: an append-only list of :class:`SetupEvent`."""

    def __init__(self) -> None:
        self._events: list[SetupEvent] = []

    def record(self, event: SetupEvent) -> int:
        self._events.append(event)
        return len(self._events)

    def events(self) -> list[SetupEvent]:
        return list(self._events)

    def clear(self) -> None:
        self._events.clear()


def start_setup_log() -> Any:
    """Start (or reuse, and empty) this job's set-up log actor.

    The actor is named ``setup-log-<job id>`` in namespace :data:`SETUP_LOG_NAMESPACE`, uses
    no CPU (``num_cpus=0``, so it never takes a slot an actor pool needs), and belongs to the
    driver: it ends when the driver disconnects, or with :func:`stop_setup_log`. This module
    keeps the handle it got at creation: Ray ends a non-detached actor, named or not, when its
    creator drops that handle.

    Returns:
        The actor handle.

    Raises:
        RuntimeError: if Ray is not running (call ``raydata_course.setup()`` first).
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running: call raydata_course.setup() before start_setup_log().")
    name = _setup_log_name()
    log = _log_handles.get(name)
    if log is None:
        actor_cls = ray.remote(num_cpus=0)(_SetupLog)
        log = actor_cls.options(name=name, namespace=SETUP_LOG_NAMESPACE, get_if_exists=True).remote()
        _log_handles[name] = log
    ray.get(log.clear.remote())
    return log


def setup_log_running() -> bool:
    """Whether this job has a set-up log actor running."""
    return _setup_log_handle() is not None


def setup_events(what: str | None = None) -> list[SetupEvent]:
    """Every set-up event this job's log has collected, in arrival order.

    Args:
        what: keep only events of this step, e.g. ``"load_classifier"``.

    Raises:
        RuntimeError: if no set-up log is running (call :func:`start_setup_log` first).
    """
    import ray

    log = _setup_log_handle()
    if log is None:
        raise RuntimeError("no set-up log is running in this job: call start_setup_log() first.")
    return [e for e in ray.get(log.events.remote()) if what is None or e.what == what]


def stop_setup_log() -> None:
    """End this job's set-up log actor, if one is running."""
    import ray

    if not ray.is_initialized():
        return
    log = _log_handles.pop(_setup_log_name(), None) or _setup_log_handle()
    if log is not None:
        ray.kill(log)


# ------------------------------------------------------------------- reading a plan


def compute_strategies(ds: Any) -> list[tuple[str, Any]]:
    """The compute strategy of every map-like operator in a dataset's (lazy) plan.

    Nothing is executed. The strategy is the one ``map_batches``/``map``/``filter`` settled
    on when it was called: what ``compute=`` asked for, what a deprecated ``concurrency=``
    was translated into, or the default (``TaskPoolStrategy()`` for a function,
    ``ActorPoolStrategy(min_size=1, max_size=None)`` for a class; Ray 2.60,
    ``ray/data/_internal/util.py``, ``get_compute_strategy``).

    This reads Ray Data's logical plan (``Dataset._logical_plan.dag`` and each operator's
    ``compute`` attribute, ``ray/data/_internal/logical/operators/map_operator.py``), which is
    internal API, checked against Ray 2.60.0.

    Args:
        ds: a ``ray.data.Dataset``.

    Returns:
        ``[(operator name, strategy), ...]`` from the source towards the output.

    Raises:
        TypeError: if ``ds`` has no logical plan (not a Dataset).
    """
    plan = getattr(ds, "_logical_plan", None)
    if plan is None:
        raise TypeError(f"expected a ray.data.Dataset, got {type(ds).__name__}.")
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def visit(op: Any) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for parent in op.input_dependencies:
            visit(parent)
        if getattr(op, "compute", None) is not None:
            found.append((op.name, op.compute))

    visit(plan.dag)
    return found
