"""Uses map (one row out per row in) where flat_map (many rows out) is needed."""
ANSWERS = {
    "long_format_answer": '''
def long_format(ds, columns: list):
    return ds.map(lambda row: {"cultivar": row["cultivar"], "measure": columns[0], "value": float(row[columns[0]])})
''',
}
FAILS = {"long_format_visible", "long_format_hidden"}
