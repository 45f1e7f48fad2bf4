// The compiled observer (`record --observer compiled`, and `auto`'s choice without CUDA): an
// at::RecordFunction callback that picks out each op a TorchDispatchMode would see, so the
// ~6 us an op that torch's C++-to-Python dispatch costs a Python mode is not paid. On the CPU
// it accounts the common op itself (fast_path.h: the agent's storage table and spool, no
// Python frame); any other op goes to the agent's Python body (ops.observed: the storage
// table, categories, the spool). Built by native.py on the user's machine, once per torch and
// Python (a plain C extension: Python's C API and torch's headers, no pybind11).
//
// Which RecordFunction calls are the ops a dispatch mode sees (RecordFunction fires at every
// Dispatcher::call; a dispatch mode only where the op reaches the Python key):
//   - a CompositeImplicitAutograd op decomposes above the Python key: not an op, and the ops
//     of its decomposition are, one by one; but under inference mode (the autograd keys
//     excluded) it reaches the Python key whole: an op, its decomposition nested;
//   - a call made while an op runs (inside its kernel) is not seen by a mode (which is off its
//     stack while it runs the op): neither is it here, at any depth;
//   - but under autocast an op with an autocast kernel never reaches the Python key itself:
//     the kernel (above it) casts the arguments and calls the op again with autocast
//     switched off, and a mode sees those calls (the casts' `_to_copy`, then the op); so a
//     call made with autocast switched off straight under an op that autocast wraps is an op,
//     and that op is not;
//   - a call made while one of the program's dispatch modes is on the stack goes to that
//     mode first, and the agent's mode (at the bottom of the stack) would see the calls the
//     mode makes: the call is passed over, and the mode's calls are seen as ops; torch's own
//     infrastructure modes (FakeTensorMode, the tracer's proxy mode) run after every other
//     mode, so a call made under them is an op, and their work under it is nested;
//   - a call made with the Python key excluded (torch.tensor() builds its tensor so, a mode
//     runs an op with dispatch off) is not seen by any mode, nor what runs under it;
//   - detach_ is done whole by its autograd kernel, which never calls below it: not an op;
//     detach is not sampled (as MemoryTracker), so it is not handed over either;
//   - autograd nodes (BACKWARD_FUNCTION scopes) are not ops, and do not nest;
//   - `record_function` blocks: their enter and exit ops are not observed by RecordFunction
//     (they make one); the agent samples them from Python (native.observe).
// Ops the agent's own Python body runs (reading a sparse tensor's parts) are not seen.
//
// A dense or meta tensor, or a subclass, is never given a Python object here that it did not
// have: one made inside torch (Parameter's detach, FakeTensor's meta tensor, a subclass being
// made) would be tied to it, and Tensor._make_subclass then refuses it. Only sparse, nested
// and functorch tensors are (the agent needs their parts; `detach`, through which torch makes
// a Parameter of one, is never handed over).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <Python.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_variable.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fast_path.h"

