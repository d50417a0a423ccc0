"""Edits the read-only input array in place instead of building a new one."""
ANSWERS = {
    "phenol_ratio_answer": '''
def phenol_ratio(batch: dict) -> dict:
    batch["flavanoids"] /= batch["total_phenols"]
    batch["phenol_ratio"] = batch["flavanoids"]
    return batch
''',
}
FAILS = {"phenol_ratio_visible", "phenol_ratio_hidden"}
