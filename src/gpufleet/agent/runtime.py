"""The running agent: discovery, one plugin server per resource, health, and a supervisor loop.

Startup: load the config (a bad one is fatal here, there is nothing to fall back to),
discover the GPUs, plan the resources, serve and register every plugin, write the node.
Then a supervisor thread, every `poll_s`:

1. Kubelet restart: a new kubelet deletes the plugin sockets and creates a new
   `kubelet.sock`. Whenever our socket is gone we serve again, and whenever kubelet.sock's
   identity differs from the one we registered with we register again. Polling one stat()
   every 0.25 s needs no inotify dependency and re-registers well within 2 s.
2. Config: every `config_poll_s` the source is re-read (and the node label re-checked). A
   new valid config replaces the plugins; an invalid one is logged, counted and kept in
   `config_error`, and the agent keeps serving the last good one.
3. Node report: when health or config changed (or the last write failed), the node patch is
   recomputed and written, and, when `gpufleet.dra.publish` is set, the node's DRA
   ResourceSlices are published (a new pool generation only when they changed).
4. MIG layout: with the config, the node's `gpufleet.io/mig-layout` annotation is read; a new
   generation is applied (`mig_layout`), the GPUs are discovered again, the plugins and DRA
   devices replaced, and the outcome written to `gpufleet.io/mig-layout-state`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpufleet.agent import configsource, health, mig_layout, mps, report, resourceslices
from gpufleet.agent.assignments import AssignmentBook, assigned_devices, trusted_assignment
from gpufleet.agent.backend import BackendUnavailableError, GpuBackend
from gpufleet.agent.config import AgentConfig, ConfigError, SharingStrategy
from gpufleet.agent.devices import HealthEvent
from gpufleet.agent.draplugin import DEFAULT_CDI_ROOT, CheckpointError, DraPlugin, recorded_carvings
from gpufleet.agent.inventory import NodeGpuInventory, inventory, without_mig
from gpufleet.agent.kube import KubeAccessError, NodeApi, PodView
from gpufleet.agent.metrics import AgentMetrics
from gpufleet.agent.mps_daemon import MpsSupervisor
from gpufleet.agent.plan import PlanError, ResourcePlan, plan_resources
from gpufleet.agent.plugin import KUBELET_SOCKET, PluginServer, RegistrationError, socket_identity
from gpufleet.agent.servicer import PluginContext
from gpufleet.model import ModelError
from gpufleet.model.assignment_auth import KeyDir

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentOptions:
    node_name: str
    kubelet_dir: Path
    """The device-plugin directory holding kubelet.sock (mount the directory, not the socket)."""
    poll_s: float = 0.25
    config_poll_s: float = 10.0
    health_poll_s: float = 1.0
    register_timeout_s: float = 5.0
    metrics_port: int | None = None
    """Overrides the config's gpufleet.metricsPort when set."""
    mps_check_s: float = 2.0
    """How often each MPS control daemon must answer."""
    dra_plugins_dir: Path | None = None
    """Where the DRA socket goes (`<dir>/<driver>/dra.sock`; the kubelet's: /var/lib/kubelet/plugins).
    With this and `dra_registry_dir` set, a config that publishes DRA slices also serves the
    kubelet's DRA API; without them it only publishes."""
    dra_registry_dir: Path | None = None
    """The kubelet's plugin-watcher directory (/var/lib/kubelet/plugins_registry)."""
    cdi_root: Path = Path(DEFAULT_CDI_ROOT)
    """Where prepared claims' CDI specs go."""
    assignment_keys: Path | None = None
    """The scheduler's assignment-signing keys (a mounted Secret, `model.assignment_auth`): with them,
    only assignments the scheduler signed for that very pod are served. None: unsigned ones are
    trusted too (any pod author who can set spec.nodeName can then pick devices)."""


