"""`memtrack estimate` of one rank of a distributed job (docs/estimate.md, "Distributed jobs").

The program runs as rank RANK of WORLD_SIZE (torchrun's environment, set by `estimate`), with
torch's fake process group whatever backend it asks for: collectives complete at once and
communicate nothing, and on the meta tensors that stand for the device their outputs are a
shape question. Nothing is spawned per rank.

- `init_process_group` (any backend, any init method) makes the fake group of the world; a
  program that names its rank and world there (mp.spawn's workers, each estimated as its own
  process) is that rank of that world, and its file says so. Without `--world-size` only that
  is done: no real group could carry the fake device's tensors.
- The functional collectives (DTensor's, FSDP2's) get meta kernels: output shapes only.
- Collectives of Python objects give each rank its own object (the others' are not known).
- `torch.cuda.device_count()` is LOCAL_WORLD_SIZE.
- FSDP2 tells deferred initialisation from the device by `device.type == "meta"`; here the
  device's tensors are meta too. So its move of parameters to the device moves the host's
  (meta stand-ins of CPU tensors) and leaves only tensors made on the meta device itself,
  and its check that nothing is left on meta asks about those alone.
"""

import os
import sys

from . import fake_memory, fake_values, state, transport
from .importhook import after_import
from .protocol import MSG_ESTIMATE_GROUP, MSG_ESTIMATE_RANK

_torch = None
_library = []
_groups = {}  # name of each process group that ran a collective -> its size


def rank_and_world():
    """This rank and its world, under a distributed estimate (`estimate` sets
    MEMTRACK_ESTIMATE_WORLD beside torchrun's variables); None otherwise, whatever RANK the
    environment has (a scheduler's)."""
    if not os.environ.get("MEMTRACK_ESTIMATE_WORLD"):
        return None
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None


def _init_process_group(dist, init):
    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                           store=None, group_name="", pg_options=None, device_id=None, **kw):
        from torch.testing._internal.distributed.fake_pg import FakeStore

        # the environment as env:// reads it, at the call (a worker may set it just before)
        me, world = rank_and_world() or (state.int_env("RANK") or 0,
                                         state.int_env("WORLD_SIZE") or 1)
        kwargs = {"group_name": group_name}
        if timeout is not None:
            kwargs["timeout"] = timeout
        # a program that names its rank and world (mp.spawn's workers) is that rank of that
        # world; otherwise torchrun's environment says
        r = rank if rank is not None and rank >= 0 else me
        w = world_size if world_size is not None and world_size > 0 else world
        if (r, w) != (me, world) or rank_and_world() is None:
            transport.message({"t": MSG_ESTIMATE_RANK, "rank": r, "world_size": w})
        return init("fake", store=FakeStore(), rank=r, world_size=w, **kwargs)

    init_process_group.__doc__ = init.__doc__
    init_process_group.__wrapped__ = init
    return init_process_group


def _object_collectives(dist):
    """Each rank's objects are its own: the others' are not known here."""

    def me():
        return dist.get_rank() if dist.is_initialized() else 0

    def all_gather_object(object_list, obj, group=None):
        for i in range(len(object_list)):
            object_list[i] = obj

    def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
        source = group_src if group_src is not None else (src or 0)
        if source != me():
            # the source's objects are not known here: this rank keeps its own list
            fake_values.note_read(f"objects broadcast from rank {source} (broadcast_object_list)")
        return None

    def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
        if object_gather_list is not None:
            for i in range(len(object_gather_list)):
                object_gather_list[i] = obj

    def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                            group=None, group_src=None):
        if scatter_object_input_list:
            k = me() if me() < len(scatter_object_input_list) else 0
            scatter_object_output_list[0] = scatter_object_input_list[k]

    for f in (all_gather_object, broadcast_object_list, gather_object, scatter_object_list):
        setattr(dist, f.__name__, f)


class _Done:
    """The Work of a collective the fake group completed at once; its future holds the
    tensors written (the fake group's own futures hold None, which DDP's hooks and
    Hugging Face's take for a failure)."""

    def __init__(self, work, tensors):
        self._work = work
        self._tensors = tensors

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return self._tensors

    def get_future(self):
        fut = _torch.futures.Future()
        fut.set_result(self._tensors)
        return fut

    def synchronize(self):
        pass

    def __getattr__(self, name):
        return getattr(self._work, name)


