"""Reads the streaming_split shards one after another: the first waits for its siblings at the epoch barrier forever."""
ANSWERS = {
    "read_shards_answer": '''
def read_shards(ds, num_shards: int) -> list:
    shards = ds.streaming_split(num_shards, equal=False)
    return [np.concatenate([b["id"] for b in shard.iter_batches(batch_size=128)]) for shard in shards]
''',
}
FAILS = {"read_shards_visible", "read_shards_hidden"}
