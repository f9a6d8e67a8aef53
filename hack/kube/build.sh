#!/usr/bin/env bash
# Builds the pinned real control plane from its Go modules (`make kube`):
#   kube-apiserver, kube-controller-manager, kube-scheduler  k8s.io/kubernetes   (hack/kube/kubernetes)
#   etcd                                                   go.etcd.io/etcd/server/v3  (hack/kube/etcd)
#   kwok                                                   sigs.k8s.io/kwok     (hack/kube/kwok)
#   helm (for the chart tests)                             helm.sh/helm/v3      (hack/kube/helm)
#   karpenter-kwok (Karpenter's KWOK provider)             sigs.k8s.io/karpenter (hack/kube/karpenter)
# into $GPUFLEET_KUBE_CACHE/<versions>/bin (default ~/.cache/gpufleet/kube), outside the
# repository. Only missing binaries are built; each build prints its time. Prints the bin
# directory on its last line.
#
# Each component is built through a wrapper module of ours: k8s.io/kubernetes and etcd's server
# module carry `replace` directives that `go install mod@version` refuses, so the wrappers pin
# every staging module (k8s.io/api, ... at v0.37.2) themselves. The go.sum files pin the rest.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
KEY="k8s-v${KUBERNETES_VERSION}_etcd-v${ETCD_VERSION}_kwok-v${KWOK_VERSION}_karpenter-v${KARPENTER_VERSION}"
BIN="${GPUFLEET_KUBE_CACHE:-$HOME/.cache/gpufleet/kube}/$KEY/bin"
mkdir -p "$BIN"
command -v go >/dev/null || { echo "kube: the Go toolchain is needed to build the control plane (go not on PATH)" >&2; exit 1; }

# One build at a time per cache directory (two test runs started together share it).
exec 9>"$BIN/.lock"
flock 9

export GOFLAGS="-mod=readonly -trimpath -buildvcs=false"

build() {  # build NAME MODULE_DIR PACKAGE [LDFLAGS]
    local name=$1 dir=$2 pkg=$3 ldflags=${4:-}
    if [ -x "$BIN/$name" ]; then
        echo "kube: $name present"
        return
    fi
    echo "kube: building $name ($pkg) ..."
    local start=$SECONDS
    (cd "$HERE/$dir" && go build -o "$BIN/$name.partial" -ldflags "-s -w $ldflags" "$pkg")
    mv "$BIN/$name.partial" "$BIN/$name"
    echo "kube: built $name in $((SECONDS - start)) s"
}

K8S_MINOR=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
K8S_LDFLAGS="-X k8s.io/component-base/version.gitVersion=v$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$K8S_MINOR -X k8s.io/component-base/version.gitTreeState=clean"
total=$SECONDS
build etcd etcd go.etcd.io/etcd/server/v3
build kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver "$K8S_LDFLAGS"
build kube-controller-manager kubernetes k8s.io/kubernetes/cmd/kube-controller-manager "$K8S_LDFLAGS"
build kube-scheduler kubernetes k8s.io/kubernetes/cmd/kube-scheduler "$K8S_LDFLAGS"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
# Karpenter v1.15 asks for Go 1.26.9: the go command fetches that toolchain from the module proxy.
GOTOOLCHAIN=auto build karpenter-kwok karpenter sigs.k8s.io/karpenter/kwok

# Karpenter's CRDs (NodePool, NodeClaim, NodeOverlay, KWOKNodeClass, ...) from the same module, beside
# bin/ in crds/karpenter/, so that the tests need no Go module cache (gpufleet.testing.cluster.karpenter).
crds() {
    local dest="$BIN/../crds/karpenter"
    if [ -f "$dest/.complete" ]; then
        echo "kube: karpenter CRDs present"
        return
    fi
    local start=$SECONDS src
    src=$(cd "$HERE/karpenter" && GOTOOLCHAIN=auto go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
    [ -n "$src" ] || { echo "kube: sigs.k8s.io/karpenter is not in the module cache" >&2; exit 1; }
    rm -rf "$dest" && mkdir -p "$dest"
    cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$dest/"
    chmod 644 "$dest"/*.yaml
    touch "$dest/.complete"
    echo "kube: copied karpenter CRDs in $((SECONDS - start)) s"
}
crds

# helm, for the chart's tests (charts/gpufleet): in a directory of its own version, so that the
# control plane's cache key (and its 11-17 minute build) does not depend on it.
HELM_BIN="${GPUFLEET_KUBE_CACHE:-$HOME/.cache/gpufleet/kube}/helm-v${HELM_VERSION}/bin"
mkdir -p "$HELM_BIN"
if [ -x "$HELM_BIN/helm" ]; then
    echo "kube: helm present"
else
    echo "kube: building helm (helm.sh/helm/v3/cmd/helm v$HELM_VERSION) ..."
    start=$SECONDS
    # As helm's Makefile: the default Kubernetes version (template, lint) is that of its client-go.
    client_go=$(cd "$HERE/helm" && go list -f '{{.Version}}' -m k8s.io/client-go)  # v0.N.x -> 1.N
    k8s_minor=$(echo "$client_go" | cut -d. -f2)
    helm_ldflags="-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        helm_ldflags="$helm_ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
    done
    (cd "$HERE/helm" && go build -o "$HELM_BIN/helm.partial" -ldflags "-s -w $helm_ldflags" helm.sh/helm/v3/cmd/helm)
    mv "$HELM_BIN/helm.partial" "$HELM_BIN/helm"
    echo "kube: built helm in $((SECONDS - start)) s"
fi
echo "kube: control plane ready in $((SECONDS - total)) s"
echo "$BIN"