# the async collectives, and which of their arguments they write
_WRITES = {
    "all_reduce": 0,
    "broadcast": 0,
    "reduce": 0,
    "all_gather_into_tensor": 0,
    "reduce_scatter_tensor": 0,
    "all_to_all_single": 0,
    "all_gather": 0,
    "reduce_scatter": 0,
    "all_to_all": 0,
}


def _completed_works(dist):
    for name, position in _WRITES.items():
        fn = getattr(dist, name, None)
        if fn is None:
            continue

        def collective(*args, __fn=fn, __position=position, **kwargs):
            work = __fn(*args, **kwargs)
            if work is None or not kwargs.get("async_op", False):
                return work
            written = args[__position] if len(args) > __position else None
            tensors = written if isinstance(written, list) else [written]
            return _Done(work, tensors)

        collective.__name__ = name
        collective.__wrapped__ = fn
        collective.__doc__ = fn.__doc__
        setattr(dist, name, collective)


def _ddp(module):
    """DDP's default gradient reduction is C++ that waits on the group's future: a fake group's
    holds nothing. Where the program registers no hook of its own before its first forward,
    torch's allreduce_hook (the same reduction, in Python) is registered then."""
    ddp = module.DistributedDataParallel
    forward = ddp.forward

    def first_forward(self, *args, **kwargs):
        if not getattr(self, "_memtrack_hooked", False):
            self._memtrack_hooked = True
            if not getattr(self, "_comm_hooks", None):
                from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

                try:
                    self.register_comm_hook(self.process_group, allreduce_hook)
                except Exception as e:
                    transport.internal_error(e)
        return forward(self, *args, **kwargs)

    ddp.forward = first_forward


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


def _ddp_checks(module):
    """DDP compares its parameters' shapes across ranks by gathering them: here every rank is
    this program, and the gathered values are not known. It moves its inputs to the device
    on a side stream where they are on another device: the device's tensors say meta here,
    and are where they should be already (`.to("cuda")` keeps them, moves the host's)."""
    if hasattr(module, "_verify_param_shape_across_processes"):
        module._verify_param_shape_across_processes = lambda *args, **kwargs: None
    recursive_to = getattr(module, "_recursive_to", None)
    if recursive_to is not None and not getattr(recursive_to, "__memtrack__", False):

        def _recursive_to(inputs, target_device, use_side_stream_for_tensor_copies):
            return recursive_to(inputs, target_device, False)

        _recursive_to.__memtrack__ = True
        module._recursive_to = _recursive_to


def _fsdp_init(module):
    import itertools

    move = module._move_states_to_device

    def _move_states_to_device(params, buffers, device):
        # the host's stand-ins are CPU tensors to FSDP: moved, as it moves CPU tensors
        params, buffers = list(params), list(buffers)
        for t in itertools.chain(params, buffers):
            if fake_memory.is_host(t):
                t.data = t.to(device)
        return move(params, buffers, device)

    module._move_states_to_device = _move_states_to_device


