"""The scheduler Deployment and the agent DaemonSet: the CLI contracts they rely on, where they
run, what they may do, and that their ConfigMaps hold configs gpufleet loads."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from gpufleet.agent import allocate as alloc
from gpufleet.agent import configsource, fake, mps, report
from gpufleet.agent.inventory import inventory
from gpufleet.agent.plan import Kind, plan_resources
from gpufleet.cli import agent_cmd
from gpufleet.cli.main import build_parser
from gpufleet.framework.profile import build_profile, load_profiles
from gpufleet.framework.profiles import builtin
from gpufleet.model import annotations as ann
from tests.deploy import manifests
from tests.deploy.manifests import Obj

IMAGE = "ghcr.io/gpufleet/gpufleet:0.1.0"
KEYS_DIR = "/var/run/secrets/gpufleet/assignment-keys"
KEYS_SECRET = "gpufleet-assignment-keys"
"""The assignment-signing key ring (docs/security.md): a Secret deploy/ does not ship, mounted into both."""
SCHEDULER_COMMAND = ["gpufleet", "scheduler", "--config", "/etc/gpufleet/profile.yaml", "--leader-elect",
                     "--lease-namespace", "gpufleet-system", "--http-port", "8080", "--assignment-keys", KEYS_DIR]
"""The contract with `gpufleet scheduler` (src/gpufleet/cli/scheduler_cmd.py): no --kubeconfig means
the pod's service account; /metrics, /healthz and /readyz are served on --http-port."""


def pod_spec(workload: Obj) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Obj) -> dict[str, Any]:
    (only,) = pod_spec(workload)["containers"]
    c: dict[str, Any] = only
    return c


def mount_source(workload: Obj, path: str) -> tuple[dict[str, Any], str]:
    """The volume holding `path` inside the container, and the path relative to the mount."""
    c = container(workload)
    mounts = [m for m in c["volumeMounts"] if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")]
    assert mounts, f"{path} is on no mounted volume"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in pod_spec(workload)["volumes"] if v["name"] == mount["name"]]
    return volume, path[len(mount["mountPath"]):].lstrip("/")


def env_value(workload: Obj, name: str) -> str:
    (var,) = [e for e in container(workload)["env"] if e["name"] == name]
    value: str = var["value"]
    return value


def env_field(workload: Obj, name: str) -> str:
    (var,) = [e for e in container(workload)["env"] if e["name"] == name]
    path: str = var["valueFrom"]["fieldRef"]["fieldPath"]
    return path


@pytest.fixture(scope="module")
def scheduler(rendered: list[Obj]) -> Obj:
    return manifests.find(rendered, "Deployment", "gpufleet-scheduler")


@pytest.fixture(scope="module")
def agent(rendered: list[Obj]) -> Obj:
    return manifests.find(rendered, "DaemonSet", "gpufleet-agent")


# -- scheduler ---------------------------------------------------------------------------------

def test_scheduler_runs_the_cli_contract_with_its_profile_mounted(rendered: list[Obj], scheduler: Obj) -> None:
    assert scheduler["spec"]["replicas"] == 2
    c = container(scheduler)
    assert c["image"] == IMAGE
    assert c["command"] == SCHEDULER_COMMAND
    volume, key = mount_source(scheduler, SCHEDULER_COMMAND[3])
    config = manifests.find(rendered, "ConfigMap", volume["configMap"]["name"])
    assert key in config["data"]
    lease_ns = SCHEDULER_COMMAND[SCHEDULER_COMMAND.index("--lease-namespace") + 1]
    role = manifests.find(rendered, "Role", "gpufleet-scheduler-leader-election")
    assert role["metadata"]["namespace"] == lease_ns == scheduler["metadata"]["namespace"]
    assert env_field(scheduler, "POD_NAME") == "metadata.name"  # the lease holder identity


def test_scheduler_command_parses_with_the_scheduler_cli(rendered: list[Obj]) -> None:
    """The contract seen from the other side: the Deployment's command parses with `gpufleet scheduler`."""
    args = build_parser().parse_args(SCHEDULER_COMMAND[1:])
    assert args.kubeconfig is None and args.leader_elect is True  # in-cluster service account
    assert str(args.config) == SCHEDULER_COMMAND[3] and args.http_port == 8080
    assert str(args.assignment_keys) == KEYS_DIR  # signs every assignment
    role = manifests.find(rendered, "Role", "gpufleet-scheduler-leader-election")
    assert args.lease_namespace == role["metadata"]["namespace"]


