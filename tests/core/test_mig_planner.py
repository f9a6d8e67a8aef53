"""Demand-driven MIG planning (core/mig_planner.py): examples, and properties over random layouts."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.mig_planner import GpuChange, MigGpu, MigPlan, MigRequest, plan, served
from gpufleet.model import GpuUuid, mig
from gpufleet.model.mig_placement import MigInstance, is_valid, maximal_layouts, place_counts

H100 = "H100-80GB"
BALANCED = (MigInstance(0, "2g.20gb"), MigInstance(2, "1g.10gb"), MigInstance(3, "1g.10gb"), MigInstance(4, "3g.40gb"))
assert place_counts(H100, ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")) == BALANCED


def _gpu(name: str, layout: tuple[MigInstance, ...], busy: tuple[MigInstance, ...] = (), *,
         frozen: bool = False, family: str = H100) -> MigGpu:
    return MigGpu(GpuUuid(name), family, layout, frozenset(busy), frozen)


def _i(profile: str, start: int) -> MigInstance:
    return MigInstance(start, profile)


def _only(result: MigPlan) -> GpuChange:
    assert len(result.changes) == 1
    return result.changes[0]


def test_nothing_pending_changes_nothing() -> None:
    assert plan([_gpu("g0", BALANCED)], []).changes == ()


def test_demand_that_free_instances_already_serve_changes_nothing() -> None:
    result = plan([_gpu("g0", BALANCED)], ["1g.10gb", "3g.40gb"])
    assert result.changes == () and result.served_before == result.served_after == 2


def test_a_4g_replaces_the_free_small_instances_beside_a_busy_3g() -> None:
    change = _only(plan([_gpu("g0", BALANCED, (_i("3g.40gb", 4),))], ["4g.40gb"]))
    assert change.destroy == (_i("2g.20gb", 0), _i("1g.10gb", 2), _i("1g.10gb", 3))
    assert change.create == (_i("4g.40gb", 0),)


def test_an_instance_in_use_is_never_destroyed_even_when_that_leaves_demand_waiting() -> None:
    gpu = _gpu("g0", BALANCED, (_i("1g.10gb", 2),))
    result = plan([gpu], ["7g.80gb", "4g.40gb"])
    assert result.changes == () and result.unplaced == ("7g.80gb", "4g.40gb")


def test_a_free_instance_pending_demand_needs_is_not_destroyed() -> None:
    # both 1g are free but one is asked for, so only one is surplus: no 4g (it needs 2g, 1g, 1g)
    gpu = _gpu("g0", BALANCED, (_i("3g.40gb", 4),))
    result = plan([gpu], ["1g.10gb", "4g.40gb"])
    assert result.changes == () and result.served_after == result.served_before == 1


def test_uncarved_space_is_used_before_anything_is_destroyed() -> None:
    full = _gpu("a", BALANCED)
    half = _gpu("b", (_i("3g.40gb", 4),))
    change = _only(plan([full, half], ["2g.20gb"] * 3))  # the first is served by full's free 2g
    assert change.uuid == "b" and change.destroy == () and change.create == (_i("2g.20gb", 0), _i("2g.20gb", 2))


def test_a_gpu_already_changed_is_preferred_so_fewer_gpus_are_reconfigured() -> None:
    gpus = [_gpu(f"g{k}", ()) for k in range(3)]
    result = plan(gpus, ["1g.10gb"] * 5)
    assert [c.uuid for c in result.changes] == ["g0"] and len(result.changes[0].create) == 5


def test_the_busiest_gpu_takes_new_small_instances_and_idle_gpus_stay_whole() -> None:
    idle = _gpu("idle", ())
    busy = _gpu("busy", (_i("3g.40gb", 4),), (_i("3g.40gb", 4),))
    assert _only(plan([idle, busy], ["2g.20gb"])).uuid == "busy"


def test_a_frozen_gpu_is_left_alone_but_its_free_instances_still_count() -> None:
    frozen = _gpu("f", BALANCED, frozen=True)
    other = _gpu("o", ())
    assert plan([frozen, other], ["3g.40gb"]).changes == ()
    assert _only(plan([frozen, other], ["4g.40gb"])).uuid == "o"


def test_a_profile_the_family_lacks_is_never_created() -> None:
    nvl = _gpu("nvl", (), family="H100-NVL-94GB")
    assert plan([nvl], ["1g.10gb+me"]).unplaced == ("1g.10gb+me",)


def test_requests_are_served_in_queue_order_when_space_is_short() -> None:
    result = plan([_gpu("g0", ())], ["3g.40gb", "7g.80gb", "4g.40gb"])
    assert _only(result).create == (_i("4g.40gb", 0), _i("3g.40gb", 4))  # the 3g keeps slot 0 free for a 4g
    assert result.unplaced == ("7g.80gb",)


def test_small_instances_go_high_so_the_low_slots_stay_free_for_large_ones() -> None:
    result = plan([_gpu("g0", ())], ["1g.10gb", "1g.10gb", "4g.40gb"])
    assert _only(result).create == (_i("4g.40gb", 0), _i("1g.10gb", 5), _i("1g.10gb", 6))


# -- properties --------------------------------------------------------------------------------

FAMILIES = ("H100-80GB", "A100-40GB", "H200-141GB", "H100-NVL-94GB")
LAYOUTS = {f: maximal_layouts(f) for f in FAMILIES}


@st.composite
def gpus_and_demand(draw: st.DrawFn) -> tuple[list[MigGpu], list[str]]:
    family = draw(st.sampled_from(FAMILIES))
    layouts = LAYOUTS[family]
    gpus = []
    for k in range(draw(st.integers(1, 4))):
        full = draw(st.sampled_from(layouts))
        kept = tuple(i for i in full if draw(st.booleans()) or draw(st.booleans()))  # some carved space gone
        busy = tuple(i for i in kept if draw(st.booleans()))
        gpus.append(_gpu(f"g{k}", kept, busy, frozen=draw(st.integers(0, 5)) == 0, family=family))
    names = sorted(mig.MIG_TABLES[family])
    demand = draw(st.lists(st.sampled_from(names), max_size=12))
    return gpus, demand


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus_and_demand())
def test_a_plan_never_touches_an_instance_in_use_stays_valid_and_serves_at_least_as_much(
        case: tuple[list[MigGpu], list[str]]) -> None:
    gpus, demand = case
    result = plan(gpus, demand)
    by_uuid = {g.uuid: g for g in gpus}
    assert len({c.uuid for c in result.changes}) == len(result.changes)
    for change in result.changes:
        gpu = by_uuid[change.uuid]
        assert not gpu.frozen, "a frozen GPU was changed"
        assert not set(change.destroy) & gpu.in_use, "an instance in use was destroyed"
        assert set(change.destroy) <= set(gpu.instances)
        after = change.apply(gpu.instances)
        assert gpu.in_use <= set(after), "an instance in use moved or vanished"
        assert is_valid(gpu.family, after), f"invalid layout {after}"
        assert change.destroy or change.create
    assert result.served_before == served(gpus, demand)
    assert result.served_after == served(gpus, demand, result.changes) >= result.served_before
    if result.served_before == len(demand):
        assert result.changes == ()


@st.composite
def gpus_and_restricted_demand(draw: st.DrawFn) -> tuple[list[MigGpu], list[MigRequest]]:
    """As `gpus_and_demand`, each request naming the GPUs its pod could use (or any)."""
    gpus, profiles = draw(gpus_and_demand())
    uuids = [g.uuid for g in gpus]
    return gpus, [MigRequest(p, None if draw(st.booleans()) else frozenset(draw(st.lists(st.sampled_from(uuids)))))
                  for p in profiles]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus_and_restricted_demand())
def test_a_gpu_is_changed_only_for_a_request_that_may_use_it_and_a_plan_serves_at_least_as_much(
        case: tuple[list[MigGpu], list[MigRequest]]) -> None:
    gpus, demand = case
    result = plan(gpus, demand)
    by_uuid = {g.uuid: g for g in gpus}
    for change in result.changes:
        assert not by_uuid[change.uuid].frozen and not set(change.destroy) & by_uuid[change.uuid].in_use
        assert is_valid(by_uuid[change.uuid].family, change.apply(by_uuid[change.uuid].instances))
        for inst in change.create:  # each new instance is of a profile some request that may use the GPU asks
            assert any(r.profile == inst.profile and r.may_use(change.uuid) for r in demand), (change, demand)
    assert result.served_before == served(gpus, demand)
    assert result.served_after == served(gpus, demand, result.changes) >= result.served_before
    if result.served_before == len(demand):
        assert result.changes == ()


def test_a_pod_that_may_use_no_gpu_changes_nothing_and_is_not_served_by_another_nodes_instance() -> None:
    """Held back by its node selector (say): the free 1g on g0, which it cannot use, does not serve it."""
    gpus = [_gpu("g0", (_i("1g.10gb", 6),)), _gpu("g1", ())]
    result = plan(gpus, [MigRequest("1g.10gb", frozenset())])
    assert result.changes == () and result.served_before == 0 and result.unplaced == ("1g.10gb",)
    assert served(gpus, [MigRequest("1g.10gb", frozenset({GpuUuid("g0")}))]) == 1


def test_a_request_is_carved_on_a_gpu_it_may_use_though_another_fits_better() -> None:
    busy = _i("3g.40gb", 4)
    gpus = [_gpu("g0", (busy,), (busy,)), _gpu("g1", ())]  # g0 is the best fit for a 1g; the pod may use g1 only
    change = _only(plan(gpus, [MigRequest("1g.10gb", frozenset({GpuUuid("g1")}))]))
    assert change.uuid == "g1" and [i.profile for i in change.create] == ["1g.10gb"]


def test_an_instance_a_restricted_request_claims_is_not_destroyed_for_a_later_one() -> None:
    """Two free 1g, one on each GPU; the first pod may use g0's only. The 4g after it could replace
    either 1g (one is spare), and g0 comes first among equals: it must take g1's."""
    gpus = [_gpu("g0", (_i("1g.10gb", 0),)), _gpu("g1", (_i("1g.10gb", 0),))]
    result = plan(gpus, [MigRequest("1g.10gb", frozenset({GpuUuid("g0")})), MigRequest("4g.40gb")])
    change = _only(result)
    assert change.uuid == "g1" and change.destroy == (_i("1g.10gb", 0),) and result.served_after == 2