namespace {

struct OpInfo {
  int32_t id;      // index into ops; -1: never an op (unnamed, detach)
  bool composite;  // CompositeImplicitAutograd: an op only under inference mode
  c10::DispatchKeySet autocast;  // the autocast keys it has a kernel for (casts its arguments)
};

struct Op {
  std::string name;  // "add.Tensor", as OpOverload.__name__
  bool mutable_;
};

std::mutex ops_mu;                                // ops and by_name grow from any thread
std::vector<Op> ops;
std::unordered_map<std::string, int32_t> by_name;
PyObject* on_op = nullptr;                        // ops.observed(op id, outputs, device)
at::CallbackHandle handle = 0;
bool stopped = false;  // uninstalled: callbacks still running finish without calling Python
// > 0 while torch.compile compiles (any thread: its callbacks are global): the ops of its
// tracing are not the program's (a dispatch mode is switched off for them the same way)
std::atomic<int> paused{0};

struct Ctx;
thread_local Ctx* top = nullptr;      // the innermost call this thread is in (not null: nested)
thread_local bool in_python = false;  // the agent's body is running on this thread
// The callback was added on this thread (install, attach). It also reaches threads that
// torch's own code starts with the caller's thread-local state (c10d gloo's workers, whose
// copies, divisions and buffers a dispatch mode, MemTracker's or the python observer's, never
// sees): their ops are left out, but those of a backward (autograd's device threads).
thread_local bool own_thread = false;
// fn.name() points into the op's schema (stable while the op is registered): a per-thread
// cache from it to the op, so the common lookup takes no lock
thread_local std::unordered_map<const char*, OpInfo>* by_ptr = nullptr;

int32_t intern(const std::string& name, bool mutable_) {
  std::lock_guard<std::mutex> g(ops_mu);
  auto it = by_name.find(name);
  if (it != by_name.end()) return it->second;
  int32_t id = (int32_t)ops.size();
  ops.push_back(Op{name, mutable_});
  by_name.emplace(name, id);
  return id;
}

OpInfo info_of(const at::RecordFunction& fn) {
  if (!by_ptr) by_ptr = new std::unordered_map<const char*, OpInfo>();
  const char* p = fn.name();
  auto it = by_ptr->find(p);
  if (it != by_ptr->end()) return it->second;
  OpInfo info{-1, false, c10::DispatchKeySet()};
  auto op_name = fn.operator_name();
  if (op_name) {
    std::string n = op_name->name;
    auto colon = n.find("::");
    if (colon != std::string::npos) n = n.substr(colon + 2);
    n += "." + (op_name->overload_name.empty() ? std::string("default") : op_name->overload_name);
    auto h = c10::Dispatcher::singleton().findOp(*op_name);
    info.composite =
        h && h->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    for (c10::DispatchKey k : c10::autocast_dispatch_keyset) {
      if (h && h->hasKernelForDispatchKey(k)) {
        info.autocast = info.autocast | c10::DispatchKeySet(k);
      }
    }
    if (n != "detach_.default" && n != "detach.default") {
      bool mutable_ = true;
      if (h) {
        try {
          mutable_ = h->schema().is_mutable();
        } catch (...) {
        }
      }
      info.id = intern(n, mutable_);
    }
  }
  by_ptr->emplace(p, info);
  return info;
}

struct Ctx : at::ObserverContext {
  int32_t id;  // the op to hand over at its end; -1: nested, or hidden from modes
  Ctx* parent;
  // an op's autocast keys that were on when it was called: its autocast kernel runs, and
  // the calls it makes with one of them switched off are the ops (id is then -1)
  c10::DispatchKeySet autocast;
  Ctx(int32_t i, Ctx* p, c10::DispatchKeySet a = c10::DispatchKeySet())
      : id(i), parent(p), autocast(a) {}
};

// Whether a tensor has its Python object already (PyObjectSlot::load_pyobj, torch 2.15; on a
// torch without it: no, and the tensor is not handed over).
template <typename Slot>
auto slot_pyobj(const Slot* slot, int) -> decltype(slot->load_pyobj()) {
  return slot->load_pyobj();
}
template <typename Slot>
PyObject* slot_pyobj(const Slot*, long) {
  return nullptr;
}
bool has_pyobj(const c10::TensorImpl* impl) { return slot_pyobj(impl->pyobj_slot(), 0) != nullptr; }

PyObject* storage_of(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) Py_RETURN_NONE;
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    // a plain dense tensor: its storage's Python object; a plain meta tensor (no memory):
    // False; a Python subclass (DTensor) with its Python object; a subclass still being made
    // (by Tensor._make_wrapper_subclass, which gives it its object next): nothing; anything
    // else (sparse, nested, functorch's wrappers) as the tensor, for the agent's slow path
    bool subclass = impl->key_set().has(c10::DispatchKey::Python);
    if (subclass) {
      if (has_pyobj(impl)) return THPVariable_Wrap(t);
      Py_RETURN_NONE;
    }
    bool plain = t.layout() == c10::kStrided &&
                 !impl->key_set().has_any(c10::functorch_transforms_ks);
    if (plain && t.is_meta()) Py_RETURN_FALSE;
    if (plain && impl->has_storage()) return THPStorage_Wrap(t.storage());
    return THPVariable_Wrap(t);
  }
  if (v.isTensorList()) {
    auto list = v.toTensorList();
    PyObject* tuple = PyTuple_New((Py_ssize_t)list.size());
    if (!tuple) return nullptr;
    for (size_t i = 0; i < list.size(); ++i) {
      PyObject* o = storage_of(c10::IValue(list.get(i)));
      if (!o) {
        Py_DECREF(tuple);
        return nullptr;
      }
      PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, o);
    }
    return tuple;
  }
  Py_RETURN_NONE;
}

