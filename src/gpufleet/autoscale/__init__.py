"""gpufleet autoscale: the pure planner (which nodes to add for pending pods, which GPU nodes
to remove). Its drivers are the simulator's `GpufleetPlanner` (sim/provisioners.py) and the
live scheduler's NodeClaim provisioner (kube/karpenter.py); see docs/autoscaling.md."""

from gpufleet.autoscale.plan import NodeAdd, Plan, plan
from gpufleet.autoscale.template import TEMPLATE_LABEL, NodeTemplate

__all__ = ["NodeAdd", "NodeTemplate", "Plan", "TEMPLATE_LABEL", "plan"]
