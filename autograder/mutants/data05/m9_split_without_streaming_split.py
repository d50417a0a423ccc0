"""Splits with Dataset.split, which materializes the dataset and hands each shard a fixed list of
blocks, instead of streaming_split: every row reaches one shard, but no Ray Train worker would
stream its shard (nothing in the rows tells; the grader sees that no split coordinator ran)."""
ANSWERS = {
    "read_shards_answer": '''
def read_shards(ds, num_shards: int) -> list:
    shards = ds.split(num_shards)
    def read(shard):
        parts = [b["id"] for b in shard.iter_batches(batch_size=128)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    with ThreadPoolExecutor(max_workers=num_shards) as pool:
        return list(pool.map(read, shards))
''',
}
FAILS = {"read_shards_hidden"}
#: Only the sandbox's processes show that no split coordinator ran: graded without a sandbox
#: (the contract tests), the rows alone pass.
OBSERVED_FAILS = {"read_shards_hidden"}
