"""The judge's checks for data03 (grader only; never copied into exercises/ or the student bundle).

Each check runs in the grader's process (:mod:`raydata_grader.judge`). The hidden checks train
their own model here (another split, seed and width than the notebook's), send its file to the
kernel, have the student's class or function run there on data sent from here, and compare the
predictions that come back with the model's own, computed here. Messages name the kind of
input that failed, its shape (``about_input``) and what to fix, never its values or the expected
result.

Model loads are observed from outside the kernel where it has a sandbox: the judge counts the
opens of the model file it wrote (inotify, :class:`raydata_grader.file_events.OpenCounter`)
and the pool's actor processes by their titles (``ray::MapWorker(...)``). Without a sandbox it
reads the course's set-up log in the kernel instead (a reported fact). The pool's compute
strategy (:func:`raydata_course.judging.helpers.compute_strategy_facts`), Ray Data's
deprecation warnings and a returned object's class are reported by the kernel. The judge
recomputes the rows and predictions that come back against its own model. What each check
rests on is in ``docs/grader/inventory.md``.
"""

import contextlib
import functools
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from raydata_course.chapters import ch03_classifier as inference
from raydata_course.data import load_wine_table
from raydata_grader.facts import observed, recomputed, reported
from raydata_grader.file_events import OpenCounter
from raydata_grader.input_shapes import about_input, describe_tables
from raydata_grader.judge import judges

#: The title of an actor of a map_batches actor pool (``ray::MapWorker(MapBatches(Cls))``).
_POOL_ACTOR = "ray::MapWorker("
_LOADS_OBSERVED = ("the opens of the model file the judge wrote (inotify, read by the host); without a sandbox, "
                   "the course's set-up log in the kernel (reported)")

_CONFIDENCE_ATOL = 1e-4
_POOLS = "raydata_course.chapters.ch03_actor_pools"


@functools.lru_cache(maxsize=4)
def _wine(copies: int = 1) -> pa.Table:
    """The wine table ``copies`` times, with a unique ``id`` and the columns in another order."""
    base = load_wine_table()
    table = pa.concat_tables([base] * copies)
    table = table.append_column("id", pa.array(np.arange(table.num_rows)))
    return table.select(table.column_names[::-1])  # cultivar and id first, features reversed


@functools.lru_cache(maxsize=1)
def _oracle_model():
    """Train the oracle's classifier on its own split; return it and its file's bytes (once per process)."""
    wine = _wine()
    names = [c for c in load_wine_table().column_names if c != "cultivar"]
    x = np.stack([wine[c].to_numpy() for c in names], axis=1)
    y = wine["cultivar"].to_numpy()
    train = np.arange(wine.num_rows) % 3 != 1
    clf = inference.train_classifier(x[train], y[train], num_classes=3, feature_names=names,
                                     hidden_units=16, epochs=120, seed=7)
    with tempfile.TemporaryDirectory(prefix="data03-oracle-") as folder:
        path = inference.save_classifier(clf, Path(folder) / "oracle-wine.pt")
        return clf, path.read_bytes()


def _with_model_in_kernel(check):
    """Run ``check(k, clf, path)`` with the oracle's model and its file written in the kernel.

    The file's folder is removed afterwards, whatever the check's outcome, so an unsandboxed
    kernel leaves nothing in its temp folder. A kernel that is gone by then has nothing to remove.
    """
    @functools.wraps(check)
    def run(k):
        clf, data = _oracle_model()
        path = k.call(k.helper("write_file"), data, "oracle-wine.pt")
        try:
            return check(k, clf, path)
        finally:
            # A kernel that died or timed out has nothing to remove; the check's failure says so.
            with contextlib.suppress(Exception):
                k.call(k.helper("remove_folder"), str(Path(path).parent))

    return run


def _reference(clf, frame: pd.DataFrame, min_confidence: float) -> pd.DataFrame:
    x = np.stack([frame[c].to_numpy() for c in clf.feature_names], axis=1).astype(np.float32)
    proba = clf.probabilities((x - clf.mean) / clf.std)
    ordered = np.sort(proba, axis=1)
    predicted = proba.argmax(axis=1).astype(np.int64)
    confidence = proba.max(axis=1)
    predicted[confidence < min_confidence] = -1
    return pd.DataFrame({"id": frame["id"].to_numpy(), "predicted": predicted, "confidence": confidence,
                         "margin": ordered[:, -1] - ordered[:, -2]}).set_index("id")


