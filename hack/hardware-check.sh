#!/usr/bin/env bash
# The agent on a real NVIDIA GPU: what docs/hardware.md records.
#
# Run as root on a machine with a driver, from the repository root:
#   OUT=/tmp/hw hack/hardware-check.sh
# It only reads the GPU's settings: it never enables MIG, changes the compute mode, or resets the GPU.
# It starts an MPS control daemon under a throwaway directory and quits it at the end.
# Python: PY (default python3) must have the runtime dependencies; the source is taken from src/.
set -u
OUT=${OUT:-/tmp/hw}
PY=${PY:-python3}
WORK=$(mktemp -d /tmp/gpufleet-hw.XXXXXX)
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
GF="$WORK/gpufleet"
printf '#!/bin/sh\nexec "%s" -c "import sys; from gpufleet.cli.main import main; sys.exit(main(sys.argv[1:]))" "$@"\n' "$PY" >"$GF"
chmod +x "$GF"
# FAKE=FIXTURE runs the agent steps on a fixture instead of NVML (to try this script without a GPU).
FAKE_ARGS=()
[ -n "${FAKE:-}" ] && FAKE_ARGS=(--fake "$FAKE")
step() { echo; echo "=== $* ($(date -u +%T))"; }
show() { step "$*"; timeout 60 "$@" 2>&1; echo "[rc=$?]"; }

step "machine"
uname -r; nproc; "$PY" --version
show nvidia-smi
show nvidia-smi -L
show nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,compute_cap,mig.mode.current,compute_mode,driver_version --format=csv
show nvidia-smi topo -m
show nvidia-smi -q -d ROW_REMAPPER,ECC,COMPUTE
show nvidia-smi mig -lgip
show nvidia-smi mig -lgipp
show ls -l /dev/nvidia* /dev/nvidia-caps
show which nvidia-cuda-mps-control nvidia-cuda-mps-server

step "NUMA and machine type, as the agent reads them"
for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && echo "$d: numa_node=$(cat "$d/numa_node" 2>&1) class=$(cat "$d/class")"
done
echo "dmi product_name: $(cat /sys/class/dmi/id/product_name 2>&1)"
ls /sys/devices/system/node/ 2>&1 | tr '\n' ' '; echo
timeout 30 "$PY" - <<'PY'
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
for call in ("nvmlDeviceGetNumaNodeId",):
    try:
        print(call, "->", getattr(n, call)(h))
    except Exception as e:  # noqa: BLE001 - a probe: print what the driver says
        print(call, "->", type(e).__name__, e)
try:
    print("nvmlDeviceGetCpuAffinity(1 word) ->", [hex(w) for w in n.nvmlDeviceGetCpuAffinity(h, 1)])
except Exception as e:  # noqa: BLE001
    print("nvmlDeviceGetCpuAffinity ->", type(e).__name__, e)
PY

step "gpufleet agent inventory / labels on NVML"
timeout 60 "$GF" agent inventory --json "${FAKE_ARGS[@]}" >"$OUT/inventory.json" 2>"$WORK/inv.err"
echo "[rc=$?]"; cat "$WORK/inv.err"; cat "$OUT/inventory.json"
show "$GF" agent inventory "${FAKE_ARGS[@]}"
show "$GF" agent labels "${FAKE_ARGS[@]}"

step "DRA: the ResourceSlices the agent would publish, and what they are built from"
timeout 30 "$PY" - <<'PY'
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
for call in ("nvmlDeviceGetArchitecture", "nvmlDeviceGetBrand", "nvmlDeviceGetCudaComputeCapability"):
    try:
        print(call, "->", getattr(n, call)(h))
    except Exception as e:  # noqa: BLE001 - a probe: print what the driver says
        print(call, "->", type(e).__name__, e)
PY
timeout 30 "$PY" -c '
from gpufleet.agent.nvml import NvmlBackend
b = NvmlBackend()
for d in b.devices():
    for p in d.mig_profiles:
        print(d.index, "profile index", p.index, "id", p.profile_id, "placements", p.placements)
b.close()' 2>&1; echo "[rc=$?]"
for mode in static dynamic shares; do
    args=(--mig "$mode"); [ "$mode" = shares ] && args=(--memory-shares)
    timeout 60 "$GF" agent resourceslices --node-name hw-node "${args[@]}" "${FAKE_ARGS[@]}" \
        >"$OUT/resourceslices-$mode.yaml" 2>"$WORK/rs.err"
    echo "[$mode rc=$?] $(grep -c '^    attributes:' "$OUT/resourceslices-$mode.yaml") devices, $(grep -c '^kind:' "$OUT/resourceslices-$mode.yaml") slices"
    cat "$WORK/rs.err"
