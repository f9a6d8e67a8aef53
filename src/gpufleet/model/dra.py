"""Dynamic Resource Allocation objects (`resource.k8s.io/v1`), read from their API shape.

DeviceClasses, ResourceSlices and ResourceClaims arrive as the API server serves them
(dicts, as JSON or YAML gives them); `parse_*` turns each into a frozen value or raises a
`ModelError` naming the object and the field (`ResourceClaim ns/c: spec.devices.requests[0].exactly.count`).
`pools()` assembles slices into the pools the allocator may use: only the newest generation
of a pool counts, and only once all its `resourceSliceCount` slices are there; every pool
left out is reported with the reason, never skipped silently.

Attribute and capacity names are kept fully qualified: an unqualified name (`productName`)
belongs to the driver's domain (`gpu.nvidia.com/productName`), as Kubernetes reads it.
Quantities are `Decimal`s in base units (`model.units.parse_quantity`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any, Iterator, Literal, Mapping, Sequence, TypeVar

from gpufleet.model.cel import AttributeValue, Version
from gpufleet.model.errors import ModelError
from gpufleet.model.units import parse_quantity

MAX_COUNT = 128
"""Most devices one request may ask for by count (Kubernetes' AllocationResultsMaxSize)."""
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer a scheduler puts on a claim before it writes the allocation."""
TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")


V = TypeVar("V")


class Frozen(Mapping[str, V]):
    """An immutable, hashable mapping: claims and their results are compared and cached by value."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, V] | None = None) -> None:
        self._items: dict[str, V] = dict(items or {})
        self._hash = hash(tuple(sorted(self._items.items(), key=lambda kv: kv[0])))

    def __getitem__(self, key: str) -> V:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return dict(self._items) == (dict(other) if isinstance(other, Mapping) else other)

    def __repr__(self) -> str:
        return repr(self._items)


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str
    """`None` (informational), `NoSchedule` or `NoExecute`."""


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    """`Equal` or `Exists`."""
    value: str = ""
    effect: str = ""
    """Empty: every effect."""

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Capacity:
    value: Decimal
    default: Decimal | None = None
    """`requestPolicy.default`: what a request that names no amount takes (None: all of it)."""
    valid_values: tuple[Decimal, ...] = ()
    valid_range: tuple[Decimal | None, Decimal | None, Decimal | None] | None = None
    """`requestPolicy.validRange`: (min, max, step)."""

    def amount(self, asked: Decimal | None) -> Decimal | None:
        """What a request asking `asked` (None: nothing named) consumes, rounded up the way the
        request policy says; None if the policy allows no such amount."""
        want = asked if asked is not None else (self.default if self.default is not None else self.value)
        if self.valid_values:
            fitting = [v for v in sorted(self.valid_values) if v >= want]
            return fitting[0] if fitting else None
        if self.valid_range is not None:
            low, high, step = self.valid_range
            if low is not None and want < low:
                want = low
            if step is not None and low is not None and step > 0:
                steps = ((want - low) / step).to_integral_value(rounding=ROUND_CEILING)  # up to the next step
                want = low + steps * step
            if high is not None and want > high:
                return None
        return want


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    """Fully qualified name -> value."""
    capacity: Mapping[str, Capacity] = field(default_factory=dict)
    consumes: tuple[tuple[str, Mapping[str, Decimal]], ...] = ()
    """(counter set, counter -> amount) per `consumesCounters` entry."""
    taints: tuple[DeviceTaint, ...] = ()
    allow_multiple: bool = False
    binding_conditions: tuple[str, ...] = ()
    """`bindingConditions` (KEP-5007): the scheduler must wait for them before binding, which
    gpufleet does not do yet, so `pools` leaves such a device out."""


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node: str | None
    """`nodeName`; None for a slice whose devices are reachable from every node (`allNodes`)."""
    devices: tuple[Device, ...] = ()
    counter_sets: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pool:
    """A complete pool of the newest generation: what the allocator may hand out."""

    driver: str
    name: str
    node: str | None
    generation: int
    devices: tuple[Device, ...]
    counter_sets: Mapping[str, Mapping[str, Decimal]]


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    """CEL expressions."""
    extended_resource_name: str | None = None


@dataclass(frozen=True, slots=True)
class Subrequest:
    """One way to satisfy a request: `exactly`, or one entry of `firstAvailable`."""

    name: str
    """The request's name, `request/subrequest` for an entry of firstAvailable."""
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = 1
    capacity: Mapping[str, Decimal] = field(default_factory=Frozen)
    """`capacity.requests`: qualified capacity name -> amount (on devices that allow several allocations)."""
    tolerations: tuple[DeviceToleration, ...] = ()
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class Request:
    name: str
    alternatives: tuple[Subrequest, ...]
    """`exactly` alone, or the `firstAvailable` entries in order of preference."""


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]
    """Names of the requests it binds (empty: all)."""
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One result of `status.allocation.devices.results`."""

    request: str
    driver: str
    pool: str
    device: str
    consumed: Mapping[str, Decimal] = field(default_factory=Frozen)
    """`consumedCapacity`, on a device that allows several allocations."""
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """An allocation the scheduler made (or a running pod holds): what `status.allocation` says."""

    claim: str
    """`namespace/name`."""
    devices: tuple[AllocatedDevice, ...]
    node: str | None
    """The node the allocation pins the claim to (None: devices reachable from every node)."""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()
    allocation: tuple[AllocatedDevice, ...] | None = None
    """None while unallocated."""
    allocated_node: str | None = None
    """The node `status.allocation.nodeSelector` pins the claim to (None: any node, or unallocated)."""
    reserved_for: tuple[str, ...] = ()
    """Uids of the pods in `status.reservedFor`."""
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def signature(self) -> tuple[object, ...]:
        """Equal for claims that ask the same (claims made from one template): interchangeable for filtering."""
        return (self.requests, self.constraints, self.allocation, self.allocated_node)


@dataclass(frozen=True, slots=True)
class DraState:
    """What a cycle knows of DRA besides the devices (those are in `Cluster.devices`)."""

    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)
    """By `namespace/name`."""
    problems: tuple[str, ...] = ()
    """Pools, slices and allocations left out, one line each (drivers log them)."""


# -- parsing -----------------------------------------------------------------------------------
def _obj(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ModelError(where, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ModelError(where, f"expected a list, got {type(value).__name__}")
    return value


def _str(value: object, where: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ModelError(where, "is required" if value in (None, "") else f"expected a string, got {value!r}")
    return value


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(where, f"expected an integer, got {value!r}")
    return value


def _name(meta: Mapping[str, Any], kind: str) -> str:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ModelError(kind, "metadata.name is required")
    return name


def qualify(name: str, driver: str) -> str:
    """`productName` -> `gpu.nvidia.com/productName`; a qualified name stays as it is."""
    return name if "/" in name else f"{driver}/{name}"


def _attribute(value: object, where: str) -> AttributeValue:
    spec = _obj(value, where)
    kinds = [k for k in ("int", "bool", "string", "version") if k in spec]
    if len(kinds) != 1:
        raise ModelError(where, f"exactly one of int, bool, string or version is required, got {sorted(spec)}")
    kind = kinds[0]
    v = spec[kind]
    if kind == "int":
        return _int(v, f"{where}.int")
    if kind == "bool":
        if not isinstance(v, bool):
            raise ModelError(f"{where}.bool", f"expected true or false, got {v!r}")
        return v
    if kind == "string":
        return _str(v, f"{where}.string", required=False)
    return Version(_str(v, f"{where}.version"))


def _quantity(value: object, where: str) -> Decimal:
    if isinstance(value, float):
        raise ModelError(where, f"expected a quantity string, got the number {value!r}")
    return parse_quantity(value, where)  # type: ignore[arg-type]


def _capacity(value: object, where: str) -> Capacity:
    spec = _obj(value, where)
    amount = _quantity(spec.get("value"), f"{where}.value")
    policy = spec.get("requestPolicy")
    if policy is None:
        return Capacity(amount)
    p = _obj(policy, f"{where}.requestPolicy")
    default = _quantity(p["default"], f"{where}.requestPolicy.default") if p.get("default") is not None else None
    valid = tuple(_quantity(v, f"{where}.requestPolicy.validValues[{k}]")
                  for k, v in enumerate(_list(p.get("validValues"), f"{where}.requestPolicy.validValues")))
    rng = None
    if p.get("validRange") is not None:
        r = _obj(p["validRange"], f"{where}.requestPolicy.validRange")
        rng = tuple(_quantity(r[k], f"{where}.requestPolicy.validRange.{k}") if r.get(k) is not None else None
                    for k in ("min", "max", "step"))
    return Capacity(amount, default, valid, rng)  # type: ignore[arg-type]


def _counters(value: object, where: str) -> dict[str, Decimal]:
    return {name: _quantity(_obj(c, f"{where}.{name}").get("value"), f"{where}.{name}.value")
            for name, c in _obj(value or {}, where).items()}


def _taint(value: object, where: str) -> DeviceTaint:
    spec = _obj(value, where)
    effect = _str(spec.get("effect"), f"{where}.effect")
    if effect not in TAINT_EFFECTS:
        raise ModelError(f"{where}.effect", f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
    return DeviceTaint(_str(spec.get("key"), f"{where}.key"), _str(spec.get("value"), f"{where}.value", False), effect)


def _device(value: object, driver: str, where: str) -> Device:
    spec = _obj(value, where)
    name = _str(spec.get("name"), f"{where}.name")
    attrs = {qualify(k, driver): _attribute(v, f"{where}.attributes[{k}]")
             for k, v in _obj(spec.get("attributes") or {}, f"{where}.attributes").items()}
    caps = {qualify(k, driver): _capacity(v, f"{where}.capacity[{k}]")
            for k, v in _obj(spec.get("capacity") or {}, f"{where}.capacity").items()}
    consumes = tuple(
        (_str(_obj(c, f"{where}.consumesCounters[{k}]").get("counterSet"), f"{where}.consumesCounters[{k}].counterSet"),
         _counters(c.get("counters"), f"{where}.consumesCounters[{k}].counters"))
        for k, c in enumerate(_list(spec.get("consumesCounters"), f"{where}.consumesCounters")))
    taints = tuple(_taint(t, f"{where}.taints[{k}]") for k, t in enumerate(_list(spec.get("taints"), f"{where}.taints")))
    conditions = tuple(_str(c, f"{where}.bindingConditions[{k}]")
                       for k, c in enumerate(_list(spec.get("bindingConditions"), f"{where}.bindingConditions")))
    return Device(name, attrs, caps, consumes, taints, spec.get("allowMultipleAllocations") is True, conditions)


def parse_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    name = _name(_obj(obj.get("metadata"), "ResourceSlice: metadata"), "ResourceSlice")
    where = f"ResourceSlice {name}"
    spec = _obj(obj.get("spec"), f"{where}: spec")
    driver = _str(spec.get("driver"), f"{where}: spec.driver")
    pool = _obj(spec.get("pool"), f"{where}: spec.pool")
    pool_name = _str(pool.get("name"), f"{where}: spec.pool.name")
    generation = _int(pool.get("generation", 0), f"{where}: spec.pool.generation")
    count = _int(pool.get("resourceSliceCount"), f"{where}: spec.pool.resourceSliceCount")
    if count < 1:
        raise ModelError(f"{where}: spec.pool.resourceSliceCount", f"must be at least 1, got {count}")
    node = spec.get("nodeName")
    if node is not None:
        node = _str(node, f"{where}: spec.nodeName")
    elif spec.get("allNodes") is not True:
        which = "nodeSelector" if spec.get("nodeSelector") is not None else (
            "perDeviceNodeSelection" if spec.get("perDeviceNodeSelection") else None)
        if which is None:
            raise ModelError(f"{where}: spec", "one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection "
                                              "is required")
        raise ModelError(f"{where}: spec.{which}", "is not supported by gpufleet yet (nodeName and allNodes are)")
    devices = tuple(_device(d, driver, f"{where}: spec.devices[{k}]")
                    for k, d in enumerate(_list(spec.get("devices"), f"{where}: spec.devices")))
    sets: dict[str, Mapping[str, Decimal]] = {}
    for k, c in enumerate(_list(spec.get("sharedCounters"), f"{where}: spec.sharedCounters")):
        at = f"{where}: spec.sharedCounters[{k}]"
        set_name = _str(_obj(c, at).get("name"), f"{at}.name")
        if set_name in sets:
            raise ModelError(f"{at}.name", f"counter set {set_name!r} appears twice")
        sets[set_name] = _counters(c.get("counters"), f"{at}.counters")
    return ResourceSlice(name, driver, pool_name, generation, count, node, devices, sets)


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    name = _name(_obj(obj.get("metadata"), "DeviceClass: metadata"), "DeviceClass")
    where = f"DeviceClass {name}"
    spec = _obj(obj.get("spec") or {}, f"{where}: spec")
    selectors = _selectors(spec.get("selectors"), f"{where}: spec.selectors")
    ext = spec.get("extendedResourceName")
    return DeviceClass(name, selectors, _str(ext, f"{where}: spec.extendedResourceName") if ext is not None else None)


def _selectors(value: object, where: str) -> tuple[str, ...]:
    out = []
    for k, s in enumerate(_list(value, where)):
        cel = _obj(_obj(s, f"{where}[{k}]").get("cel"), f"{where}[{k}].cel")
        out.append(_str(cel.get("expression"), f"{where}[{k}].cel.expression"))
    return tuple(out)


def _subrequest(spec: Mapping[str, Any], name: str, where: str) -> Subrequest:
    device_class = _str(spec.get("deviceClassName"), f"{where}.deviceClassName")
    mode = spec.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise ModelError(f"{where}.allocationMode", f"{mode!r} is not ExactCount or All")
    count = 1
    if mode == "ExactCount":
        count = _int(spec.get("count", 1), f"{where}.count")
        if not 1 <= count <= MAX_COUNT:
            raise ModelError(f"{where}.count", f"must be between 1 and {MAX_COUNT}, got {count}")
    elif spec.get("count") not in (None, 0):
        raise ModelError(f"{where}.count", "must not be set with allocationMode All")
    driverless = {}
    capacity = _obj(spec.get("capacity") or {}, f"{where}.capacity")
    for k, v in _obj(capacity.get("requests") or {}, f"{where}.capacity.requests").items():
        driverless[k] = _quantity(v, f"{where}.capacity.requests[{k}]")
    tolerations = tuple(_toleration(t, f"{where}.tolerations[{k}]")
                        for k, t in enumerate(_list(spec.get("tolerations"), f"{where}.tolerations")))
    return Subrequest(name, device_class, _selectors(spec.get("selectors"), f"{where}.selectors"),
                      "All" if mode == "All" else "ExactCount", count, Frozen(driverless), tolerations, spec.get("adminAccess") is True)


def _toleration(value: object, where: str) -> DeviceToleration:
    spec = _obj(value, where)
    operator = spec.get("operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise ModelError(f"{where}.operator", f"{operator!r} is not Equal or Exists")
    return DeviceToleration(_str(spec.get("key"), f"{where}.key", False), operator,
                            _str(spec.get("value"), f"{where}.value", False), _str(spec.get("effect"), f"{where}.effect",
                                                                                    False))


def parse_claim_spec(spec: Mapping[str, Any], where: str) -> tuple[tuple[Request, ...], tuple[Constraint, ...]]:
    """A claim's (or a template's) `spec`: its requests and constraints."""
    devices = _obj(spec.get("devices") or {}, f"{where}: spec.devices")
    requests: list[Request] = []
    seen: set[str] = set()
    for k, r in enumerate(_list(devices.get("requests"), f"{where}: spec.devices.requests")):
        at = f"{where}: spec.devices.requests[{k}]"
        req = _obj(r, at)
        name = _str(req.get("name"), f"{at}.name")
        if name in seen:
            raise ModelError(f"{at}.name", f"request {name!r} appears twice")
        seen.add(name)
        if (req.get("exactly") is None) == (not req.get("firstAvailable")):
            raise ModelError(at, "exactly one of exactly or firstAvailable is required")
        if req.get("exactly") is not None:
            requests.append(Request(name, (_subrequest(_obj(req["exactly"], f"{at}.exactly"), name, f"{at}.exactly"),)))
            continue
        subs = []
        for j, s in enumerate(_list(req.get("firstAvailable"), f"{at}.firstAvailable")):
            sub_at = f"{at}.firstAvailable[{j}]"
            sub = _obj(s, sub_at)
            subs.append(_subrequest(sub, f"{name}/{_str(sub.get('name'), f'{sub_at}.name')}", sub_at))
        requests.append(Request(name, tuple(subs)))
    if not requests:
        raise ModelError(f"{where}: spec.devices.requests", "at least one request is required")
    constraints = []
    for k, c in enumerate(_list(devices.get("constraints"), f"{where}: spec.devices.constraints")):
        at = f"{where}: spec.devices.constraints[{k}]"
        spec_c = _obj(c, at)
        names = tuple(_str(n, f"{at}.requests[{j}]") for j, n in enumerate(_list(spec_c.get("requests"), f"{at}.requests")))
        for n in names:
            if n.split("/")[0] not in seen:
                raise ModelError(f"{at}.requests", f"names request {n!r}, which the claim does not have")
        match, distinct = spec_c.get("matchAttribute"), spec_c.get("distinctAttribute")
        if (match is None) == (distinct is None):
            raise ModelError(at, "exactly one of matchAttribute or distinctAttribute is required")
        constraints.append(Constraint(names, _str(match, f"{at}.matchAttribute") if match is not None else None,
                                      _str(distinct, f"{at}.distinctAttribute") if distinct is not None else None))
    return tuple(requests), tuple(constraints)


def parse_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    meta = _obj(obj.get("metadata"), "ResourceClaim: metadata")
    name = _name(meta, "ResourceClaim")
    namespace = _str(meta.get("namespace") or "default", "ResourceClaim: metadata.namespace")
    where = f"ResourceClaim {namespace}/{name}"
    requests, constraints = parse_claim_spec(_obj(obj.get("spec"), f"{where}: spec"), where)
    status = _obj(obj.get("status") or {}, f"{where}: status")
    allocation = None
    node = None
    if status.get("allocation") is not None:
        alloc = _obj(status["allocation"], f"{where}: status.allocation")
        results = _list(_obj(alloc.get("devices") or {}, f"{where}: status.allocation.devices").get("results"),
                        f"{where}: status.allocation.devices.results")
        allocation = tuple(_result(r, f"{where}: status.allocation.devices.results[{k}]") for k, r in enumerate(results))
        node = allocated_node(alloc.get("nodeSelector"))
    reserved = tuple(_str(_obj(r, f"{where}: status.reservedFor[{k}]").get("uid"), f"{where}: status.reservedFor[{k}].uid")
                     for k, r in enumerate(_list(status.get("reservedFor"), f"{where}: status.reservedFor")))
    return ResourceClaim(namespace, name, _str(meta.get("uid") or f"{namespace}/{name}", f"{where}: metadata.uid"),
                         requests, constraints, allocation, node, reserved, meta.get("deletionTimestamp") is not None)


def _result(value: object, where: str) -> AllocatedDevice:
    r = _obj(value, where)
    consumed = {k: _quantity(v, f"{where}.consumedCapacity[{k}]")
                for k, v in _obj(r.get("consumedCapacity") or {}, f"{where}.consumedCapacity").items()}
    share = r.get("shareID")
    driver = _str(r.get("driver"), f"{where}.driver")
    return AllocatedDevice(_str(r.get("request"), f"{where}.request"), driver, _str(r.get("pool"), f"{where}.pool"),
                           _str(r.get("device"), f"{where}.device"), Frozen({qualify(k, driver): v for k, v in consumed.items()}),
                           share if isinstance(share, str) else None)


NODE_NAME_FIELD = "metadata.name"


def node_selector_for(node: str) -> dict[str, Any]:
    """`status.allocation.nodeSelector` pinning a claim to `node`, as kube-scheduler writes it."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]}]}