// A KeyboardInterrupt or SystemExit raised while the agent's body ran (a signal handler of the
// program's runs at any bytecode, the body's included) belongs to the program: it cannot pass
// through the op's C++ frames from here, so it is raised again in the program's own code at
// its next bytecode (a pending call, as CPython raises a signal handler's exception). Until
// then no op is handed over: the pending call would run at the body's first bytecode again,
// and in a loop of ops it would never reach the program.
PyObject *deferred_type = nullptr, *deferred_value = nullptr, *deferred_traceback = nullptr;

int raise_deferred(void*) {
  if (!deferred_type) return 0;
  PyErr_Restore(deferred_type, deferred_value, deferred_traceback);
  deferred_type = deferred_value = deferred_traceback = nullptr;
  return -1;
}

void defer_if_the_programs() {
  if (!PyErr_Occurred()) return;
  if (PyErr_ExceptionMatches(PyExc_Exception) || deferred_type) {
    PyErr_Clear();  // the body reports its own failures: whatever is left is never the program's
    return;
  }
  PyErr_Fetch(&deferred_type, &deferred_value, &deferred_traceback);
  if (Py_AddPendingCall(raise_deferred, nullptr) != 0) {
    PyErr_Restore(deferred_type, deferred_value, deferred_traceback);
    deferred_type = deferred_value = deferred_traceback = nullptr;
    PyErr_Clear();
  }
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// The device index of a plain dense output (-1 on the CPU), for the agent's body.
long device_of(const std::vector<c10::IValue>* outs) {
  if (!outs || outs->size() != 1 || !(*outs)[0].isTensor()) return -1;
  const at::Tensor& t = (*outs)[0].toTensor();
  return t.defined() && !t.is_cpu() ? (long)t.get_device() : -1L;
}

// Hand op `id` and its outputs to the agent: (id, None | storage | tensor | tuple of them,
// the device index of a single storage).
void hand_over(int32_t id, const std::vector<c10::IValue>* outs) {
  if (id < 0 || stopped || !Py_IsInitialized() || finalizing()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  if (!stopped && on_op && !deferred_type) {
    in_python = true;
    // an exception of the program's may be on its way through this op's caller: set it
    // aside while the agent's body runs, and put it back as it was
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    std::vector<at::Tensor> ts;
    if (fast_outputs(outs, ts) && observe_fast(id, *outs, ts)) {
      ++path_counts.ops_in_c;
      defer_if_the_programs();
      PyErr_Restore(type, value, traceback);
      in_python = false;
      PyGILState_Release(gil);
      return;
    }
    ++path_counts.ops_to_python;
    PyObject* out;
    if (!outs || outs->empty()) {
      out = Py_None;
      Py_INCREF(out);
    } else if (outs->size() == 1) {
      out = storage_of((*outs)[0]);
    } else {
      out = PyTuple_New((Py_ssize_t)outs->size());
      for (size_t i = 0; out && i < outs->size(); ++i) {
        PyObject* o = storage_of((*outs)[i]);
        if (!o) {
          Py_CLEAR(out);
          break;
        }
        PyTuple_SET_ITEM(out, (Py_ssize_t)i, o);
      }
    }
    PyObject* pid = out ? PyLong_FromLong(id) : nullptr;
    PyObject* dev = pid ? PyLong_FromLong(device_of(outs)) : nullptr;
    if (dev) {
      PyObject* args[3] = {pid, out, dev};
      PyObject* r = PyObject_Vectorcall(on_op, args, 3, nullptr);
      Py_XDECREF(r);
    }
    Py_XDECREF(dev);
    Py_XDECREF(pid);
    Py_XDECREF(out);
    defer_if_the_programs();
    PyErr_Restore(type, value, traceback);
    in_python = false;
  }
  PyGILState_Release(gil);
}

// Whether a call made now, straight under `parent`, is one of the calls its autocast kernel
// makes with autocast switched off (the casts, then the op again): then the parent is not an
// op, and the call is seen as if made outside any op.
bool made_by_autocast(Ctx* parent) {
  if (parent->autocast.empty()) return false;
  c10::DispatchKeySet off = c10::impl::tls_local_dispatch_key_set().excluded_;
  if (!off.has_any(parent->autocast)) return false;
  parent->id = -1;
  return true;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (in_python || paused.load(std::memory_order_relaxed) > 0) return nullptr;
  if (!own_thread && torch::autograd::get_current_graph_task_id() == -1) return nullptr;
  Ctx* parent = top;
  if ((parent && !made_by_autocast(parent)) ||
      c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Python)) {
    top = new Ctx(-1, parent);
    return std::unique_ptr<at::ObserverContext>(top);
  }
  if (c10::impl::TorchDispatchModeTLS::any_modes_set(/*skip_infra_modes=*/true)) return nullptr;
  OpInfo info = info_of(fn);
  if (info.id < 0 || (info.composite && !c10::InferenceMode::is_enabled())) return nullptr;
  // autocast is on for a key where autocast is not excluded (autocast_dispatch_keyset is
  // excluded by default, and each is taken out of the excluded set while it is enabled)
  c10::DispatchKeySet autocast = info.autocast;
  if (!autocast.empty()) autocast = autocast - c10::impl::tls_local_dispatch_key_set().excluded_;
  top = new Ctx(info.id, parent, autocast);
  return std::unique_ptr<at::ObserverContext>(top);
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx_) {
  if (!ctx_) return;
  auto* ctx = static_cast<Ctx*>(ctx_);
  top = ctx->parent;
  // an op that raised (its RecordFunction ends as the exception passes) gave nothing, and a
  // dispatch mode would not have seen it end
  if (ctx->id >= 0 && std::uncaught_exceptions() == 0) hand_over(ctx->id, &fn.outputs());
}

// guarded(fn, *args): fn(*args) for a weakref callback (the agent's storage deaths), called
// from C so that no bytecode of the agent's runs before the call does: a signal handler's
// exception raised as fn starts (at its first bytecode) would otherwise be lost, as Python
// loses any exception of a weakref callback. It is deferred to the program as hand_over
// defers one, and fn is called again, once, to do its work.
PyObject* guarded(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n < 1) {
    PyErr_SetString(PyExc_TypeError, "guarded(fn, *args)");
    return nullptr;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    PyObject* r = PyObject_Vectorcall(args[0], args + 1, (size_t)(n - 1), nullptr);
    if (r) return r;
    if (PyErr_ExceptionMatches(PyExc_Exception)) return nullptr;  // fn's own failure, as ever
    defer_if_the_programs();
  }
  Py_RETURN_NONE;
}

