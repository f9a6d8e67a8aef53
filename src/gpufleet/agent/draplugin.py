"""The agent as the kubelet's DRA plugin: registration, `NodePrepareResources`, `NodeUnprepareResources`.

Two unix sockets, where the kubelet's helper library (k8s.io/dynamic-resource-allocation
`kubeletplugin`) puts them by default:

- `<registry dir>/<driver>-reg.sock` (registry dir `/var/lib/kubelet/plugins_registry`): the
  kubelet's plugin watcher finds it and calls `Registration.GetInfo`; the answer names the
  type `DRAPlugin`, the driver, the DRA socket and the service version `v1.DRAPlugin`;
- `<plugins dir>/<driver>/dra.sock` (plugins dir `/var/lib/kubelet/plugins`): the DRA service.

Preparing a claim (`draprepare.prepare`) reads it from the API server, writes its CDI spec to
the CDI directory (`/var/run/cdi`) and records it in `prepared.json` beside the DRA socket
before answering, so a restarted agent still refuses to hand a prepared device out twice. A
corrupt `prepared.json` stops the agent rather than forget what it handed out.

A partitionable MIG placement (Dynamic MIG) is carved at prepare, through the backend, before the
CDI spec is written: if any carve of the claim fails, or writing the spec or the record does, what
this call carved is destroyed again and the claim is refused. `prepared.json` records each carved
instance (GPU, MIG UUID, instance ids, placement); unpreparing destroys exactly those, by MIG UUID,
and nothing a claim names, so nothing a pod author writes makes the agent destroy an instance it
did not carve. A destroy that fails (device busy) keeps the claim's record, and the kubelet retries.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from concurrent import futures
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import grpc  # type: ignore[import-untyped]  # grpcio ships no type information

from gpufleet.agent import devices as dev
from gpufleet.agent import draprepare
from gpufleet.agent.backend import BackendError, GpuBackend
from gpufleet.agent.draprepare import PreparedClaim, PreparedDevice, PrepareError
from gpufleet.agent.files import write_atomically
from gpufleet.agent.drav1 import dra_pb2, dra_pb2_grpc, registration_pb2, registration_pb2_grpc
from gpufleet.agent.kube import KubeAccessError
from gpufleet.agent.resourceslices import DeviceTarget

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SERVICE_VERSION = "v1.DRAPlugin"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_ROOT = "/var/run/cdi"
ClaimReader = Callable[[str, str], Mapping[str, Any] | None]
"""(namespace, name) -> the ResourceClaim as the API server has it, None if there is none; raises KubeAccessError."""


class CheckpointError(RuntimeError):
    """`prepared.json` cannot be read; the message names the file."""


class DraPlugin:
    def __init__(self, driver: str, node: str, read_claim: ClaimReader, targets: Mapping[str, DeviceTarget],
                 plugins_dir: Path, registry_dir: Path, cdi_root: Path, dev_exists: Callable[[str], bool],
                 backend: GpuBackend | None = None) -> None:
        """`backend` carves and destroys MIG instances for partitionable placements; without one,
        a claim for a placement is refused."""
        self.driver, self.node = driver, node
        self._backend = backend
        self._read_claim, self._targets, self._dev_exists = read_claim, targets, dev_exists
        self.data_dir = plugins_dir / driver
        self.socket_path = self.data_dir / "dra.sock"
        self.registration_path = registry_dir / f"{driver}-reg.sock"
        self.checkpoint_path = self.data_dir / "prepared.json"
        self.cdi_root = cdi_root
        self.prepared: dict[str, PreparedClaim] = {}
        self.registered: bool | None = None
        """What the kubelet last said of our registration (None: nothing yet)."""
        self._lock = threading.Lock()
        self._servers: list[grpc.Server] = []

    def start(self) -> None:
        """Load the checkpoint (CheckpointError), then serve both sockets (OSError)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.registration_path.parent.mkdir(parents=True, exist_ok=True)
        self.prepared = self._load()
        dra = _server("dra")
        dra_pb2_grpc.add_DRAPluginServicer_to_server(_DraServicer(self), dra)  # type: ignore[no-untyped-call]
        registration = _server("dra-registration")
        registration_pb2_grpc.add_RegistrationServicer_to_server(  # type: ignore[no-untyped-call]
            _RegistrationServicer(self), registration)
        for server, path in ((dra, self.socket_path), (registration, self.registration_path)):
            _unlink(path)
            if not server.add_insecure_port(f"unix://{path}"):
                raise OSError(f"cannot listen on {path}")
            server.start()
            self._servers.append(server)
        log.info("serving DRA driver %s on %s (registration %s; %d claims prepared)", self.driver,
                 self.socket_path, self.registration_path, len(self.prepared))

    def stop(self, grace_s: float = 0.1) -> None:
        for server in self._servers:
            server.stop(grace_s).wait(grace_s + 2.0)
        self._servers = []
        for path in (self.registration_path, self.socket_path):  # registration first: the kubelet lets go
            _unlink(path)

    def prepare(self, namespace: str, name: str, uid: str) -> PreparedClaim:
        """Raises PrepareError (also for an API server that cannot be reached) or OSError."""
        try:
            claim = self._read_claim(namespace, name)
        except KubeAccessError as exc:
            raise PrepareError(f"ResourceClaim {namespace}/{name}: cannot read it: {exc}") from exc
        with self._lock:
            done = draprepare.prepare(claim, namespace, name, uid, driver=self.driver, node=self.node,
                                      targets=self._targets, prepared=self.prepared)
            if uid not in self.prepared:
                done = self._carve(done)
                try:
                    spec = draprepare.cdi_spec(self.driver, uid, done, self._targets, self._dev_exists)
                    self.cdi_root.mkdir(parents=True, exist_ok=True)
                    write_atomically(self._cdi_path(uid), json.dumps(spec, indent=2) + "\n")
                    self.prepared[uid] = done
                    self._save()
                except OSError:
                    self.prepared.pop(uid, None)
                    _unlink(self._cdi_path(uid))
                    self._undo([d.carved for d in done.devices if d.carved is not None])
                    raise
                log.info("prepared ResourceClaim %s/%s: %s", namespace, name, ", ".join(
                    d.device + (f" (carved {d.carved.uuid})" if d.carved else "") for d in done.devices)
                         or "no devices of this driver")
            return done

    def unprepare(self, uid: str) -> None:
        """Destroy the MIG instances carved for the claim, forget it and remove its CDI spec; a claim
        never prepared is no error. Raises BackendError (a destroy failed: the claim stays recorded,
        spec and all, for the kubelet's retry) or OSError."""
        with self._lock:
            claim = self.prepared.get(uid)
            if claim is not None:
                self._destroy(claim)
                del self.prepared[uid]
            _unlink(self._cdi_path(uid))
            if claim is not None:
                self._save()
                log.info("unprepared ResourceClaim %s/%s", claim.namespace, claim.name)

    def _carve(self, claim: PreparedClaim) -> PreparedClaim:
        """The claim with each partitionable placement carved; PrepareError, with nothing left carved,
        when one cannot be."""
        devices: list[PreparedDevice] = []
        carved: list[dev.CarvedInstance] = []
        for d in claim.devices:
            target = self._targets[d.device]
            if target.carve is None:
                devices.append(d)
                continue
            where = f"ResourceClaim {claim.namespace}/{claim.name}: device {d.device!r}"
            assert target.profile_id is not None and target.placement is not None  # set with carve
            try:
                if self._backend is None:
                    raise BackendError("this agent has no GPU backend to carve with")
                instance = self._backend.create_mig_instance(target.uuid, target.profile_id, *target.placement)
            except BackendError as exc:
                left = self._undo(carved)
                raise PrepareError(f"{where}: cannot carve its {target.carve} MIG instance: {exc}{left}") from exc
            carved.append(instance)
            devices.append(replace(d, carved=instance))
        return replace(claim, devices=tuple(devices))

    def _undo(self, carved: list[dev.CarvedInstance]) -> str:
        """Destroy instances a failed prepare carved; "" when all went, else what is left, to report."""
        left = []
        for c in reversed(carved):
            try:
                assert self._backend is not None  # it carved them
                self._backend.destroy_mig_instance(c.gpu_uuid, c.uuid)
            except BackendError as exc:
                log.error("cannot destroy MIG device %s carved for a refused claim: %s", c.uuid, exc)
                left.append(c.uuid)
        return f" (and MIG devices {', '.join(left)} carved for it could not be destroyed)" if left else ""

    def _destroy(self, claim: PreparedClaim) -> None:
        """Destroy the instances carved for a prepared claim, by the MIG UUIDs recorded; one already
        gone (a reboot) is fine. Raises BackendError."""
        for d in reversed(claim.devices):
            if d.carved is None:
                continue
            if self._backend is None:
                raise BackendError(f"ResourceClaim {claim.namespace}/{claim.name}: MIG device {d.carved.uuid} "
                                   "was carved for it, and this agent has no GPU backend to destroy it with")
            if not self._backend.destroy_mig_instance(d.carved.gpu_uuid, d.carved.uuid):
                log.info("MIG device %s of ResourceClaim %s/%s was already gone", d.carved.uuid, claim.namespace,
                         claim.name)

    def _cdi_path(self, uid: str) -> Path:
        return self.cdi_root / f"{draprepare.cdi_spec_name(self.driver, uid)}.json"

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            data = json.loads(self.checkpoint_path.read_text())
            return {uid: PreparedClaim(c["namespace"], c["name"], tuple(
                        PreparedDevice(tuple(d["requests"]), d["pool"], d["device"], tuple(d["cdi_ids"]),
                                       _carved(d.get("carved")))
                        for d in c["devices"]))
                    for uid, c in data["claims"].items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{self.checkpoint_path}: cannot read the prepared claims ({type(exc).__name__}: "
                                  f"{exc}); move it away to start with none prepared, after checking that no pod "
                                  "on this node still uses a DRA device of this driver") from None

    def _save(self) -> None:
        body = {"claims": {uid: asdict(c) for uid, c in sorted(self.prepared.items())}}
        write_atomically(self.checkpoint_path, json.dumps(body, indent=1) + "\n")


class _RegistrationServicer(registration_pb2_grpc.RegistrationServicer):
    def __init__(self, plugin: DraPlugin) -> None:
        self._plugin = plugin

    def GetInfo(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method's name
        return registration_pb2.PluginInfo(type=PLUGIN_TYPE, name=self._plugin.driver,
                                           endpoint=str(self._plugin.socket_path), supported_versions=[SERVICE_VERSION])

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._plugin.registered = bool(request.plugin_registered)
        if request.plugin_registered:
            log.info("the kubelet registered DRA driver %s", self._plugin.driver)
        else:
            log.error("the kubelet refused DRA driver %s: %s", self._plugin.driver, request.error)
        return registration_pb2.RegistrationStatusResponse()


class _DraServicer(dra_pb2_grpc.DRAPluginServicer):
    def __init__(self, plugin: DraPlugin) -> None:
        self._plugin = plugin

    def NodePrepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802
        response = dra_pb2.NodePrepareResourcesResponse()
        for c in request.claims:
            try:
                done = self._plugin.prepare(c.namespace, c.name, c.uid)
            except (PrepareError, OSError) as exc:
                log.warning("cannot prepare ResourceClaim %s/%s for the kubelet: %s", c.namespace, c.name, exc)
                response.claims[c.uid].error = str(exc)
                continue
            response.claims[c.uid].devices.extend(
                dra_pb2.Device(request_names=list(d.requests), pool_name=d.pool, device_name=d.device,
                               cdi_device_ids=list(d.cdi_ids)) for d in done.devices)
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802
        response = dra_pb2.NodeUnprepareResourcesResponse()
        for c in request.claims:
            try:
                self._plugin.unprepare(c.uid)
                response.claims[c.uid].error = ""
            except (BackendError, OSError) as exc:
                response.claims[c.uid].error = f"ResourceClaim {c.namespace}/{c.name}: {exc}"
        return response


def recorded_carvings(plugins_dir: Path, driver: str) -> tuple[dev.CarvedInstance, ...]:
    """The MIG instances `prepared.json` says this agent carved for prepared claims, read before the
    plugin starts so discovery can leave them out; () when there is no readable checkpoint (a corrupt
    one stops the plugin's start() instead)."""
    try:
        data = json.loads((plugins_dir / driver / "prepared.json").read_text())
        return tuple(c for claim in data["claims"].values() for d in claim["devices"]
                     if (c := _carved(d.get("carved"))) is not None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ()


def _carved(record: Any) -> dev.CarvedInstance | None:
    if record is None:
        return None
    return dev.CarvedInstance(str(record["gpu_uuid"]), str(record["uuid"]), int(record["gi"]), int(record["ci"]),
                              int(record["profile_id"]), int(record["start"]), int(record["size"]))


def _server(name: str) -> grpc.Server:
    return grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix=name))


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
