#!/usr/bin/env python3
"""Writes the ```cpp blocks of a Markdown file into one C++ translation unit, which the test suite
compiles (ctest docs_snippets, tests/docs/CMakeLists.txt), so that every example in README.md and
docs/*.md compiles against the library as it is.

A block that holds `int main(` is a whole program and is copied as it is (one per file). Any other
block is marked by an HTML comment on the line before its fence (invisible on GitHub):

  <!-- compile: snippet -->           statements: compiled as the body of a function; its
                                      #include lines go to the top of the file (every block
                                      sees <xgrad/xgrad.hpp>)
  <!-- compile: snippet               the same, after the declarations it takes as given (the
  xgrad::nn::Linear<float> model(3, 1);   model, the inputs of the text around it), one per line
  -->
  <!-- compile: skip (why) -->        not compiled; the reason says why (e.g. it is pseudo-code)

A block without a mark, and a mark without a block, are errors, so that no example is left out.

A C++ header's comment marks its examples on the comment line before them:

  // compile: snippet                   the comment lines right after it that are indented by two
  //   xgrad::Tensor<float> x = ...;    spaces or more are statements, compiled as the body of a
  //   ...                              function in namespace xgrad (as the header's own code reads
                                        them), after the header and <xgrad/xgrad.hpp>
  // compile: snippet given: DECLS;     the same, after the declarations it takes as given (the
                                        model, the loss, ...), on the mark's line
  // compile: skip (why)                not compiled (a fragment, pseudo-code)

  extract_doc_snippets.py FILE.md OUT.cpp
  extract_doc_snippets.py xgrad/.../FILE.hpp OUT.cpp
"""
import re
import sys

FENCE = re.compile(r"^```(cpp|c\+\+)\s*$")
MARK = re.compile(r"<!--\s*compile:\s*(snippet|skip)\b(.*?)(-->|$)", re.S)


def blocks(lines):
    """(fence line number, mark text or None, code lines) for each ```cpp block."""
    i = 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                raise SystemExit(f"line {start + 1}: a ```cpp block that never ends")
            # The mark: the HTML comment that ends on the line right before the fence.
            mark = None
            k = start - 1
            if k >= 0 and lines[k].rstrip().endswith("-->"):
                while k >= 0 and "<!--" not in lines[k]:
                    k -= 1
                mark = "\n".join(lines[k:start])
            yield start + 1, mark, lines[start + 1:j]
            i = j
        i += 1


HEADER_MARK = re.compile(r"^\s*//\s*compile:\s*(snippet|skip)\b(.*)$")
HEADER_CODE = re.compile(r"^\s*//(  +\S.*)$")
HEADER_BLANK = re.compile(r"^\s*//\s*$")


def header_main(header, out):
    """The marked examples of a header's comments, each the body of a function."""
    lines = open(header, encoding="utf-8").read().split("\n")
    functions, includes, errors = [], [], []
    for n, line in enumerate(lines):
        m = HEADER_MARK.match(line)
        if not m:
            continue
        where = f"{header}:{n + 1}"
        if m.group(1) == "skip":
            if not m.group(2).strip().startswith("("):
                errors.append(f"{where}: compile: skip needs its reason in parentheses")
            continue
        code, j = [], n + 1
        while j < len(lines):
            c = HEADER_CODE.match(lines[j])
            if c:
                code.append(c.group(1))
            elif not (HEADER_BLANK.match(lines[j]) and j + 1 < len(lines) and HEADER_CODE.match(lines[j + 1])):
                break
            else:
                code.append("")
            j += 1
        if not code:
            errors.append(f"{where}: a compile mark with no example right after it (comment lines indented by "
                          "two spaces or more)")
            continue
        indent = min(len(l) - len(l.lstrip()) for l in code if l.strip())
        code = [l[indent:] for l in code]
        includes += [l.strip() for l in code if l.lstrip().startswith("#include")]
        body = [l for l in code if not l.lstrip().startswith("#include")]
        given = m.group(2).strip()
        if given and not given.startswith("given:"):
            errors.append(f"{where}: after 'compile: snippet', only 'given: DECLARATIONS' may follow")
            continue
        k = len(functions)
        functions.append("\n".join([f"[[maybe_unused]] void snippet_{k}() {{  // {where}",
                                     f'#line {n + 1} "{header}"', given[len("given:"):].strip(),
                                     f'#line {n + 2} "{header}"'] + body + ["}"]))
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    text = [f"// Generated by scripts/extract_doc_snippets.py from {header}: do not edit.",
            "#include <xgrad/xgrad.hpp>", f"#include <{header}>", *dict.fromkeys(includes), "",
            "namespace xgrad {"]
    text += [f"namespace {{\n{f}\n}}  // namespace\n" for f in functions]
    text += ["}  // namespace xgrad"]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(text) + "\n")
    return 0


def main():
    md, out = sys.argv[1], sys.argv[2]
    if md.endswith((".hpp", ".h")):
        return header_main(md, out)
    lines = open(md, encoding="utf-8").read().split("\n")
    includes, programs, functions, errors = [], [], [], []
    # A mark opens its line; the text may quote one inline (docs/building.md does).
    marks = [n + 1 for n, l in enumerate(lines) if l.lstrip().startswith("<!-- compile:")]
    used_marks = set()
    for number, mark, code in blocks(lines):
        where = f"{md}:{number}"
        is_program = any(re.match(r"\s*int\s+main\s*\(", l) for l in code)
        if mark is not None:
            m = MARK.search(mark)
            if not m:
                errors.append(f"{where}: the comment before the block is not a compile mark")
                continue
            used_marks.add(number - 1 - mark.count("\n"))
            kind = m.group(1)
        else:
            kind = "program" if is_program else None
        if kind is None:
            errors.append(f"{where}: a ```cpp block that is not a program needs a mark: "
                          "<!-- compile: snippet --> or <!-- compile: skip (why) --> on the line before")
            continue
        if kind == "skip":
            if not m.group(2).strip().startswith("("):
                errors.append(f"{where}: compile: skip needs its reason in parentheses")
            continue
        body = [l for l in code if not l.lstrip().startswith("#include")]
        includes += [l.strip() for l in code if l.lstrip().startswith("#include")]
        line_directive = f'#line {number + 1} "{md}"'
        if kind == "program":
            if programs:
                errors.append(f"{where}: a second program in one file (mark one as a snippet or skip it)")
                continue
            programs.append("\n".join([line_directive] + code))
        else:
            given = [l for l in m.group(2).split("\n") if l.strip()]
            n = len(functions)
            functions.append("\n".join([f"[[maybe_unused]] void snippet_{n}() {{  // {where}"] + given +
                                       [line_directive] + body + ["}"]))
    for n in marks:
        if n not in used_marks:
            errors.append(f"{md}:{n}: a compile mark with no ```cpp block right after it")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    unique = list(dict.fromkeys(includes))
    # Every block sees the umbrella header, as the text around the examples assumes.
    text = [f"// Generated by scripts/extract_doc_snippets.py from {md}: do not edit.",
            "#include <xgrad/xgrad.hpp>", *unique, ""]
    text += [f"namespace {{\n{f}\n}}  // namespace\n" for f in functions]
    text += programs
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
