"""Pod Security Standards, the controls of the "baseline" and "restricted" levels that a pod
template can break, checked on plain dicts (kubernetes.io/docs/concepts/security/pod-security-standards).
"""

from __future__ import annotations

from typing import Any, Iterator

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def violations(pod: dict[str, Any]) -> list[str]:
    """Every control of the restricted level (baseline included) that the pod spec breaks."""
    return sorted(set(_baseline(pod)) | set(_restricted(pod)))


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"], *pod.get("ephemeralContainers", [])]


def _baseline(pod: dict[str, Any]) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            yield f"baseline: {field}"
    for v in pod.get("volumes", []):
        if "hostPath" in v:
            yield f"baseline: hostPath volume {v['name']}"
    for c in _containers(pod):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            yield f"baseline: privileged container {c['name']}"
        allowed = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                   "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
        if set(sc.get("capabilities", {}).get("add", [])) - allowed:
            yield f"baseline: capabilities added to {c['name']}"
        if any(p.get("hostPort") for p in c.get("ports", [])):
            yield f"baseline: hostPort in {c['name']}"
        if sc.get("procMount", "Default") != "Default":
            yield f"baseline: procMount in {c['name']}"


def _restricted(pod: dict[str, Any]) -> Iterator[str]:
    psc = pod.get("securityContext", {})
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"restricted: volume type {sorted(kinds)} ({v['name']})"
    if psc.get("runAsUser") == 0:
        yield "restricted: pod runAsUser 0"
    pod_seccomp = psc.get("seccompProfile", {}).get("type")
    for c in _containers(pod):
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"restricted: {name} must set allowPrivilegeEscalation false"
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            yield f"restricted: {name} must run as non-root (runAsNonRoot true)"
        if sc.get("runAsUser") == 0:
            yield f"restricted: {name} runAsUser 0"
        if sc.get("seccompProfile", {}).get("type", pod_seccomp) not in ("RuntimeDefault", "Localhost"):
            yield f"restricted: {name} needs seccompProfile RuntimeDefault or Localhost"
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            yield f"restricted: {name} must drop ALL capabilities"
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            yield f"restricted: {name} may add only NET_BIND_SERVICE"
