"""Offloading matmuls and convolutions to relax-runtime's kernels (TODO: issue 10)."""


def rewrite(ir_module, target):
    return ir_module