def _check_output(out, batch: pd.DataFrame, who: str) -> pd.DataFrame:
    assert isinstance(out, dict), f"{who}: __call__ must return a dict of NumPy arrays."
    assert set(out) == {"id", "cultivar", "predicted", "confidence"}, (
        f"{who}: the output must have exactly the columns id, cultivar, predicted, confidence."
    )
    n = len(batch)
    for key in out:
        assert isinstance(out[key], np.ndarray) and len(out[key]) == n, (
            f"{who}: every output column needs one value per input row.")
    assert out["predicted"].dtype == np.int64, f"{who}: predicted must be int64."
    assert out["confidence"].dtype == np.float32, f"{who}: confidence must be float32."
    assert np.array_equal(out["id"], batch["id"].to_numpy()) and np.array_equal(
        out["cultivar"], batch["cultivar"].to_numpy()), (
        f"{who}: copy id and cultivar from the batch unchanged, in the batch's row order."
    )
    return pd.DataFrame({k: np.asarray(v) for k, v in out.items()}).set_index("id")


def _agrees(got: pd.DataFrame, ref: pd.DataFrame, min_confidence: float) -> bool:
    """Same predictions and confidences, allowing float noise at near-ties and the threshold."""
    got = got.reindex(ref.index)
    if got["confidence"].isna().any():
        return False
    close = np.isclose(got["confidence"].to_numpy(np.float64), ref["confidence"].to_numpy(np.float64),
                       rtol=0, atol=_CONFIDENCE_ATOL)
    same = got["predicted"].to_numpy() == ref["predicted"].to_numpy()
    ambiguous = (ref["margin"].to_numpy() < _CONFIDENCE_ATOL) | (
        np.abs(ref["confidence"].to_numpy() - min_confidence) < _CONFIDENCE_ATOL)
    return bool(close.all() and (same | ambiguous).all())


def _frame(data) -> pd.DataFrame:
    """A FrameData or TableData from the kernel as a DataFrame."""
    return pd.DataFrame({n: np.asarray(c) if not isinstance(c, np.ndarray) else c
                         for n, c in zip(data.names, data.columns)})


def _local_loads(k) -> int:
    return k.call(k.module("builtins").len, k.module(_POOLS).local_setup_events("load_classifier"))



def warm() -> None:
    """Train the oracle's model and load the tables before the first grade cell (while the kernel starts)."""
    _oracle_model()
    _wine(2)


# ------------------------------------------------------------------------------ part A


def _notebook_classifier(k):
    """The notebook's own classifier, rebuilt here from its arrays (no pickle crosses)."""
    import torch

    arrays = k.call(k.helper("classifier_arrays"), k.student("classifier"))
    state = {name: torch.from_numpy(np.array(v)) for name, v in arrays["state"].items()}
    hidden = int(state["0.weight"].shape[0])
    model = inference._build_model(len(arrays["feature_names"]), len(arrays["class_names"]), hidden)
    model.load_state_dict(state)
    model.eval()
    return inference.Classifier(model, np.asarray(arrays["mean"], np.float32), np.asarray(arrays["std"], np.float32),
                                tuple(arrays["feature_names"]), tuple(arrays["class_names"]))


@judges("predictor_visible", facts=[
    recomputed("the visible output's columns, dtypes, ids and accuracy; -1 under a strict threshold")])
def visible_predictor(k):
    wine = load_wine_table().to_pandas()
    out = k.value("out_a")
    assert isinstance(out, dict), "__call__ must return a dict of NumPy arrays"
    assert set(out) == {"id", "cultivar", "predicted", "confidence"}, "expected columns id, cultivar, predicted, confidence"
    assert out["predicted"].dtype == np.int64, "predicted must be int64"
    assert out["confidence"].dtype == np.float32, "confidence must be float32"
    ids = np.asarray(k.value("batch_a")["id"])
    assert len(out["predicted"]) == 40 and np.array_equal(out["id"], ids), "one output row per input row, ids unchanged"
    assert np.all((out["confidence"] > 0) & (out["confidence"] <= 1)), "confidence is a probability"
    truth = wine["cultivar"].to_numpy()[np.asarray(out["id"], dtype=np.int64)]
    assert float((out["predicted"] == truth).mean()) >= 0.85, "too few wines classified correctly"
    assert len(k.value("one")["predicted"]) == 1, "a batch of one row must give one prediction"
    assert np.all(k.value("strict")["predicted"] == -1), "with min_confidence above every probability, every prediction must be -1"


