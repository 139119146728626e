#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries that internal/kubetest runs
# (through controller-runtime's envtest) from the Go module proxy, into DIR.
# Does nothing when both are already there. Called by `make test-assets`.
#
# Each binary has its own module here (kube-apiserver/, etcd/) so that neither
# k8s.io/kubernetes nor etcd's server enters the main module's graph, and so
# that the two do not move each other's dependency versions.
set -euo pipefail

dir=${1:?usage: build.sh DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

have() { [[ -x $dir/kube-apiserver && -x $dir/etcd ]]; }
have && exit 0

mkdir -p "$dir"
# Two makes at once (or an interrupted one) never leave half a binary behind.
exec 9>"$dir/.lock"
flock 9
have && exit 0

version() { awk -v m="$1" '$1 == m { print $2; exit }' "$2"; }
k8s=$(version k8s.io/kubernetes "$here/kube-apiserver/go.mod")
etcd=$(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")

# Static binaries, no C toolchain needed; the main module's go.work (if one
# is ever added) must not leak into these builds.
export CGO_ENABLED=0 GOWORK=off
start=$SECONDS

build() { # module package output [go build flags...]
  local mod=$1 pkg=$2 out=$3
  shift 3
  [[ -x $dir/$out ]] && return 0
  echo "test-assets: building $out from $pkg ($mod) ..."
  (cd "$here/$mod" && go build -trimpath "$@" -o "$dir/.$out.tmp" "$pkg") || return
  mv -f "$dir/.$out.tmp" "$dir/$out"
}

# Both at once: one's downloads overlap the other's compiling.
build etcd go.etcd.io/etcd/server/v3 etcd -ldflags='-s -w' &
etcd_pid=$!
minor=${k8s#v1.}
minor=${minor%%.*}
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver -ldflags="-s -w \
  -X k8s.io/component-base/version.gitVersion=$k8s \
  -X k8s.io/component-base/version.gitMajor=1 \
  -X k8s.io/component-base/version.gitMinor=$minor \
  -X k8s.io/component-base/version.gitTreeState=clean" || { wait "$etcd_pid"; exit 1; }
wait "$etcd_pid"

echo "test-assets: kube-apiserver $k8s and etcd $etcd built into $dir in $((SECONDS - start))s"
