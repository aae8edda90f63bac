#!/usr/bin/env python3
"""check-functions.py [--max N] [DIR...]: fails when a function in the C and CUDA sources
(.c, .h, .cu, .cuh under DIR, src/ by default) is longer than N lines (200): the house style
wants a function to be one thing a reader can hold, and a kernel that grows past that is
telling you it holds several (issue 40). Lists the offenders, longest first.

A function is a top-level brace block whose head has a parameter list (not a struct, enum,
union or initialiser), from the first line of its head (its template line included) to its
closing brace; lambdas and local blocks count towards the function that holds them. Braces in
comments, strings and character literals and preprocessor lines are skipped; `extern "C" {`
blocks are looked into.
--self-test: runs the checker on small fixtures (one function a line too long, one just
short enough, braces in comments and strings, a long struct and table, extern "C") and over a
folder holding them, and fails if it misjudges one.
"""
import contextlib
import io
import os
import re
import sys
import tempfile

LIMIT = 200


def strip(text):
    """text with comments, string and character literals blanked (newlines kept) and
    preprocessor lines (with their continuations) emptied, so that braces are code's."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        ch = text[i]
        if line_start and ch in ' \t':
            out.append(ch)
            i += 1
            continue
        if line_start and ch == '#':
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out.append('\n')
                    i += 2
                    continue
                i += 1
            continue
        line_start = False
        if ch == '\n':
            line_start = True
            out.append(ch)
            i += 1
        elif text.startswith('//', i):
            while i < n and text[i] != '\n':
                i += 1
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif ch in '"\'':
            j = i + 1
            while j < n and text[j] != ch and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(ch + re.sub(r'[^\n]', ' ', text[i + 1:j - 1]) + ch)
            i = j
        else:
            out.append(ch)
            i += 1
    return ''.join(out)


def functions(text):
    """(name, first line, last line) of every top-level function definition in text."""
    code = strip(text)
    found = []
    depth = 0          # braces open, extern "C" blocks not counted
    transparent = []   # depths at which an extern "C" block opened
    head_start = 0     # where the current top-level declaration's text starts
    opened = None      # (name, first line) of the function whose body is open
    for i, ch in enumerate(code):
        if ch == '{':
            if depth == 0 and opened is None:
                head = code[head_start:i]
                if re.search(r'\bextern\s+"[^"]*"\s*$', head):
                    transparent.append(depth)
                    head_start = i + 1
                    continue
                if is_function_head(head):
                    first = head_start + (len(head) - len(head.lstrip()))
                    opened = (head_name(head), code.count('\n', 0, first) + 1)
            depth += 1
        elif ch == '}':
            if depth == 0 and transparent:
                transparent.pop()
                head_start = i + 1
                continue
            depth -= 1
            if depth == 0:
                if opened is not None:
                    found.append((opened[0], opened[1], code.count('\n', 0, i) + 1))
                    opened = None
                head_start = i + 1
        elif ch == ';' and depth == 0:
            head_start = i + 1
    return found


def head_name(head):
    """The identifier before the parameter list: the parentheses that close last."""
    j = head.rfind(')')
    level = 0
    while j >= 0:
        level += {')': 1, '(': -1}.get(head[j], 0)
        if level == 0:
            break
        j -= 1
    m = re.search(r'([A-Za-z_]\w*)\s*$', head[:max(j, 0)])
    return m.group(1) if m else '?'


def is_function_head(head):
    """Whether a top-level head opens a function body: it ends with its parameter list (and
    perhaps const, noexcept, a trailing return type), which no struct, enum, union or
    initialiser head does."""
    h = ' '.join(head.split())
    return bool(re.search(r'\)\s*(const|noexcept|override|\s)*(->\s*[\w:<>&*, ]+)?$', h))


def check(paths, limit):
    long_ = []
    for path in sources(paths):
        with open(path, encoding='utf-8', errors='replace') as fh:
            text = fh.read()
        for name, a, b in functions(text):
            if b - a + 1 > limit:
                long_.append((b - a + 1, path, a, name))
    return sorted(long_, reverse=True)


def sources(paths):
    """The .c, .h, .cu and .cuh files named or under the folders named."""
    for top in paths:
        if os.path.isfile(top):
            yield top
            continue
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(('.c', '.h', '.cu', '.cuh')):
                    yield os.path.join(root, f)


def self_test():
    """0 where the checker judges its fixtures right: in memory, and through main over files."""
    body = lambda n: ''.join('    x += %d; /* { */\n' % k for k in range(n))
    # a function of exactly LIMIT lines: head, LIMIT - 2 statements, closing brace
    ok = 'static int fits(int x) {\n' + body(LIMIT - 2) + '}\n'
    # LIMIT + 1 lines, its template line (with a default argument) and a two-line head included
    long_ = ('template <int N, bool B = false>\nstatic __device__ int too_long(int x,\n'
             '                                  int y) {\n' +
             '    const char *s = "}}}"; char c = \'}\';\n' + body(LIMIT - 5) + '    return x;\n}\n')
    struct = 'struct big {\n' + ''.join('    int f%d;\n' % k for k in range(LIMIT + 5)) + '};\n'
    table = 'static const int t[] = {\n' + ''.join('    %d,\n' % k for k in range(LIMIT + 5)) + '};\n'
    cases = [
        ('fits', ok, []),
        ('too_long', long_, ['too_long']),
        ('struct', struct, []),
        ('table', table, []),
        ('extern C', 'extern "C" {\n' + long_ + '}\n', ['too_long']),
        ('macro', '#define M(x) { \\\n  x; }\n' + ok, []),
        ('one-liners', 'static int one(void) { return 1; }\n' * (LIMIT + 5) + ok, []),
    ]
    bad = 0
    for label, text, want in cases:
        got = [name for name, a, b in functions(text) if b - a + 1 > LIMIT]
        if got != want:
            lens = {name: b - a + 1 for name, a, b in functions(text)}
            print('check-functions self-test: %s: flagged %s, wanted %s (lengths %s)' % (label, got, want, lens))
            bad = 1
    if functions(ok) != [('fits', 1, LIMIT)]:
        print('check-functions self-test: fits measured as %s, wanted lines 1-%d' % (functions(ok), LIMIT))
        bad = 1
    # the command itself: its exit status over a folder without and with the long function
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, 'fits.cu'), 'w') as f:
            f.write(ok)
        with contextlib.redirect_stdout(io.StringIO()):
            rc_ok = main(['check-functions.py', d])
        with open(os.path.join(d, 'long.c'), 'w') as f:
            f.write(long_)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            rc_long = main(['check-functions.py', d])
        if rc_ok != 0 or rc_long != 1 or 'too_long is %d lines' % (LIMIT + 1) not in out.getvalue():
            print('check-functions self-test: exit %d over a short function, %d over a long one (%s)' %
                  (rc_ok, rc_long, out.getvalue().strip()))
            bad = 1
    if not bad:
        print('check-functions self-test: a function of %d lines passes, one of %d fails' % (LIMIT, LIMIT + 1))
    return bad


def main(argv):
    limit = LIMIT
    args = argv[1:]
    if args and args[0] == '--self-test':
        return self_test()
    if len(args) >= 2 and args[0] == '--max':
        limit = int(args[1])
        args = args[2:]
    paths = args or [os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src')]
    long_ = check(paths, limit)
    for n, path, line, name in long_:
        print('check-functions: %s:%d: %s is %d lines (at most %d)' % (os.path.relpath(path), line, name, n, limit))
    if not long_:
        print('check-functions: every function in %s is at most %d lines' % (' '.join(args or ['src']), limit))
    return 1 if long_ else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