done
head -60 "$OUT/resourceslices-static.yaml"

MPS_ROOT="$WORK/mps"
# manageDaemon false: this run's Allocate is checked against the daemon started by hand below.
cat >"$WORK/mps.yaml" <<EOF
version: v1
flags:
  mpsRoot: $MPS_ROOT
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
gpufleet:
  mps:
    manageDaemon: false
EOF

# The kubelet test peer: register, ListAndWatch, Allocate the first device ID. $1: plugin dir, $2: JSON out.
peer() {
    timeout 60 "$PY" - "$1" "$2" <<'PY'
import json, sys
from pathlib import Path
from google.protobuf.json_format import MessageToDict
from tests.agent.kubelet import FakeKubelet
kubelet = FakeKubelet(Path(sys.argv[1])); kubelet.start()
try:
    endpoint = kubelet.endpoint("nvidia.com/gpu", timeout_s=30)
    print("registered:", MessageToDict(endpoint.request))
    print("options:", MessageToDict(endpoint.options))
    devices = endpoint.next_list(timeout_s=30).devices
    for d in devices:
        print("device:", MessageToDict(d))
    answer = MessageToDict(endpoint.allocate([devices[0].ID]))
    print("allocate:", json.dumps(answer, indent=1))
    Path(sys.argv[2]).write_text(json.dumps(answer))
finally:
    kubelet.stop()
PY
    echo "[peer rc=$?]"
}

# The CUDA_* exports a container gets from an Allocate answer (JSON $1), with host paths for mounts.
alloc_env() {
    "$PY" - "$1" <<'PY'
import json, sys
answer = json.load(open(sys.argv[1]))["containerResponses"][0]
envs = dict(answer.get("envs", {}))
mounts = {m["containerPath"]: m["hostPath"] for m in answer.get("mounts", [])}
envs["CUDA_MPS_PIPE_DIRECTORY"] = mounts.get(envs.get("CUDA_MPS_PIPE_DIRECTORY", ""), "MISSING-MOUNT")
envs["CUDA_VISIBLE_DEVICES"] = envs.get("NVIDIA_VISIBLE_DEVICES", "")
for k, v in envs.items():
    if k.startswith("CUDA_"):
        print(f"export {k}={v}")
PY
}

metrics() {  # $1: port, $2: egrep of the metric names to show
    timeout 10 "$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode())' "$1" 2>&1 | grep -E "$2"
}

# One agent run against the kubelet test peer: register, ListAndWatch, Allocate; then SIGTERM.
# $1: label, $2..: extra agent arguments. Prints the Allocate answer as JSON to $WORK/<label>.alloc.json.
agent_run() {
    local label=$1; shift
    local dir="$WORK/$label-dp"; mkdir -p "$dir"
    step "gpufleet agent run ($label) on NVML, kubelet test peer"
    "$GF" agent run "${FAKE_ARGS[@]}" --node-name hw-check --kubelet-dir "$dir" --metrics-port 19402 \
        --state-file "$WORK/$label.node.json" --log-level DEBUG "$@" >"$WORK/$label.agent.log" 2>&1 &
    local pid=$!
    peer "$dir" "$WORK/$label.alloc.json"
    echo "--- metrics (gpufleet_*, first 40)"
    metrics 19402 '^gpufleet_' | head -40
    kill -TERM "$pid"; wait "$pid"; echo "[agent exit=$?]"
    echo "--- agent log"; cat "$WORK/$label.agent.log"
    echo "--- node state"; cat "$WORK/$label.node.json"; echo
}
agent_run whole
cp "$WORK/whole.node.json" "$OUT/node.json" 2>/dev/null

