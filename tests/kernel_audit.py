"""Which ops of a traced `tf.function` have a GPU kernel, read from TensorFlow's own kernel registry.

The registry: `tensorflow.python.framework.kernels.get_registered_kernels_for_op(op_type)` returns a
`KernelList` of every kernel registered for an op type; each `KernelDef` has a `device_type` ("CPU",
"GPU", or "DEFAULT" for a kernel registered for every device), the `constraint`s on the node's type
attributes it accepts (e.g. `T` in {float, half}), and the `host_memory_arg`s it keeps in host memory.
A node has a GPU kernel when one of its op's GPU or DEFAULT kernels accepts the node's types: the
question TensorFlow's placer asks before it puts a node on a GPU. `tf_finds_gpu_kernel` asks
TensorFlow's own lookup (`FindKernelDef`, through `_pywrap_kernel_registry.TryFindKernelClass`, which
TensorFlow's `selective_registration_header_lib` uses) the same question; the tests require both
answers to agree on every node, so the matching here is checked against TensorFlow's.

The Linux `tensorflow` wheel is built with CUDA (`tf.test.is_built_with_cuda()`): it registers its GPU
kernels even on a machine without a GPU, so the audit reads the kernels a GPU run would use. A
CPU-only build (macOS, `tensorflow-cpu`) registers none; there the audit cannot tell anything, and
`registry_has_gpu_kernels()` says so (the tests skip with that reason, rather than pass on nothing).

Ops on int32 shapes and sizes need no allow-list: TensorFlow registers their GPU (or all-device)
kernels with those arguments in host memory (`KernelDef.host_memory_arg`, as it does for variable
handles), which is how a GPU graph runs them; the audit counts them (`host_memory`). What lacks a GPU kernel is either
`HOST_CONSTANT` below, with its reason, or reported.

`graph_nodes` walks a traced function's graph and every function it reaches through a function-valued
attribute: `While`/`StatelessWhile` (`cond`, `body`), `If`/`StatelessIf` (`then_branch`,
`else_branch`), `Case` (`branches`) and `PartitionedCall`/`StatefulPartitionedCall` (`f`). Library functions no node reaches (the forward loop bodies TensorFlow rewrites when it
differentiates a loop) are left out: they never run.
"""

import collections
import contextlib
import functools

import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry

# The one kind of node allowed to lack a GPU kernel, and why: a string constant that feeds nothing
# but `Assert` nodes (their messages, e.g. from `SparseSoftmaxCrossEntropyWithLogits`' shape check or
# Keras' check that a cuDNN mask is right-padded), or nothing at all (grappler prunes it). TensorFlow
# has no GPU kernel for a string `Const`; `Assert` itself has an all-device kernel that reads its
# message from host memory, so the placer keeps these constants on the host and nothing is copied.
HOST_CONSTANT = "string Const feeding only Assert"


def registry_has_gpu_kernels():
    """Whether this TensorFlow build registered GPU kernels (a CUDA build does, with or without a GPU)."""
    return any(k.device_type == "GPU" for k in kernels.get_registered_kernels_for_op("MatMul").kernel)


