#!/usr/bin/env bash
# The format check (scripts/test.sh's first phase; docs/building.md, "Format"): every C++ line
# added or changed since the commit in scripts/format_base is as clang-format 14 writes it with
# the repository's .clang-format. The lines older than that commit are left as they are (the tree
# was formatted by hand before the check existed): each change formats what it touches, so the
# formatted part grows without a whole-tree reformat.
#   scripts/check_format.sh          check (exit 1 and print the diff on a badly formatted line)
#   scripts/check_format.sh --fix    format the changed lines in place (git clang-format)
# Changes count once committed or staged (git diff-index against the base): an untracked file is
# checked after `git add`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "format check skipped: $(pwd) is not a git checkout (the check compares with a commit)"
  exit 0
fi
for tool in clang-format-14 git-clang-format-14; do
  command -v "$tool" >/dev/null || { echo "FAIL: '$tool' is missing: run scripts/setup.sh (Debian's clang-format)" >&2; exit 1; }
done
base=$(grep -v '^#' scripts/format_base | head -n 1)
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "FAIL: scripts/format_base names $base, which this checkout does not have (a shallow clone?)" >&2
  exit 1
fi
args=(--binary clang-format-14 --extensions cpp,hpp,h,cc,cxx "$base" -- xgrad tests examples benchmarks fuzz)
if [[ ${1:-} == --fix ]]; then
  exec git-clang-format-14 "${args[@]}"
fi
out=$(git-clang-format-14 --diff "${args[@]}")
case $out in
  "no modified files to format" | "clang-format did not modify any files" | "")
    echo "format check: the C++ lines changed since ${base:0:12} are formatted (.clang-format)"
    ;;
  *)
    printf '%s\n' "$out"
    echo "FAIL: the lines above, changed since ${base:0:12}, are not formatted as .clang-format says:" \
         "run scripts/check_format.sh --fix (git clang-format) and commit the result" >&2
    exit 1
    ;;
esac
