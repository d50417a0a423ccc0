"""Right block count and row count, but the ids are strings."""
ANSWERS = {
    "make_blocks_answer": '''
def make_blocks(num_rows: int, num_blocks: int):
    return ray.data.from_items([{"id": str(i)} for i in range(num_rows)]).repartition(num_blocks).materialize()
''',
}
FAILS = {"make_blocks_hidden"}
