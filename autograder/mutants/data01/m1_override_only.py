"""Off-by-one block count: trusts override_num_blocks to give exactly k blocks.

range(103, override_num_blocks=4) makes 5 blocks (25, 25, 25, 25 and a leftover 3).
"""
ANSWERS = {
    "make_blocks_answer": '''
def make_blocks(num_rows: int, num_blocks: int):
    return ray.data.range(num_rows, override_num_blocks=num_blocks).materialize()
''',
}
# Grade cells this mutant must fail (score 0); every other grade cell must score full marks.
FAILS = {"make_blocks_hidden"}
