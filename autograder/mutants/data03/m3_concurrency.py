"""Stale advice from Ray 2.10-2.50 material: concurrency=num_actors instead of compute=."""
ANSWERS = {
    "predict_wine_answer": '''
def predict_wine(ds, model_path: str, num_actors: int, batch_size: int = 16, min_confidence: float = 0.0):
    return ds.map_batches(
        WinePredictor,
        fn_constructor_kwargs={"model_path": model_path, "min_confidence": min_confidence},
        batch_size=batch_size,
        concurrency=num_actors,
    )
''',
}
FAILS = {"predict_wine_hidden"}
