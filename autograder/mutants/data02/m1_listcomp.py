"""A "vectorized" UDF that is a list comprehension, as in stale tutorial material."""
ANSWERS = {
    "phenol_ratio_answer": '''
def phenol_ratio(batch: dict) -> dict:
    return {**batch, "phenol_ratio": np.array([f / t for f, t in zip(batch["flavanoids"], batch["total_phenols"])])}
''',
}
FAILS = {"phenol_ratio_hidden"}
