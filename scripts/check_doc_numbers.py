#!/usr/bin/python3
"""Every measured number the docs quote comes from one table: this check fails when a copy drifts.

The sources, each written by the run that measured it:
  - benchmarks/results.md, written by benchmarks/compare.py: the training-step tables (fp32 and
    bf16). docs/performance.md's summary table and README's headline ("up to N% of the machine's
    fastest gemm, A-Bx faster than PyTorch") are read against it, rounded as they are printed.
  - docs/examples.md: each example's measured run (its own section, with the command). README's
    sentences about train_masked_chars and train_gpt, and the time estimates of its list of
    programs, are read against it.
A new copy of a number in README or docs/performance.md gets a line below, or the copy is replaced
by a link to its source.

    /usr/bin/python3 scripts/check_doc_numbers.py [--root DIR]     (ctest doc_numbers)
"""

import argparse
import decimal
import os
import re
import sys

errors = []


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def find(text, pattern, where):
    """The groups of pattern's first match in text (whitespace in the pattern matches any run)."""
    m = re.search(pattern.replace(" ", r"\s+"), text)
    if not m:
        errors.append(f"{where}: expected a sentence matching /{pattern}/; none found")
        return None
    return m.groups()


def rounded(source, decimals):
    """source rounded half up (66.5 -> 67, as the docs print it) to decimals places, as text."""
    step = decimal.Decimal(1).scaleb(-decimals)
    return str(decimal.Decimal(str(source)).quantize(step, rounding=decimal.ROUND_HALF_UP))


def same(copy, source, where, what):
    """copy (as printed) equals source rounded to copy's decimals."""
    decimals = len(copy.split(".")[1]) if "." in copy else 0
    if rounded(source, decimals) != copy:
        errors.append(f"{where}: {what} reads {copy}, its source says {source} (rounded: "
                      f"{rounded(source, decimals)})")


def same_significant(copy, source, where, what):
    """copy equals source to copy's significant digits (0.046 vs 0.0461, 149 vs 149.2)."""
    digits = len(copy.replace(".", "").lstrip("0"))
    if float(f"{float(source):.{digits}g}") != float(copy):
        errors.append(f"{where}: {what} reads {copy}, its source says {source}")


def table(text, header_start, where):
    """Rows (lists of cells) of the markdown table whose header line starts with header_start."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    errors.append(f"{where}: no table whose header starts with '{header_start}'")
    return []


def number(cell):
    m = re.match(r"[\d.]+", cell)
    return m.group(0).rstrip(".") if m else None


def check_benchmarks(root):
    results = read(root, "benchmarks/results.md")
    fp32 = {r[0]: r for r in table(results, "| config | B N d h ff L | xgrad ms", "benchmarks/results.md")}
    bf16 = {r[0]: r for r in table(results, "| config | xgrad bf16 ms", "benchmarks/results.md")}
    if not fp32:
        return
    speedups = [float(number(r[4])) for r in fp32.values()]
    limits = [float(number(r[6])) for r in fp32.values()]

    readme = read(root, "README.md")
    got = find(readme, r"runs at up to (\d+)% of the machine's fastest gemm, ([\d.]+)-([\d.]+)x faster", "README.md")
    if got:
        same(got[0], max(limits), "README.md", "the best % of the gemm limit")
        same(got[1], min(speedups), "README.md", "the smallest speedup over PyTorch")
        same(got[2], max(speedups), "README.md", "the largest speedup over PyTorch")

    perf = read(root, "docs/performance.md")
    where = "docs/performance.md"
    for row in table(perf, "| config (B N d h ff L) | xgrad fp32 ms", where):
        config = row[0].split(" ")[0]
        if config not in fp32:
            errors.append(f"{where}: config {config} is not in benchmarks/results.md")
            continue
        src, what = fp32[config], f"{config}: "
        same_significant(number(row[1]), number(src[2]), where, what + "xgrad fp32 ms")
        same_significant(number(row[2]), number(src[3]), where, what + "PyTorch fp32 ms")
        same_significant(number(row[3]), number(src[4]), where, what + "speedup")
        same(number(row[4]), number(src[6]), where, what + "% of limit")
        if config in bf16:
            b = bf16[config]
            same_significant(number(row[5]), number(b[1]), where, what + "xgrad bf16 ms")
            same_significant(number(row[6]), number(b[2]), where, what + "PyTorch bf16 ms")
            same_significant(number(row[7]), number(b[4]), where, what + "bf16 vs xgrad fp32")


def check_examples(root):
    readme, examples = read(root, "README.md"), read(root, "docs/examples.md")
    # A program both lists name gets the same estimate: "(~4 min)" in its comment.
    def estimates(text):
        return {m.group(1): m.group(2) for m in
                re.finditer(r"^build/release/examples/(\w+) +#[^(\n]*(\([^)]*\))", text, re.M)}
    ours, theirs = estimates(readme), estimates(examples)
    if not ours or not theirs:
        errors.append("README.md / docs/examples.md: no list of example programs with estimates")
    for program in sorted(set(ours) & set(theirs)):
        if ours[program] != theirs[program]:
            errors.append(f"README.md: {program}'s estimate {ours[program]} differs from docs/examples.md's "
                          f"{theirs[program]}")

    src = find(examples, r"([\d.]+)% held-out masked-letter accuracy against an? ([\d.]+)% baseline", "docs/examples.md")
    got = find(readme, r"reaches ([\d.]+)% held-out masked-letter accuracy against an? ([\d.]+)% baseline", "README.md")
    if src and got:
        same(got[0], src[0], "README.md", "train_masked_chars' accuracy")
        same(got[1], src[1], "README.md", "train_masked_chars' baseline")

    src = find(examples, r"held-out loss ([\d.]+) nats per character \(([\d.]+) bits\)", "docs/examples.md")
    got = find(readme, r"held-out loss of \*\*([\d.]+) nats per character \(([\d.]+) bits\)\*\*", "README.md")
    if src and got:
        same(got[0], src[0], "README.md", "train_gpt's held-out nats per character")
        same(got[1], src[1], "README.md", "train_gpt's held-out bits per character")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    check_benchmarks(args.root)
    check_examples(args.root)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        print(f"doc numbers: {len(errors)} copies differ from their source", file=sys.stderr)
        return 1
    print("doc numbers: every copy checked agrees with its source (benchmarks/results.md, docs/examples.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
