#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries that internal/kubetest runs
# (through controller-runtime's envtest), and the coredns that
# internal/dnstest runs, from the Go module proxy, into DIR. Does nothing
# when all three are already there. Called by `make test-assets`.
#
# Each binary has its own module here (kube-apiserver/, etcd/, coredns/) so
# that neither k8s.io/kubernetes nor etcd's server nor CoreDNS enters the main
# module's graph, and so that none moves another's dependency versions.
#
# DIR is keyed by the kube-apiserver and etcd versions (the Makefile names
# it). coredns is built into a sibling folder keyed by its own version,
# DIR/../coredns-VERSION, and DIR/coredns is a symbolic link to it: one
# folder (KUBEBUILDER_ASSETS) still holds all three, a CoreDNS bump builds
# CoreDNS alone, and a DIR from before CoreDNS was added just gets the link.
set -euo pipefail

dir=${1:?usage: build.sh DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

version() { awk -v m="$1" '$1 == m { print $2; exit }' "$2"; }
k8s=$(version k8s.io/kubernetes "$here/kube-apiserver/go.mod")
etcd=$(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
coredns=$(version github.com/coredns/coredns "$here/coredns/go.mod")
coredns_dir=$(dirname "$dir")/coredns-${coredns#v}
coredns_link=../coredns-${coredns#v}/coredns

have() {
  [[ -x $dir/kube-apiserver && -x $dir/etcd && -x $dir/coredns && $(readlink "$dir/coredns") == "$coredns_link" ]]
}
have && exit 0

mkdir -p "$dir" "$coredns_dir"
# Two makes at once (or an interrupted one) never leave half a binary behind.
exec 9>"$dir/.lock"
flock 9
have && exit 0

# Static binaries, no C toolchain needed; the main module's go.work (if one
# is ever added) must not leak into these builds.
export CGO_ENABLED=0 GOWORK=off
start=$SECONDS
built=()

build() { # module package output-dir output [go build flags...]
  local mod=$1 pkg=$2 out_dir=$3 out=$4
  shift 4
  [[ -x $out_dir/$out ]] && return 0
  echo "test-assets: building $out from $pkg ($mod) ..."
  (cd "$here/$mod" && go build -trimpath "$@" -o "$out_dir/.$out.tmp" "$pkg") || return
  mv -f "$out_dir/.$out.tmp" "$out_dir/$out"
}

# coredns's folder may be shared by several DIRs (after a kube-apiserver or
# etcd bump): it has a lock of its own.
build_coredns() {
  (
    exec 8>"$coredns_dir/.lock"
    flock 8
    build coredns github.com/coredns/coredns "$coredns_dir" coredns -ldflags='-s -w'
  ) || return
  ln -sfn "$coredns_link" "$dir/.coredns.tmp"
  mv -fT "$dir/.coredns.tmp" "$dir/coredns"
}

# All at once: one's downloads overlap another's compiling.
pids=()
if [[ ! -x $dir/etcd ]]; then
  build etcd go.etcd.io/etcd/server/v3 "$dir" etcd -ldflags='-s -w' &
  pids+=($!)
  built+=("etcd $etcd")
fi
if [[ ! -x $dir/coredns || $(readlink "$dir/coredns") != "$coredns_link" ]]; then
  if [[ -x $coredns_dir/coredns ]]; then
    built+=("coredns $coredns (linked)")
  else
    built+=("coredns $coredns")
  fi
  build_coredns &
  pids+=($!)
fi
failed=0
if [[ ! -x $dir/kube-apiserver ]]; then
  minor=${k8s#v1.}
  minor=${minor%%.*}
  build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$dir" kube-apiserver -ldflags="-s -w \
    -X k8s.io/component-base/version.gitVersion=$k8s \
    -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=$minor \
    -X k8s.io/component-base/version.gitTreeState=clean" || failed=1
  built+=("kube-apiserver $k8s")
fi
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
((failed == 0)) || exit 1

printf -v list '%s, ' "${built[@]}"
echo "test-assets: ${list%, } built into $dir in $((SECONDS - start))s"