def _opens(k, path: str) -> "OpenCounter | None":
    """An :class:`OpenCounter` of the model file in the sandbox, entered; None without a sandbox."""
    if not k.observable():
        return None
    host = k.outside.host_path(path)
    return OpenCounter(host).__enter__() if host is not None else None


@judges("predictor_hidden", facts=[
    recomputed("every prediction and confidence, batch by batch and whole, against the judge's own model"),
    observed("one load per instance", _LOADS_OBSERVED),
])
@_with_model_in_kernel
def check_predictor(k, clf, path):
    """Another model, batch sizes and orders: the model's own predictions, one load per instance.

    The loads are observed from the host: the opens of the model file while one instance is
    made and predicts (one open per ``load_classifier``). Without a sandbox, the count of
    ``load_classifier`` calls in the kernel's set-up log (reported). Every prediction and
    confidence is checked against this process's own model.
    """
    frame = _wine().to_pandas()
    order = np.random.default_rng(11).permutation(len(frame))
    bounds = np.cumsum([0, 1, 7, 50, 120])  # batch sizes, 178 rows in all
    pieces = [frame.iloc[order[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]

    def batch(piece: pd.DataFrame):
        table = pa.Table.from_pandas(piece, preserve_index=False)
        return k.helper("readonly_batch")(table, {"quality_note": np.arange(len(piece), dtype=np.float64)})  # not a feature

    for min_confidence in (0.0, 0.95):
        counter = _opens(k, path)
        before = _local_loads(k) if counter is None else 0
        try:
            predictor = k.remote_call("WinePredictor", path, min_confidence=min_confidence)
            results = {}
            for i in (2, 0, 3, 1):  # batches out of order
                results[i] = _check_output(k.call(predictor, batch(pieces[i])), pieces[i], "WinePredictor")
            whole = _check_output(k.call(predictor, batch(frame)), frame, "WinePredictor")
        finally:
            if counter is not None:
                counter.__exit__(None, None, None)
        loads = counter.opens if counter is not None else _local_loads(k) - before
        assert loads >= 1, (
            "WinePredictor never called inference.load_classifier(model_path): load the model with it "
            "in __init__."
        )
        assert loads == 1, (
            "One WinePredictor instance loaded the model more than once while it predicted several "
            "batches: load it once, in __init__, keep it on self, and only use it in __call__."
        )
        batched = pd.concat(results.values())
        ref = _reference(clf, frame, min_confidence)
        own_whole = whole[["predicted", "confidence"]].assign(margin=ref["margin"])
        consistent = np.isfinite(batched["confidence"].to_numpy(np.float64)).all() and _agrees(
            batched, own_whole, min_confidence)
        assert consistent, (
            "A row's prediction changed with the rows that share its batch (a batch of one row included): "
            "standardize with the training statistics classifier.mean and classifier.std, never with "
            "the batch's own mean or std."
        )
        assert _agrees(whole, ref, min_confidence) and _agrees(batched, ref, min_confidence), (
            "With another model file" + (" and a min_confidence threshold" if min_confidence else "")
            + ", some predictions or confidences differ from the model's. Stack the features in the "
            "order of classifier.feature_names (not the batch's column order; the batch may hold other "
            "columns), as float32, standardize with classifier.mean and classifier.std, and mark "
            "predictions whose confidence is below min_confidence with -1."
        )


# ------------------------------------------------------------------------------ part B


@judges("predict_wine_visible", facts=[
    recomputed("every wine predicted once, with the notebook's own model's predictions and confidences"),
    reported("one load per actor in the notebook's own run", "the course's set-up log, read in the kernel"),
])
def visible_predict_wine(k):
    wine = load_wine_table()
    frame = _frame(k.value("out_b"))
    loads = k.value("loads")
    assert len(frame) == wine.num_rows and sorted(frame["id"].tolist()) == list(range(wine.num_rows)), (
        "every wine must be predicted exactly once")
    assert isinstance(loads, list) and loads, "no model was loaded inside an actor"
    actors = {e.get("actor_id") for e in loads if isinstance(e, dict)}
    assert None not in actors and len(loads) == len(actors), "load the model once per actor, in __init__"
    clf = _notebook_classifier(k)
    table = wine.append_column("id", pa.array(np.arange(wine.num_rows))).to_pandas()
    x = np.stack([table[c].to_numpy() for c in clf.feature_names], axis=1).astype(np.float32)
    reference = clf.probabilities((x - clf.mean) / clf.std)
    frame = frame.sort_values("id")
    assert np.array_equal(frame["predicted"].to_numpy(), reference.argmax(axis=1)), "some predictions differ from the model's"
    assert np.allclose(frame["confidence"].to_numpy(), reference.max(axis=1), atol=1e-5), "some confidences differ"


@judges("predict_wine_hidden", facts=[
    reported("a lazy Dataset comes back", "the kernel looks the class up in the object's MRO, by identity"),
    reported("no deprecated concurrency= (Ray Data's warning)", "Ray Data's warning log records, caught in the kernel"),
    reported("a fixed pool of exactly num_actors actors", "the plan's compute strategy, read in the kernel"),
    observed("num_actors actors, each loading the model once",
             "the pool's actor processes by title, and the opens of the model file (inotify), read by the host; "
             "without a sandbox, the course's set-up log in the kernel (reported)",
             forged_by=("impostor-name", "copies-files")),
    recomputed("every row once, with the judge's own model's prediction"),
])
@_with_model_in_kernel
def check_predict_wine(k, clf, path):
    """A fixed pool of exactly num_actors actors, one load per actor, every row predicted right.

    The loads are observed from the host: the pool's new actor processes (``ray::MapWorker(...)``)
    and the opens of the model file (at least one, at most one per actor; two actors opening it
    at the same moment may show as one open). Without a sandbox, the course's set-up log in the
    kernel decides (reported). Reported by the kernel: the pool's compute strategy read from
    the plan, Ray Data's deprecation warnings and the returned object's class. Every row is
    checked against this process's model.
    """
    num_actors, batch_size, min_confidence = 2, 8, 0.8
    table = _wine(copies=2)
    ds = k.module("ray.data").from_arrow([table.slice(i, 72) for i in range(0, table.num_rows, 72)])  # 5 blocks
    called = k.helper("call_capturing_warnings")(k.student("predict_wine"), ds, path, num_actors,
                                                  batch_size=batch_size, min_confidence=min_confidence,
                                                  logger_name="ray.data._internal.util")
    out_ds = k.helper("getitem")(called, "result")
    messages = k.call(k.helper("getitem"), called, "messages")
    assert k.is_instance(out_ds, "ray.data.dataset.Dataset"), (
        "predict_wine must return the Dataset that map_batches gives (lazy), not rows or a DataFrame."
    )
    assert not any("concurrency" in m and "deprecated" in m for m in messages), (
        "predict_wine uses the concurrency= argument, which Ray 2.60 deprecates (it logs a warning). "
        "Pass compute=ray.data.ActorPoolStrategy(size=num_actors) instead."
    )
    strategies = k.call(k.helper("compute_strategy_facts"), out_ds)
    assert strategies, "predict_wine must apply WinePredictor with map_batches."
    strategy = strategies[-1]
    assert strategy["strategy"] == "ActorPoolStrategy", (
        "WinePredictor must run in an actor pool: compute=ray.data.ActorPoolStrategy(...)."
    )
    assert strategy["min_size"] == strategy["max_size"] == num_actors, (
        "The pool is not a fixed pool of exactly num_actors actors: use "
        "compute=ray.data.ActorPoolStrategy(size=num_actors), not an autoscaling pool (a class with "
        "no compute= gets one) and not a hard-coded size."
    )

    k.call(k.module(_POOLS).start_setup_log)
    counter = _opens(k, path)
    watch = k.outside.watch() if counter is not None else None
    try:
        if watch is not None:
            watch.__enter__()
        # Wait until every actor of the pool has started (run its constructor) before work is
        # handed out, so that the number of loads does not depend on how fast actors start.
        rows = _frame(k.call(k.helper("run_with_min_actor_wait"), out_ds, 120))
    finally:
        if watch is not None:
            watch.__exit__(None, None, None)
        if counter is not None:
            counter.__exit__(None, None, None)
    assert len(rows) == table.num_rows and rows["id"].is_unique, (
        "On a larger dataset, not every row came out exactly once."
    )
    if counter is not None:
        loads, actors = counter.opens, len(watch.pids_titled(_POOL_ACTOR, new_only=True))
        assert loads >= 1, "No model was loaded by the pool: load it in WinePredictor.__init__ with load_classifier."
        assert loads <= num_actors, (
            "In the actor pool, the model file was opened more times than there are actors (once per batch?): "
            "load it once per actor, in WinePredictor.__init__.")
    else:
        # Only this pool's loads: an actor of the notebook's earlier pool (another model file)
        # can still be starting on a busy machine, and would load after the log was cleared.
        events = [e for e in k.call(k.module(_POOLS).setup_events, "load_classifier")
                  if isinstance(e, dict) and e.get("actor_id") is not None and e.get("detail") == path]
        assert events, "No model was loaded inside the pool's actors: load it in WinePredictor.__init__."
        assert len(events) == len({e["actor_id"] for e in events}), (
            "In the actor pool, some actor loaded the model more than once (once per batch?): load it "
            "once per actor, in WinePredictor.__init__."
        )
        actors = len({e["actor_id"] for e in events})
    assert actors == num_actors, (
        "The number of actors in the pool differs from num_actors: the pool must have exactly num_actors actors."
    )
    got = rows.set_index("id")
    ref = _reference(clf, table.to_pandas(), min_confidence)
    assert set(rows.columns) == {"id", "cultivar", "predicted", "confidence"}, (
        "The pool's output must have exactly the columns id, cultivar, predicted, confidence."
    )
    assert _agrees(got, ref, min_confidence), (
        "Through the actor pool, with another model, batch size and min_confidence, some rows' "
        "predictions differ from the model's. Make sure WinePredictor passes Part A, pass model_path "
        "and min_confidence to the constructor with fn_constructor_kwargs, and batch_size to map_batches."
    )


# ------------------------------------------------------------------------------ part C


def _expected(frame: pd.DataFrame, num_classes: int) -> dict:
    kept = frame[frame["predicted"] >= 0]
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(confusion, (kept["cultivar"].to_numpy(), kept["predicted"].to_numpy()), 1)
    return {"accuracy": float((frame["predicted"] == frame["cultivar"]).mean()),
            "abstained": int((frame["predicted"] == -1).sum()), "confusion": confusion}


def _predictions(truth: np.ndarray, num_classes: int, seed: int, error_rate: float, abstain_rate: float,
                 never_predicted: int | None = None):
    rng = np.random.default_rng(seed)
    predicted = truth.copy()
    wrong = rng.random(len(truth)) < error_rate
    predicted[wrong] = (truth[wrong] + rng.integers(1, num_classes, wrong.sum())) % num_classes
    if never_predicted is not None:  # a class the model never predicts: an all-zero column
        predicted[predicted == never_predicted] = (never_predicted + 1) % num_classes
    predicted[rng.random(len(truth)) < abstain_rate] = -1
    frame = pd.DataFrame({"id": np.arange(len(truth)), "cultivar": truth.astype(np.int64),
                          "predicted": predicted.astype(np.int64),
                          "confidence": rng.random(len(truth)).astype(np.float32)})
    return frame.sample(frac=1.0, random_state=seed)  # not in id order


def _check_evaluation(result, frame: pd.DataFrame, num_classes: int, what: str) -> None:
    expected = _expected(frame, num_classes)
    assert isinstance(result, dict) and {"accuracy", "abstained", "confusion"} <= set(result), (
        "evaluate must return a dict with accuracy, abstained and confusion."
    )
    assert isinstance(result["accuracy"], (float, np.floating)), "accuracy must be a float."
    assert isinstance(result["abstained"], (int, np.integer)) and not isinstance(result["abstained"], bool), (
        "abstained must be an int.")
    confusion = result["confusion"]
    assert isinstance(confusion, np.ndarray) and confusion.dtype == np.int64, "confusion must be an int64 NumPy array."
    assert confusion.shape == (num_classes, num_classes), (
        f"{what}, confusion does not have shape (num_classes, num_classes)."
    )
    assert np.array_equal(confusion, expected["confusion"]) and result["abstained"] == expected["abstained"], (
        f"{what}, the confusion matrix or the abstention count is wrong: count each row by its own "
        "cultivar and predicted, leave rows with predicted == -1 out of the matrix, and do not compare "
        "with labels kept in input order."
    )
    assert abs(float(result["accuracy"]) - expected["accuracy"]) < 1e-9, (
        f"{what}, the accuracy is wrong: correct rows (predicted == cultivar) divided by all rows, "
        "abstentions included."
    )


@judges("evaluate_visible", facts=[recomputed("accuracy, abstentions and confusion matrix of the visible predictions")])
def visible_evaluate(k):
    truth = load_wine_table()["cultivar"].to_numpy()
    pred = truth.copy()
    pred[::10] = (truth[::10] + 1) % 3
    pred[5::25] = -1
    frame = pd.DataFrame({"id": np.arange(len(truth)), "cultivar": truth, "predicted": pred})
    _check_evaluation(k.value("result_c"), frame, 3, "On the visible test's predictions")


@judges("evaluate_hidden", facts=[
    recomputed("accuracy, abstentions, confusion matrix and its dtype, on other predictions, blocks and classes")])
def check_evaluate(k):
    wine_truth = load_wine_table()["cultivar"].to_numpy()
    cases = [
        (_predictions(wine_truth, 3, seed=5, error_rate=0.2, abstain_rate=0.1), 3, 5),
        (_predictions(np.random.default_rng(2).integers(0, 4, 1000), 4, seed=9, error_rate=0.3,
                      abstain_rate=0.05, never_predicted=3), 4, 7),
    ]
    for frame, num_classes, blocks in cases:
        tables = [pa.Table.from_pandas(frame[i::blocks], preserve_index=False) for i in range(blocks)]
        with about_input(describe_tables(tables) + f", num_classes={num_classes}"):
            result = k.call("evaluate", k.helper("dataset_from_pandas")(tables), num_classes)
            _check_evaluation(result, frame, num_classes,
                              "On predictions that arrive in another order (and in other blocks, with another number "
                              "of classes)")


# ------------------------------------------------------------------------------ part D


def _check_pool(k, args, expected_max: int, visible: bool) -> None:
    pool = k.remote_call("pool_for", *args)
    assert k.is_instance(pool, "ray.data.ActorPoolStrategy"), (
        "pool_for must return a ray.data.ActorPoolStrategy.")
    sizes = (pool.min_size.get(), pool.initial_size.get(), pool.max_size.get())
    if visible:
        assert (sizes[0], sizes[2]) == (1, expected_max), f"pool_for{args}: expected min_size=1, max_size={expected_max}"
        return
    assert sizes[0] == 1 and sizes[1] == 1, "The pool must start from min_size=1 (autoscaling)."
    assert sizes[2] == expected_max, (
        "For other cluster sizes, CPUs per actor (fractions included) or reserved CPUs, max_size is "
        "wrong: it is the largest whole number of actors of cpus_per_actor CPUs that fit in "
        "cluster_cpus - reserved_cpus."
    )


def _raises_value_error(k, args) -> bool:
    from raydata_grader.remote import KernelRaised

    try:
        k.call("pool_for", *args)
    except KernelRaised as exc:
        if exc.is_a("ValueError"):
            return True
        raise
    return False


_IS_POOL = reported("an ActorPoolStrategy comes back", "the kernel looks the class up in the object's MRO, by identity")


@judges("pool_for_visible", facts=[_IS_POOL, recomputed("min_size and max_size on the visible cluster sizes"),
                                   recomputed("ValueError when no actor fits")])
def visible_pool_for(k):
    num_cpus = k.student("session").num_cpus.get()
    for args, expected_max in [((4,), 3), ((4, 0.5), 6), ((2, 1, 1), 1), ((num_cpus,), num_cpus - 1)]:
        _check_pool(k, args, expected_max, visible=True)
    assert _raises_value_error(k, (1, 1, 1)), "pool_for(1, 1, 1) leaves no CPU for an actor: it must raise ValueError"


@judges("pool_for_hidden", facts=[
    _IS_POOL, recomputed("min_size, initial_size and max_size for other cluster sizes, fractional CPUs and reserves"),
    recomputed("ValueError when cpus_per_actor is not positive or no actor fits")])
def check_pool_for(k):
    fits = [((16, 2, 2), 7), ((8, 0.25, 1), 28), ((3, 2, 0), 1), ((2.5, 1, 1), 1), ((6, 1.5, 1), 3),
            ((64, 4, 4), 15)]
    for args, expected_max in fits:
        _check_pool(k, args, expected_max, visible=False)
    for args in [(1, 2, 0), (1.5, 1, 1), (4, 0, 1), (4, -1, 1)]:
        assert _raises_value_error(k, args), (
            "When cpus_per_actor is not positive, or not even one actor fits, pool_for must raise ValueError."
        )
