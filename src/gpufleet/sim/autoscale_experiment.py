"""The autoscaling experiment (issue 7): no autoscaling, a Karpenter-like provisioner and the
gpufleet planner on a day of diurnal openb load, starting with no GPU nodes.

Per seed, one workload (`diurnal.diurnal_workload`) and the same scheduler (`PLACEMENT`, the
`bestfit` profile: the default profile when the published figures were measured) in every
arm; only the autoscaler differs:

- `karpenter`: `provisioners.KarpenterLike` (pod by pod, a fraction counts as a whole GPU,
  no gangs, WhenEmpty consolidation);
- `gpufleet`: `provisioners.GpufleetPlanner` (`autoscale.plan()`, idle GPU nodes removed);
- `gpufleet-underutilized` (not run by default): the planner with `autoscale.removal`'s
  consolidation, which moves running pods (their jobs restart from their last checkpoint);
- `fixed`: no autoscaling, a billed cluster sized to the diurnal peak: per template, the most
  nodes of it the `gpufleet` arm held at one time (same seed), there from the start.

Both autoscalers share the timing (`provisioners.ScalerSettings`: a 10 s tick, 60 s
consolidation delay). The trade-off curve reruns both over `consolidate_after_s`, the knob
that trades GPU-hours paid for waiting. Jobs checkpoint every `CHECKPOINT_S` (only jobs whose
node is scaled away restart, and only the underutilized arm does that).

Templates (`TEMPLATES`): 1 x L40S, 4 x L40S and 8 x H100 nodes with the CPU, memory and
on-demand price per hour of AWS g6e.4xlarge, g6e.12xlarge and p5.48xlarge (us-east-1 list
prices as we know them, not checked against the live price list: treat them as illustrative);
start delays of 2, 3 and 5 minutes (boot, driver, image pull; illustrative).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from gpufleet.autoscale import TEMPLATE_LABEL, NodeTemplate
from gpufleet.framework.profile import build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.model import ClusterSnapshot, ModelError, NodeName, PodSpec
from gpufleet.sim import parallel
from gpufleet.sim.diurnal import DiurnalSettings, diurnal_workload
from gpufleet.sim.provisioners import FixedCluster, GpufleetPlanner, KarpenterLike, ScalerSettings
from gpufleet.sim.replay import replay
from gpufleet.sim.scaling import NewNode, Scaler, ScaleStep
from gpufleet.sim.workload import Job

GIB = 1024
TEMPLATES: tuple[NodeTemplate, ...] = (
    NodeTemplate("l40s-x1", 16_000, 128 * GIB, 3.00, gpu_model="L40S", gpus=1, gpu_mem_mib=48 * GIB,
                 start_delay_s=120.0),
    NodeTemplate("l40s-x4", 48_000, 384 * GIB, 10.49, gpu_model="L40S", gpus=4, gpu_mem_mib=48 * GIB,
                 start_delay_s=180.0),
    NodeTemplate("h100-x8", 192_000, 2048 * GIB, 55.04, gpu_model="H100-80GB", gpus=8, gpu_mem_mib=80 * GIB,
                 start_delay_s=300.0),
)
ARMS = ("fixed", "karpenter", "gpufleet", "gpufleet-underutilized")
DEFAULT_ARMS = ("fixed", "karpenter", "gpufleet")
CURVE_ARMS = ("karpenter", "gpufleet")
CONSOLIDATE_AFTER_S = (0.0, 60.0, 300.0, 900.0, 1800.0)
"""Values of the knob for the trade-off curve (60 s is the table's)."""
CHECKPOINT_S = 1800.0
KPIS = ("gpu_hours_paid", "idle_gpu_hours", "cost", "wait_p95_s", "wait_mean_s", "finished", "jobs",
        "gpu_hours_allocated", "gpu_hours_lost", "peak_gpus")
SERIES_STEP_S = 300.0
"""Spacing of the recorded paid/allocated GPU series."""
PLACEMENT = "bestfit"
"""The built-in profile every arm's scheduler, and the gpufleet planner, place pods with."""


@dataclass(frozen=True, slots=True)
class ArmSpec:
    arm: str
    seed: int
    consolidate_after_s: float = 60.0
    fixed: tuple[tuple[str, int], ...] = ()
    """For the `fixed` arm: nodes per template name."""


@dataclass(frozen=True, slots=True)
class AutoscaleRun:
    spec: ArmSpec
    summary: dict[str, float]
    series: list[tuple[float, float, float]]
    """(time, GPUs paid for, GPUs allocated), every `SERIES_STEP_S`."""
    peak_nodes: dict[str, int] = field(default_factory=dict)
    """Per template, the most nodes held (launching or joined) at one time."""


class Recorder:
    """Wraps a scaler: counts the nodes it holds per template and samples GPUs paid and allocated."""

    def __init__(self, inner: Scaler) -> None:
        self.inner = inner
        self.interval_s = inner.interval_s
        self.held: dict[NodeName, str] = {}
        self.gpus: dict[NodeName, int] = {}
        self.count: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.series: list[tuple[float, float, float]] = []
        self.next_sample = 0.0

    def step(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
             launching: Sequence[NewNode]) -> ScaleStep:
        out = self.inner.step(now, snapshot, pending, launching)
        for new in out.add:
            t = new.node.labels.get(TEMPLATE_LABEL, "")
            self.held[new.node.name], self.gpus[new.node.name] = t, len(new.node.gpus)
            self.count[t] = self.count.get(t, 0) + 1
            self.peak[t] = max(self.peak.get(t, 0), self.count[t])
        for name in out.remove:
            self.count[self.held.pop(name)] -= 1
            del self.gpus[name]
        if now >= self.next_sample:
            self.series.append((now, float(sum(self.gpus.values())), snapshot.gpu_allocated_milli() / 1000))
            self.next_sample = now + SERIES_STEP_S
        return out


def scaler_for(spec: ArmSpec) -> Scaler:
    settings = ScalerSettings(consolidate_after_s=spec.consolidate_after_s)
    if spec.arm == "karpenter":
        return KarpenterLike(TEMPLATES, settings)
    if spec.arm == "gpufleet":
        return GpufleetPlanner(TEMPLATES, settings, profile=build_profile(builtin(PLACEMENT)))
    if spec.arm == "gpufleet-underutilized":
        return GpufleetPlanner(TEMPLATES, settings, profile=build_profile(builtin(PLACEMENT)),
                               consolidation="underutilized")
    if spec.arm == "fixed":
        by_name = {t.name: t for t in TEMPLATES}
        return FixedCluster([(by_name[n], k) for n, k in spec.fixed])
    raise ModelError("--arms", f"unknown arm {spec.arm!r}; known: {', '.join(ARMS)}")


def run_arm(jobs: Sequence[Job], spec: ArmSpec, diurnal: DiurnalSettings = DiurnalSettings()) -> AutoscaleRun:
    """One arm on one seed's day (`jobs` is the openb pod list the day is drawn from)."""
    workload = diurnal_workload(jobs, spec.seed, diurnal)
    recorder = Recorder(scaler_for(spec))
    result = replay(workload, build_profile(builtin(PLACEMENT)), spec.seed, scaler=recorder, checkpoint_s=CHECKPOINT_S)
    summary = result.summary()
    summary["peak_gpus"] = max((paid for _, paid, _ in recorder.series), default=0.0)
    return AutoscaleRun(spec, summary, recorder.series, dict(recorder.peak))


@dataclass(frozen=True, slots=True)
class Experiment:
    runs: list[AutoscaleRun]
    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    curve: tuple[float, ...]

    def table(self, consolidate_after_s: float = 60.0) -> dict[str, dict[str, float]]:
        """Per arm, the mean of each KPI over seeds (and `<kpi>_sd`, the standard deviation)."""
        return {arm: _mean(self.of(arm, consolidate_after_s)) for arm in self.arms}

    def of(self, arm: str, consolidate_after_s: float = 60.0) -> list[AutoscaleRun]:
        return [r for r in self.runs if r.spec.arm == arm and r.spec.consolidate_after_s == consolidate_after_s]

    def curve_rows(self) -> dict[str, list[dict[str, float]]]:
        """Per autoscaler, one row per value of the knob (means over seeds)."""
        return {arm: [{"consolidate_after_s": v, **_mean(self.of(arm, v))} for v in self.curve if self.of(arm, v)]
                for arm in CURVE_ARMS if arm in self.arms}


def _mean(runs: Sequence[AutoscaleRun]) -> dict[str, float]:
    out: dict[str, float] = {"seeds": float(len(runs))}
    for k in KPIS:
        values = np.array([r.summary[k] for r in runs], dtype=float)
        out[k] = float(values.mean()) if len(values) else float("nan")
        out[f"{k}_sd"] = float(values.std()) if len(values) else float("nan")
    return out


def run_experiment(jobs: Sequence[Job], *, seeds: Sequence[int], arms: Sequence[str] = DEFAULT_ARMS,
                   curve: Sequence[float] = CONSOLIDATE_AFTER_S, diurnal: DiurnalSettings = DiurnalSettings(),
                   workers: int = 1, on_done: Callable[[AutoscaleRun], None] | None = None) -> Experiment:
    """Every arm on every seed, the curve, then the fixed cluster sized from the planner's peak."""
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms or not seeds:
        raise ModelError("--arms", f"unknown arm {unknown[0]!r}; known: {', '.join(ARMS)}" if unknown
                         else "need at least one arm and one seed")
    specs = [ArmSpec(a, s) for s in seeds for a in arms if a != "fixed"]
    if "fixed" in arms and "gpufleet" not in arms:
        specs += [ArmSpec("gpufleet", s) for s in seeds]  # the fixed cluster is sized from it
    specs += [ArmSpec(a, s, v) for s in seeds for a in CURVE_ARMS if a in arms for v in curve if v != 60.0]
    runs = parallel.run_jobs(_run_spec, (tuple(jobs), diurnal), [(s,) for s in specs], workers, on_done)
    if "fixed" in arms:
        fixed = [ArmSpec("fixed", s, fixed=_peak_cluster(runs, s)) for s in seeds]
        runs += parallel.run_jobs(_run_spec, (tuple(jobs), diurnal), [(s,) for s in fixed], workers, on_done)
    runs.sort(key=lambda r: (r.spec.seed, ARMS.index(r.spec.arm), r.spec.consolidate_after_s))
    return Experiment(runs, tuple(a for a in ARMS if a in arms), tuple(seeds), tuple(sorted({60.0, *curve})))


def _run_spec(shared: tuple[tuple[Job, ...], DiurnalSettings], spec: ArmSpec) -> AutoscaleRun:
    return run_arm(shared[0], spec, shared[1])


def _peak_cluster(runs: Sequence[AutoscaleRun], seed: int) -> tuple[tuple[str, int], ...]:
    planner = next(r for r in runs if r.spec.arm == "gpufleet" and r.spec.seed == seed
                   and r.spec.consolidate_after_s == 60.0)
    return tuple((t.name, planner.peak_nodes.get(t.name, 0)) for t in TEMPLATES)


def fixed_cost_per_hour(nodes: Sequence[tuple[str, int]]) -> float:
    by_name = {t.name: t for t in TEMPLATES}
    return sum(by_name[n].price_per_hour * k for n, k in nodes)
