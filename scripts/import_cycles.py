#!/usr/bin/env python3
"""Fails if two source files of src/ import each other, directly or through others.

A file "imports" another when it names a path into it: `use crate::a::b::C`,
`crate::a::b::f(...)`, `super::x` (resolved from the file's module). A path is
mapped to the deepest module file that exists (src/a/b.rs or src/a/b/mod.rs). A
module file's use of its own children counts as well (`use child::X`,
`child::f()`, `pub use child::{A, B}`): a child that uses its parent while the
parent uses it is a circle like any other. A path to an item a module re-exports
from a child leads to that child. Usage: import_cycles.py [SRC | --self-test]. Prints each cycle
found."""
import os, re, sys

def self_test():
    """The check on two crates of its own: a parent and child that use each other
    is a circle; a parent that only re-exports its child is not."""
    import subprocess, tempfile
    cases = {
        "child uses its parent": ("mod b;\npub use b::X;\npub struct Y;\n", "use super::Y;\npub struct X(Y);\n", 1),
        "child uses a sibling": ("mod b;\nmod c;\npub use b::X;\n", "use super::c::Y;\npub struct X(Y);\n", 0),
    }
    for name, (parent, child, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "a"))
            for path, text in [("lib.rs", "pub mod a;\n"), ("a/mod.rs", parent), ("a/b.rs", child), ("a/c.rs", "pub struct Y;\n")]:
                with open(os.path.join(d, path), "w") as f:
                    f.write(text)
            got = subprocess.run([sys.executable, __file__, d], capture_output=True).returncode
            if got != want:
                sys.exit(f"import_cycles self-test failed: {name}: exit {got}, wanted {want}")
    print("import_cycles: self-test passed")


if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
    self_test()
    sys.exit(0)
SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")

def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel

files = {}
for root, _, names in os.walk(SRC):
    for n in names:
        if n.endswith(".rs"):
            p = os.path.join(root, n)
            files[tuple(module_of(p))] = p

# Items a module file re-exports from its children (`pub use child::{A, B}`): a
# path naming them leads to the child that defines them.
reexports = {}
for mod, p in files.items():
    text = open(p).read()
    for m in re.finditer(r"pub use ([a-z_][a-z0-9_]*)::\{([^}]*)\};", text):
        for item in m.group(2).split(","):
            reexports[(mod, item.strip().split(" as ")[-1])] = mod + (m.group(1),)
    for m in re.finditer(r"pub use ([a-z_][a-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*);", text):
        reexports[(mod, m.group(2))] = mod + (m.group(1),)

def resolve(parts):
    """The deepest existing module for a crate path (through re-exports)."""
    for k in range(len(parts), 0, -1):
        if tuple(parts[:k]) in files:
            mod = tuple(parts[:k])
            if k < len(parts) and (mod, parts[k]) in reexports:
                target = reexports[(mod, parts[k])]
                if target in files:
                    return target
            return mod
    return None

path_re = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\*)")
group_re = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^}]*)\}")
edges = {m: set() for m in files}
for mod, p in files.items():
    text = open(p).read()
    text = re.sub(r"//[^\n]*", "", text)
    # `pub(in crate::a)` names a visibility, not an import.
    text = re.sub(r"pub\(in [^)]*\)", "pub", text)
    # The file's tests module may use its parent freely.
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", text)[0]
    here = list(mod)
    is_mod_rs = os.path.basename(p) in ("mod.rs", "lib.rs", "main.rs")
    base_for_super = here  # the module itself; `super` is its parent
    def add(root, rest):
        parts = [x for x in rest.split("::") if x and x != "*"]
        if root == "crate":
            full = parts
        else:
            b = list(base_for_super)
            while parts and parts[0] == "super":
                parts = parts[1:]
                b = b[:-1]
            full = b[:-1] + parts if root == "super" else parts
        target = resolve(full)
        if target and target != tuple(mod):
            edges[mod].add(target)
    for m in group_re.finditer(text):
        for item in m.group(3).split(","):
            item = item.strip().split(" as ")[0]
            if item and item != "self":
                add(m.group(1), m.group(2) + "::" + item.replace("::", "::"))
            elif item == "self":
                add(m.group(1), m.group(2))
    for m in path_re.finditer(text):
        add(m.group(1), m.group(2))
    # A module file's uses of its own children (declared `mod child;`).
    kids = set(re.findall(r"\bmod ([a-z_][a-z0-9_]*)\s*;", text))
    for k in kids:
        for m in re.finditer(r"(?<![:\w])(?:self::)?" + k + r"((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{[^}]*\})", text):
            rest = m.group(1)
            if rest.startswith("::{"):
                for item in rest[3:-1].split(","):
                    item = item.strip().split(" as ")[0]
                    add("crate", "::" + "::".join(here + [k]) + ("::" + item if item and item != "self" else ""))
            else:
                add("crate", "::" + "::".join(here + [k]) + rest)
# Cycles: strongly connected components of more than one file.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def strong(v):
    index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            strong(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1:
            sccs.append(comp)
for v in list(edges):
    if v not in index:
        strong(v)
for comp in sccs:
    names = sorted(files[c][len(SRC) + 1:] for c in comp)
    print("import circle:", ", ".join(n.replace(os.sep, "/") for n in names))
sys.exit(1 if sccs else 0)
