#!/usr/bin/env bash
# Fails when git tracks a build output: a file over 1 MiB, or an executable
# binary (ELF, Mach-O, PE, or a Go archive). Scripts are text and pass.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=$((1 << 20))
bad=()
while IFS= read -r -d '' f; do
  [[ -f $f ]] || continue # deleted in the work tree
  size=$(stat -c %s "$f")
  if ((size > limit)); then
    bad+=("$f: $size bytes (over 1 MiB)")
    continue
  fi
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case $magic in
    7f454c46) bad+=("$f: ELF binary") ;;
    feedface | feedfacf | cefaedfe | cffaedfe | cafebabe) bad+=("$f: Mach-O binary") ;;
    4d5a*) bad+=("$f: PE binary") ;;
    213c6172) bad+=("$f: archive") ;;
  esac
done < <(git ls-files -z)

if ((${#bad[@]})); then
  printf 'tracked build outputs (remove them and add them to .gitignore):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