def test_an_instance_a_restricted_request_claims_serves_no_later_request() -> None:
    """g0's only free 1g goes to the first pod: the second 1g is unmet, and gets one carved."""
    gpus = [_gpu("g0", (_i("1g.10gb", 0),)), _gpu("g1", ())]
    result = plan(gpus, [MigRequest("1g.10gb", frozenset({GpuUuid("g0")})), "1g.10gb"])
    assert result.served_before == 1 and result.served_after == 2
    assert [i.profile for c in result.changes for i in c.create] == ["1g.10gb"]


def test_a_surplus_instance_is_destroyed_once() -> None:
    """Two free 1g and one 1g request: one of them is surplus, so the first 4g may take a GPU's 1g
    and the second may not take the other's."""
    gpus = [_gpu("g0", (_i("1g.10gb", 0),)), _gpu("g1", (_i("1g.10gb", 0),))]
    result = plan(gpus, ["1g.10gb", "4g.40gb", "4g.40gb"])
    assert len(result.changes) == 1 and result.unplaced == ("4g.40gb",)
    assert result.served_before == 1 and result.served_after == 2


def test_every_request_of_a_profile_that_fits_nowhere_is_reported_unplaced() -> None:
    busy = _i("4g.40gb", 0)
    result = plan([_gpu("g0", (busy,), (busy,))], ["4g.40gb", "4g.40gb", "1g.10gb"])
    assert result.unplaced == ("4g.40gb", "4g.40gb") and result.served_after == 1


@settings(max_examples=200, deadline=None)
@given(gpus_and_demand())
def test_every_created_instance_serves_a_request_that_was_not_served(case: tuple[list[MigGpu], list[str]]) -> None:
    gpus, demand = case
    result = plan(gpus, demand)
    created = sum(len(c.create) for c in result.changes)
    assert result.served_after - result.served_before == created
