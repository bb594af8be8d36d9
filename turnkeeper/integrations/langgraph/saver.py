"""``TurnkeeperSaver``: a LangGraph checkpointer whose threads are streams of the store.

Each thread is one append-only stream (log.py); writes to it are fenced (threads.py):
a second writer on a thread is refused with ``ABORTED`` rather than fork it. Channel
values are stored once per version, a list that only grew as the items it gained
(values.py). The async methods run the sync ones in a worker thread: the store is
synchronous.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.base import writes_sort_key as _writes_order
from langgraph.checkpoint.serde.base import SerializerProtocol

from turnkeeper.errors import InvalidArgument
from turnkeeper.integrations.langgraph.log import (
    CHECKPOINT,
    DELETED,
    REMOVED,
    WRITES,
    StoredCheckpoint,
    ThreadState,
    Typed,
    new_event,
)
from turnkeeper.integrations.langgraph.threads import DEFAULT_CACHED_THREADS, ThreadLog
from turnkeeper.integrations.langgraph.values import (
    Values,
    appended,
    blob_rows,
    dump,
    item_forms,
    load,
    rebuild,
)
from turnkeeper.json_types import JsonDict, JsonValue
from turnkeeper.store.base import EventStore
from turnkeeper.store.opening import open_event_store
from turnkeeper.store.records import NewEvent

# Named here because the saver's ``list`` method hides the builtin inside the class.
_Found = list[tuple[str, StoredCheckpoint, ThreadState]]
_Tuples = list[CheckpointTuple]
_Keys = list[tuple[str, str]]


class HasStore(Protocol):
    """What :meth:`TurnkeeperSaver.from_project` needs of an open project."""

    @property
    def store(self) -> EventStore: ...


_EMPTY = object()  # a channel with a new version and no value (LangGraph's "empty")


def _thread_id(config: RunnableConfig) -> str:
    thread_id = config.get("configurable", {}).get("thread_id")
    if thread_id is None:
        raise InvalidArgument(
            "a checkpoint config needs configurable.thread_id", reason="missing_thread_id"
        )
    return str(thread_id)


def _ns(config: RunnableConfig) -> str:
    return str(config.get("configurable", {}).get("checkpoint_ns", ""))


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _json_typed(typed: Typed) -> list[JsonValue]:
    return [typed[0], typed[1]]


class TurnkeeperSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in turnkeeper's event store (SQLite or PostgreSQL).

    ``TurnkeeperSaver.from_url(url)`` opens (and, on :meth:`close`, closes) a store;
    ``TurnkeeperSaver.from_project(project)`` writes into an open project's store.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        serde: SerializerProtocol | None = None,
        owns_store: bool = False,
        cached_threads: int = DEFAULT_CACHED_THREADS,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self._owns_store = owns_store
        self._log = ThreadLog(store, cached_threads)

    @classmethod
    def from_url(cls, url: str | Path, *, serde: SerializerProtocol | None = None) -> Self:
        """A saver on the store at ``url`` (a SQLite path or URL, ``postgresql://...``)."""
        return cls(open_event_store(url), serde=serde, owns_store=True)

    @classmethod
    def from_project(cls, project: HasStore, *, serde: SerializerProtocol | None = None) -> Self:
        """A saver on an open ``turnkeeper.Project``'s store (the project closes it)."""
        return cls(project.store, serde=serde)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------

    def _tuple(
        self, thread_id: str, state: ThreadState, stored: StoredCheckpoint, memo: Values
    ) -> CheckpointTuple:
        checkpoint = cast(Checkpoint, load(self.serde, stored.checkpoint))
        values: dict[str, object] = {}
        for channel, version in checkpoint["channel_versions"].items():
            key = (stored.ns, channel, str(version))
            if key in state.blobs and state.blobs[key].value[0] != "empty":
                values[channel] = rebuild(self.serde, state, key, memo)
        checkpoint["channel_values"] = values
        writes = sorted(
            state.writes.get((stored.ns, stored.id), {}).values(),
            key=lambda w: _writes_order(w.task_path, w.task_id, w.idx),
        )
        return CheckpointTuple(
            config=_config(thread_id, stored.ns, stored.id),
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, load(self.serde, stored.metadata)),
            parent_config=(_config(thread_id, stored.ns, stored.parent) if stored.parent else None),
            pending_writes=[(w.task_id, w.channel, load(self.serde, w.value)) for w in writes],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _thread_id(config), _ns(config)
        checkpoint_id = get_checkpoint_id(config)
        with self._log.lock:
            state = self._log.read(thread_id)
            if checkpoint_id is None:
                checkpoint_id = state.latest.get(ns)
            stored = None if checkpoint_id is None else state.checkpoints.get((ns, checkpoint_id))
            return None if stored is None else self._tuple(thread_id, state, stored, {})

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, object] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable", {})
        ns = configurable.get("checkpoint_ns")
        only_id = configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        with self._log.lock:
            if "thread_id" in configurable:
                thread_ids = [str(configurable["thread_id"])]
            else:
                thread_ids = self._log.live_thread_ids()
            found: _Found = []
            for thread_id in thread_ids:
                state = self._log.read(thread_id)
                found.extend(
                    (thread_id, stored, state)
                    for stored in state.checkpoints.values()
                    if (ns is None or stored.ns == ns)
                    and (only_id is None or stored.id == only_id)
                    and (before_id is None or stored.id < before_id)
                )
            found.sort(key=lambda item: item[1].id, reverse=True)
            result: _Tuples = []
            memos: dict[str, Values] = {}
            for thread_id, stored, state in found:
                if limit is not None and len(result) >= limit:
                    break
                if filter:
                    metadata = cast(CheckpointMetadata, load(self.serde, stored.metadata))
                    if any(metadata.get(k) != v for k, v in filter.items()):
                        continue
                memo = memos.setdefault(thread_id, {})
                result.append(self._tuple(thread_id, state, stored, memo))
        yield from result

    # --- writing ----------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns = _thread_id(config), _ns(config)
        parent = get_checkpoint_id(config)
        bare = checkpoint.copy()
        values: dict[str, object] = bare.pop("channel_values", {})  # type: ignore[misc]
        full_metadata = get_serializable_checkpoint_metadata(config, metadata)
        run_id = full_metadata.get("run_id")
        with self._log.lock:
            state = self._log.for_write(thread_id)
            blobs: list[JsonValue] = []
            lists: dict[tuple[str, str], tuple[str, list[tuple[str, bytes]]]] = {}
            for channel, version in new_versions.items():
                if (ns, channel, str(version)) in state.blobs:
                    continue  # a value is stored once per version
                value = values.get(channel, _EMPTY)
                if value is _EMPTY:
                    blobs.append([channel, version, "empty", None, None])
                    continue
                stored_value = value
                base: str | None = None
                if isinstance(value, list):
                    forms = item_forms(self.serde, value)
                    base, kept = appended(state, ns, channel, forms)
                    stored_value = value[kept:]
                    lists[(ns, channel)] = (str(version), forms)
                typed = dump(self.serde, stored_value)
                blobs.append([channel, version, typed[0], typed[1], base])
            payload: JsonDict = {
                "ns": ns,
                "id": checkpoint["id"],
                "parent": parent,
                "checkpoint": _json_typed(dump(self.serde, bare)),
                "metadata": _json_typed(dump(self.serde, full_metadata)),
                "run_id": run_id if isinstance(run_id, str) else None,
                "blobs": blobs,
            }
            self._log.append(thread_id, state, [new_event(CHECKPOINT, payload)])
            state.last_lists.update(lists)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, object]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns = _thread_id(config), _ns(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise InvalidArgument(
                "pending writes need the config of their checkpoint (checkpoint_id)",
                reason="missing_checkpoint_id",
            )
        upsert = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        with self._log.lock:
            state = self._log.for_write(thread_id)
            known = state.writes.get((ns, checkpoint_id), {})
            rows: list[JsonValue] = []
            for position, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, position)
                if not upsert and (task_id, idx) in known:
                    continue  # written before (a retried task): kept once
                typed = dump(self.serde, value)
                rows.append([idx, channel, typed[0], typed[1]])
            if not rows:
                return
            payload: JsonDict = {
                "ns": ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "upsert": upsert,
                "writes": rows,
            }
            self._log.append(thread_id, state, [new_event(WRITES, payload)])

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: a tombstone event (the log is append-only; its bytes stay).
        Every later write to the thread is refused (``ABORTED``, ``thread_deleted``)."""
        with self._log.lock:
            state = self._log.read(thread_id)
            if state.head == 0 or state.deleted:
                return
            self._log.append(thread_id, state, [new_event(DELETED, {})])

    def _remove(self, thread_id: str, state: ThreadState, keys: _Keys, why: str) -> None:
        if keys:
            rows: list[JsonValue] = [[ns, cid] for ns, cid in keys]
            self._log.append(
                thread_id, state, [new_event(REMOVED, {"checkpoints": rows, "why": why})]
            )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove every checkpoint (and its writes) of the runs: tombstones, per thread."""
        wanted = set(run_ids)
        if not wanted:
            return
        with self._log.lock:
            threads = {t for run_id in wanted for t in self._log.threads_of_run(run_id)}
            for thread_id in sorted(threads):
                state = self._log.read(thread_id)
                keys = [k for k, c in state.checkpoints.items() if c.run_id in wanted]
                self._remove(thread_id, state, keys, "delete_for_runs")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append every live checkpoint of the source, with its values and writes, to
        the target, in the source's order, in one atomic append."""
        with self._log.lock:
            source = self._log.read(source_thread_id)
            if source.deleted or not source.checkpoints:
                return
            target = self._log.read(target_thread_id)
            events: list[NewEvent] = []
            emitted: set[tuple[str, str, str]] = set(target.blobs)
            for stored in sorted(source.checkpoints.values(), key=lambda c: (c.ns, c.id)):
                checkpoint = cast(Checkpoint, load(self.serde, stored.checkpoint))
                blobs: list[JsonValue] = []
                for channel, version in checkpoint["channel_versions"].items():
                    key = (stored.ns, channel, str(version))
                    blobs.extend(blob_rows(source, key, emitted))
                payload: JsonDict = {
                    "ns": stored.ns,
                    "id": stored.id,
                    "parent": stored.parent,
                    "checkpoint": _json_typed(stored.checkpoint),
                    "metadata": _json_typed(stored.metadata),
                    "run_id": stored.run_id,
                    "blobs": blobs,
                }
                events.append(new_event(CHECKPOINT, payload))
                by_task: dict[tuple[str, str, bool], list[JsonValue]] = {}
                for write in source.writes.get((stored.ns, stored.id), {}).values():
                    by_task.setdefault((write.task_id, write.task_path, write.idx < 0), []).append(
                        [write.idx, write.channel, write.value[0], write.value[1]]
                    )
                for (task_id, task_path, special), rows in by_task.items():
                    writes_payload: JsonDict = {
                        "ns": stored.ns,
                        "checkpoint_id": stored.id,
                        "task_id": task_id,
                        "task_path": task_path,
                        "upsert": special,
                        "writes": rows,
                    }
                    events.append(new_event(WRITES, writes_payload))
            self._log.append(target_thread_id, target, events)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: tombstone all but each namespace's latest checkpoint;
        ``delete``: :meth:`delete_thread`. Neither shrinks the log."""
        if strategy == "delete":
            for thread_id in thread_ids:
                self.delete_thread(thread_id)
            return
        if strategy != "keep_latest":
            raise InvalidArgument(
                f"unknown prune strategy {strategy!r} (keep_latest or delete)",
                reason="unknown_prune_strategy",
            )
        with self._log.lock:
            for thread_id in thread_ids:
                state = self._log.read(thread_id)
                latest: dict[str, str] = {}
                for ns, cid in state.checkpoints:
                    latest[ns] = max(cid, latest.get(ns, cid))
                keys = [(ns, cid) for ns, cid in state.checkpoints if latest[ns] != cid]
                self._remove(thread_id, state, keys, "prune")

    def get_next_version(self, current: str | None, channel: None) -> str:
        # LangGraph's SQL savers' scheme: a zero-padded counter (ordered as text) and a
        # random fraction.
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # --- async: the sync methods in a worker thread ---------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, object] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def listed() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(listed):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, object]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
