"""A correct answer written from chapter 02 in another style: np.true_divide on float64 copies
for the ratio, statistics from one ds.aggregate call applied in a pyarrow batch UDF, bands
picked with pc.take from a label array, and a loop-built list of rows in flat_map."""
ANSWERS = {
    "phenol_ratio_answer": '''
def phenol_ratio(batch: dict) -> dict:
    """Add phenol_ratio = flavanoids / total_phenols (float64) to a NumPy batch."""
    flav = np.asarray(batch["flavanoids"], dtype=np.float64)
    phen = np.asarray(batch["total_phenols"], dtype=np.float64)
    result = dict(batch)  # a new dict; the arrays themselves are not touched
    result["phenol_ratio"] = np.true_divide(flav, phen)
    return result
''',
    "standardize_answer": '''
from ray.data.aggregate import Mean, Std


def standardize(ds, columns: list):
    """Return ds with each column in columns z-scored by dataset-wide mean and std (ddof=1)."""
    aggs = []
    for i, name in enumerate(columns):
        aggs.append(Mean(name, alias_name=f"m{i}"))
        aggs.append(Std(name, ddof=1, alias_name=f"s{i}"))
    stats = ds.aggregate(*aggs)
    params = {name: (float(stats[f"m{i}"]), float(stats[f"s{i}"])) for i, name in enumerate(columns)}

    def zscore(table: pa.Table) -> pa.Table:
        for name, (mu, sigma) in params.items():
            x = pc.cast(table[name], pa.float64())
            z = pc.divide(pc.subtract(x, mu), sigma)
            table = table.set_column(table.schema.get_field_index(name), name, z)
        return table

    return ds.map_batches(zscore, batch_format="pyarrow")
''',
    "add_bands_answer": '''
BAND_NAMES = pa.array(["light", "medium", "strong"], type=pa.string())


def _band_of(table: pa.Table) -> pa.Table:
    alcohol = table["alcohol"]
    # 0 below 12.5, 1 from 12.5, 2 from 13.5
    level = pc.add(pc.cast(pc.greater_equal(alcohol, 12.5), pa.int8()),
                   pc.cast(pc.greater_equal(alcohol, 13.5), pa.int8()))
    band = pc.take(BAND_NAMES, level)
    return table.append_column(pa.field("band", pa.string()), band)


def add_bands(ds):
    """Add a string column band (light/medium/strong) from alcohol, with pyarrow.compute."""
    return ds.map_batches(_band_of, batch_format="pyarrow")
''',
    "long_format_answer": '''
def long_format(ds, columns: list):
    """One row {cultivar, measure, value} per input row and listed column."""
    names = list(columns)

    def melt(row: dict) -> list:
        out = []
        for name in names:
            out.append({"cultivar": int(row["cultivar"]), "measure": str(name), "value": float(row[name])})
        return out

    return ds.flat_map(melt)
''',
}
FAILS = set()