step "MPS: control daemon by hand, as NVIDIA documents it"
PIPE="$MPS_ROOT/nvidia.com/gpu/pipe"; LOG="$MPS_ROOT/nvidia.com/gpu/log"
mkdir -p "$PIPE" "$LOG"
export CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$LOG
mps() { echo "> $*"; echo "$*" | timeout 20 nvidia-cuda-mps-control; echo "[rc=$?]"; }
timeout 20 nvidia-cuda-mps-control -d; echo "[daemon start rc=$?]"
ls -la "$PIPE" "$LOG"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
mps get_server_list
mps set_default_active_thread_percentage 50
mps get_default_active_thread_percentage
mps set_default_device_pinned_mem_limit 0 8192M
mps get_default_device_pinned_mem_limit 0
mps set_default_device_pinned_mem_limit "$UUID" 8192M
mps get_default_device_pinned_mem_limit "$UUID"
mps get_device_client_list

client() {  # a CUDA client: what it sees, and whether a 1.5x-the-limit allocation is refused
    timeout 90 "$PY" - <<'PY'
import os, torch
print("env:", {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "NVIDIA_"))})
free, total = torch.cuda.mem_get_info()
print(f"mem_get_info: free={free >> 20} MiB total={total >> 20} MiB")
print("sm count:", torch.cuda.get_device_properties(0).multi_processor_count)
x = torch.ones(1 << 20, device="cuda"); print("kernel ran:", float(x.sum()))
try:
    y = torch.empty(int(total * 1.5), dtype=torch.uint8, device="cuda")
    print("allocation of 1.5x the reported total: ALLOWED")
except torch.OutOfMemoryError as e:
    print("allocation of 1.5x the reported total: refused:", str(e).splitlines()[0][:160])
PY
    echo "[client rc=$?]"
}
step "MPS client with the daemon's defaults"
client
step "MPS client with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 client
mps get_server_list

agent_run mps --config "$WORK/mps.yaml"
step "MPS client with the environment the agent's Allocate returned"
alloc_env "$WORK/mps.alloc.json" >"$WORK/mps.env"
cat "$WORK/mps.env"
(. "$WORK/mps.env"; client)
mps get_server_list
echo "--- MPS control log"; cat "$LOG/control.log"
echo "--- MPS server log (last 40)"; tail -40 "$LOG/server.log" 2>/dev/null

hold() {  # a CUDA client that keeps its context for $1 seconds, then uses it once more
    timeout 120 "$PY" - "$1" <<'PY'
import sys, time, torch
x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); print("holder: attached", flush=True)
time.sleep(float(sys.argv[1]))
try:
    print("holder: after the wait, kernel ran:", float(x.sum()), flush=True)
except Exception as e:
    print("holder: after the wait, CUDA failed:", type(e).__name__, str(e).splitlines()[0][:200], flush=True)
PY
    echo "[holder rc=$?]"
}
step "MPS: quit while a client is attached"
hold 12 & HOLDER=$!
sleep 8
mps get_server_list
SERVER=$(echo get_server_list | nvidia-cuda-mps-control | head -1)
mps get_client_list "$SERVER"
start=$(date +%s%N); mps quit; echo "quit took $(( ($(date +%s%N) - start) / 1000000 )) ms"
pgrep -a nvidia-cuda-mps || echo "no MPS process left right after quit"
wait $HOLDER
sleep 1; pgrep -a nvidia-cuda-mps || echo "no MPS process left after the client ended"

step "MPS: control daemon and server killed (SIGKILL) under a client, restarted on the same directories"
timeout 20 nvidia-cuda-mps-control -d; echo "[daemon start rc=$?]"
hold 10 & HOLDER=$!
sleep 8
pgrep -a nvidia-cuda-mps
pkill -KILL -f nvidia-cuda-mps-control; pkill -KILL -f nvidia-cuda-mps-server
sleep 1; pgrep -a nvidia-cuda-mps || echo "no MPS process left after SIGKILL"
ls -la "$PIPE"
wait $HOLDER
timeout 20 nvidia-cuda-mps-control -d; echo "[daemon restart rc=$?]"
sleep 1; pgrep -a nvidia-cuda-mps
mps get_server_list
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M client
echo "--- MPS control log after the restart (last 25)"; tail -25 "$LOG/control.log"
mps quit
sleep 2; pgrep -a nvidia-cuda-mps || echo "no MPS process left"

step "MPS managed by the agent: start, defaults, a client, SIGKILL, restart, SIGTERM"
# exclusiveProcess false: the GPU's compute mode is a setting this check must leave alone.
AROOT="$WORK/agent-mps"
cat >"$WORK/agent-mps.yaml" <<EOF
version: v1
flags:
  mpsRoot: $AROOT
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
gpufleet:
  mps:
    exclusiveProcess: false
