"""Compiler and linker flags for the c10d extension, from the torch that
the interpreter running this finds (the Makefile runs it with
/usr/bin/python3, once per build): `build_flags.py DIR` writes DIR/cflags
and DIR/libs, one line each.

The pybind11 ABI macros are torch's own, as torch.utils.cpp_extension
passes them, so that the extension's classes share pybind11's registry
with torch's (torch's ProcessGroup is the base class of ours)."""

import os
import sys
import sysconfig

import torch
from torch.utils import cpp_extension


def cflags():
    flags = ["-isystem" + p for p in cpp_extension.include_paths()]
    flags.append("-isystem" + sysconfig.get_paths()["include"])
    flags.append("-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch._C, "_PYBIND11_" + name, None)
        if value is not None:
            flags.append('-DPYBIND11_%s="%s"' % (name, value))
    return flags


def libs():
    flags = ["-L" + p for p in cpp_extension.library_paths()]
    return flags + ["-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: %s DIR" % os.path.basename(sys.argv[0]))
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, flags in (("cflags", cflags()), ("libs", libs())):
        with open(os.path.join(sys.argv[1], name), "w") as f:
            f.write(" ".join(flags) + "\n")


if __name__ == "__main__":
    main()
