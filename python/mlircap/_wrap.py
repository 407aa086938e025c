"""Shared by the module wrappers (mlircap.Compiled, the capture layer's module call)."""
import functools
import types


def returning_wrapper(wrapper: object, module: object, method: types.MethodType):
    """``method`` of the wrapped module; where it returns the module itself (eval, train,
    to, cuda, float, ...), ``wrapper`` is returned instead, so chained calls keep the
    compiled path."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        result = method(*args, **kwargs)
        return wrapper if result is module else result
    return call


def module_attr(wrapper: object, module: object, name: str):
    """``module.name`` read through ``wrapper``: a method bound to the module comes back
    as `returning_wrapper`, anything else as it is."""
    value = getattr(module, name)
    if isinstance(value, types.MethodType) and value.__self__ is module:
        return returning_wrapper(wrapper, module, value)
    return value
