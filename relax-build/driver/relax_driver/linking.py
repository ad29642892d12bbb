"""Linking compiled code into a shared library for the machine that will load it."""

import os
import tempfile


def export_shared_library(library, path, cross_compiler=None):
    """Writes `library` (a TVM runtime module) to `path` as a shared library: linked by the
    host's C++ compiler, or by `cross_compiler` for another target."""
    if not cross_compiler:
        library.export_library(path)
        return
    from tvm.support import cc

    # The triple comes from the compiler (`-dumpmachine`): TVM otherwise takes it from the
    # library's LLVM code, and packs the VM bytecode for the host when all the code is
    # relax-runtime's kernels and there is none.
    compile_function = cc.cross_compiler(cross_compiler, get_target_triple=cc.get_target_by_dump_machine(cross_compiler))
    library.export_library(path, fcompile=compile_function)


def export_candidate(cross_compiler, library):
    """meta-schedule's builder export (`functools.partial` over the compiler): a candidate
    as a shared library in a fresh folder. relax-rpc-server loads shared libraries only;
    meta-schedule's default is a tar of object files, which TVM's Python server links on
    the device."""
    path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
    export_shared_library(library, path, cross_compiler)
    return path
