"""Python model sources: importing the file, finding the entry, exporting nn modules."""

import importlib.util
import os
import sys

from .errors import DriverError, user_traceback


def import_source(model_name, source_path):
    """Executes the model source as a module registered in sys.modules.

    TVMScript's parser looks the defining module up in sys.modules to read the class
    source, so the module must be registered before it is executed.
    """
    module_name = "relax_model_" + model_name
    spec = importlib.util.spec_from_file_location(module_name, source_path)
    if spec is None or spec.loader is None:
        raise DriverError("source", f"cannot import {source_path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, os.path.dirname(source_path))
    try:
        spec.loader.exec_module(module)
    except SystemExit as error:
        raise DriverError(
            "source_exit",
            f"running {source_path} called sys.exit({error.code!r}); a model source must not exit",
            user_traceback(source_path),
        ) from error
    except Exception as error:  # the user's code may raise anything
        raise DriverError(
            "source_exception",
            f"{type(error).__name__}: {error}",
            user_traceback(source_path),
        ) from error
    return module


def resolve_entry(module, entry, source_path):
    if not hasattr(module, entry):
        public = sorted(
            name
            for name in vars(module)
            if not name.startswith("_") and not isinstance(getattr(module, name), type(sys))
        )
        raise DriverError(
            "entry_missing",
            f"{source_path} has no attribute `{entry}`",
            "attributes defined there: " + (", ".join(public) if public else "(none)"),
        )
    return getattr(module, entry)


def tensor_spec(nn, argument):
    dims = [dim if isinstance(dim, int) else str(dim) for dim in argument["shape"]]
    return nn.spec.Tensor(dims, argument["dtype"])


def export_nn_module(module_object, inputs, source_path):
    """relax.frontend.nn module -> (IRModule, parameter names in call order)."""
    from tvm.relax.frontend import nn

    if not inputs:
        raise DriverError(
            "inputs_missing",
            "a relax.frontend.nn module needs an input spec for each method to export",
        )
    spec = {
        method["method"]: {argument["name"]: tensor_spec(nn, argument) for argument in method["arguments"]}
        for method in inputs
    }
    for method in spec:
        if not callable(getattr(module_object, method, None)):
            raise DriverError("inputs_method", f"the module has no method `{method}`", subject=method)
    try:
        ir_module, parameters = module_object.export_tvm(spec=spec)
    except Exception as error:
        raise DriverError("export", f"{type(error).__name__}: {error}", user_traceback(source_path)) from error
    return ir_module, [name for name, _ in parameters]


def reject_inputs(inputs):
    if inputs:
        raise DriverError(
            "inputs_unused",
            "the entry is an IRModule, whose functions declare their own argument names, shapes and dtypes",
        )


def load_ir_module(entry_object, inputs, source_path):
    """Turns the entry attribute into an IRModule.

    Accepted: a TVMScript IRModule, a relax.frontend.nn.Module subclass (built with no
    arguments) or instance, or a function taking no arguments that returns an IRModule.
    Returns (IRModule, weight names or None when weights keep their Relax names).
    """
    import tvm
    from tvm.relax.frontend import nn

    if isinstance(entry_object, tvm.IRModule):
        reject_inputs(inputs)
        return entry_object, None
    if isinstance(entry_object, type) and issubclass(entry_object, nn.Module):
        try:
            entry_object = entry_object()
        except Exception as error:
            raise DriverError(
                "entry_construct",
                f"constructing {entry_object.__name__}() failed: {type(error).__name__}: {error}",
                user_traceback(source_path),
            ) from error
    if isinstance(entry_object, nn.Module):
        return export_nn_module(entry_object, inputs, source_path)
    if callable(entry_object) and not isinstance(entry_object, type):
        try:
            result = entry_object()
        except Exception as error:
            raise DriverError(
                "source_exception", f"{type(error).__name__}: {error}", user_traceback(source_path)
            ) from error
        if isinstance(result, tvm.IRModule):
            reject_inputs(inputs)
            return result, None
        raise DriverError("entry_type", f"calling the entry returned {type(result).__name__}, not an IRModule")
    raise DriverError("entry_type", f"the entry is a {type(entry_object).__name__}")
