"""Trusts the defaults ("streaming bounds memory by itself"): picks numbers but configure() applies nothing."""
ANSWERS = {
    "configure_answer": '''
BUDGET_BYTES = 64 * MiB
BLOCK_BYTES = 8 * MiB


def configure(ctx) -> None:
    pass  # Ray Data streams, so memory takes care of itself
''',
}
FAILS = {"budget_visible", "budget_hidden", "peak_visible", "peak_hidden"}
