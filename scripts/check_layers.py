#!/usr/bin/env python3
"""Layer check: no file includes or calls upward across the layers that
docs/architecture.md lists.

The layers come from the fenced block marked ```layers in the document, one
line per layer, bottom first:  name: dir dir ...  A file may include and call
its own layer and the layers listed before it. The block ```tool-headers
lists the internal headers (relative to src/) that files of the tools layer
may include besides the public ones in include/.

Two kinds of arrow are checked:
  includes  every #include "..." in the .c and .h files of the layers' dirs,
            resolved against the file's dir, then src/, then include/;
  calls     for each object $BUILD/src/**.o whose source still exists, the
            undefined symbols that an object of a higher layer defines (nm).
Violations print as  file: includes|calls X (layer a -> layer b)  and make
the exit status 1, except those the allow-list names (the same text up to
the parenthesis), which are shown as allowed. Exit status 2: bad usage or a
document without the block.
"""
import argparse
import os
import re
import subprocess
import sys

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def fenced_block(text, tag):
    m = re.search(r'^```' + re.escape(tag) + r'\s*\n(.*?)^```', text, re.M | re.S)
    if not m:
        return None
    lines = []
    for line in m.group(1).splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def read_layers(doc):
    with open(doc, encoding='utf-8') as f:
        text = f.read()
    block = fenced_block(text, 'layers')
    if not block:
        sys.exit('%s: no ```layers block' % doc)
    layers = []  # (rank, name, [dirs])
    for rank, line in enumerate(block):
        name, sep, dirs = line.partition(':')
        if not sep or not dirs.split():
            sys.exit('%s: bad layer line "%s" (want  name: dir ...)' % (doc, line))
        layers.append((rank, name.strip(), [d.rstrip('/') for d in dirs.split()]))
    tool_headers = set(fenced_block(text, 'tool-headers') or [])
    return layers, tool_headers


def layer_of(path, layers):
    """The layer of a path relative to the root, by its longest dir prefix."""
    best = None
    for rank, name, dirs in layers:
        for d in dirs:
            if path == d or path.startswith(d + '/'):
                if best is None or len(d) > best[2]:
                    best = (rank, name, len(d))
    return (best[0], best[1]) if best else None


def resolve(root, src_file, inc):
    """The root-relative path an #include "inc" of src_file finds, or None."""
    here = os.path.dirname(src_file)
    for base in (here, 'src', 'include'):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def source_files(root, layers):
    for _, _, dirs in layers:
        for d in dirs:
            for dirpath, _, files in os.walk(os.path.join(root, d)):
                for fn in sorted(files):
                    if fn.endswith(('.c', '.h')):
                        yield os.path.relpath(os.path.join(dirpath, fn), root)


def include_violations(root, layers, tool_headers, tools_layer):
    out = []
    for f in sorted(set(source_files(root, layers))):
        mine = layer_of(f, layers)
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
            for line in fh:
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                target = resolve(root, f, m.group(1))
                if target is None or target.startswith('include/'):
                    continue
                theirs = layer_of(target, layers)
                if theirs is None:
                    continue
                if mine[1] == tools_layer and theirs[1] != tools_layer:
                    rel = os.path.relpath(target, 'src')
                    if rel not in tool_headers:
                        out.append('%s: includes %s (layer %s -> internal header of layer %s)'
                                   % (f, target, mine[1], theirs[1]))
                elif theirs[0] > mine[0]:
                    out.append('%s: includes %s (layer %s -> layer %s)'
                               % (f, target, mine[1], theirs[1]))
    return out


def nm_symbols(objs):
    """{obj: (defined set, undefined set)} of the global symbols, by one nm run."""
    syms = {o: (set(), set()) for o in objs}
    if not objs:
        return syms
    res = subprocess.run(['nm', '-A', '-g'] + objs, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, check=False)
    if res.returncode != 0:
        sys.exit('nm failed: ' + res.stderr.strip())
    for line in res.stdout.splitlines():
        obj, _, rest = line.partition(':')
        parts = rest.split()
        if len(parts) == 2 and parts[0] == 'U':
            syms[obj][1].add(parts[1])
        elif len(parts) == 3 and parts[1] not in 'UwvN':
            syms[obj][0].add(parts[2])
    return syms


def call_violations(root, build, layers):
    objs = {}  # object path -> source path (root-relative)
    src_root = os.path.join(build, 'src')
    for dirpath, _, files in os.walk(src_root):
        for fn in sorted(files):
            if not fn.endswith('.o'):
                continue
            obj = os.path.join(dirpath, fn)
            src = os.path.join('src', os.path.relpath(obj, src_root))[:-2] + '.c'
            # An object whose source is gone is stale, not part of the build.
            if os.path.isfile(os.path.join(root, src)) and layer_of(src, layers):
                objs[obj] = src
    syms = nm_symbols(sorted(objs))
    owner = {}  # symbol -> (layer, source)
    for obj, (defined, _) in syms.items():
        for s in defined:
            owner.setdefault(s, (layer_of(objs[obj], layers), objs[obj]))
    out = []
    for obj in sorted(syms):
        mine = layer_of(objs[obj], layers)
        for s in sorted(syms[obj][1]):
            if s in owner and owner[s][0][0] > mine[0]:
                out.append('%s: calls %s (layer %s -> layer %s, defined in %s)'
                           % (objs[obj], s, mine[1], owner[s][0][1], owner[s][1]))
    return out, len(objs)


def read_allow(path):
    allow = set()
    if path and os.path.isfile(path):
        with open(path, encoding='utf-8') as f:
            for line in f:
                line = line.split('#', 1)[0].strip()
                if line:
                    allow.add(line)
    return allow


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default='.', help='source tree (default .)')
    ap.add_argument('--doc', help='architecture document (default ROOT/docs/architecture.md)')
    ap.add_argument('--build', help='build dir whose src/**.o are checked for upward calls')
    ap.add_argument('--allow', help='allow-list (default ROOT/scripts/layers_allow.txt)')
    ap.add_argument('--tools-layer', default='tools',
                    help='the layer whose files may include only public and tool headers')
    args = ap.parse_args()
    root = args.root
    layers, tool_headers = read_layers(args.doc or os.path.join(root, 'docs/architecture.md'))
    allow = read_allow(args.allow or os.path.join(root, 'scripts/layers_allow.txt'))

    found = include_violations(root, layers, tool_headers, args.tools_layer)
    nobj = 0
    if args.build:
        calls, nobj = call_violations(root, args.build, layers)
        found += calls
    bad, used = [], set()
    for v in found:
        key = v.split(' (', 1)[0]
        if key in allow:
            used.add(key)
            print('allowed: ' + v)
        else:
            bad.append(v)
            print(v)
    for key in sorted(allow - used):
        # Without objects the calls went unchecked: their entries may be live.
        if args.build or ': calls ' not in key:
            print('note: allow-list entry no longer needed: ' + key)
    what = 'includes' + (' and calls of %d objects' % nobj if args.build else '')
    if bad:
        print('check-layers: %d upward arrow(s) in %s' % (len(bad), what))
        return 1
    print('check-layers: %s point down (%d allowed by the list)' % (what, len(used)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
