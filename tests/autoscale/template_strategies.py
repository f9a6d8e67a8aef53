"""Random node templates for the planner's property tests (`test_check`, `test_plan_properties`)."""

from __future__ import annotations

from typing import Sequence

from hypothesis import strategies as st

from gpufleet.autoscale import NodeTemplate
from gpufleet.framework.profile import Profile, build_for
from gpufleet.framework.profiles import builtin
from gpufleet.model import Taint
from gpufleet.testing import make_pod

GIB = 1024
MODELS = ("H100-80GB", "A100-80GB", "L40S")
MIX = [make_pod(f"mix-{cpu}-{kind}-{size}").cpu(cpu).fraction(size).build() if kind == "fraction"
       else make_pod(f"mix-{cpu}-{kind}-{size}").cpu(cpu).gpus(size).build()
       for cpu in (500, 2000, 8000) for kind, sizes in (("fraction", (100, 250, 500, 700)), ("whole", (1, 2, 4)))
       for size in sizes]
"""The typical-task mix the planner tests' profiles are built with: the sizes their pods draw."""
PROFILE_NAMES = ("default", "bestfit")


def profile(name: str) -> Profile:
    """A built-in profile, built with `MIX` if it reads a typical-task mix."""
    return build_for(builtin(name), MIX)


@st.composite
def templates(draw: st.DrawFn, *, layouts: Sequence[tuple[str, ...]], varied_prices: bool = False,
              pool_limits: bool = False, cpu_template: bool = False) -> list[NodeTemplate]:
    """1-4 GPU templates (L40S never MIG, one in five tainted); with `varied_prices` a GPU
    costs 1-20 per hour, else 1; `pool_limits` draws maxNodes/maxGPUs; `cpu_template` may
    add a CPU-only template."""
    out = []
    for i in range(draw(st.integers(1, 4))):
        model = draw(st.sampled_from(MODELS))
        gpus = draw(st.sampled_from((1, 2, 4, 8)))
        layout = draw(st.sampled_from(layouts)) if model != "L40S" else ()
        taints = (Taint("dedicated", "ml"),) if draw(st.integers(0, 4)) == 0 else ()
        price = float((draw(st.integers(1, 20)) if varied_prices else 1) * gpus)
        max_nodes = draw(st.one_of(st.none(), st.integers(0, 4))) if pool_limits else None
        max_gpus = draw(st.one_of(st.none(), st.integers(0, 24))) if pool_limits else None
        out.append(NodeTemplate(f"t{i}", 16_000 * gpus, 64 * GIB * gpus, price, gpu_model=model, gpus=gpus,
                                gpu_mem_mib=80 * GIB, mig_layout=layout, taints=taints, max_nodes=max_nodes,
                                max_gpus=max_gpus))
    if cpu_template and draw(st.booleans()):
        out.append(NodeTemplate("cpu", 32_000, 128 * GIB, 1.0))
    return out