def allocated_node(selector: object) -> str | None:
    """The node a claim's allocation pins it to, when its selector is the one-node form
    (`node_selector_for`); None for no selector (devices reachable from every node)."""
    if not isinstance(selector, Mapping):
        return None
    for term in selector.get("nodeSelectorTerms") or ():
        for req in (term or {}).get("matchFields") or ():
            values = list(req.get("values") or ())
            if req.get("key") == NODE_NAME_FIELD and req.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


# -- pools -------------------------------------------------------------------------------------
def pools(slices: Sequence[ResourceSlice]) -> tuple[list[Pool], list[str]]:
    """The complete pools of the newest generation, and one line per pool or slice left out."""
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        by_pool.setdefault((s.driver, s.pool), []).append(s)
    out: list[Pool] = []
    problems: list[str] = []
    for (driver, name), found in sorted(by_pool.items()):
        newest = max(s.generation for s in found)
        current = sorted((s for s in found if s.generation == newest), key=lambda s: s.name)
        label = f"pool {driver}/{name} generation {newest}"
        counts = {s.slice_count for s in current}
        if len(counts) > 1:
            problems.append(f"{label}: its slices disagree on resourceSliceCount ({sorted(counts)}); not used")
            continue
        (want,) = counts
        if len(current) < want:
            problems.append(f"{label}: {len(current)} of {want} slices seen; not used until all are")
            continue
        if len(current) > want:
            problems.append(f"{label}: {len(current)} slices but resourceSliceCount is {want}; not used")
            continue
        nodes = {s.node for s in current}
        if len(nodes) > 1:
            problems.append(f"{label}: its slices name different nodes ({sorted(str(n) for n in nodes)}); not used")
            continue
        devices: list[Device] = []
        seen: dict[str, str] = {}
        sets: dict[str, Mapping[str, Decimal]] = {}
        bad = None
        for s in current:
            for d in s.devices:
                if d.name in seen:
                    bad = f"device {d.name} appears in slices {seen[d.name]} and {s.name}"
                    break
                seen[d.name] = s.name
                devices.append(d)
            for set_name, counters in s.counter_sets.items():
                if set_name in sets:
                    bad = f"counter set {set_name} is defined twice (slice {s.name})"
                sets[set_name] = counters
            if bad:
                break
        if bad is None:
            for d in devices:
                for set_name, counters in d.consumes:
                    missing = [c for c in counters if c not in sets.get(set_name, {})]
                    if set_name not in sets or missing:
                        bad = (f"device {d.name} consumes counter set {set_name}"
                               + (f" counters {missing}" if set_name in sets else "") + ", which the pool does not define")
                        break
                if bad:
                    break
        if bad is not None:
            problems.append(f"{label}: {bad}; not used")
            continue
        waiting = [d for d in devices if d.binding_conditions]
        problems.extend(f"{label}: device {d.name} has bindingConditions {list(d.binding_conditions)}, which gpufleet "
                        "does not wait for yet; left out" for d in waiting)
        out.append(Pool(driver, name, next(iter(nodes)), newest,
                        tuple(d for d in devices if not d.binding_conditions), sets))
    return out, problems
