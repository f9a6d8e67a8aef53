"""How a profile trades the four KPIs: queue order, preemption, reclaim and starvation.

In a profile's YAML this is the gpufleet-specific `queueing` section, next to `plugins`:

    profiles:
      - schedulerName: gpufleet
        queueing:
          order: fair                  # fifo | priority | fair | las
          usageHalfLifeSeconds: 3600   # fair: order on decayed usage (0 = current allocation)
          preemption: true             # higher priority preempts lower, within a queue
          reclaim: true                # a queue below its fair share reclaims from queues above
          minRuntimeSeconds: 300       # pods younger than this are never victims
          maxPreemptionsPerPodPerHour: 2
          starvationBoundSeconds: 86400 # the oldest unit waiting longer goes first, holds nodes

Every knob is off by default, so a profile without this section orders pods by priority,
then age, exactly as kube-scheduler does.
"""

from __future__ import annotations

from dataclasses import dataclass

ORDERS = ("fifo", "priority", "fair", "las")


@dataclass(frozen=True, slots=True)
class QueueingConfig:
    order: str = "priority"
    """fifo: arrival order. priority: priority, then age. fair: hierarchical dominant-resource
    fair share between queues, then priority and age within a queue. las: least attained
    service first (Tiresias-like; the driver reports each job's GPU-seconds so far)."""
    usage_half_life_seconds: float = 0.0
    """fair: 0 = order queues on what they hold now; > 0 = on their usage decayed with this
    half-life (reported by the driver), so a queue that just used a lot waits a little."""
    preemption: bool = False
    reclaim: bool = False
    min_runtime_seconds: float = 0.0
    max_preemptions_per_pod_per_hour: int = 3
    starvation_bound_seconds: float = 0.0
    """0 = off. The oldest unit waiting longer than this is placed before all others and, when
    it does not fit, the nodes it needs are held for it (nothing else starts there) until it does."""
    preemption_attempts_per_cycle: int = 32
    """At most this many pending units per cycle look for victims (bounds the cycle's cost)."""
    las_thresholds_gpu_seconds: tuple[float, ...] = (3600.0, 36000.0)
    """las: attained-service levels; a job drops a level when it crosses a threshold."""

    def problem(self) -> tuple[str, str] | None:
        """(camelCase key, what is wrong) for an invalid setting, else None."""
        if self.order not in ORDERS:
            return "order", f"must be one of {', '.join(ORDERS)}, got {self.order!r}"
        if self.usage_half_life_seconds < 0:
            return "usageHalfLifeSeconds", "must not be negative (0 = off)"
        if self.min_runtime_seconds < 0:
            return "minRuntimeSeconds", "must not be negative"
        if self.max_preemptions_per_pod_per_hour < 1:
            return "maxPreemptionsPerPodPerHour", "must be at least 1"
        if self.starvation_bound_seconds < 0:
            return "starvationBoundSeconds", "must not be negative (0 = off)"
        if self.preemption_attempts_per_cycle < 0:
            return "preemptionAttemptsPerCycle", "must not be negative"
        if list(self.las_thresholds_gpu_seconds) != sorted(set(self.las_thresholds_gpu_seconds)) \
                or any(t <= 0 for t in self.las_thresholds_gpu_seconds):
            return "lasThresholdsGpuSeconds", "must be positive and strictly increasing"
        return None

    @property
    def preempts(self) -> bool:
        return self.preemption or self.reclaim
