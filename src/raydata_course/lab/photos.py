"""An image dataset in Parquet, built offline from real photographs.

The photographs ship inside two installed packages, so nothing is downloaded:

- scikit-image's ``skimage/data``: astronaut (Eileen Collins, NASA), chelsea (a cat),
  coffee, motorcycle_left/right (a stereo pair), rocket, hubble_deep_field (NASA), ihc
  (immunohistochemistry microscopy), retina (a fundus photograph), camera (grey);
- scikit-learn's ``sklearn/datasets/images``: china (a temple) and flower.

Each row of the dataset is a random square crop of one photograph, resized to
``encoded_side`` pixels and **stored JPEG-encoded** (the ``image`` column, bytes), with the
photograph's index as ``label``: a 12-class "which photograph is this crop from?" task. The
crops are drawn from a seeded generator, so the same arguments always give the same files.

Examples:
    >>> [name for name, _ in PHOTOS][:3]
    ['astronaut.png', 'chelsea.png', 'coffee.png']
"""

from __future__ import annotations

import io
import json
import os
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["PHOTOS", "load_photos", "build_image_parquet"]

#: (file name, package data folder) of each photograph; the list index is the label.
PHOTOS: list[tuple[str, str]] = [
    ("astronaut.png", "skimage/data"),
    ("chelsea.png", "skimage/data"),
    ("coffee.png", "skimage/data"),
    ("motorcycle_left.png", "skimage/data"),
    ("motorcycle_right.png", "skimage/data"),
    ("rocket.jpg", "skimage/data"),
    ("hubble_deep_field.jpg", "skimage/data"),
    ("ihc.png", "skimage/data"),
    ("retina.jpg", "skimage/data"),
    ("camera.png", "skimage/data"),
    ("china.jpg", "sklearn/datasets/images"),
    ("flower.jpg", "sklearn/datasets/images"),
]


def load_photos() -> list[np.ndarray]:
    """Decode the photographs as RGB ``uint8`` arrays of shape (height, width, 3).

    Raises:
        FileNotFoundError: if scikit-image or scikit-learn lacks a file (run ``make setup``).
    """
    from PIL import Image

    images = []
    for name, folder in PHOTOS:
        package, *parts = folder.split("/")
        path = resources.files(package).joinpath(*parts, name)
        if not path.is_file():
            raise FileNotFoundError(f"{folder}/{name} is missing from the installed {package}; run `make setup`.")
        with path.open("rb") as fh:
            images.append(np.asarray(Image.open(fh).convert("RGB")))
    return images


def _encode_crops(photos, labels: np.ndarray, rng: np.random.Generator, side: int, quality: int) -> list[bytes]:
    from PIL import Image

    out = []
    for label in labels:
        photo = photos[label]
        h, w, _ = photo.shape
        crop = int(rng.integers(min(h, w) // 2, min(h, w) + 1))
        top = int(rng.integers(0, h - crop + 1))
        left = int(rng.integers(0, w - crop + 1))
        tile = Image.fromarray(photo[top : top + crop, left : left + crop]).resize((side, side), Image.BILINEAR)
        buf = io.BytesIO()
        tile.save(buf, format="JPEG", quality=quality)
        out.append(buf.getvalue())
    return out


def build_image_parquet(
    directory: str | Path,
    num_rows: int,
    *,
    encoded_side: int = 256,
    rows_per_file: int = 1024,
    quality: int = 90,
    seed: int = 0,
) -> Path:
    """Write (or reuse) the encoded-image Parquet dataset.

    Args:
        directory: folder for ``part-*.parquet`` and a ``manifest.json``; reused as is when
            the manifest matches the arguments, or matches them but for holding more rows
            (a reader takes the files it needs in order, as
            :func:`raydata_course.lab.workload.build_dataset` does), so variants of different
            lengths share one folder instead of rewriting it in turn.
        num_rows: number of crops (rows).
        encoded_side: side of each stored JPEG, in pixels.
        rows_per_file: rows per Parquet file.
        quality: JPEG quality, 1-95.
        seed: seed of the crop generator.

    Returns:
        ``directory`` as a Path.

    Raises:
        ValueError: if ``num_rows`` or ``encoded_side`` is not positive.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if num_rows <= 0 or encoded_side <= 0:
        raise ValueError(f"num_rows and encoded_side must be positive, got {num_rows} and {encoded_side}.")
    folder = Path(directory)
    wanted = {"num_rows": num_rows, "encoded_side": encoded_side, "rows_per_file": rows_per_file,
              "quality": quality, "seed": seed, "photos": [n for n, _ in PHOTOS]}
    manifest = folder / "manifest.json"
    if manifest.is_file():
        have = json.loads(manifest.read_text())
        if isinstance(have.get("num_rows"), int) and have["num_rows"] >= num_rows \
                and {**have, "num_rows": num_rows} == wanted:
            return folder
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("part-*.parquet"):
        old.unlink()
    photos = load_photos()
    labels = np.random.default_rng(seed).integers(0, len(photos), size=num_rows)

    def write_file(i: int) -> None:
        # Each file has its own generator, seeded by (seed, file index), so the output does
        # not depend on how the files are spread over threads.
        rng = np.random.default_rng([seed, i])
        part = labels[i * rows_per_file : (i + 1) * rows_per_file]
        table = pa.table({
            "image": pa.array(_encode_crops(photos, part, rng, encoded_side, quality), pa.binary()),
            "label": pa.array(part.astype(np.int64)),
        })
        pq.write_table(table, folder / f"part-{i:05d}.parquet")

    from concurrent.futures import ThreadPoolExecutor

    num_files = -(-num_rows // rows_per_file)
    # PIL releases the GIL while it resizes and encodes, so threads use every core.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(write_file, range(num_files)))
    manifest.write_text(json.dumps(wanted, indent=1))
    return folder