// ---- weak references to autograd nodes, for the module tracker's "all" hooks (gradhooks._last):
// a hook on each of several nodes that counts, in each backward, those the backward will run.
// Holding the nodes' Python objects in the hook, which each node holds, would make a reference
// cycle per module call (node -> its pre-hooks -> the hook -> the nodes): garbage that only
// the collector's full collections free, and every one of them promoted into the oldest
// generation, so that a loop of small modules set off a full collection (100-200 ms with
// torch imported) every few thousand ops that the program alone never has. A capsule of weak
// node pointers holds nothing Python sees: no cycle, nothing for the collector to track.

// a node's Python object holds it by std::shared_ptr in older torch, by c10::intrusive_ptr in
// newer: the weak pointer of whichever this torch has
template <class P>
struct WeakOf;
template <class T>
struct WeakOf<std::shared_ptr<T>> {
  using type = std::weak_ptr<T>;
};
template <class T>
struct WeakOf<c10::intrusive_ptr<T>> {
  using type = c10::weak_intrusive_ptr<T>;
};
using WeakNode = WeakOf<decltype(torch::autograd::THPCppFunction::cdata)>::type;

struct WeakNodes {
  std::vector<WeakNode> nodes;
};

const char* const WEAK_NODES = "memtrack.weak_nodes";

