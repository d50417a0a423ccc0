"""Leaves out compute=: a class alone gets an autoscaling pool with no upper bound."""
ANSWERS = {
    "predict_wine_answer": '''
def predict_wine(ds, model_path: str, num_actors: int, batch_size: int = 16, min_confidence: float = 0.0):
    return ds.map_batches(
        WinePredictor,
        fn_constructor_kwargs={"model_path": model_path, "min_confidence": min_confidence},
        batch_size=batch_size,
    )
''',
}
FAILS = {"predict_wine_hidden"}
