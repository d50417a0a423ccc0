"""Off-by-one at the band boundaries (<= instead of <)."""
ANSWERS = {
    "add_bands_answer": '''
def add_bands(ds):
    def band(table: pa.Table) -> pa.Table:
        alcohol = table["alcohol"]
        values = pc.if_else(pc.less_equal(alcohol, 12.5), "light",
                            pc.if_else(pc.less_equal(alcohol, 13.5), "medium", "strong"))
        return table.append_column("band", values)
    return ds.map_batches(band, batch_format="pyarrow")
''',
}
FAILS = {"add_bands_visible", "add_bands_hidden"}