void free_weak_nodes(PyObject* capsule) {
  delete static_cast<WeakNodes*>(PyCapsule_GetPointer(capsule, WEAK_NODES));
}

// weak_nodes(nodes) -> capsule; TypeError where one is not a C++ node (a custom Function's)
PyObject* weak_nodes(PyObject*, PyObject* seq) {
  PyObject* fast = PySequence_Fast(seq, "weak_nodes(nodes): a sequence");
  if (!fast) return nullptr;
  auto held = std::make_unique<WeakNodes>();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* o = PySequence_Fast_GET_ITEM(fast, i);
    if (!torch::autograd::THPCppFunction_Check(o)) {
      Py_DECREF(fast);
      PyErr_SetString(PyExc_TypeError, "weak_nodes: not a C++ autograd node");
      return nullptr;
    }
    held->nodes.emplace_back(reinterpret_cast<torch::autograd::THPCppFunction*>(o)->cdata);
  }
  Py_DECREF(fast);
  PyObject* capsule = PyCapsule_New(held.get(), WEAK_NODES, free_weak_nodes);
  if (capsule) held.release();
  return capsule;
}

// live_nodes(capsule) -> [node, ...]: those still alive (a dead one runs in no backward)
PyObject* live_nodes(PyObject*, PyObject* capsule) {
  auto* held = static_cast<WeakNodes*>(PyCapsule_GetPointer(capsule, WEAK_NODES));
  if (!held) return nullptr;
  PyObject* list = PyList_New(0);
  if (!list) return nullptr;
  for (auto& weak : held->nodes) {
    auto node = weak.lock();
    if (!node) continue;
    PyObject* o = torch::autograd::functionToPyObject(node);
    if (!o || PyList_Append(list, o) < 0) {
      Py_XDECREF(o);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(o);
  }
  return list;
}

}  // namespace

#include "module_path.h"

