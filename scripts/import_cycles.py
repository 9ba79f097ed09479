#!/usr/bin/env python3
"""Fails if two source files of src/ import each other, directly or through others,
or if an import goes against the layout that `//! # Layout` in src/lib.rs draws.

A file "imports" another when it names a path into it: `use crate::a::b::C`,
`crate::a::b::f(...)`, `super::x` (resolved from the file's module). A path is
mapped to the deepest module file that exists (src/a/b.rs or src/a/b/mod.rs). A
module file's use of its own children counts as well (`use child::X`,
`child::f()`, `pub use child::{A, B}`): a child that uses its parent while the
parent uses it is a circle like any other. A re-export is an import: a path to an
item a module re-exports leads to that module, which imports the child that
defines it; so a file that names `crate::a::X` while a's child imports that file
is in a circle.

The layout places every top-level module in one line `//! - <layer> <name>:
`module`, ...`: layer `edge` (the process and its HTTP boundary), `report`
(what reads several areas), `area` (a business area, named) or `base` (what
every area shares). A file imports only its
own layer or those below it; a file of one area imports only the areas listed
below its own (the back-up arrows not undone yet are listed in BACK_UP, which
may only shrink); and it imports another area only through that area's root
module or its `pub mod` children, and theirs (its interface), never the files
behind them. Usage: import_cycles.py [SRC |
--self-test]. Prints each circle and each wrong-way import found."""
import os, re, sys

# The back-up arrows between areas still to undo: (a file, the area above it that
# it imports). Recovery's repair reads the areas above it (it is to sit above
# them, its detection below); admission reads a sale's row through sales.
BACK_UP = {
    ("admission/advance", "ordering"),
    ("admission/draw", "sales"),
    ("admission/draw/close", "sales"),
    ("admission/raffle", "sales"),
    ("admission/raffle/view", "sales"),
    ("recovery/desk", "ordering"),
    ("recovery/desk", "sales"),
    ("recovery/generations", "ordering"),
    ("recovery/history/shard", "ordering"),
    ("recovery/history/tests", "ordering"),
    ("recovery/quarantine", "ordering"),
    ("recovery/repair", "sales"),
    ("recovery/rescue", "ordering"),
    ("recovery/restore", "sales"),
    ("recovery/snapshot", "ordering"),
    ("recovery/snapshot", "sales"),
    ("recovery/task", "ordering"),
}

LIB = "pub mod a;\npub mod d;\n//! # Layout\n//! - area one: `a`\n//! - base low: `d`\n"
# A second area, `e`, above `a`.
ABOVE = "pub mod a;\npub mod d;\npub mod e;\n//! # Layout\n//! - area two: `e`\n//! - area one: `a`\n//! - base low: `d`\n"

def self_test():
    """The check on small crates of its own: each case names its files and whether
    the check must fail."""
    import subprocess, tempfile
    cases = {
        "child uses its parent": ({"a/mod.rs": "mod b;\npub use b::X;\npub struct Y;\n", "a/b.rs": "use super::Y;\npub struct X(Y);\n"}, 1),
        "child uses a sibling": ({"a/mod.rs": "mod b;\nmod c;\npub use b::X;\n", "a/b.rs": "use super::c::Y;\npub struct X(Y);\n"}, 0),
        "a re-export is an import": ({"a/mod.rs": "mod b;\npub use b::X;\n", "a/b.rs": "pub struct X;\npub fn f() { crate::d::g() }\n", "d.rs": "pub fn g() {}\npub fn h() -> crate::a::X { crate::a::X }\n",
                                      "lib.rs": "pub mod a;\npub mod d;\n//! # Layout\n//! - area one: `a`\n//! - area two: `d`\n"}, 1),
        "a base module importing an area": ({"a/mod.rs": "pub struct X;\n", "d.rs": "pub fn h() -> crate::a::X { crate::a::X }\n"}, 1),
        "an area importing a base module": ({"a/mod.rs": "pub fn f() { crate::d::g() }\n", "d.rs": "pub fn g() {}\n"}, 0),
        "a module the layout does not place": ({"a/mod.rs": "", "d.rs": "", "lib.rs": LIB + "pub mod e;\n", "e.rs": ""}, 1),
        "an area reaching into another's file": ({"a/mod.rs": "mod b;\n", "a/b.rs": "pub fn f() {}\n", "e.rs": "pub fn g() { crate::a::b::f() }\n",
                                                  "lib.rs": ABOVE}, 1),
        "an area through another's interface": ({"a/mod.rs": "pub mod b;\n", "a/b.rs": "pub fn f() {}\n", "e.rs": "pub fn g() { crate::a::b::f() }\n",
                                                 "lib.rs": ABOVE}, 0),
        "an area through a pub mod of a pub mod": ({"a/mod.rs": "pub mod b;\n", "a/b/mod.rs": "pub mod c;\n", "a/b/c.rs": "pub fn f() {}\n",
                                                     "e.rs": "pub fn g() { crate::a::b::c::f() }\n", "lib.rs": ABOVE}, 0),
        "an area importing one above it": ({"a/mod.rs": "pub fn f() {}\n", "e.rs": "pub fn g() { crate::a::f() }\n",
                                           "lib.rs": LIB + "pub mod e;\n//! - area two: `e`\n"}, 1),
        "an area importing one below it": ({"a/mod.rs": "pub fn f() { crate::e::g() }\n", "e.rs": "pub fn g() {}\n",
                                           "lib.rs": LIB + "pub mod e;\n//! - area two: `e`\n"}, 0),
        "an area through a private child of a pub mod": ({"a/mod.rs": "pub mod b;\n", "a/b/mod.rs": "mod c;\n", "a/b/c.rs": "pub fn f() {}\n",
                                                         "e.rs": "pub fn g() { crate::a::b::c::f() }\n", "lib.rs": ABOVE}, 1),
    }
    for name, (tree, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "a"))
            tree = {"lib.rs": LIB, "a/c.rs": "pub struct Y;\n", "d.rs": "pub fn g() {}\n", **tree}
            for path, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
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

