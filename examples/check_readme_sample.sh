#!/usr/bin/env bash
# Fails unless every non-blank line of README.md's first C++ block appears, in the same order, in
# examples/readme_sample.cpp (which ctest builds and runs), so the README's code stays real.
#   check_readme_sample.sh README.md examples/readme_sample.cpp
set -euo pipefail
awk '
  NR == FNR {
    if (!done && /^```cpp/) { inside = 1; next }
    if (inside && /^```/) { inside = 0; done = 1 }
    if (inside && NF) lines[++n] = $0
    next
  }
  matched < n && $0 == lines[matched + 1] { matched++ }
  END {
    if (n == 0) { print "no ```cpp block in " ARGV[1]; exit 1 }
    if (matched < n) { print "README line not found (in order) in " ARGV[2] ": " lines[matched + 1]; exit 1 }
    print "all " n " lines of the README sample are in " ARGV[2]
  }
' "$1" "$2"