def test_scheduler_probes_and_metrics_service_use_the_http_port(rendered: list[Obj], scheduler: Obj) -> None:
    c = container(scheduler)
    port = int(SCHEDULER_COMMAND[SCHEDULER_COMMAND.index("--http-port") + 1])
    assert c["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    labels = scheduler["spec"]["template"]["metadata"]["labels"]
    service = manifests.find(rendered, "Service", "gpufleet-scheduler-metrics")
    assert service["spec"]["selector"].items() <= labels.items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    pdb = manifests.find(rendered, "PodDisruptionBudget", "gpufleet-scheduler")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert scheduler["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_scheduler_runs_as_non_root_without_privileges(scheduler: Obj) -> None:
    """Pod Security "restricted" itself is judged by kube-apiserver (tests/live/test_pod_security_live.py)."""
    spec = pod_spec(scheduler)
    sc = container(scheduler)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65532
    assert not spec.get("hostNetwork")


def test_scheduler_requests_and_limits_resources_and_spreads_its_replicas(scheduler: Obj) -> None:
    resources = container(scheduler)["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    (term,) = pod_spec(scheduler)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= \
        scheduler["spec"]["template"]["metadata"]["labels"].items()


def test_the_profile_configmap_is_the_shipped_default_and_loads(rendered: list[Obj]) -> None:
    text = manifests.find(rendered, "ConfigMap", "gpufleet-scheduler-config")["data"]["profile.yaml"]
    shipped = (manifests.ROOT / "src/gpufleet/framework/profiles/default.yaml").read_text()
    assert text == shipped, "deploy/scheduler/profile.yaml drifted from the built-in default profile"
    (settings,) = load_profiles(text, "gpufleet-scheduler-config")
    assert settings == builtin("default")
    assert settings.name == ann.SCHEDULER_NAME
    build_profile(settings)


def test_image_tag_is_the_package_version() -> None:
    version = tomllib.loads((manifests.ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert IMAGE.endswith(f":{version}")


# -- agent -------------------------------------------------------------------------------------

def test_agent_command_parses_with_the_agent_cli_and_matches_its_mounts(rendered: list[Obj], agent: Obj) -> None:
    c = container(agent)
    assert c["image"] == IMAGE and c["command"][0] == "gpufleet"
    args = build_parser().parse_args(c["command"][1:])
    assert args.func is agent_cmd._run
    assert args.kubeconfig is None and not args.state_file and not args.nfd_file and not args.node_label
    assert str(args.kubelet_dir) == agent_cmd.DEFAULT_KUBELET_DIR
    volume, rest = mount_source(agent, str(args.kubelet_dir))
    assert rest == "" and volume["hostPath"] == {"path": agent_cmd.DEFAULT_KUBELET_DIR, "type": "Directory"}
    volume, rest = mount_source(agent, str(args.config))
    assert rest == "" and volume["configMap"]["name"] == "gpufleet-agent-config"  # a directory of named configs
    assert [p["containerPort"] for p in c["ports"]] == [args.metrics_port]
    assert env_field(agent, "NODE_NAME") == "spec.nodeName"  # --node-name defaults to $NODE_NAME
    assert str(args.assignment_keys) == KEYS_DIR  # serves only signed assignments


# -- the assignment keys (both) ----------------------------------------------------------------

def can_read(mode: int, file_uid: int, file_gid: int, uid: int, gids: set[int]) -> bool:
    """Unix read permission for a process without capabilities (both containers drop ALL)."""
    if uid == file_uid:
        return bool(mode & 0o400)
    if file_gid in gids:
        return bool(mode & 0o040)
    return bool(mode & 0o004)


def secret_file_owner(workload: Obj) -> tuple[int, int]:
    """(uid, gid) of the files of a Secret volume: the kubelet writes them as root, and with an
    fsGroup gives them that group (and at least r--r----- on a read-only volume's files)."""
    return 0, pod_spec(workload).get("securityContext", {}).get("fsGroup", 0)


@pytest.mark.parametrize("name", ["scheduler", "agent"])
def test_both_mount_the_assignment_keys_secret_read_only_and_required(request: pytest.FixtureRequest,
                                                                      name: str) -> None:
    workload: Obj = request.getfixturevalue(name)
    volume, rest = mount_source(workload, KEYS_DIR)
    assert rest == ""
    (mount,) = [m for m in container(workload)["volumeMounts"] if m["mountPath"] == KEYS_DIR]
    assert mount["readOnly"] is True and "subPath" not in mount  # subPath mounts never see a rotation
    assert volume["secret"]["secretName"] == KEYS_SECRET
    assert not volume["secret"].get("optional"), "without the Secret the pods must wait, not run unsigned"
    assert "items" not in volume["secret"]  # every key id in the ring, and `active`, become files
    mode = volume["secret"]["defaultMode"]
    assert mode & 0o007 == 0, f"{name}: keys readable by others ({mode:o})"
    assert mode & 0o222 == 0, f"{name}: keys writable ({mode:o})"


@pytest.mark.parametrize("name", ["scheduler", "agent"])
def test_the_process_can_read_the_keys_and_nobody_else_in_the_pod(request: pytest.FixtureRequest,
                                                                  name: str) -> None:
    workload: Obj = request.getfixturevalue(name)
    psc = pod_spec(workload)["securityContext"]
    uid, gid = psc["runAsUser"], psc["runAsGroup"]
    gids = {gid, *([psc["fsGroup"]] if "fsGroup" in psc else []), *psc.get("supplementalGroups", [])}
    volume, _ = mount_source(workload, KEYS_DIR)
    mode = volume["secret"]["defaultMode"]
    file_uid, file_gid = secret_file_owner(workload)
    assert can_read(mode, file_uid, file_gid, uid, gids), f"{name} (uid {uid}) cannot read mode {mode:o}"
    assert not can_read(mode, file_uid, file_gid, 4242, {4242}), "another user could read the keys"
    assert "CAP_DAC_OVERRIDE" not in container(workload)["securityContext"]["capabilities"].get("add", [])


def test_the_scheduler_reads_the_keys_through_its_fs_group_not_as_root(scheduler: Obj) -> None:
    psc = pod_spec(scheduler)["securityContext"]
    assert psc["runAsUser"] != 0 and psc["fsGroup"] == psc["runAsGroup"] == 65532
    volume, _ = mount_source(scheduler, KEYS_DIR)
    assert volume["secret"]["defaultMode"] == 0o440
    # without the fsGroup the same mode would lock the scheduler out
    assert not can_read(0o440, 0, 0, psc["runAsUser"], {psc["runAsGroup"]})


def test_the_base_ships_no_secret_and_no_role_may_read_secrets(rendered: list[Obj]) -> None:
    """A key in a public repository is no key: the operator creates the Secret (docs/install.md)."""
    assert [manifests.key(o) for o in rendered if o["kind"] == "Secret"] == []
    for role in (o for o in rendered if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert "secrets" not in rule["resources"] and "*" not in rule["resources"], manifests.key(role)


def matches(terms: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """Required node affinity: terms are ORed, expressions ANDed (only In/Exists are used here)."""
    def one(e: dict[str, Any]) -> bool:
        if e["operator"] == "Exists":
            return e["key"] in labels
        assert e["operator"] == "In"
        return labels.get(e["key"]) in e["values"]
    return any(all(one(e) for e in t["matchExpressions"]) for t in terms)


@pytest.mark.parametrize(("labels", "runs"), [
    pytest.param({"nvidia.com/gpu.present": "true"}, True, id="GPU Operator label"),
    pytest.param({"feature.node.kubernetes.io/pci-10de.present": "true"}, True, id="NFD PCI vendor label"),
    pytest.param({"kubernetes.io/os": "linux"}, False, id="a CPU node"),
    pytest.param({"nvidia.com/gpu.present": "false"}, False, id="GPU explicitly absent"),
])
def test_agent_runs_only_on_gpu_nodes(agent: Obj, labels: dict[str, str], runs: bool) -> None:
    terms = pod_spec(agent)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert matches(terms["nodeSelectorTerms"], labels) is runs
    assert "nodeSelector" not in pod_spec(agent)


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Kubernetes' Toleration.ToleratesTaint."""
    def one(t: dict[str, Any]) -> bool:
        if t.get("effect") and t["effect"] != taint["effect"]:
            return False
        if t.get("key") and t["key"] != taint["key"]:
            return False
        if t.get("operator", "Equal") == "Exists":
            return True
        return bool(t.get("value", "") == taint.get("value", ""))
    return any(one(t) for t in tolerations)


@pytest.mark.parametrize("taint", [
    pytest.param({"key": ann.GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}, id="the GPU taint"),
    pytest.param({"key": ann.GPU_RESOURCE, "effect": "NoSchedule"}, id="the GPU taint without value"),
    *(pytest.param({"key": f"{report.TAINT_PREFIX}GPU-0f3c", "value": "xid-79", "effect": effect},
                   id=f"its own device taint, {effect}") for effect in ("NoSchedule", "PreferNoSchedule", "NoExecute")),
    pytest.param({"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}, id="a team's dedicated taint"),
])
def test_agent_tolerates_gpu_node_taints_and_its_own(agent: Obj, taint: dict[str, str]) -> None:
    assert tolerates(pod_spec(agent)["tolerations"], taint)


def test_agent_has_only_the_privileges_it_needs(agent: Obj) -> None:
    spec = pod_spec(agent)
    sc = container(agent)["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True
    assert not (spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"))
    assert [v["name"] for v in spec["volumes"] if "hostPath" in v] == ["device-plugins", "mps-root", "mps-shm"]
    assert spec["securityContext"]["runAsUser"] == 0  # the kubelet's root-owned device-plugin directory
    # These are exactly why the namespace is labelled privileged: kube-apiserver's PodSecurity admission
    # names them and nothing else (tests/live/test_pod_security_live.py, quoted in docs/security.md).


@pytest.mark.parametrize("sharing", ["", "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"])
def test_the_agent_and_its_mps_pods_share_the_daemon_directories(rendered: list[Obj], agent: Obj,
                                                                  sharing: str) -> None:
    """With MPS turned on in the shipped config, every path Allocate gives a pod is where the agent's daemon
    lives: the same host directory, mounted at the same path in the agent (pipe) or at /dev/shm (shm)."""
    data = manifests.find(rendered, "ConfigMap", "gpufleet-agent-config")["data"]["default.yaml"]
    text = data.replace("migStrategy: mixed", "migStrategy: none") + sharing  # MPS is refused with mixed MIG
    config = configsource.load_text(text, "default.yaml")
    backend = fake.load_fixture("h100-sxm-8")
    plans = plan_resources(inventory(backend.system(), backend.devices()), config)
    specs = {s.resource: s for s in mps.daemon_specs(plans, config)}
    assert bool(specs) == bool(sharing)
    for plan in plans:
        daemon = mps.daemon_resource(plan, config)
        if daemon is None:
            continue
        unit = plan.units[0]
        grant = alloc.FractionGrant(unit, 250, 1024) if plan.kind is Kind.MILLI else None
        result = alloc.allocate(plan, [unit.id], config, grant=grant, dev_exists=lambda p: False)
        pod_mounts = {m.container_path: m.host_path for m in result.mounts}
        pipe_host = pod_mounts[result.envs["CUDA_MPS_PIPE_DIRECTORY"]]
        assert pipe_host == specs[daemon].pipe_dir
        volume, rest = mount_source(agent, pipe_host)  # the agent sees the host path at the same path
        assert f"{volume['hostPath']['path']}/{rest}" == pipe_host
        shm, rest = mount_source(agent, "/dev/shm")
        assert rest == "" and shm["hostPath"]["path"] == pod_mounts["/dev/shm"] == specs[daemon].shm_dir
    assert "compute" in env_value(agent, "NVIDIA_DRIVER_CAPABILITIES").split(",")


@pytest.mark.parametrize("fixture", fake.fixture_names())
def test_the_agent_configmap_loads_and_plans_every_shipped_fixture(rendered: list[Obj], fixture: str) -> None:
    data = manifests.find(rendered, "ConfigMap", "gpufleet-agent-config")["data"]
    assert list(data) == ["default.yaml"]  # the only file, so every node uses it without a label
    config = configsource.load_text(data["default.yaml"], "gpufleet-agent-config/default.yaml")
    assert config.warnings == ()
    backend = fake.load_fixture(fixture)
    plans = plan_resources(inventory(backend.system(), backend.devices()), config)
    resources = {p.resource for p in plans}
    assert ann.GPU_MILLI_RESOURCE in resources  # fractions: every fixture has a GPU outside MIG mode
    if fixture == "a100-mig":
        assert any(r.startswith(ann.MIG_RESOURCE_PREFIX) for r in resources)  # migStrategy: mixed
