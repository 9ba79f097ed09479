#!/usr/bin/env python3
"""Fails if a source file of src/ is over 300 lines, a function over 80 lines
(from the line that names it to its closing brace), or a function is allowed
`clippy::too_many_arguments`: values that travel together get a type of their
own. Usage: sizes.py [SRC | --self-test]. Prints each one found."""
import os, re, sys

MAX_FILE, MAX_FN = 300, 80
LITERAL = re.compile(r"'(?:\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'")


def blank(text):
    """The text with comments, strings and char literals blanked (newlines kept),
    so that braces inside them do not count."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i) + 2
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            j = text.find('"' + m.group(1), i + len(m.group(0))) + 1 + len(m.group(1))
        elif c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif c == "'" and LITERAL.match(text, i):
            j = LITERAL.match(text, i).end()
        else:
            out.append(c)
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def functions(text):
    """(name, first line, lines) of each function with a body."""
    t = blank(text)
    for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)", t):
        # The body opens at the first `{` outside the signature's brackets (a `;`
        # there, as in `[u8; 32]`, is not the end of a declaration).
        k, nested = m.end(), 0
        while k < len(t) and not (nested == 0 and t[k] in "{;"):
            nested += {"(": 1, "[": 1, ")": -1, "]": -1}.get(t[k], 0)
            k += 1
        if k >= len(t) or t[k] == ";":
            continue
        depth, j = 0, k
        while True:
            depth += {"{": 1, "}": -1}.get(t[j], 0)
            if depth == 0:
                break
            j += 1
        first, last = t.count("\n", 0, m.start()) + 1, t.count("\n", 0, j) + 1
        yield m.group(1), first, last - first + 1


def check(src):
    problems = []
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if not n.endswith(".rs"):
                continue
            path = os.path.join(root, n)
            rel = os.path.relpath(path, src)
            text = open(path).read()
            if text.count("\n") > MAX_FILE:
                problems.append(f"src/{rel} has {text.count(chr(10))} lines (at most {MAX_FILE})")
            for name, line, lines in functions(text):
                if lines > MAX_FN:
                    problems.append(f"src/{rel}:{line} fn {name} has {lines} lines (at most {MAX_FN})")
            if re.search(r"allow\([^)]*too_many_arguments", blank(text)):
                problems.append(f"src/{rel} allows clippy::too_many_arguments")
    for p in problems:
        print("sizes:", p)
    return 1 if problems else 0


def self_test():
    import tempfile, contextlib, io
    body = lambda n: "fn f() {\n" + "    let _ = \"}\";\n" * (n - 2) + "}\n"
    cases = {
        "a function of 80 lines": (body(80), 0),
        "a function of 81 lines": (body(81), 1),
        "a file of 301 lines": ("\n" * 301, 1),
        "an allowance": ("#[allow(clippy::too_many_arguments)]\nfn f() {}\n", 1),
        "an array in the signature": ("fn f() -> [u8; 32] {\n" + "    let _ = 1;\n" * 80 + "}\n", 1),
        "braces in strings and comments": ("fn f() {\n    // }\n    let _ = '}';\n}\nfn g() {}\n", 0),
    }
    for name, (text, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "a.rs"), "w") as f:
                f.write(text)
            with contextlib.redirect_stdout(io.StringIO()):
                got = check(d)
            if got != want:
                sys.exit(f"sizes self-test failed: {name}: exit {got}, wanted {want}")
    print("sizes: self-test passed")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        self_test()
        sys.exit(0)
    sys.exit(check(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")))