def graph_nodes(concrete_function):
    """Every `NodeDef` of `concrete_function`'s graph and of the library functions it reaches, as
    `(nodes, groups)`: the flat list, and `{function name or "": its nodes}` ("" is the top graph)."""
    graph_def = concrete_function.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    groups, pending = {}, [("", list(graph_def.node))]
    while pending:
        name, group = pending.pop()
        groups[name] = group
        for node in group:
            for value in node.attr.values():
                called = [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
                for callee in called:
                    if callee in library and callee not in groups and all(callee != n for n, _ in pending):
                        pending.append((callee, list(library[callee].node_def)))
    return [node for group in groups.values() for node in group], groups


def _type_values(node, name):
    """The type(s) a node gives its attribute `name` (its op's default when the node omits it)."""
    value = node.attr[name] if name in node.attr else None
    if value is None:
        for attr in op_def_registry.get(node.op).attr:
            if attr.name == name and attr.HasField("default_value"):
                value = attr.default_value
    if value is None:
        return None
    return list(value.list.type) if value.HasField("list") else [value.type]


@functools.cache
def gpu_kernels(op_type):
    """The unlabelled kernels registered for `op_type` on GPU, then those for every device ("DEFAULT"),
    in the order TensorFlow's lookup prefers them."""
    registered = [k for k in kernels.get_registered_kernels_for_op(op_type).kernel if not k.label]
    return [k for k in registered if k.device_type == "GPU"] + [k for k in registered if k.device_type == "DEFAULT"]


def gpu_kernel(node):
    """The `KernelDef` of a GPU (or all-device) kernel registered for `node`'s op that accepts its
    types, or None."""
    for kernel in gpu_kernels(node.op):
        accepted = True
        for constraint in kernel.constraint:
            types = _type_values(node, constraint.name)
            allowed = set(constraint.allowed_values.list.type)
            if types is None or not set(types) <= allowed:
                accepted = False
        if accepted:
            return kernel
    return None


def tf_finds_gpu_kernel(node):
    """TensorFlow's own answer: whether `FindKernelDef` finds a kernel for `node` on a GPU."""
    from tensorflow.python.util import _pywrap_kernel_registry

    on_gpu = type(node)()
    on_gpu.CopyFrom(node)
    on_gpu.device = "/device:GPU:0"
    return bool(_pywrap_kernel_registry.TryFindKernelClass(on_gpu.SerializeToString()))


def consumers(group):
    """`{node name: [NodeDef reading it]}` within one graph or function body."""
    readers = collections.defaultdict(list)
    for node in group:
        for name in node.input:
            readers[name.lstrip("^").split(":")[0]].append(node)
    return readers


def is_host_constant(node, readers):
    """Whether `node` is a string `Const` read by `Assert` nodes only (`HOST_CONSTANT`)."""
    return (node.op == "Const" and node.attr["dtype"].type == tf.string.as_datatype_enum
            and all(reader.op == "Assert" for reader in readers[node.name]))


def audit(concrete_function):
    """Audits a traced function. Returns a dict:

    - `ops`: the number of nodes, `op_types`: a Counter of their op types;
    - `functions`: the names of the library functions reached;
    - `host`: the number of `HOST_CONSTANT` nodes;
    - `host_memory`: the number of nodes whose GPU kernel keeps some inputs or outputs in host memory
      (int32 shapes, sizes and indices; variable handles): the GPU kernel runs, reading those there;
    - `without_gpu_kernel`: sorted `Op(type attrs)` strings of every other node without a GPU kernel;
    - `disagreements`: nodes where `gpu_kernel` and TensorFlow's own lookup answer differently;
    - `string_ops`: sorted op types of the nodes that read or write `tf.string`, other than
      `HOST_CONSTANT`s and the `Assert`s reading them (text processing).
    """
    nodes, groups = graph_nodes(concrete_function)
    host, host_memory, missing, disagreements, strings = 0, 0, set(), set(), set()
    for group in groups.values():
        readers = consumers(group)
        for node in group:
            kernel = gpu_kernel(node)
            ours = kernel is not None
            host_memory += ours and bool(kernel.host_memory_arg)
            if ours != tf_finds_gpu_kernel(node):
                disagreements.add(describe(node))
            allowed = is_host_constant(node, readers)
            if not ours and allowed:
                host += 1
            elif not ours:
                missing.add(describe(node))
            if handles_strings(node) and not allowed and node.op != "Assert":
                strings.add(node.op)
    return {"ops": len(nodes), "op_types": collections.Counter(n.op for n in nodes),
            "functions": set(groups) - {""}, "host": host, "host_memory": host_memory, "without_gpu_kernel": sorted(missing),
            "disagreements": sorted(disagreements), "string_ops": sorted(strings)}


def handles_strings(node):
    """Whether one of `node`'s inputs or outputs is a `tf.string` (read from its op's `OpDef`)."""
    op_def = op_def_registry.get(node.op)
    if op_def is None:
        return False
    for arg in list(op_def.input_arg) + list(op_def.output_arg):
        if arg.type == tf.string.as_datatype_enum:
            return True
        name = arg.type_attr or arg.type_list_attr
        if name and tf.string.as_datatype_enum in (_type_values(node, name) or []):
            return True
    return False


def describe(node):
    """`Op(T=float32, ...)`: a node's op and type attributes."""
    types = [f"{name}={tf.as_dtype(value.type).name}" for name, value in sorted(node.attr.items())
             if value.HasField("type")]
    return f"{node.op}({', '.join(types)})"


@contextlib.contextmanager
def gpu_visible():
    """Inside the block, `tf.config.list_logical_devices("GPU")` lists one GPU: the query Keras asks
    before it runs a GRU/LSTM layer by cuDNN, and `tfattn.tier.gpu_visible` asks. Graphs traced here
    are the graphs a GPU machine traces; they are only traced, never run."""
    real = tf.config.list_logical_devices
    fake = tf.config.LogicalDevice(name="/device:GPU:0", device_type="GPU")

    def listed(device_type=None):
        return [fake] if device_type == "GPU" else real(device_type)

    tf.config.list_logical_devices = listed
    try:
        yield
    finally:
        tf.config.list_logical_devices = real