namespace {

// ---- the module: install(on_op, fast), death(key), attach(), uninstall(),
// op(id) -> (name, mutable), pause(), resume(), counts(), guarded(fn, *args),
// weak_nodes(nodes), live_nodes(capsule), bind_modules(...), module_pre(mod, inputs),
// module_post(mod, output)

PyObject* install(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n < 1 || n > 2) {
    PyErr_SetString(PyExc_TypeError, "install(on_op, fast=None)");
    return nullptr;
  }
  PyObject* fn = args[0];
  if (handle != 0) {
    PyErr_SetString(PyExc_RuntimeError, "the compiled observer is installed already");
    return nullptr;
  }
  hot = nullptr;
  if (n == 2 && !set_hot(args[1])) return nullptr;
  try {
    Py_INCREF(fn);
    Py_XDECREF(on_op);
    on_op = fn;
    stopped = false;
    at::RecordFunctionCallback cb(on_start, on_end);
    cb.needsOutputs(true);
    cb.scopes({at::RecordScope::FUNCTION});
    handle = at::addThreadLocalCallback(cb);
    own_thread = true;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

// attach(): the callback on this thread too (a thread the program started while recording);
// taken off with the thread (its callbacks end with it), and silent once uninstalled
thread_local at::CallbackHandle attached = 0;

PyObject* attach(PyObject*, PyObject*) {
  if (handle == 0 || stopped || attached != 0) Py_RETURN_NONE;
  try {
    at::RecordFunctionCallback cb(on_start, on_end);
    cb.needsOutputs(true);
    cb.scopes({at::RecordScope::FUNCTION});
    attached = at::addThreadLocalCallback(cb);
    own_thread = true;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* uninstall(PyObject*, PyObject*) {
  stopped = true;
  if (handle != 0) {
    try {
      at::removeCallback(handle);
    } catch (const std::exception&) {
    }
  }
  handle = 0;
  Py_RETURN_NONE;
}

PyObject* op(PyObject*, PyObject* arg) {
  long id = PyLong_AsLong(arg);
  if (id == -1 && PyErr_Occurred()) return nullptr;
  std::lock_guard<std::mutex> g(ops_mu);
  if (id < 0 || (size_t)id >= ops.size()) {
    PyErr_SetString(PyExc_IndexError, "no such op");
    return nullptr;
  }
  return Py_BuildValue("(sO)", ops[id].name.c_str(), ops[id].mutable_ ? Py_True : Py_False);
}

PyObject* pause(PyObject*, PyObject*) {
  paused.fetch_add(1);
  Py_RETURN_NONE;
}

PyObject* resume(PyObject*, PyObject*) {
  if (paused.fetch_sub(1) <= 0) paused.fetch_add(1);  // (never below zero)
  Py_RETURN_NONE;
}

// counts() -> {path: how many}: what took which path so far (fast_path.h's PathCounts)
PyObject* counts(PyObject*, PyObject*) {
  const PathCounts& c = path_counts;
  return Py_BuildValue(
      "{sKsKsKsKsKsKsKsKsKsKsK}", "ops_in_c", c.ops_in_c, "ops_to_python", c.ops_to_python,
      "records_in_place", c.records_in_place, "records_to_python", c.records_to_python,
      "deaths_in_c", c.deaths_in_c, "module_pre_in_c", c.module_pre_in_c,
      "module_pre_to_python", c.module_pre_to_python, "module_post_in_c", c.module_post_in_c,
      "module_post_to_python", c.module_post_to_python, "backward_in_c", c.backward_in_c,
      "backward_to_python", c.backward_to_python);
}

PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_FASTCALL,
     "Start handing every op of this thread to the callable (the CPU's commonest in C)."},
    {"death", death, METH_O, "A counted storage's weakref callback (ops._death_callback)."},
    {"attach", attach, METH_NOARGS, "Hand this thread's ops over too."},
    {"uninstall", uninstall, METH_NOARGS, "Stop (this thread's callback is removed)."},
    {"op", op, METH_O, "(name, mutable) of an op id handed over."},
    {"pause", pause, METH_NOARGS, "Hand over no op until resume() (nested: counted)."},
    {"resume", resume, METH_NOARGS, "Undo one pause()."},
    {"counts", counts, METH_NOARGS, "What took which path so far: {path: how many}."},
    {"guarded", (PyCFunction)(void (*)(void))guarded, METH_FASTCALL,
     "fn(*args), a signal's exception in it raised again in the program's code."},
    {"weak_nodes", weak_nodes, METH_O, "A capsule of weak references to C++ autograd nodes."},
    {"live_nodes", live_nodes, METH_O, "The nodes of a weak_nodes capsule still alive."},
    {"bind_modules", (PyCFunction)(void (*)(void))bind_modules, METH_FASTCALL,
     "The module tracker's commonest calls in C, with its state (module_path.h)."},
    {"module_pre", (PyCFunction)(void (*)(void))module_pre, METH_FASTCALL,
     "A module's forward pre-hook, where the fast path takes it: True when done."},
    {"module_post", (PyCFunction)(void (*)(void))module_post, METH_FASTCALL,
     "A module's forward hook, where the fast path takes it: True when done."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "memtrack_observer", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_memtrack_observer() { return PyModule_Create(&module); }
