"""Measuring the object store, one way for the whole course.

Two views of the same memory, and the chapters and the lab read both through this package:

- :mod:`.store`: what the object store (plasma) **actually** holds, read from every raylet:
  :func:`~.store.object_store_stats` for one reading, :class:`~.store.PlasmaSampler` for a
  timeline (with each object classified as referenced, pinned without a ref, or freed but not
  yet deleted), and :func:`~.store.settle_store` to wait for freed memory to go before a
  measurement;
- :mod:`.raydata`: what **Ray Data believes** it uses, read from inside its streaming
  executor by :class:`~.raydata.RayDataProbe`, wherever the executor runs;
- :mod:`.run`: one measured run of a dataset and its consumer, both views side by side
  (:func:`~.run.measure_streaming_run`).
"""

from raydata_course.measure.store import ObjectStoreStats, PlasmaSample, PlasmaSampler, object_store_stats, settle_store

__all__ = ["ObjectStoreStats", "PlasmaSample", "PlasmaSampler", "object_store_stats", "settle_store"]
