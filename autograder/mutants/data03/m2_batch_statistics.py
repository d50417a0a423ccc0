"""Standardizes each batch with its own mean and std, so a row's result depends on its batch."""
ANSWERS = {
    "predictor_answer": '''
class WinePredictor:
    def __init__(self, model_path: str, min_confidence: float = 0.0):
        self.classifier = inference.load_classifier(model_path)
        self.min_confidence = float(min_confidence)

    def __call__(self, batch: dict) -> dict:
        clf = self.classifier
        x = np.stack([batch[name] for name in clf.feature_names], axis=1).astype(np.float32)
        proba = clf.probabilities((x - x.mean(axis=0)) / x.std(axis=0))
        predicted = proba.argmax(axis=1).astype(np.int64)
        confidence = proba.max(axis=1).astype(np.float32)
        predicted[confidence < self.min_confidence] = -1
        return {"id": batch["id"], "cultivar": batch["cultivar"], "predicted": predicted, "confidence": confidence}
''',
}
FAILS = {"predictor_visible", "predictor_hidden", "predict_wine_visible", "predict_wine_hidden"}
