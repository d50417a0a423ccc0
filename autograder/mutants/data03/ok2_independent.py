"""A correct answer written from chapter 03 in another style: a predictor that precomputes the
scaling in __init__ and masks low confidences with np.where, a fixed pool written as
min_size == max_size, a confusion matrix from a Ray groupby count, and a pool size with a
float tolerance."""
ANSWERS = {
    "predictor_answer": '''
class WinePredictor:
    """Loads the classifier once; predicts a NumPy batch of wines."""

    def __init__(self, model_path, min_confidence=0.0):
        self.model = inference.load_classifier(model_path)
        self.columns = list(self.model.feature_names)
        self.center = np.asarray(self.model.mean, dtype=np.float32)
        self.scale = np.asarray(self.model.std, dtype=np.float32)
        self.threshold = float(min_confidence)

    def __call__(self, batch):
        x = np.column_stack([np.asarray(batch[c], dtype=np.float32) for c in self.columns])
        x = x.reshape(len(batch["id"]), len(self.columns))
        probs = self.model.probabilities((x - self.center) / self.scale)
        best = np.argmax(probs, axis=1).astype(np.int64)
        conf = np.max(probs, axis=1).astype(np.float32)
        predicted = np.where(conf < self.threshold, np.int64(-1), best).astype(np.int64)
        return {
            "id": np.array(batch["id"]),
            "cultivar": np.array(batch["cultivar"]),
            "predicted": predicted,
            "confidence": conf,
        }
''',
    "predict_wine_answer": '''
def predict_wine(ds, model_path: str, num_actors: int, batch_size: int = 16, min_confidence: float = 0.0):
    """Apply WinePredictor to ds in a fixed pool of num_actors actors; return the lazy dataset."""
    fixed_pool = ray.data.ActorPoolStrategy(min_size=num_actors, max_size=num_actors)
    return ds.map_batches(
        WinePredictor,
        batch_size=batch_size,
        compute=fixed_pool,
        fn_constructor_kwargs=dict(model_path=model_path, min_confidence=min_confidence),
    )
''',
    "evaluate_answer": '''
def evaluate(pred_ds, num_classes: int) -> dict:
    """Accuracy (abstentions count as wrong), number of abstentions, and confusion matrix."""
    pairs = pred_ds.select_columns(["cultivar", "predicted"])
    counts = pairs.groupby(["cultivar", "predicted"]).count().take_all()
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    total = correct = abstained = 0
    for row in counts:
        truth, guess, n = int(row["cultivar"]), int(row["predicted"]), int(row["count()"])
        total += n
        if guess == -1:
            abstained += n
            continue
        confusion[truth, guess] += n
        if guess == truth:
            correct += n
    accuracy = correct / total if total else 0.0
    return {"accuracy": float(accuracy), "abstained": int(abstained), "confusion": confusion}
''',
    "pool_for_answer": '''
import math


def pool_for(cluster_cpus: float, cpus_per_actor: float = 1.0, reserved_cpus: float = 1.0):
    """ActorPoolStrategy(min_size=1, max_size=<actors that fit in cluster_cpus - reserved_cpus>)."""
    if not cpus_per_actor > 0:
        raise ValueError(f"cpus_per_actor must be positive, got {cpus_per_actor}")
    free = cluster_cpus - reserved_cpus
    fit = math.floor(free / cpus_per_actor + 1e-9)  # 3 / 0.1 is 29.999... in floating point
    if fit < 1:
        raise ValueError(
            f"no actor of {cpus_per_actor} CPUs fits in {cluster_cpus} CPUs with {reserved_cpus} reserved "
            f"({free} CPUs left)")
    return ray.data.ActorPoolStrategy(min_size=1, max_size=int(fit))
''',
}
FAILS = set()
