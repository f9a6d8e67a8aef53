"""`DeviceTable`: every DRA device of a cluster's complete pools as arrays, for the allocator.

Devices are ordered by node (the cluster's node order), then driver, pool and device name,
so node i's devices are the rows `start[i]:end[i]` and ties go to the lowest name as they do
for nodes. Devices reachable from every node (`allNodes` pools) come after, in `anywhere`.
Quantities (counters, capacities) are held as int64 milli-units, exact for every quantity
Kubernetes accepts below 9.2e15 base units.

A device whose `uuid` attribute names one of the node's GPUs is *linked* to it: allocating
it exclusively holds that whole GPU in `Usage`, so extended-resource pods and DRA claims
never share a GPU by accident and the GPU scorers see what DRA holds.

`DeviceFacts` (what a CEL selector sees) are built once per distinct device description;
selectors are evaluated per facts id, not per device (see `core.claims`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.model.cel import AttributeValue, DeviceFacts
from gpufleet.model.dra import Capacity, Device, DeviceTaint, Pool
from gpufleet.model.node import GpuUuid, NodeName

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Bool = npt.NDArray[np.bool_]
MILLI = 1000
IDENTITY_VALUES = 64
"""An attribute with more distinct values than this in a table identifies devices (see `shapes`)."""
UUID_ATTRIBUTES = ("uuid",)
PARENT_ATTRIBUTE = "parentUUID"
"""A MIG device's attribute naming the GPU it is carved from (NVIDIA's driver, gpufleet's agent)."""
"""Attribute short names (in the driver's domain) that name the GPU a device is."""


def milli(amount: Decimal) -> int:
    """A quantity in milli-units, rounded up (a request never gets less than it asked)."""
    scaled = amount * MILLI
    whole = int(scaled)
    return whole + (1 if scaled > whole else 0)


