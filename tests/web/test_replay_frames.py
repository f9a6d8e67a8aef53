"""`replay(observe=...)`: the moments a dashboard replay is made of."""

from __future__ import annotations

import pytest

from gpufleet.framework.profile import build_for
from gpufleet.framework.profiles import builtin
from gpufleet.sim.default_workload import default_workload
from gpufleet.sim.replay import Moment, replay
from gpufleet.web.sources import ReplayRecorder
from gpufleet.web.view import document


def test_moments_are_spaced_and_their_traces_add_up_to_the_whole_run() -> None:
    w = default_workload(scale=0.02, seed=1, load=3.0, tasks=400)
    moments: list[Moment] = []

    def look(m: Moment) -> None:  # the snapshot is the replay's own: valid during the call only
        assert not {p.uid for p in m.waiting} & set(m.snapshot.placements)  # running and waiting apart
        assert set(m.reasons) <= {p.uid for p in m.waiting}  # a reason only for a pod that waits
        moments.append(m)
    profile = build_for(builtin("bestfit"), [p for j in w.jobs for p in j.pods])
    result = replay(w, profile, 0, observe=look, observe_every_s=300.0)
    times = [m.time_s for m in moments]
    assert times[0] == 0.0 and all(b - a >= 300.0 for a, b in zip(times, times[1:]))
    whole = sum(1 for m in moments for _, what, _ in m.trace if what == "arrive")
    arrived_by_last = sum(1 for j in w.jobs if j.arrival_s <= times[-1])
    assert whole == arrived_by_last  # each trace entry is handed out once, none lost
    assert any(m.reasons for m in moments)  # at 3x load, pods wait with a reason
    assert result.records


def test_the_recorder_turns_moments_into_fleets_the_page_can_draw() -> None:
    w = default_workload(scale=0.02, seed=1, load=3.0, tasks=400)
    recorder = ReplayRecorder(w.name)
    replay(w, build_for(builtin("bestfit"), [p for j in w.jobs for p in j.pods]), 0, observe=recorder,
           observe_every_s=600.0)
    docs = [document(f) for f in recorder.fleets]
    assert all(d["simulated"] and d["summary"]["nodes"] == len(w.nodes) for d in docs)
    busiest = max(docs, key=lambda d: d["summary"]["gpusAllocated"])
    held = sum(g[0] for n in busiest["nodes"] for g in n[4] if not g[3]) / 1000
    assert busiest["summary"]["gpusAllocated"] == pytest.approx(held) and held > 0
    assert any(d["summary"]["pending"] for d in docs)


def test_a_bad_observe_interval_is_refused() -> None:
    w = default_workload(scale=0.02, seed=1, tasks=10)
    with pytest.raises(ValueError, match="observe interval"):
        replay(w, build_for(builtin("bestfit"), []), 0, observe=lambda m: None, observe_every_s=0)
