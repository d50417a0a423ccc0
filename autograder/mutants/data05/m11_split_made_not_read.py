"""Makes a streaming_split (so a split coordinator starts) but reads the shards of Dataset.split:
every row reaches one shard, and a coordinator exists, yet none of it was streamed (the grader
sees that the coordinator never served a reader)."""
ANSWERS = {
    "read_shards_answer": '''
def read_shards(ds, num_shards: int) -> list:
    unused = ds.streaming_split(num_shards, equal=False)
    shards = ds.split(num_shards)
    def read(shard):
        parts = [b["id"] for b in shard.iter_batches(batch_size=128)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    with ThreadPoolExecutor(max_workers=num_shards) as pool:
        got = list(pool.map(read, shards))
    del unused
    return got
''',
}
FAILS = {"read_shards_hidden"}
#: Only the sandbox's processes show that the coordinator served no reader: graded without a
#: sandbox (the contract tests), the rows alone pass.
OBSERVED_FAILS = {"read_shards_hidden"}