@dataclass(frozen=True, slots=True)
class DeviceRef:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class DeviceTable:
    """Static per-device arrays. Never mutated after construction."""

    def __init__(self, pools: Sequence[Pool], node_index: Mapping[NodeName, int],
                 gpu_uuids: Mapping[tuple[int, GpuUuid], int] | None = None) -> None:
        """`gpu_uuids`: (node index, GPU UUID) -> GPU index on the node, for linking."""
        self.problems: list[str] = []
        n_nodes = len(node_index)
        rows: list[tuple[int, str, str, Device, Pool]] = []
        for pool in pools:
            if pool.node is None:
                node = -1
            elif NodeName(pool.node) in node_index:
                node = node_index[NodeName(pool.node)]
            else:
                self.problems.append(f"pool {pool.driver}/{pool.name}: node {pool.node} is not in the cluster; not used")
                continue
            rows.extend((node, pool.driver, pool.name, d, pool) for d in pool.devices)
        rows.sort(key=lambda r: (r[0] if r[0] >= 0 else n_nodes, r[1], r[2], r[3].name))
        d_count = len(rows)
        self.n_devices = d_count
        self.refs: tuple[DeviceRef, ...] = tuple(DeviceRef(r[1], r[2], r[3].name) for r in rows)
        self.index: dict[DeviceRef, int] = {ref: k for k, ref in enumerate(self.refs)}
        self.devices: tuple[Device, ...] = tuple(r[3] for r in rows)
        self.node: I32 = np.array([r[0] for r in rows], dtype=np.int32)
        nodes_sorted = np.where(self.node >= 0, self.node, n_nodes)
        self.start: I64 = np.searchsorted(nodes_sorted, np.arange(n_nodes), side="left").astype(np.int64)
        self.end: I64 = np.searchsorted(nodes_sorted, np.arange(n_nodes), side="right").astype(np.int64)
        self.anywhere: I64 = np.arange(int(np.searchsorted(nodes_sorted, n_nodes)), d_count, dtype=np.int64)
        self.multi: Bool = np.array([r[3].allow_multiple for r in rows], dtype=np.bool_)
        self.taints: tuple[tuple[DeviceTaint, ...], ...] = tuple(
            tuple(t for t in r[3].taints if t.effect != "None") for r in rows)
        self.tainted: Bool = np.array([bool(t) for t in self.taints], dtype=np.bool_)
        # Facts, at two levels: `facts` per distinct device description, and `shapes`, the same
        # without the attributes that nearly every device has its own value of (UUIDs, PCI
        # addresses): a selector that names none of those gives one answer per shape.
        values: dict[str, set[AttributeValue]] = {}
        for r in rows:
            for name, value in r[3].attributes.items():
                values.setdefault(name, set()).add(value)
        self.identity: frozenset[str] = frozenset(
            name.rpartition("/")[2] for name, v in values.items() if len(v) > IDENTITY_VALUES)
        """Short names of attributes with more than IDENTITY_VALUES distinct values."""
        self.facts: list[DeviceFacts] = []
        self.shapes: list[DeviceFacts] = []
        self.facts_of: I32 = _dedupe(rows, self.facts, frozenset())
        self.shape_of: I32 = _dedupe(rows, self.shapes, self.identity)
        self.memo: dict[object, object] = {}
        """Selector results per (expression, level), kept with the table (`core.claims`)."""
        # Counters: one row per (pool, counter set, counter).
        counter_id: dict[tuple[str, str, str, str], int] = {}
        totals: list[int] = []
        for pool in pools:
            for set_name, counters in pool.counter_sets.items():
                for c, amount in counters.items():
                    counter_id[(pool.driver, pool.name, set_name, c)] = len(totals)
                    totals.append(milli(amount))
        self.counter_total: I64 = np.array(totals, dtype=np.int64)
        set_id: dict[tuple[str, str, str], int] = {}
        members: list[list[int]] = []
        for (driver, pool_name, set_name, _), c_row in counter_id.items():
            sid = set_id.setdefault((driver, pool_name, set_name), len(members))
            if sid == len(members):
                members.append([])
            members[sid].append(c_row)
        self.set_counters: tuple[tuple[int, ...], ...] = tuple(tuple(m) for m in members)
        """Per counter set, its counter rows."""
        self.device_sets: tuple[tuple[int, ...], ...] = tuple(
            tuple(sorted({set_id[(r[1], r[2], name)] for name, _ in r[3].consumes})) for r in rows)
        """Per device, the counter sets it consumes from."""
        self.consumes: tuple[tuple[tuple[int, int], ...], ...] = tuple(
            tuple((counter_id[(r[1], r[2], s, c)], milli(a)) for s, cs in r[3].consumes for c, a in cs.items())
            for r in rows)
        users: dict[int, list[int]] = {}
        for k, cons in enumerate(self.consumes):
            for c_row, _ in cons:
                users.setdefault(c_row, []).append(k)
        self.counter_users: dict[int, tuple[int, ...]] = {c: tuple(ks) for c, ks in users.items()}
        """Per counter, the devices that consume it (whose availability changes with it)."""
        # Consumable capacity: one row per (device, capacity) of devices that allow several allocations.
        self.cap_rows: tuple[Mapping[str, tuple[int, Capacity]], ...]
        cap_rows: list[dict[str, tuple[int, Capacity]]] = []
        cap_total: list[int] = []
        for k, (_, _, _, d, _) in enumerate(rows):
            row: dict[str, tuple[int, Capacity]] = {}
            if d.allow_multiple:
                for name, cap in sorted(d.capacity.items()):
                    row[name] = (len(cap_total), cap)
                    cap_total.append(milli(cap.value))
            cap_rows.append(row)
        self.cap_rows = tuple(cap_rows)
        self.cap_total: I64 = np.array(cap_total, dtype=np.int64)
        # Links to the cluster's GPUs.
        self.gpu: I64 = np.full(d_count, -1, dtype=np.int64)
        if gpu_uuids:
            for k, (node, driver, _, d, _) in enumerate(rows):
                for short in UUID_ATTRIBUTES:
                    uuid = d.attributes.get(f"{driver}/{short}")
                    if isinstance(uuid, str) and (node, GpuUuid(uuid)) in gpu_uuids:
                        self.gpu[k] = gpu_uuids[(node, GpuUuid(uuid))]
        self.parent: I64 = np.full(d_count, -1, dtype=np.int64)
        """For a device carved from a node's GPU (a MIG device or placement, not itself linked by its
        `uuid`): that GPU's index. While any such device is allocated the GPU is taken for
        whole-GPU and fractional work, and work on the GPU keeps its partitions out."""
        if gpu_uuids:
            for k, (node, driver, _, d, _) in enumerate(rows):
                parent = d.attributes.get(f"{driver}/{PARENT_ATTRIBUTE}")
                if self.gpu[k] < 0 and isinstance(parent, str) and (node, GpuUuid(parent)) in gpu_uuids:
                    self.parent[k] = gpu_uuids[(node, GpuUuid(parent))]

    def node_rows(self, i: int) -> range:
        return range(int(self.start[i]), int(self.end[i]))


def _dedupe(rows: Sequence[tuple[int, str, str, Device, Pool]], out: list[DeviceFacts],
            leave_out: frozenset[str]) -> I32:
    """Append one DeviceFacts per distinct description to `out` (attributes whose short name is in
    `leave_out` dropped); return each row's index into it."""
    ids: dict[tuple[object, ...], int] = {}
    found: list[int] = []
    for _, driver, _, d, _ in rows:
        attrs = tuple(sorted((k, v) for k, v in d.attributes.items() if k.rpartition("/")[2] not in leave_out))
        key = (driver, attrs, tuple(sorted((k, c.value) for k, c in d.capacity.items())), d.allow_multiple)
        f = ids.get(key)
        if f is None:
            f = ids[key] = len(out)
            out.append(_facts(driver, d, leave_out))
        found.append(f)
    return np.array(found, dtype=np.int32)


def _facts(driver: str, d: Device, leave_out: frozenset[str]) -> DeviceFacts:
    attributes: dict[str, dict[str, AttributeValue]] = {}
    for qualified, value in d.attributes.items():
        domain, _, short = qualified.rpartition("/")
        if short in leave_out:
            continue
        attributes.setdefault(domain, {})[short] = value
    capacity: dict[str, dict[str, Decimal]] = {}
    for qualified, cap in d.capacity.items():
        domain, _, short = qualified.rpartition("/")
        capacity.setdefault(domain, {})[short] = cap.value
    return DeviceFacts(driver, attributes, capacity, d.allow_multiple)


EMPTY = DeviceTable((), {})
