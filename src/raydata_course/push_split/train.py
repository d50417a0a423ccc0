"""The Ray Train hook of the push-based split: :class:`PushDataConfig`.

``TorchTrainer(..., dataset_config=PushDataConfig())`` gives every worker a push-fed shard
instead of a ``streaming_split`` one. The training loop does not change: it still calls
``ray.train.get_dataset_shard("train").iter_torch_batches(...)``.

How it plugs in: Ray Train asks its ``DataConfig`` for the per-worker iterators.
``DataConfig.configure(datasets, world_size, worker_handles, worker_node_ids)``
(``ray/train/_internal/data_config.py:86-136``) is the documented extension point ("can be
subclassed and the `configure()` method overridden"); in Train V2 the ``DatasetManager``
actor calls it once, when rank 0 first asks for a shard
(``ray/train/v2/_internal/data_integration/dataset_manager.py:53-65, 86-128``), and hands
each worker its element of the returned list. The base class calls
``ds.streaming_split(world_size, equal=True, locality_hints=...)``
(``data_config.py:122-130``); this subclass calls ``push_split`` with the same arguments,
after applying the same per-dataset execution options (``_resolve_execution_options``,
``data_config.py:73-84``).

The blocks are pushed into the Train worker actors themselves: V2 runs the training
function in a thread of the worker actor (``ray/train/v2/_internal/execution/worker_group/
worker.py:139-175``), so the actor's main thread is free to receive deliveries.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ray.train import DataConfig

from raydata_course.push_split import (DEFAULT_CONTROL_INTERVAL_S, DEFAULT_LIVENESS_INTERVAL_S, WINDOW_POLICIES,
                                       push_split)

__all__ = ["PushDataConfig"]


class PushDataConfig(DataConfig):
    """A ``ray.train.DataConfig`` that shards with :func:`push_split`.

    Args:
        datasets_to_split: as in ``DataConfig``: ``"all"`` or a list of dataset names;
            the others are given to every worker whole (``ds.iterator()``).
        execution_options: as in ``DataConfig``.
        enable_shard_locality: as in ``DataConfig``: pass the workers' node ids as
            locality hints.
        liveness_interval_s, window, steer_on_store, read_ahead_cap, idle_wait,
            control_interval_s: passed to :func:`push_split` as they are (see there).

    Raises:
        ValueError: an option :func:`push_split` refuses (checked here, before Ray Train
            starts its workers).
    """

    def __init__(self, datasets_to_split="all", execution_options=None, enable_shard_locality: bool = True,
                 liveness_interval_s: float = DEFAULT_LIVENESS_INTERVAL_S, window: str = "adaptive",
                 steer_on_store: bool = False, read_ahead_cap: bool = True, idle_wait: bool = True,
                 control_interval_s: float = DEFAULT_CONTROL_INTERVAL_S):
        super().__init__(datasets_to_split=datasets_to_split, execution_options=execution_options,
                         enable_shard_locality=enable_shard_locality)
        if window not in WINDOW_POLICIES:
            raise ValueError(f"window must be one of {WINDOW_POLICIES}, got {window!r}.")
        if not control_interval_s > 0 or not liveness_interval_s > 0:
            raise ValueError(f"control_interval_s and liveness_interval_s must be above 0 seconds, got "
                             f"{control_interval_s!r} and {liveness_interval_s!r}.")
        #: every option push_split takes, passed through as they are
        self.push_options = {"liveness_interval_s": liveness_interval_s, "window": window,
                             "steer_on_store": steer_on_store, "read_ahead_cap": read_ahead_cap,
                             "idle_wait": idle_wait, "control_interval_s": control_interval_s}

    def configure(self, datasets: Dict[str, object], world_size: int, worker_handles: Optional[list],
                  worker_node_ids: Optional[list], **kwargs) -> List[Dict[str, object]]:
        """Return, per worker rank, ``{dataset name: iterator}``; split datasets get a
        :class:`~raydata_course.push_split.iterator.PushSplitIterator`."""
        output: List[Dict[str, object]] = [{} for _ in range(world_size)]
        for name, ds in datasets.items():
            if ds.name is None:
                ds.set_name(name)
        to_split = set(datasets) if self._datasets_to_split == "all" else set(self._datasets_to_split)
        hints = worker_node_ids if self._enable_shard_locality else None
        for name, ds in datasets.items():
            ds = ds.copy(ds)
            ds.context.execution_options = self._resolve_execution_options(name)
            if name in to_split:
                for rank, split in enumerate(push_split(ds, world_size, equal=True, locality_hints=hints,
                                                        **self.push_options)):
                    output[rank][name] = split
            else:
                for rank in range(world_size):
                    output[rank][name] = ds.iterator()
        return output
