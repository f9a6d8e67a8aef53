"""The live scheduler gives FGD-style scorers the typical-task mix of the pods it sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.framework.plugins.fgd import FragScorePlugin
from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.framework.profiles import BUILTIN, builtin
from gpufleet.kube import config
from gpufleet.kube.rest import Rest
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings
from gpufleet.testing import PodBuilder
from gpufleet.testing.apiserver import ApiServer


@pytest.mark.parametrize("name", ["default", "fgd", "gpufleet", "gpufleet-lookahead"])
def test_a_fragmentation_profile_is_built_with_the_typical_tasks_of_the_pending_pods(name: str,
                                                                                       tmp_path: Path) -> None:
    specs = [PodBuilder(f"p{i}").cpu(1000 * (1 + i % 2)).fraction(500).build() for i in range(4)]
    with ApiServer() as srv:
        rest = Rest(config.from_kubeconfig(srv.write_kubeconfig(tmp_path / "kubeconfig")))
        try:
            service = SchedulerService(rest, builtin(name), ServiceSettings())
            profile = service._build_profile(specs)
        finally:
            rest.close()
    frag = [p for p, _ in profile.scores if isinstance(p, FragScorePlugin)]
    assert len(frag) == 1
    assert frag[0].scorer.tasks == typical_tasks(specs)
    assert len(frag[0].scorer.tasks) == 2


def test_exactly_the_profiles_with_fgd_or_frag_aware_need_typical_tasks() -> None:
    needs = {name: builtin(name).needs_typical_tasks for name in BUILTIN}
    assert needs == {"default": True, "bestfit": False, "fgd": True, "gpufleet": True, "gpufleet-lookahead": True}
