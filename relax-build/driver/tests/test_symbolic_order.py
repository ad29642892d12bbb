"""Symbolic dims defined before their use after TVM's fusion (symbolic_order.py). A
reshape to a target computed at run time defines new dims in the body (a `match_cast`),
and `shape_to_tensor` of those dims reads them through no tensor: TVM's FuseOps put such
a read before the definition in ddddocr's quantized recognizer, and VMShapeLower failed
("PrimExpr reshape_dim_0 ... has not been computed"). Here the block is written in that
order, as FuseOps left it."""

import os
import sys
import unittest

import numpy as np
import tvm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import symbolic_order  # noqa: E402


def module_read_before_defined():
    from tvm import relax, tirx

    x = relax.Var("x", relax.TensorType([4], "int64"))
    dim = tirx.Var("dim", "int64")
    head = relax.DataflowVar("head", relax.TensorType([1], "int64"))
    shape = relax.DataflowVar("shape", relax.ShapeType(ndim=1))
    cast = relax.DataflowVar("cast", relax.ShapeType([dim]))
    dims = relax.DataflowVar("dims", relax.TensorType([1], "int64"))
    y = relax.Var("y", relax.TensorType([1], "int64"))
    bindings = [
        relax.VarBinding(dims, relax.op.shape_to_tensor(relax.ShapeExpr([dim]))),
        relax.VarBinding(head, relax.op.strided_slice(x, [0], [0], [1])),
        relax.VarBinding(shape, relax.op.tensor_to_shape(head)),
        relax.MatchCast(cast, shape, relax.ShapeType([dim])),
        relax.VarBinding(y, relax.op.add(dims, head)),
    ]
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], y)
    function = relax.Function([x], body, relax.TensorType([1], "int64")).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": function})


def run(module):
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(np.array([5, 1, 2, 3], np.int64))).numpy()


class SymbolicDimsInOrder(unittest.TestCase):
    def test_the_block_as_fusion_left_it_does_not_build(self):
        with self.assertRaisesRegex(Exception, "dim .* has not been computed"):
            run(module_read_before_defined())

    def test_reordered_the_read_follows_the_definition_and_runs(self):
        ordered = symbolic_order.pass_()(module_read_before_defined())
        names = [str(binding.var) for binding in ordered["main"].body.blocks[0].bindings]
        self.assertLess(names.index("cast"), names.index("dims"))
        np.testing.assert_array_equal(run(ordered), [10])

    def test_a_block_in_order_is_left_as_it_is(self):
        ordered = symbolic_order.pass_()(module_read_before_defined())
        self.assertTrue(symbolic_order.pass_()(ordered)["main"].same_as(ordered["main"]))


if __name__ == "__main__":
    unittest.main()
