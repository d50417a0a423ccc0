"""Compares predictions with the labels in input order, as if the pool kept the row order."""
ANSWERS = {
    "evaluate_answer": '''
def evaluate(pred_ds, num_classes: int) -> dict:
    predicted = pred_ds.to_pandas()["predicted"].to_numpy()
    truth = wine["cultivar"].to_numpy()[: len(predicted)]
    kept = predicted >= 0
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(confusion, (truth[kept], predicted[kept]), 1)
    return {"accuracy": float(np.mean(predicted == truth)), "abstained": int((~kept).sum()),
            "confusion": confusion}
''',
}
FAILS = {"evaluate_visible", "evaluate_hidden"}
