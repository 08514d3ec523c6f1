#!/usr/bin/env python3
"""Import circles between the files of one crate (issue 34: "no import
circle between files of `cli`").

Reads every `crate::name` reference in CRATE/src/*.rs (a `use` or a path in
code, comments and strings left out) as an edge from that file to
`name.rs`. The crate root (main.rs, lib.rs) is left out: it declares every
module and dispatches to them, so it sits above all of them, and what the
others take from it (`crate::Failure`) is its re-exports. Prints each
strongly connected component of more than one file (Tarjan) and exits 1 if
there is one, so CI can keep a crate free of them.

Usage: python3 scripts/import-cycles.py [CRATE_DIR ...]  (default crates/cli)
"""
import os
import re
import sys


def strip_comments(text):
    """Drops // and /* */ comments (doc comments name paths as prose) and
    string literals, which can hold `crate::` too."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and i + 2 < n and (text[i + 2] == "'" or text[i + 1] == "\\"):
            # a char literal ('"', '\n'); lifetimes ('a) are left alone
            j = text.find("'", i + 2 if text[i + 1] == "\\" else i + 1)
            i = n if j < 0 else j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def group_heads(text, start):
    """The first names of each path in a `{a::x, b, c::{y, z}}` group whose
    `{` is at `start`."""
    depth, heads, expect = 0, [], True
    for m in re.finditer(r"[{},]|[A-Za-z_][A-Za-z0-9_]*", text[start:]):
        tok = m.group(0)
        if tok == "{":
            depth += 1
            expect = depth == 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                break
        elif tok == ",":
            expect = depth == 1
        elif expect:
            heads.append(tok)
            expect = False
    return heads


def edges_of(path, modules):
    text = strip_comments(open(path, encoding="utf-8").read())
    heads = []
    for m in re.finditer(r"\bcrate::(\{|[A-Za-z_][A-Za-z0-9_]*)", text):
        if m.group(1) == "{":
            heads.extend(group_heads(text, m.start(1)))
        else:
            heads.append(m.group(1))
    me = os.path.splitext(os.path.basename(path))[0]
    return {h for h in heads if h in modules and h != me}


def components(graph):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [c for c in comps if len(c) > 1]


def check(crate):
    src = os.path.join(crate, "src")
    files = sorted(f for f in os.listdir(src) if f.endswith(".rs"))
    modules = {os.path.splitext(f)[0] for f in files} - {"lib", "main"}
    graph = {m: edges_of(os.path.join(src, m + ".rs"), modules) for m in modules}
    comps = components(graph)
    for c in comps:
        print(f"{crate}: import circle of {len(c)} files: {', '.join(c)}")
        for v in c:
            inside = sorted(graph[v] & set(c))
            print(f"  {v}.rs -> {', '.join(inside)}")
    if not comps:
        print(f"{crate}: no import circle between its {len(modules)} module files")
    return not comps


def main():
    crates = sys.argv[1:] or ["crates/cli"]
    ok = all([check(c) for c in crates])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
