"""Stale advice: "the batch is an Arrow table", without asking for batch_format="pyarrow"."""
ANSWERS = {
    "add_bands_answer": '''
def add_bands(ds):
    def band(table):
        alcohol = table["alcohol"]
        values = pc.if_else(pc.less(alcohol, 12.5), "light", pc.if_else(pc.less(alcohol, 13.5), "medium", "strong"))
        return table.append_column("band", values)
    return ds.map_batches(band)
''',
}
FAILS = {"add_bands_visible", "add_bands_hidden"}
