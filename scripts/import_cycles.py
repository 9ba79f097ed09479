#!/usr/bin/env python3
"""Fails if two source files of src/ import each other, directly or through others.

A file "imports" another when it names a path into it: `use crate::a::b::C`,
`crate::a::b::f(...)`, `super::x` (resolved from the file's module). A path is
mapped to the deepest module file that exists (src/a/b.rs or src/a/b/mod.rs). A
module's own children are its parts, not imports: a path to an item a module
re-exports from a child leads to that child. Prints each cycle found."""
import os, re, sys

SRC = os.path.join(os.path.dirname(__file__), "..", "src")

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
        if target and target != tuple(mod) and not (len(target) > len(mod) and target[: len(mod)] == tuple(mod)):
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
    # A module file's own children are its parts, not imports (re-exports are
    # followed to the child that defines the item, above).
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