def _fsdp_param(module):
    """FSDP2's CPU offload keeps the sharded parameters on the CPU, but not those it sees
    on meta (taken for deferred initialisation): the device's tensors here. Offloaded, they
    become host stand-ins, as the CPU copies they are on a GPU."""
    from . import fake_mode

    cls = module.FSDPParam
    init = cls._init_sharded_param

    def _init_sharded_param(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:  # FSDP's own attributes: another torch may name them otherwise
            data = self._sharded_param_data
            if not (self.offload_to_cpu and data.is_meta and fake_memory.uncounted_kind(data) is None):
                return
            padded = fake_mode.to_meta(data.view(self.padded_sharded_param_size), host=True)
            dim = self.fsdp_placement.dim
            self._sharded_param_data = padded.view(-1)
            self.sharded_param._local_tensor = padded.narrow(dim, 0, self.sharded_size[dim])
        except Exception as e:
            transport.internal_error(e)

    cls._init_sharded_param = _init_sharded_param


def _fsdp_collectives(module):
    """FSDP2's gradient reduction copies the gradients to the CPU under CPU offload: host
    stand-ins, whatever their size."""
    from . import fake_mode

    reduce = module.foreach_reduce

    def foreach_reduce(*args, **kwargs):
        fake_mode.offloading[0] += 1
        try:
            return reduce(*args, **kwargs)
        finally:
            fake_mode.offloading[0] -= 1

    module.foreach_reduce = foreach_reduce


def _fsdp_param_group(module):
    group = module.FSDPParamGroup
    validate = group._validate_no_meta_params
    collectives = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_collectives")
    if collectives is not None and hasattr(module, "foreach_reduce"):
        module.foreach_reduce = collectives.foreach_reduce  # the one _fsdp_collectives wraps

    def _validate_no_meta_params(self):
        try:
            local = lambda p: getattr(p.sharded_param, "_local_tensor", p.sharded_param)  # noqa: E731
            left = any(fake_memory.is_user_meta(local(p)) for p in self.fsdp_params)
        except Exception as e:
            transport.internal_error(e)
            return validate(self)
        return validate(self) if left else None

    group._validate_no_meta_params = _validate_no_meta_params
    validate_cpu = getattr(group, "_validate_cpu_offload_params", None)
    if validate_cpu is not None:

        def _validate_cpu_offload_params(self):
            # the host's stand-ins are the CPU tensors it asks for
            try:
                local = lambda p: getattr(p.sharded_param, "_local_tensor", p.sharded_param)  # noqa: E731
                if all(fake_memory.is_host(local(p)) for p in self.fsdp_params):
                    return None
            except Exception as e:
                transport.internal_error(e)
            return validate_cpu(self)

        group._validate_cpu_offload_params = _validate_cpu_offload_params


def _group_of(func, args):
    """The process group a collective op runs on: a functional collective names it (its last
    string argument), a c10d op holds it."""
    if func.namespace == "_c10d_functional":
        names = [a for a in args if isinstance(a, str)]
        if not names:
            return None
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(names[-1])
    from torch._C._distributed_c10d import ProcessGroup

    for a in args:
        if type(a).__name__ == "ScriptObject":
            try:
                return ProcessGroup.unbox(a)
            except Exception:
                continue
    return None


def saw_collective(func, args):
    """A collective ran: a process group of more than one rank that communicates is NCCL
    communicators and their buffers on the device, the first time (a `group` message; the
    estimate's allowance per group: docs/estimate.md)."""
    if func.namespace not in ("c10d", "_c10d_functional") or _torch is None:
        return
    try:
        pg = _group_of(func, args)
        if pg is None:
            return
        name, size = pg.group_name, pg.size()
        if name in _groups:
            return
        _groups[name] = size
        if size > 1:
            transport.message({"t": MSG_ESTIMATE_GROUP, "name": name, "size": size})
            allowance = int(os.environ.get("MEMTRACK_ESTIMATE_NCCL_ALLOWANCE", "0") or 0)
            if allowance:
                fake_memory.take_from_limit(allowance)
    except Exception as e:
        transport.internal_error(e)


def install(torch):
    """The fake group and the rest, under every estimate; under a distributed one (`--world-size`
    or torchrun) also torchrun's count of the node's devices."""
    global _torch
    import torch.distributed as dist

    if not dist.is_available():
        return
    _torch = torch
    dist.init_process_group = _init_process_group(dist, dist.init_process_group)
    dist.is_nccl_available = lambda: True
    _object_collectives(dist)
    _completed_works(dist)
    _meta_kernels(torch)
    if rank_and_world() is not None:
        local = os.environ.get("LOCAL_WORLD_SIZE", "1")
        torch.cuda.device_count = lambda: int(local) if local.isdigit() else 1
    after_import("torch.distributed.utils", _ddp_checks)
    after_import("torch.nn.parallel.distributed", _ddp_checks)
    after_import("torch.nn.parallel.distributed", _ddp)
    after_import("torch.distributed.fsdp._fully_shard._fsdp_init", _fsdp_init)
    after_import("torch.distributed.fsdp._fully_shard._fsdp_param_group", _fsdp_param_group)
    after_import("torch.distributed.fsdp._fully_shard._fsdp_param", _fsdp_param)
    after_import("torch.distributed.fsdp._fully_shard._fsdp_collectives", _fsdp_collectives)
