"""Hidden tests for data03 (grader only; never copied into exercises/ or the student bundle).

Each ``check_*`` receives the student's class or function and raises ``AssertionError`` with a
message that names the kind of input that failed and what to fix, never the input or the
expected value. The checks use their own model (another split, seed and width than the
notebook's), their own datasets, batch sizes and row orders.
"""

import logging
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import ray

from raydata_course.chapters import ch03_actor_pools as pools
from raydata_course.chapters import ch03_classifier as inference
from raydata_course.data import load_wine_table

_CONFIDENCE_ATOL = 1e-4


def _wine(copies: int = 1) -> pa.Table:
    """The wine table ``copies`` times, with a unique ``id`` and the columns in another order."""
    base = load_wine_table()
    table = pa.concat_tables([base] * copies)
    table = table.append_column("id", pa.array(np.arange(table.num_rows)))
    names = table.column_names
    return table.select(names[::-1])  # cultivar and id first, features reversed


def _oracle_model(folder: Path):
    """Train the oracle's classifier on its own split; return it and its file."""
    wine = _wine()
    names = [c for c in load_wine_table().column_names if c != "cultivar"]
    x = np.stack([wine[c].to_numpy() for c in names], axis=1)
    y = wine["cultivar"].to_numpy()
    train = np.arange(wine.num_rows) % 3 != 1
    clf = inference.train_classifier(x[train], y[train], num_classes=3, feature_names=names,
                                     hidden_units=16, epochs=120, seed=7)
    return clf, str(inference.save_classifier(clf, folder / "oracle-wine.pt"))


def _reference(clf, frame: pd.DataFrame, min_confidence: float) -> pd.DataFrame:
    x = np.stack([frame[c].to_numpy() for c in clf.feature_names], axis=1).astype(np.float32)
    proba = clf.probabilities((x - clf.mean) / clf.std)
    ordered = np.sort(proba, axis=1)
    predicted = proba.argmax(axis=1).astype(np.int64)
    confidence = proba.max(axis=1)
    predicted[confidence < min_confidence] = -1
    return pd.DataFrame({"id": frame["id"].to_numpy(), "predicted": predicted, "confidence": confidence,
                         "margin": ordered[:, -1] - ordered[:, -2]}).set_index("id")


def _readonly_batch(frame: pd.DataFrame, extra_column: bool = True) -> dict:
    batch = {c: frame[c].to_numpy().copy() for c in frame.columns}
    if extra_column:
        batch["quality_note"] = np.arange(len(frame), dtype=np.float64)  # not a feature
    for array in batch.values():
        array.setflags(write=False)
    return batch