EOF
ADIR="$WORK/agent-mps-dp"; mkdir -p "$ADIR"
"$GF" agent run "${FAKE_ARGS[@]}" --node-name hw-check --kubelet-dir "$ADIR" --metrics-port 19403 \
    --state-file "$WORK/agent-mps.node.json" --config "$WORK/agent-mps.yaml" >"$WORK/agent-mps.log" 2>&1 &
APID=$!
peer "$ADIR" "$WORK/agent-mps.alloc.json"
APIPE="$AROOT/nvidia.com/gpu/pipe"
amps() { echo "> $*"; echo "$*" | CUDA_MPS_PIPE_DIRECTORY=$APIPE timeout 20 nvidia-cuda-mps-control; echo "[rc=$?]"; }
amps get_default_active_thread_percentage
amps get_default_device_pinned_mem_limit "$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)"
alloc_env "$WORK/agent-mps.alloc.json" >"$WORK/agent-mps.env"
cat "$WORK/agent-mps.env"
echo "--- a client with the agent's environment"
(. "$WORK/agent-mps.env"; client)
echo "--- a client that unsets the limits (a pod author can): the daemon's defaults must still hold"
(. "$WORK/agent-mps.env"; unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; client)
echo "--- SIGKILL of the daemon and its server"
pgrep -a nvidia-cuda-mps
pkill -KILL -f nvidia-cuda-mps-control; pkill -KILL -f nvidia-cuda-mps-server
sleep 6
pgrep -a nvidia-cuda-mps
metrics 19403 '^gpufleet_agent_(mps|devices)'
amps get_default_active_thread_percentage
echo "--- a client after the restart, limits unset"
(. "$WORK/agent-mps.env"; unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; client)
kill -TERM "$APID"; wait "$APID"; echo "[agent exit=$?]"
sleep 1; pgrep -a nvidia-cuda-mps || echo "no MPS process left after the agent stopped"
echo "--- agent log"; cat "$WORK/agent-mps.log"
echo "--- node conditions"
"$PY" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["conditions"], indent=1))' "$WORK/agent-mps.node.json"

step "Dynamic MIG carve on a GPU with MIG off: the agent's refusal, and NVML's own (nothing is changed)"
# Only with MIG disabled, where NVML cannot create an instance; with MIG on this step carves nothing.
[ -z "${FAKE:-}" ] && timeout 60 "$PY" - <<'PY'
import ctypes
import pynvml as n
from gpufleet.agent.backend import BackendError
from gpufleet.agent.nvml import NvmlBackend
b = NvmlBackend()
d = b.devices()[0]
n.nvmlInit()
h = n.nvmlDeviceGetHandleByUUID(d.uuid)
current = n.nvmlDeviceGetMigMode(h)[0]
print("MIG mode current:", current)
if current != n.NVML_DEVICE_MIG_DISABLE or not d.mig_profiles:
    print("skipped: MIG is on (or the GPU has no MIG profiles); this script never carves")
else:
    p = d.mig_profiles[0]
    start, size = p.placements[0]
    try:
        b.create_mig_instance(d.uuid, p.profile_id, start, size)
        print("UNEXPECTED: the agent carved with MIG off")
    except BackendError as e:
        print("agent create ->", e)
    placement = n.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = start, size
    try:
        # by reference: nvml.h takes a pointer, and pynvml passes the argument through (the struct itself segfaults)
        n.nvmlDeviceCreateGpuInstanceWithPlacement(h, p.profile_id, ctypes.byref(placement))
        print("UNEXPECTED: NVML created a GPU instance with MIG off")
    except n.NVMLError as e:
        print("NVML nvmlDeviceCreateGpuInstanceWithPlacement ->", type(e).__name__, e)
    try:
        print("NVML nvmlDeviceGetMaxMigDeviceCount ->", n.nvmlDeviceGetMaxMigDeviceCount(h))
    except n.NVMLError as e:
        print("NVML nvmlDeviceGetMaxMigDeviceCount ->", type(e).__name__, e)
    try:
        print("agent destroy of an unknown MIG UUID ->", b.destroy_mig_instance(d.uuid, "MIG-00000000-0000-0000-0000-000000000000"))
    except BackendError as e:
        print("agent destroy ->", e)
b.close()
PY
echo "[rc=$?]"

step "GPU state afterwards (must equal the start)"
show nvidia-smi --query-gpu=index,mig.mode.current,compute_mode --format=csv
rm -rf "$WORK"
