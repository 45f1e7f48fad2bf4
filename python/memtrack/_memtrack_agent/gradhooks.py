"""When a module's backward starts and ends: pre-hooks on the autograd nodes that produce its
outputs' and inputs' gradients (ModuleTracker.on_grads). Each fn given (the tracker's
backward_starts / backward_ends) reports its own failures.
"""

import weakref

from . import ops
from .transport import internal_error

_will_engine_execute_node = None  # bound by bind()


def bind(torch):
    global _will_engine_execute_node
    _will_engine_execute_node = torch._C._will_engine_execute_node


def _every(fn):
    def hook(grad_outputs):
        fn()

    return hook


def _first(fn, gtid):
    """The first of several nodes to run in each backward (graph task)."""
    ran = set()

    def hook(grad_outputs):
        try:
            k = gtid()
            if k in ran:
                return
            ran.add(k)
        except Exception as e:
            internal_error(e)
            return
        fn()

    return hook


class _Held:
    """The nodes a strong "all" hook counts (_last), weakly referable: once hand_over gave
    them to the module's outputs' hooks, the hook reaches them only through a weak
    reference."""

    __slots__ = ("nodes", "__weakref__")

    def __init__(self, nodes):
        self.nodes = nodes


def _last(fn, gtid, nodes, weakly=True):
    """The last of several nodes to run in each backward, counting only those this backward
    runs (register_multi_grad_hook's "all"). Where the hook would hold the nodes itself, its
    `hand_over` returns them, for the module's outputs' hooks to hold, and leaves the hook a
    weak reference to them (on_grads)."""
    left = {}
    will_run = _will_engine_execute_node
    # a leaf's gradient accumulator lives only while something holds it (the leaf holds it
    # weakly): on_leaf_grads keeps them, and its hooks go at the end of the backward anyway
    weak = _weakly(nodes) if weakly else None
    if weak is not None:
        live, nodes = weak  # the hook holds no node: no reference cycle (_weakly)
        held = None
    else:
        # [the nodes, held here | None, a weak reference to them]; the closure keeps no
        # other reference to them
        held, nodes = [_Held(nodes), None], None

    def hook(grad_outputs):
        try:
            k = gtid()
            n = left.get(k)
            if n is None:
                n = 0
                if held is None:
                    counted = live(nodes)
                else:
                    h = held[0] or held[1]()
                    # gone: the module's outputs' graph died, its backward can run no more
                    counted = h.nodes if h is not None else ()
                for node in counted:
                    if will_run(node):
                        n += 1
            n -= 1
            if n > 0:
                left[k] = n
                return
            left.pop(k, None)
        except Exception as e:
            internal_error(e)
            return
        fn()

    def hand_over():
        h = held[0]
        if h is not None:
            held[1] = weakref.ref(h)
            held[0] = None
        return h

    if held is not None:
        hook.hand_over = hand_over
    return hook


def _weakly(nodes):
    """(live_nodes, capsule): the nodes held weakly by the compiled observer (observer.cpp,
    weak_nodes), or None where it is not loaded or one is a custom Function's node. A hook
    on a node that holds the node (or a sibling) is a reference cycle per module call, which
    only the collector's full collections free: every few thousand ops, one the program alone
    never has (docs/record.md, Python's garbage collections)."""
    ext = ops._native
    if ext is None:
        return None
    try:
        return ext.live_nodes, ext.weak_nodes(nodes)
    except Exception:  # TypeError: a custom Function's node; an older build: no weak_nodes
        return None


def on_grads(tracker, tensors, fn, mode, inputs_hook=None):
    """Call fn() once the gradients of `tensors` are being computed in a backward: when
    the first is ("any", a module's backward starts) or all of them are ("all", it ended),
    as register_multi_grad_hook, by a pre-hook on each distinct node producing them. A
    tensor hook of a non-leaf runs just before its node, as the node's pre-hooks do (in
    the order registered), so the moment is the same; a pre-hook is one C call to
    register and one Python call when it fires, against the multi-grad hook's Python
    machinery (handles, locks, a buffer of gradients): about a third of the module hooks'
    cost on a loop of small modules. Every hook on a non-leaf is a node pre-hook, so
    that those of different modules on one node keep the order they were registered in
    (a node runs its tensor hooks before its pre-hooks), but the outputs' hook of a module
    with forward hooks of its own (on_output_tensors).

    Where an "all" hook holds its nodes itself (they cannot be held weakly, _weakly), it
    returns a weak reference to that hook; the module's post-forward passes it on to its
    outputs' "any" hook (`inputs_hook`), which takes the nodes over (hand_over) and holds
    them from then on. A hook holding the nodes it sits on is a reference cycle per module
    call that only a full collection frees (docs/record.md, Known limits); the outputs'
    nodes lead to the inputs' nodes anyway, so holding them there makes no cycle, and they
    go with the outputs' graph. Returns None otherwise."""
    nodes = []
    leaves = None
    for t in tensors:
        g = t.grad_fn
        if g is None:
            if leaves is None:
                leaves = [t]
            elif all(t is not x for x in leaves):
                leaves.append(t)
            continue
        for n in nodes:
            if n is g:
                break
        else:
            nodes.append(g)
    if leaves is not None:
        on_leaf_grads(tracker, nodes, leaves, fn, mode)
        return None
    handing = None
    if len(nodes) == 1:
        # one node runs once per backward: its pre-hook is both "any" and "all"
        hook = _every(fn)
    elif mode == "any":
        hook = _first(fn, tracker.gtid)
    else:
        hook = _last(fn, tracker.gtid, nodes)
        if hasattr(hook, "hand_over"):
            handing = weakref.ref(hook)
    if inputs_hook is not None:
        inputs = inputs_hook()
        if inputs is not None:
            hook.keep = inputs.hand_over()  # held as long as the hook, by its nodes
    for n in nodes:
        n.register_prehook(hook)
    return handing


