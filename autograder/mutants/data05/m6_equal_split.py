"""Splits with equal=True, which drops the rows that do not divide evenly among the shards."""
ANSWERS = {
    "read_shards_answer": '''
def read_shards(ds, num_shards: int) -> list:
    shards = ds.streaming_split(num_shards, equal=True)
    def read(shard):
        return np.concatenate([b["id"] for b in shard.iter_batches(batch_size=128)])
    with ThreadPoolExecutor(max_workers=num_shards) as pool:
        return list(pool.map(read, shards))
''',
}
FAILS = {"read_shards_hidden"}