def _check_output(out, batch: dict, who: str) -> pd.DataFrame:
    assert isinstance(out, dict), f"{who}: __call__ must return a dict of NumPy arrays."
    assert set(out) == {"id", "cultivar", "predicted", "confidence"}, (
        f"{who}: the output must have exactly the columns id, cultivar, predicted, confidence."
    )
    n = len(batch["id"])
    for key in out:
        assert len(out[key]) == n, f"{who}: every output column needs one value per input row."
    assert np.asarray(out["predicted"]).dtype == np.int64, f"{who}: predicted must be int64."
    assert np.asarray(out["confidence"]).dtype == np.float32, f"{who}: confidence must be float32."
    assert np.array_equal(out["id"], batch["id"]) and np.array_equal(out["cultivar"], batch["cultivar"]), (
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


def _loads() -> int:
    return len(pools.local_setup_events("load_classifier"))


def check_predictor(WinePredictor):
    with tempfile.TemporaryDirectory(prefix="data03-oracle-") as folder:
        clf, path = _oracle_model(Path(folder))
        frame = _wine().to_pandas()
        order = np.random.default_rng(11).permutation(len(frame))
        bounds = np.cumsum([0, 1, 7, 50, 120])  # batch sizes, 178 rows in all
        pieces = [frame.iloc[order[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]

        for min_confidence in (0.0, 0.95):
            before = _loads()
            predictor = WinePredictor(path, min_confidence=min_confidence)
            results = {}
            for i in (2, 0, 3, 1):  # batches out of order
                results[i] = _check_output(predictor(_readonly_batch(pieces[i])), pieces[i], "WinePredictor")
            whole = _check_output(predictor(_readonly_batch(frame)), frame, "WinePredictor")
            loads = _loads() - before
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


def _deprecation_records(fn):
    """Run fn() while capturing Ray Data's WARNING log records; return (result, messages)."""
    messages = []

    class _Capture(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = _Capture(logging.WARNING)
    logger = logging.getLogger("ray.data._internal.util")
    logger.addHandler(handler)
    try:
        result = fn()
    finally:
        logger.removeHandler(handler)
    return result, messages


def check_predict_wine(predict_wine):
    num_actors, batch_size, min_confidence = 2, 8, 0.8
    with tempfile.TemporaryDirectory(prefix="data03-oracle-") as folder:
        clf, path = _oracle_model(Path(folder))
        table = _wine(copies=2)
        ds = ray.data.from_arrow([table.slice(i, 72) for i in range(0, table.num_rows, 72)])  # 5 blocks
        out_ds, messages = _deprecation_records(
            lambda: predict_wine(ds, path, num_actors, batch_size=batch_size, min_confidence=min_confidence)
        )
        assert hasattr(out_ds, "_logical_plan"), (
            "predict_wine must return the Dataset that map_batches gives (lazy), not rows or a DataFrame."
        )
        assert not any("concurrency" in m and "deprecated" in m for m in messages), (
            "predict_wine uses the concurrency= argument, which Ray 2.60 deprecates (it logs a warning). "
            "Pass compute=ray.data.ActorPoolStrategy(size=num_actors) instead."
        )
        strategies = pools.compute_strategies(out_ds)
        assert strategies, "predict_wine must apply WinePredictor with map_batches."
        strategy = strategies[-1][1]
        assert isinstance(strategy, ray.data.ActorPoolStrategy), (
            "WinePredictor must run in an actor pool: compute=ray.data.ActorPoolStrategy(...)."
        )
        assert strategy.min_size == strategy.max_size == num_actors, (
            "The pool is not a fixed pool of exactly num_actors actors: use "
            "compute=ray.data.ActorPoolStrategy(size=num_actors), not an autoscaling pool (a class with "
            "no compute= gets one) and not a hard-coded size."
        )

        pools.start_setup_log()
        # Wait until every actor of the pool has started (run its constructor) before work is
        # handed out, so that the number of loads does not depend on how fast actors start.
        # The dataset runs with the DataContext snapshot it was created with, so set it there.
        ctx = out_ds.context
        saved_wait_s, ctx.wait_for_min_actors_s = ctx.wait_for_min_actors_s, 120
        try:
            rows = out_ds.to_pandas()
        finally:
            ctx.wait_for_min_actors_s = saved_wait_s
        # Only this pool's loads: an actor of the notebook's earlier pool (another model file)
        # can still be starting on a busy machine, and would load after the log was cleared.
        loads = [e for e in pools.setup_events("load_classifier")
                 if e.actor_id is not None and e.detail == str(Path(path).resolve())]
        assert len(rows) == table.num_rows and rows["id"].is_unique, (
            "On a larger dataset, not every row came out exactly once."
        )
        assert loads, "No model was loaded inside the pool's actors: load it in WinePredictor.__init__."
        actors = {e.actor_id for e in loads}
        assert len(loads) == len(actors), (
            "In the actor pool, some actor loaded the model more than once (once per batch?): load it "
            "once per actor, in WinePredictor.__init__."
        )
        assert len(actors) == num_actors, (
            "The number of actors that loaded the model differs from num_actors: the pool must have "
            "exactly num_actors actors."
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


def check_evaluate(evaluate):
    wine_truth = load_wine_table()["cultivar"].to_numpy()
    cases = [
        (_predictions(wine_truth, 3, seed=5, error_rate=0.2, abstain_rate=0.1), 3, 5),
        (_predictions(np.random.default_rng(2).integers(0, 4, 1000), 4, seed=9, error_rate=0.3,
                      abstain_rate=0.05, never_predicted=3), 4, 7),
    ]
    for frame, num_classes, blocks in cases:
        result = evaluate(ray.data.from_pandas([frame[i::blocks] for i in range(blocks)]), num_classes)
        expected = _expected(frame, num_classes)
        assert isinstance(result, dict) and {"accuracy", "abstained", "confusion"} <= set(result), (
            "evaluate must return a dict with accuracy, abstained and confusion."
        )
        assert isinstance(result["accuracy"], (float, np.floating)), "accuracy must be a float."
        assert isinstance(result["abstained"], (int, np.integer)), "abstained must be an int."
        confusion = result["confusion"]
        assert isinstance(confusion, np.ndarray) and confusion.dtype == np.int64, (
            "confusion must be an int64 NumPy array."
        )
        assert confusion.shape == (num_classes, num_classes), (
            "For another number of classes, confusion does not have shape (num_classes, num_classes)."
        )
        assert np.array_equal(confusion, expected["confusion"]) and result["abstained"] == expected["abstained"], (
            "On predictions that arrive in another order (and in other blocks), the confusion matrix or "
            "the abstention count is wrong: count each row by its own cultivar and predicted, leave "
            "rows with predicted == -1 out of the matrix, and do not compare with labels kept in input order."
        )
        assert abs(float(result["accuracy"]) - expected["accuracy"]) < 1e-9, (
            "On predictions in another order, the accuracy is wrong: correct rows (predicted == cultivar) "
            "divided by all rows, abstentions included."
        )


def check_pool_for(pool_for):
    fits = [((16, 2, 2), 7), ((8, 0.25, 1), 28), ((3, 2, 0), 1), ((2.5, 1, 1), 1), ((6, 1.5, 1), 3),
            ((64, 4, 4), 15)]
    for args, expected_max in fits:
        pool = pool_for(*args)
        assert isinstance(pool, ray.data.ActorPoolStrategy), "pool_for must return a ray.data.ActorPoolStrategy."
        assert pool.min_size == 1 and pool.initial_size == 1, "The pool must start from min_size=1 (autoscaling)."
        assert pool.max_size == expected_max, (
            "For other cluster sizes, CPUs per actor (fractions included) or reserved CPUs, max_size is "
            "wrong: it is the largest whole number of actors of cpus_per_actor CPUs that fit in "
            "cluster_cpus - reserved_cpus."
        )
    for args in [(1, 2, 0), (1.5, 1, 1), (4, 0, 1), (4, -1, 1)]:
        try:
            pool_for(*args)
        except ValueError:
            continue
        raise AssertionError(
            "When cpus_per_actor is not positive, or not even one actor fits, pool_for must raise ValueError."
        )