def on_output_tensors(tracker, tensors, fn, inputs_hook=None):
    """on_grads(..., "any") for the outputs of a module with forward hooks of its own: tensor
    hooks on the outputs themselves, which autograd runs before every node pre-hook on their
    node, in the order registered. The module's own forward hooks run after the agent's
    (global ones), so its backward starts before any tensor hook they put on its outputs, as
    ModTracker's (also a global module hook's tensor hooks) does: FSDP2's pre-backward
    all-gathers the module's parameters there and queues its end-of-backward callback
    (docs/record.md, "FSDP2"). The agent's pre-hooks already on those nodes (a submodule's
    whose output it returns: the head of an LM) are moved in front of it, their order kept.
    Outputs that are leaves, or tensors that take no hook, are on_grads's."""
    outs = []
    for t in tensors:
        if t.grad_fn is None:
            return on_grads(tracker, tensors, fn, "any", inputs_hook)
        if all(t is not o for o in outs):
            outs.append(t)
    hook = _every(fn) if len(outs) == 1 else _first(fn, tracker.gtid)
    handles = []
    try:
        nodes = []
        for t in outs:
            g = t.grad_fn
            earlier = None
            if all(g is not n for n in nodes):
                nodes.append(g)
                earlier = _take_own_prehooks(g)
            handles.append(t.register_hook(_after(earlier, hook) if earlier else hook))
    except Exception:
        for h in handles:
            h.remove()
        return on_grads(tracker, tensors, fn, "any", inputs_hook)
    if inputs_hook is not None:
        inputs = inputs_hook()
        if inputs is not None:
            hook.keep = inputs.hand_over()  # held as long as the hook, by the outputs' nodes
    return None


def _after(earlier, hook):
    def moved(grad):
        for h in earlier:
            h(None)
        hook(grad)

    return moved


def _noop(grad_outputs):
    pass


def _own_codes():
    """The code of the hooks _every, _first and _last make."""
    return {
        c
        for f in (_every, _first, _last)
        for c in f.__code__.co_consts
        if getattr(c, "co_name", None) == "hook"
    }


_OWN = _own_codes()


def _take_own_prehooks(node):
    """The agent's pre-hooks on `node` (its own, or the compiled observer's ModHook), taken off
    it, in the order they were registered; a node's Python pre-hooks share one dict, reached
    through a handle."""
    h = node.register_prehook(_noop)
    d = h.hooks_dict_ref()
    h.remove()
    if d is None:
        return None
    taken = []
    for k, v in list(d.items()):
        c = getattr(v, "__code__", None)
        own = c in _OWN if c is not None else type(v).__name__ == "ModHook"
        if own:
            taken.append(v)
            del d[k]
    return taken


def on_leaf_grads(tracker, nodes, leaves, fn, mode):
    """on_grads where some tensors are leaves (a parametrization's forward reads the
    parameter itself): a leaf keeps its hooks for good, so a hook per forward call would
    fire once more each iteration (ModTracker's Post-Backward calls pile up: 2, 3, 4...).
    The leaves get tensor hooks that fire once and are removed at the end of that
    backward (engine_callback; not inside the hook, while autograd walks the hooks); the
    other tensors, node pre-hooks as in on_grads. For "all", a leaf counts by its
    gradient accumulator, found as register_multi_grad_hook finds it (a view of it)."""
    handles = [None]  # the leaves' hook handles, until fn ran

    def once():
        h = handles[0]
        if h is None:
            return
        handles[0] = None
        tracker.here().spent_hooks.extend(h)
        fn()

    if len(nodes) + len(leaves) == 1:
        hook = _every(once)
    elif mode == "any":
        hook = _first(once, tracker.gtid)
    else:
        accs = [tracker.grad_acc(t) for t in leaves]
        hook = _last(once, tracker.gtid, nodes + accs, weakly=False)
    for n in nodes:
        n.register_prehook(hook)

    def tensor_hook(grad):
        hook(None)

    handles[0] = [t.register_hook(tensor_hook) for t in leaves]
