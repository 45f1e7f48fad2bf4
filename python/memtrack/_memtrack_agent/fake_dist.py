"""`memtrack estimate` of one rank of a distributed job (docs/estimate.md, "Distributed jobs").

The program runs as rank RANK of WORLD_SIZE (torchrun's environment, set by `estimate`), with
torch's fake process group whatever backend it asks for: collectives complete at once and
communicate nothing, and on the meta tensors that stand for the device their outputs are a
shape question. Nothing is spawned per rank.

- `init_process_group` (any backend, any init method) makes the fake group of the world.
- The functional collectives (DTensor's, FSDP2's) get meta kernels: output shapes only.
- Collectives of Python objects give each rank its own object (the others' are not known).
- `torch.cuda.device_count()` is LOCAL_WORLD_SIZE.
- FSDP2 tells deferred initialisation from the device by `device.type == "meta"`; here the
  device's tensors are meta too. So its move of parameters to the device moves the host's
  (meta stand-ins of CPU tensors) and leaves only tensors made on the meta device itself,
  and its check that nothing is left on meta asks about those alone.
"""

import os

from . import fake_memory, transport
from .importhook import after_import

_torch = None
_library = []


def rank_and_world():
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None


def _init_process_group(dist, init):
    me, world = rank_and_world()

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                           store=None, group_name="", pg_options=None, device_id=None, **kw):
        from torch.testing._internal.distributed.fake_pg import FakeStore

        kwargs = {"group_name": group_name}
        if timeout is not None:
            kwargs["timeout"] = timeout
        return init("fake", store=FakeStore(), rank=me, world_size=world, **kwargs)

    init_process_group.__doc__ = init.__doc__
    init_process_group.__wrapped__ = init
    return init_process_group


def _object_collectives(dist):
    """Each rank's objects are its own: the others' are not known here."""
    me = rank_and_world()[0]

    def all_gather_object(object_list, obj, group=None):
        for i in range(len(object_list)):
            object_list[i] = obj

    def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
        return None

    def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
        if object_gather_list is not None:
            for i in range(len(object_gather_list)):
                object_gather_list[i] = obj

    def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                            group=None, group_src=None):
        if scatter_object_input_list:
            k = me if me < len(scatter_object_input_list) else 0
            scatter_object_output_list[0] = scatter_object_input_list[k]

    for f in (all_gather_object, broadcast_object_list, gather_object, scatter_object_list):
        setattr(dist, f.__name__, f)


def _meta_kernels(torch):
    """Meta kernels for the functional collectives and the coalesced c10d ops under them."""
    lib = torch.library.Library("_c10d_functional", "IMPL")
    _library.append(lib)

    def gather(x, group_size, group_name):
        return x.new_empty((x.shape[0] * group_size, *x.shape[1:]))

    def scatter(x, reduce_op, group_size, group_name):
        return x.new_empty((x.shape[0] // group_size, *x.shape[1:]))

    def same(x, *args):
        return x.new_empty(x.shape)

    def all_to_all(x, output_split_sizes, input_split_sizes, group_name):
        n = sum(output_split_sizes) if output_split_sizes else x.shape[0]
        return x.new_empty((n, *x.shape[1:]))

    kernels = {
        "all_gather_into_tensor": gather,
        "all_gather_into_tensor_coalesced": lambda xs, n, g: [gather(x, n, g) for x in xs],
        "reduce_scatter_tensor": scatter,
        "reduce_scatter_tensor_coalesced": lambda xs, op, n, g: [scatter(x, op, n, g) for x in xs],
        "all_reduce": same,
        "all_reduce_coalesced": lambda xs, op, g: [x.new_empty(x.shape) for x in xs],
        "broadcast": same,
        "all_to_all_single": all_to_all,
    }
    for name, fn in kernels.items():
        try:
            lib.impl(name, fn, "Meta")
        except Exception as e:
            transport.internal_error(RuntimeError(f"estimate: a meta kernel for {name}: {e}"))


def _fsdp_init(module):
    import itertools

    move = module._move_states_to_device

    def _move_states_to_device(params, buffers, device):
        # the host's stand-ins are CPU tensors to FSDP: moved, as it moves CPU tensors
        for t in itertools.chain(params, buffers):
            if fake_memory.is_host(t):
                t.data = t.to(device)
        return move(params, buffers, device)

    module._move_states_to_device = _move_states_to_device


def _fsdp_param_group(module):
    group = module.FSDPParamGroup
    validate = group._validate_no_meta_params

    def _validate_no_meta_params(self):
        left = [
            p._param_fqn
            for p in self.fsdp_params
            if fake_memory.is_user_meta(getattr(p.sharded_param, "_local_tensor", p.sharded_param))
        ]
        if left:
            return validate(self)
        return None

    group._validate_no_meta_params = _validate_no_meta_params


def install(torch):
    """Under a distributed estimate (RANK and WORLD_SIZE set): the fake group and the rest."""
    global _torch
    _torch = torch
    if rank_and_world() is None:
        return
    import torch.distributed as dist

    if not dist.is_available():
        return
    dist.init_process_group = _init_process_group(dist, dist.init_process_group)
    dist.is_nccl_available = lambda: True
    _object_collectives(dist)
    _meta_kernels(torch)
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    torch.cuda.device_count = lambda: int(local) if local.isdigit() else 1
    after_import("torch.distributed.fsdp._fully_shard._fsdp_init", _fsdp_init)
    after_import("torch.distributed.fsdp._fully_shard._fsdp_param_group", _fsdp_param_group)
