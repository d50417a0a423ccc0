"""Helpers named for the chapter they serve (and that chapter's exercise and its grader).

- :mod:`.ch03_classifier`: the small PyTorch classifier of chapter 03 and its file format;
  loading it is the expensive set-up an actor pool runs once per actor.
- :mod:`.ch03_actor_pools`: a cluster-wide log of set-up calls, and the compute strategy a
  dataset's plan settled on.
- :mod:`.ch04_backpressure`: a workload whose memory is easy to reason about, a slow
  consumer, the knobs of the object-store budget, and Ray's defaults cited from its source.
- :mod:`.ch05_torch_ingest`: the digits, a model, a map-style PyTorch dataset and the Ray
  Train loop of chapter 05.
- :mod:`.ch05_split_checks`: rows whose features spell their id, row coverage, and reading
  ``streaming_split`` iterators under a deadline.
- :mod:`.ch07_ingest_tuning`: photo shards with an unused column, the decode and augment
  UDFs, one measured training epoch, how shuffled an order is, how many tasks ran at once.
- :mod:`.ch07_stats`: Ray Data's stats text as numbers: ``ds.stats()`` per operator, an
  iterator's blocked time per stage, the map tasks' heap peak.
- :mod:`.ch07_decide`: repeated epochs of one configuration, and the rule that keeps a step
  only if its median beats the kept one's by more than their spread.

Measurement lives in :mod:`raydata_course.measure`; showing source in :mod:`raydata_course.show`.
"""
