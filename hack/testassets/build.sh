#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries that internal/kubetest runs
# (through controller-runtime's envtest), the kubectl of the same version
# that the operator guide's commands are run with, and the coredns that
# internal/dnstest runs, from the Go module proxy, into DIR; with --istiod,
# also the istiod (pilot-discovery) that internal/istiodtest runs. Does
# nothing when all of them are already there. Called by `make test-assets`
# and `make test-assets-istiod`.
#
# Each binary has its own module here (kube-apiserver/, which builds
# kubectl too, etcd/, coredns/, istiod/) so that neither k8s.io/kubernetes nor etcd's server nor CoreDNS
# nor istio.io/istio's graph enters the main module's, and so that none
# moves another's dependency versions.
#
# DIR is keyed by the kube-apiserver and etcd versions (the Makefile names
# it). coredns is built into a sibling folder keyed by its own version,
# DIR/../coredns-VERSION, and DIR/coredns is a symbolic link to it: one
# folder (KUBEBUILDER_ASSETS) still holds them all, a CoreDNS bump builds
# CoreDNS alone, and a DIR from before CoreDNS was added just gets the link.
# istiod goes the same way, into DIR/../istiod-VERSION, linked as
# DIR/pilot-discovery. It is optional because it is the longest build of
# all (about 9.5 CPU-minutes cold, against about 22 for the other three):
# `make test` does without it and its tests skip.
set -euo pipefail

want_istiod=0
if [[ ${1:-} == --istiod ]]; then
  want_istiod=1
  shift
fi
dir=${1:?usage: build.sh [--istiod] DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

version() { awk -v m="$1" '$1 == m { print $2; exit }' "$2"; }
k8s=$(version k8s.io/kubernetes "$here/kube-apiserver/go.mod")
etcd=$(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
coredns=$(version github.com/coredns/coredns "$here/coredns/go.mod")
coredns_dir=$(dirname "$dir")/coredns-${coredns#v}
coredns_link=../coredns-${coredns#v}/coredns
istiod=$(version istio.io/istio "$here/istiod/go.mod")
istiod_dir=$(dirname "$dir")/istiod-${istiod#v}
istiod_link=../istiod-${istiod#v}/pilot-discovery

have_coredns() { [[ -x $dir/coredns && $(readlink "$dir/coredns") == "$coredns_link" ]]; }
have_istiod() { ((!want_istiod)) || [[ -x $dir/pilot-discovery && $(readlink "$dir/pilot-discovery") == "$istiod_link" ]]; }
have() {
  [[ -x $dir/kube-apiserver && -x $dir/kubectl && -x $dir/etcd ]] && have_coredns && have_istiod
}
have && exit 0

mkdir -p "$dir" "$coredns_dir"
((!want_istiod)) || mkdir -p "$istiod_dir"
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

# istiod's folder, like coredns's, may be shared by several DIRs. The
# version stamps are what `pilot-discovery version` and istiod's
# istio_build metric report: the pinned module version and its commit.
build_istiod() {
  (
    exec 7>"$istiod_dir/.lock"
    flock 7
    build istiod istio.io/istio/pilot/cmd/pilot-discovery "$istiod_dir" pilot-discovery -ldflags="-s -w \
      -X istio.io/istio/pkg/version.buildVersion=$istiod \
      -X istio.io/istio/pkg/version.buildGitRevision=${istiod##*-} \
      -X istio.io/istio/pkg/version.buildTag=$istiod \
      -X istio.io/istio/pkg/version.buildStatus=Clean"
  ) || return
  ln -sfn "$istiod_link" "$dir/.pilot-discovery.tmp"
  mv -fT "$dir/.pilot-discovery.tmp" "$dir/pilot-discovery"
}

# All at once: one's downloads overlap another's compiling.
pids=()
if [[ ! -x $dir/etcd ]]; then
  build etcd go.etcd.io/etcd/server/v3 "$dir" etcd -ldflags='-s -w' &
  pids+=($!)
  built+=("etcd $etcd")
fi
if ! have_coredns; then
  if [[ -x $coredns_dir/coredns ]]; then
    built+=("coredns $coredns (linked)")
  else
    built+=("coredns $coredns")
  fi
  build_coredns &
  pids+=($!)
fi
if ! have_istiod; then
  if [[ -x $istiod_dir/pilot-discovery ]]; then
    built+=("istiod $istiod (linked)")
  else
    built+=("istiod $istiod")
  fi
  build_istiod &
  pids+=($!)
fi
failed=0
# kube-apiserver, then kubectl: one module, so the second reuses the
# first's compiled packages.
minor=${k8s#v1.}
minor=${minor%%.*}
for bin in kube-apiserver kubectl; do
  [[ ! -x $dir/$bin ]] || continue
  build kube-apiserver "k8s.io/kubernetes/cmd/$bin" "$dir" "$bin" -ldflags="-s -w \
    -X k8s.io/component-base/version.gitVersion=$k8s \
    -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=$minor \
    -X k8s.io/component-base/version.gitTreeState=clean" || failed=1
  built+=("$bin $k8s")
done
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
((failed == 0)) || exit 1

printf -v list '%s, ' "${built[@]}"
echo "test-assets: ${list%, } built into $dir in $((SECONDS - start))s"