class Agent:
    def __init__(self, open_backend: Callable[[], GpuBackend], api: NodeApi, source: configsource.ConfigSource,
                 options: AgentOptions, *, clock: health.Clock = time.monotonic,
                 dev_exists: Callable[[str], bool] = os.path.exists) -> None:
        """`open_backend` is called in start(), after the config is read, so that failOnInitError applies."""
        self._open_backend, self._api, self._source, self.options = open_backend, api, source, options
        self._backend: GpuBackend | None = None
        self._clock, self._dev_exists = clock, dev_exists
        self.metrics = AgentMetrics()
        self.board = health.HealthBoard()
        self.plugins: list[PluginServer] = []
        self.config_error: str | None = None
        self.idle = False
        """True when the node has no usable driver and failOnInitError is false."""
        self._stop = threading.Event()
        self._lock = threading.RLock()
        """Serialises plugin restarts, config reloads and node writes (supervisor vs. callers)."""
        self._reported: tuple[int, str, int, int] | None = None
        self._owned_labels: frozenset[str] = frozenset()
        self._write_error: str | None = None
        self._slice_driver: str | None = None
        """The DRA driver whose pool this agent last published, to withdraw it when the config changes."""
        self.slice_generation = 0
        """The published pool's generation (0: none published)."""
        self._slice_error: str | None = None
        self.dra: DraPlugin | None = None
        """The kubelet's DRA API, when served."""
        self._dra_options: resourceslices.SliceOptions | None = None
        self._failed_register: dict[str, tuple[int, int, int]] = {}
        self._layout_seen: str | None = None
        """The last `gpufleet.io/mig-layout` value acted on (applied or refused)."""
        self.layout_state: str | None = None
        """The `gpufleet.io/mig-layout-state` to write; None before any layout was read."""
        self._layout_version = 0
        self._monitor: health.HealthMonitor | None = None
        self.mps: MpsSupervisor | None = None
        self._mps_lock = threading.Lock()
        self._mps_thread = threading.Thread(target=self._mps_loop, name="gpufleet-mps", daemon=True)
        """MPS commands can take seconds to time out; they must not hold up the kubelet's plugins."""
        self._supervisor = threading.Thread(target=self._supervise, name="gpufleet-supervisor", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="gpufleet-node-writer", daemon=True)
        """Node writes run here, so a slow or hanging API server never delays kubelet re-registration."""

    def _assignment_rejected(self, pod: PodView, why: str) -> None:
        self.metrics.assignments_rejected.labels(why).inc()
        note = (f"the gpufleet agent on {self.options.node_name} refuses this pod's GPU assignment: its signature "
                f"is {'missing' if why == 'missing' else why.replace('-', ' ')}; only the gpufleet scheduler's "
                "own assignments get devices")
        try:
            self._api.pod_event(pod, "AssignmentRejected", note)
        except KubeAccessError as exc:
            log.warning("pod %s/%s: cannot record the refused assignment: %s", pod.namespace, pod.name, exc)

    @property
    def kubelet_socket(self) -> Path:
        return self.options.kubelet_dir / KUBELET_SOCKET

    def start(self) -> None:
        """Raises ConfigError, PlanError, BackendError, or OSError (metrics port) when the agent cannot start."""
        loaded = self._source.poll()
        assert loaded is not None  # the first poll always returns the config
        self.loaded = loaded
        try:
            self._backend = backend = self._open_backend()
            self.inventory: NodeGpuInventory = without_mig(inventory(backend.system(), backend.devices()),
                                                           self._dra_carved(loaded.config))
        except BackendUnavailableError as exc:
            if loaded.config.flags.fail_on_init_error:
                raise
            log.warning("no usable GPU driver (%s); idling because failOnInitError is false", exc)
            self.idle = True
            return
        plans = plan_resources(self.inventory, loaded.config)
        self._log_warnings(loaded)
        port = self.options.metrics_port
        self.metrics.serve(loaded.config.gpufleet.metrics_port if port is None else port)  # OSError: port taken
        self._tracker = health.HealthTracker(loaded.config.gpufleet.health, self.inventory)
        self._keys = keys = KeyDir(self.options.assignment_keys) if self.options.assignment_keys is not None else None
        if keys is None:
            log.warning("no --assignment-keys: GPU assignments are trusted unsigned, so a pod created with "
                        "spec.nodeName set can choose its devices (docs/security.md)")
        book = AssignmentBook(self._api, self.options.node_name, keys, self._assignment_rejected)
        self._ctx = PluginContext(self.options.node_name, loaded.config, self.inventory, self.board,
                                  book, self.metrics, self._dev_exists)
        self._monitor = health.HealthMonitor(backend, self._tracker, self.board, self._clock,
                                             self.options.health_poll_s, self._count_event)
        self._monitor.start()
        self.mps = MpsSupervisor(backend, self.board, self.metrics, loaded.config.gpufleet.mps.control_binary,
                                 check_s=self.options.mps_check_s)
        self.mps.apply(mps.daemon_specs(plans, loaded.config))
        self.mps.sync()  # before the plugins: MPS replicas are advertised healthy only once their daemon answers
        self._start_plugins(plans)
        self._start_dra(loaded.config)  # CheckpointError, OSError
        self.report()
        self._supervisor.start()
        self._writer.start()
        self._mps_thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        for thread in (self._supervisor, self._writer, self._mps_thread):
            if thread.is_alive():
                thread.join(timeout_s)
        if self.mps is not None:
            with self._mps_lock:
                self.mps.stop()
        if self._monitor is not None:
            self._monitor.stop(timeout_s)
        for p in self.plugins:
            p.stop()
        if self.dra is not None:
            self.dra.stop()
        self.metrics.shutdown()
        if self._backend is not None:
            self._backend.close()

    def sync_kubelet(self) -> None:
        """Serve again where our socket vanished; register again with a new kubelet."""
        with self._lock:
            self._sync_kubelet()

    def _sync_kubelet(self) -> None:
        kubelet = socket_identity(self.kubelet_socket)
        for p in self.plugins:
            if not p.socket_present():
                log.info("socket of %s is gone (kubelet restart?); serving again", p.plan.resource)
                p.stop()
                p.start()
            if kubelet is not None and p.registered_with != kubelet:
                try:
                    p.register(self.kubelet_socket, self.options.register_timeout_s)
                except RegistrationError as exc:
                    if self._failed_register.get(p.plan.resource) != kubelet:  # once per kubelet, not every poll
                        log.warning("%s (retrying every %.2f s)", exc, self.options.poll_s)
                    self._failed_register[p.plan.resource] = kubelet

    def reload_config(self) -> bool:
        """Poll the config source; True if a new config was applied."""
        with self._lock:
            return self._reload_config()

    def _reload_config(self) -> bool:
        try:
            loaded = self._source.poll()
            if loaded is None:
                return False
            plans = plan_resources(self.inventory, loaded.config)
        except (ConfigError, PlanError) as exc:
            if str(exc) != self.config_error:
                log.error("rejected new config, still serving %s: %s", self.loaded.name, exc)
                self.metrics.config_errors.inc()
            self.config_error = str(exc)
            return False
        except KubeAccessError as exc:
            log.warning("cannot read node labels to choose a config: %s", exc)
            return False
        log.info("applying config %s", loaded.name)
        self._log_warnings(loaded)
        self.loaded, self.config_error = loaded, None
        self._ctx.config = loaded.config
        self._tracker.reconfigure(loaded.config.gpufleet.health)
        if self.mps is not None:
            with self._mps_lock:
                self.mps.apply(mps.daemon_specs(plans, loaded.config), loaded.config.gpufleet.mps.control_binary)
        for p in self.plugins:
            p.stop()
        self._start_plugins(plans)
        if _slice_options(loaded.config) != self._dra_options:
            if self.dra is not None:
                self.dra.stop()
                self.dra = None
            try:
                self._start_dra(loaded.config)
            except (CheckpointError, OSError) as exc:
                log.error("cannot serve the kubelet's DRA API for the new config: %s", exc)
        return True  # the writer thread reports the new config on its next poll

    def report(self) -> None:
        """Write the node patch if health or config changed since the last successful write.

        The patch is built under the lock and sent outside it: the API call (with its retries
        and timeouts) must not hold up plugin restarts or kubelet re-registration.
        """
        with self._lock:
            supervisor = self.mps
            state = (self.board.version, self.loaded.fingerprint, supervisor.version if supervisor else 0,
                     self._layout_version)
            if state == self._reported:
                return
            faults = self.board.faults()
            config = self.loaded.config
            patch = report.node_patch(self.inventory, self.loaded.config, faults, self._owned_labels,
                                      supervisor.status() if supervisor else None)
            if self.layout_state is not None:
                patch = dataclasses.replace(
                    patch, annotations={**patch.annotations, mig_layout.STATE_ANNOTATION: self.layout_state})
        try:
            self._api.patch_node(patch)
            self._publish_slices(config, frozenset(faults))
        except KubeAccessError as exc:
            with self._lock:
                if str(exc) != self._write_error:  # once per distinct failure, not every poll
                    log.warning("cannot update node %s: %s", self.options.node_name, exc)
                self._write_error = str(exc)
            return
        with self._lock:
            self._write_error = None
            self._owned_labels = frozenset(k for k, v in patch.labels.items() if v is not None)
            self._reported = state
            self._update_device_metrics(frozenset(faults))

    def sync_mig_layout(self) -> bool:
        """Apply the scheduler's MIG layout if the node carries one not yet acted on; True if a GPU changed.

        Each GPU's change is all or nothing (`mig_layout.apply`); GPUs are independent, so a
        layout may succeed on some and fail on others; the state then says `failed`, naming each.
        """
        try:
            text = self._api.node_annotations().get(mig_layout.LAYOUT_ANNOTATION)
        except KubeAccessError as exc:
            log.warning("cannot read node %s for its MIG layout: %s", self.options.node_name, exc)
            return False
        if text is None or text == self._layout_seen or self._backend is None:
            return False
        with self._lock:
            changed, errors, generation = self._apply_layout(text)
            self._layout_seen = text
            self.layout_state = mig_layout.state(generation, "; ".join(errors) or None)
            self._layout_version += 1
        for e in errors:
            log.error("MIG layout generation %d: %s", generation, e)
        if changed:
            log.info("MIG layout generation %d applied", generation)
        return changed

    def _apply_layout(self, text: str) -> tuple[bool, list[str], int]:
        assert self._backend is not None
        try:
            desired = mig_layout.parse(text)
        except mig_layout.LayoutError as exc:
            return False, [str(exc)], 0
        try:
            in_use = self._mig_in_use()
        except KubeAccessError as exc:
            return False, [f"cannot tell which MIG devices are in use ({exc}); nothing changed"], desired.generation
        changed, errors = False, []
        before = inventory(self._backend.system(), self._backend.devices())  # one GPU's change leaves the others be
        for uuid, want in sorted(desired.gpus.items()):
            fresh = before.gpu(uuid)
            try:
                if fresh is None:
                    raise mig_layout.LayoutError(f"GPU {uuid}: not on this node")
                change = mig_layout.diff(fresh, want)
                if not change.empty:
                    mig_layout.apply(self._backend, change, in_use)
                    changed = True
            except (mig_layout.LayoutError, ModelError) as exc:
                errors.append(str(exc))
        if changed:
            errors += self._rediscover()
        return changed, errors, desired.generation

    def _mig_in_use(self) -> frozenset[str]:
        """MIG devices carved for prepared DRA claims, and those assigned to pods on this node that
        have not finished. (A container running on a device is also refused by the backend's busy check.)"""
        used: set[str] = set(self._dra_carved(self.loaded.config))
        for pod in self._api.pods_on_node():
            a = trusted_assignment(pod, self.options.node_name, self._keys)
            if pod.phase not in ("Succeeded", "Failed") and a is not None:
                used |= assigned_devices(a, self.inventory) or frozenset()
        return frozenset(used)

    def _rediscover(self) -> list[str]:
        """After the GPUs changed: new inventory, plugins, DRA devices; errors that keep the old plugins."""
        assert self._backend is not None
        config = self.loaded.config
        self.inventory = without_mig(inventory(self._backend.system(), self._backend.devices()),
                                     self._dra_carved(config))
        self._ctx.inventory = self.inventory
        self._tracker.set_inventory(self.inventory)
        try:
            plans = plan_resources(self.inventory, config)
        except PlanError as exc:
            return [f"the new layout cannot be served with config {self.loaded.name}: {exc}"]
        if self.mps is not None:
            with self._mps_lock:
                self.mps.apply(mps.daemon_specs(plans, config), config.gpufleet.mps.control_binary)
        for p in self.plugins:
            p.stop()
        self._start_plugins(plans)
        if self.dra is not None:
            self.dra.stop()
            self.dra = None
            try:
                self._start_dra(config)
            except (CheckpointError, OSError) as exc:
                return [f"cannot serve the kubelet's DRA API for the new layout: {exc}"]
        return []

    def _start_dra(self, config: AgentConfig) -> None:
        """Serve the kubelet's DRA API for the config's driver, when it publishes slices and the
        kubelet's directories are known."""
        options = _slice_options(config)
        self._dra_options = options
        if options is None or self.options.dra_plugins_dir is None or self.options.dra_registry_dir is None:
            return
        self.dra = DraPlugin(options.driver, self.options.node_name, self._api.resource_claim,
                             resourceslices.device_targets(self.inventory, options), self.options.dra_plugins_dir,
                             self.options.dra_registry_dir, self.options.cdi_root, self._dev_exists, self._backend)
        self.dra.start()

    def _dra_carved(self, config: AgentConfig) -> frozenset[str]:
        """MIG devices the DRA plugin carved for claims still prepared (a restart): discovery leaves
        them out, so the pool stays partitionable and no device plugin offers them."""
        options = _slice_options(config)
        if options is None or self.options.dra_plugins_dir is None:
            return frozenset()
        return frozenset(c.uuid for c in recorded_carvings(self.options.dra_plugins_dir, options.driver))

    def _publish_slices(self, config: AgentConfig, unhealthy: frozenset[str]) -> None:
        """The node's DRA pool as the config asks: published, or withdrawn (also a former driver's)."""
        dra = config.gpufleet.dra
        if self._slice_driver is not None and (not dra.publish or dra.driver != self._slice_driver):
            self._api.publish_resource_slices(self._slice_driver, ())
            self._slice_driver = None
        options = _slice_options(config)
        if options is None:
            return
        try:
            slices = resourceslices.resource_slices(self.inventory, self.options.node_name, 1, options, unhealthy)
        except ModelError as exc:  # a driver fact the API cannot take: say so once, keep the node written
            if str(exc) != self._slice_error:
                log.error("cannot publish ResourceSlices for node %s: %s", self.options.node_name, exc)
            self._slice_error = str(exc)
            return
        self._slice_error = None
        self._slice_driver = dra.driver
        self.slice_generation = self._api.publish_resource_slices(dra.driver, slices)

    def _write_loop(self) -> None:
        while not self._stop.wait(self.options.poll_s):
            try:
                self.report()
            except Exception:  # noqa: BLE001 - the writer must outlive any one failure
                log.exception("node write failed; retrying")

    def _start_plugins(self, plans: tuple[ResourcePlan, ...]) -> None:
        self.plugins = [PluginServer(plan, self._ctx, self.options.kubelet_dir) for plan in plans]
        for p in self.plugins:
            p.start()
        self._sync_kubelet()

    def _supervise(self) -> None:
        next_config = time.monotonic() + self.options.config_poll_s
        while not self._stop.wait(self.options.poll_s):
            try:
                self.sync_kubelet()
                if time.monotonic() >= next_config:
                    next_config = time.monotonic() + self.options.config_poll_s
                    self.reload_config()
                    self.sync_mig_layout()
            except Exception:  # noqa: BLE001 - the supervisor must outlive any one failure
                log.exception("supervisor cycle failed; retrying")

    def _mps_loop(self) -> None:
        while not self._stop.wait(self.options.poll_s):
            try:
                with self._mps_lock:
                    assert self.mps is not None
                    self.mps.sync()
            except Exception:  # noqa: BLE001 - the MPS supervisor must outlive any one failure
                log.exception("MPS supervision cycle failed; retrying")

    def _update_device_metrics(self, unhealthy: frozenset[str]) -> None:
        """As ListAndWatch advertises them: a resource whose MPS daemon is down is all Unhealthy."""
        self.metrics.clear_devices()
        held = self.board.held()
        for p in self.plugins:
            if mps.daemon_resource(p.plan, self.loaded.config) in held:
                self.metrics.set_devices(p.plan.resource, 0, len(p.plan.units))
                continue
            bad = sum(1 for u in p.plan.units if u.gpu in unhealthy or u.mig in unhealthy)
            self.metrics.set_devices(p.plan.resource, len(p.plan.units) - bad, bad)

    def _count_event(self, event: HealthEvent) -> None:
        self.metrics.health_events.labels(event.kind.value).inc()

    @staticmethod
    def _log_warnings(loaded: configsource.LoadedConfig) -> None:
        for warning in loaded.config.warnings:
            log.warning("%s", warning)


def _slice_options(config: AgentConfig) -> resourceslices.SliceOptions | None:
    """How the config publishes DRA slices; None when it does not."""
    dra = config.gpufleet.dra
    if not dra.publish:
        return None
    return resourceslices.SliceOptions(dra.driver, resourceslices.MigMode(dra.mig),
                                       config.sharing.strategy is not SharingStrategy.NONE)
