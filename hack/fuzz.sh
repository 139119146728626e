#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME (10s unless set),
# one after the other: `go test -fuzz` takes one target per run. The
# targets are found in the code, so that a new one runs without being
# listed anywhere; each starts from its f.Add seeds and the corpus checked
# in under its package's testdata/fuzz/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
fuzztime=${FUZZTIME:-10s}

# "./dir/ FuzzXxx" for each `func FuzzXxx(f *testing.F)` in the test
# files of the module's packages (go list leaves out nested modules, such
# as tools, and testdata folders).
mod=$("$GO" list -m)
targets=()
while read -r pkg file; do
  rel=${pkg#"$mod"} rel=${rel#/}
  while read -r name; do
    targets+=("./${rel:+$rel/} $name")
  done < <(grep -oE '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' "$file" | sed -E 's/^func ([^(]*).*/\1/')
done < <("$GO" list -f '{{$p := .ImportPath}}{{$d := .Dir}}{{range .TestGoFiles}}{{$p}} {{$d}}/{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$p}} {{$d}}/{{.}}{{"\n"}}{{end}}' ./...)
if ((${#targets[@]} == 0)); then
  echo "no fuzz targets found" >&2
  exit 1
fi

start=$SECONDS
for t in "${targets[@]}"; do
  pkg=${t% *} name=${t##* }
  printf -- '--- %s %s (%s)\n' "$name" "$pkg" "$fuzztime"
  "$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg"
done
printf -- '--- %d fuzz targets in %ss\n' "${#targets[@]}" "$((SECONDS - start))"