def resolve(parts):
    """The deepest existing module file for a crate path. A path through a re-export
    leads to the module that re-exports (which imports what it re-exports)."""
    for k in range(len(parts), 0, -1):
        if tuple(parts[:k]) in files:
            return tuple(parts[:k])
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

# The map: `//! # Layout` in lib.rs places every top-level module in a layer.
LAYERS = {"edge": 3, "report": 2, "area": 1, "base": 0}
layout_re = re.compile(r"^- (edge|report|area|base) ([a-z]+): ((?:`[a-z_]+`(?:, )?)+)", re.M)
lib = open(os.path.join(SRC, "lib.rs")).read()
if "//! # Layout" not in lib:
    sys.exit("import_cycles: src/lib.rs has no `//! # Layout` section")
layer, area = {}, {}
# The section's lines without `//!`, a bullet's continuation lines joined to it.
section = "\n".join(l[3:].strip() if l.startswith("//!") else "" for l in lib.split("//! # Layout", 1)[1].splitlines())
section = re.sub(r"\n(?!- |\n)", " ", section)
for m in layout_re.finditer(section):
    for name in re.findall(r"`([a-z_]+)`", m.group(3)):
        layer[name], area[name] = LAYERS[m.group(1)], m.group(2)
declared = set(re.findall(r"^pub mod ([a-z_][a-z0-9_]*)\s*;", lib, re.M))
problems = [f"module `{d}` is not placed in the layout of src/lib.rs" for d in sorted(declared - set(layer))]
problems += [f"the layout of src/lib.rs names `{d}`, which lib.rs does not declare" for d in sorted(set(layer) - declared)]

def interface(root):
    """An area's interface: its root module, the children the root declares `pub`,
    and theirs in turn (a `pub mod` of a `pub mod`)."""
    found, todo = set(), [(root,)]
    while todo:
        m = todo.pop()
        found.add(m)
        p = files.get(m)
        kids = set(re.findall(r"^pub mod ([a-z_][a-z0-9_]*)\s*;", open(p).read(), re.M)) if p else set()
        todo += [m + (k,) for k in kids if m + (k,) not in found]
    return found

for mod in sorted(edges):
    for target in sorted(edges[mod]):
        if not mod or not target or mod[0] not in layer or target[0] not in layer:
            continue
        here, there = "/".join(mod), "/".join(target)
        if layer[target[0]] > layer[mod[0]]:
            problems.append(f"upward import: {here} ({area[mod[0]]}) imports {there} ({area[target[0]]})")
        elif (layer[mod[0]] == LAYERS["area"] and layer[target[0]] == LAYERS["area"]
              and area[mod[0]] != area[target[0]] and target not in interface(target[0])):
            problems.append(f"{here} ({area[mod[0]]}) reaches into {there}, a file of {area[target[0]]}: "
                            f"use what `{target[0]}` or one of its `pub mod`s exports")
# The areas' order: the layout lists them from the top down, and an area imports
# only the areas below it. The back-up arrows the move has not undone yet are
# listed (a file and the area above it that it imports): the list may only
# shrink, so a new one fails and one undone must leave it.
order = []
for m in layout_re.finditer(section):
    if m.group(1) == "area" and m.group(2) not in order:
        order.append(m.group(2))
rank = {a: len(order) - i for i, a in enumerate(order)}
backs = set()
for mod in sorted(edges):
    for target in sorted(edges[mod]):
        if (mod and target and mod[0] in layer and target[0] in layer
                and layer[mod[0]] == LAYERS["area"] and layer[target[0]] == LAYERS["area"]
                and rank[area[target[0]]] > rank[area[mod[0]]]):
            backs.add(("/".join(mod), area[target[0]]))
for here, up in sorted(backs - BACK_UP):
    problems.append(f"back-up import: {here} ({area[here.split('/')[0]]}) imports {up}, an area above it in the layout")
# (An entry of a module this crate does not have, as in the self-test's, is not its.)
for here, up in sorted(b for b in BACK_UP - backs if b[0].split("/")[0] in layer):
    problems.append(f"{here} no longer imports {up}: take it off BACK_UP in scripts/import_cycles.py")
for p in problems:
    print("import direction:", p)
sys.exit(1 if sccs or problems else 0)
