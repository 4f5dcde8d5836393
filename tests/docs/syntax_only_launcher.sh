#!/bin/sh
# The compiler launcher of xgrad_docs_snippets: runs the -fsyntax-only check, then creates the
# (empty) object file named after -o, so that make sees the file checked and checks it again only
# when it or a header it includes changes (the compiler still writes its dependency file).
# Without it every docs_snippets run compiled every file again (185 s of each CI run).
set -e
"$@"
out=
prev=
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then out=$arg; fi
  prev=$arg
done
if [ -n "$out" ]; then : >"$out"; fi
