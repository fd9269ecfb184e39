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

`graph_nodes` walks a traced function's graph and every function it reaches through a function-valued
attribute: `While`/`StatelessWhile` (`cond`, `body`), `If`/`StatelessIf` (`then_branch`,
`else_branch`), `Case` (`branches`), `PartitionedCall`/`StatefulPartitionedCall` (`f`), and gradient
functions. Library functions no node reaches (the forward loop bodies TensorFlow rewrites when it
differentiates a loop) are left out: they never run.
"""

import collections
import contextlib

import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry

# Ops TensorFlow runs on the host inside a GPU graph, each for a stated reason. Nothing else may lack a
# GPU kernel. (Op type, dtype attribute value or None for any) -> why.
HOST_OPS = {
    ("Const", tf.string): "the message of a `tf.Assert` (Keras' cuDNN path checks its mask is right-padded); "
                          "a string constant lives in host memory, which is where Assert reads it",
    ("Assert", None): "checks a condition and prints its message: TensorFlow registers it for CPU only and "
                      "places it on the host (soft placement); it reads one boolean back per call, not per step",
}


def registry_has_gpu_kernels():
    """Whether this TensorFlow build registered GPU kernels (a CUDA build does, with or without a GPU)."""
    return any(k.device_type == "GPU" for k in kernels.get_registered_kernels_for_op("MatMul").kernel)


def graph_nodes(concrete_function):
    """Every `NodeDef` of `concrete_function`'s graph and of the library functions it reaches."""
    graph_def = concrete_function.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    nodes, reached = [], set()
    pending = [list(graph_def.node)]
    while pending:
        for node in pending.pop():
            nodes.append(node)
            for value in node.attr.values():
                names = [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
                for name in names:
                    if name in library and name not in reached:
                        reached.add(name)
                        pending.append(list(library[name].node_def))
    return nodes, reached


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


def gpu_kernel(node):
    """The `KernelDef` of a GPU (or all-device) kernel registered for `node`'s op that accepts its
    types, or None."""
    for kernel in kernels.get_registered_kernels_for_op(node.op).kernel:
        if kernel.device_type not in ("GPU", "DEFAULT") or kernel.label:
            continue
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


def host_reason(node):
    """Why `node` may run on the host (`HOST_OPS`), or None."""
    dtype = node.attr["dtype"].type if "dtype" in node.attr else None
    return HOST_OPS.get((node.op, None)) or HOST_OPS.get((node.op, tf.as_dtype(dtype) if dtype else None))


def audit(concrete_function):
    """Audits a traced function: a dict of `ops` (node count), `op_types` (Counter), `functions`
    (library functions reached), `host` (Counter of allowed host ops), `without_gpu_kernel` (sorted
    list of `op(type attrs)` strings of every other node without a GPU kernel) and `disagreements`
    (nodes where `gpu_kernel` and TensorFlow's lookup differ)."""
    nodes, functions = graph_nodes(concrete_function)
    host, missing, disagreements = collections.Counter(), set(), set()
    for node in nodes:
        ours = gpu_kernel(node) is not None
        if ours != tf_finds_gpu_kernel(node):
            disagreements.add(describe(node))
        if ours:
            continue
        if host_reason(node):
            host[node.op] += 1
        else:
            missing.add(describe(node))
    return {"ops": len(nodes), "op_types": collections.Counter(n.op for n in nodes), "functions": functions,
            "host": host, "without_gpu_kernel": sorted(missing), "disagreements": sorted(disagreements)}


def describe(node):
    """`Op(T=float32, ...)`: a node's op and type attributes."""
    types = []
    for name, value in sorted(node.attr.items()):
        if value.HasField("type"):
            types.append(f"{name}={tf.as_dtype(value.type).name}")
    return f"{node.op}({', '.join(types)})"


@contextlib.contextmanager
def gpu_visible():
    """Inside the block, `tf.config.list_logical_devices("GPU")` lists one GPU: the query Keras asks
    before it runs a GRU/LSTM layer by cuDNN, and `tfattn.config.gpu_visible` asks. Graphs traced here
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
