// The compiled observer's module fast path (included by observer.cpp, in its translation unit,
// after its weak node pointers). The module tracker's forward hooks (modules.py,
// ModuleTracker.pre_forward / post_forward) for their commonest call: a submodule, called in
// the main thread outside backward, whose inputs and outputs are plain tensors in plain
// tuples and lists (the layers of a model, an RNN cell unrolled over time). Done here with
// the tracker's own Python state (its dicts and lists, the ModInfo on the module) and the
// same records, and the autograd hooks that say when the module's backward starts and ends
// are C objects on the nodes (gradhooks.py's `_every`, `_first` and `_last`, holding the
// nodes weakly) doing the tracker's backward_starts / backward_ends (backward_fast, else
// calling them): on a loop of small modules the Python bodies of the hooks cost about 0.2x
// the program's own time, on a small conv net 0.05x. A module's first call in an iteration
// counts its parameters and buffers (params.Params.track) where they are plain CPU
// tensors counted already, with their hooks on, read through nn.Module's own methods.
// Everything else (a top-level call, which may begin an iteration; a first call with new or
// unusual parameters; backward; another thread; pytree containers; leaf tensors;
// subclasses; a custom Function's node) is left to the Python path, decided before anything
// is done, so that a call is done wholly by one path or the other.
#pragma once

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

// modules.bind_native's codes, in this order (protocol.py's)
enum { C_PUSH, C_POP, C_SNAP, C_INPUT, C_OUTPUT, C_PRE_FW, C_POST_FW, C_PRE_BW, C_POST_BW,
       C_PUSH_FORWARD, C_PUSH_BACKWARD, C_PUSH_PASS_THROUGH, C_MOD, C_REF, C_PARAM, C_BUFFER,
       C_GRAD, N_CODES };

// The nn.Module methods a module's parameters and buffers are read through (MemTracker's
// mod.parameters() and mod.buffers()): a module whose class overrides one is the Python
// path's.
enum { M_PARAMETERS, M_BUFFERS, M_NAMED_PARAMETERS, M_NAMED_BUFFERS, M_NAMED_MEMBERS,
       M_NAMED_MODULES, N_METHODS };
const char* method_names[N_METHODS] = {"parameters", "buffers", "named_parameters",
                                       "named_buffers", "_named_members", "named_modules"};

struct Mods {
  unsigned long main_ident = 0;  // the thread that started recording (tracker.main_ident)
  PyObject* tracked = nullptr;   // tracker.tracked: mk -> True
  PyObject* inner = nullptr;     // tracker.inner: compiled calls running
  PyObject* main = nullptr;      // tracker.main: the main thread's ThreadState
  PyObject* parents = nullptr;   // tracker.main.parents: name -> active count
  PyObject* queued = nullptr;    // tracker.main.post_bw_to_enqueue
  PyObject* starts = nullptr;    // tracker.backward_starts(wmod, info, how)
  PyObject* ends = nullptr;      // tracker.backward_ends(wmod, info)
  PyObject* partial = nullptr;   // functools.partial
  PyObject* parameter = nullptr; // torch.nn.Parameter (a plain tensor, as ops.parts has it)
  PyObject* state = nullptr;     // state.py's globals (`active`)
  PyObject* hooked = nullptr;    // tracker.params.hooked: id(param) -> weakref
  PyObject* methods[N_METHODS] = {};  // nn.Module's
  int64_t codes[N_CODES] = {};
  // interned attribute names
  PyObject *s_dict, *s_info, *s_obj_id, *s_seen, *s_mk, *s_name, *s_name_id, *s_wmod,
      *s_fw_inputs, *s_active, *s_has_callback, *s_parameters, *s_buffers, *s_modules,
      *s_forward_hooks;
  PyObject* s_methods[N_METHODS] = {};
};
Mods* mods = nullptr;  // set by bind_modules(); never freed (a late hook may still run)

int64_t code(int i) { return mods->codes[i]; }

using NodePtr = std::remove_cv_t<std::remove_reference_t<decltype(
    std::declval<at::TensorBase>().grad_fn())>>;

// A storage a module's first call counts (ops.track_as): its entry in ops._known, its key,
// the category it is counted in
struct Member {
  PyObject* entry;  // a new reference
  int64_t key, cat;
};

// One module call, as gathered before anything is done.
struct Call {
  PyObject* info = nullptr;   // its ModInfo (a new reference)
  PyObject* name = nullptr;   // info.name, info.wmod (new references)
  PyObject* wmod = nullptr;
  PyObject* fw_inputs = nullptr;  // info.fw_inputs: a list (a new reference)
  int64_t mk = 0, name_id = 0;
  std::vector<PyObject*> grads;  // the leaves whose gradients a backward computes (borrowed)
  std::vector<NodePtr> nodes;    // their distinct nodes, in order
  int64_t io = 0;                // the bytes of the leaves' storages (io_mem)
  bool first = false;            // its first call in the iteration (MOD, with its members)
  std::vector<Member> params, buffers;  // (params: each parameter's, then its gradient's)
  ~Call() {
    for (auto* v : {&params, &buffers})
      for (const Member& e : *v) Py_DECREF(e.entry);
    Py_XDECREF(info);
    Py_XDECREF(name);
    Py_XDECREF(wmod);
    Py_XDECREF(fw_inputs);
  }
};

// ModuleTracker.flat's leaves of plain nested tuples and lists; false where another container
// is met (pytree's, left to the Python path)
bool plain_leaves(PyObject* seq, std::vector<PyObject*>& out, int depth = 0) {
  if (depth > 32) return false;
  bool tuple = PyTuple_CheckExact(seq);
  Py_ssize_t n = tuple ? PyTuple_GET_SIZE(seq) : PyList_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = tuple ? PyTuple_GET_ITEM(seq, i) : PyList_GET_ITEM(seq, i);
    if (PyTuple_CheckExact(a) || PyList_CheckExact(a)) {
      if (!plain_leaves(a, out, depth + 1)) return false;
    } else if (PyTuple_Check(a) || PyList_Check(a) || PyDict_Check(a)) {
      return false;
    } else {
      out.push_back(a);
    }
  }
  return true;
}

PyObject* attr(PyObject* o, PyObject* name) { return PyObject_GetAttr(o, name); }

// o.__dict__[name] (borrowed: o holds its __dict__), or null: absent, or with an exception set
// on failure
PyObject* own_attr(PyObject* o, PyObject* name) {
  PyObject* d = attr(o, mods->s_dict);
  if (!d) return nullptr;
  PyObject* v = PyDict_Check(d) ? PyDict_GetItemWithError(d, name) : nullptr;
  Py_DECREF(d);
  return v;
}

// o.<name>, an int, into out; -1 with an exception set on failure
int int_attr(PyObject* o, PyObject* name, int64_t& out) {
  PyObject* v = attr(o, name);
  if (!v) return -1;
  out = PyLong_AsLongLong(v);
  Py_DECREF(v);
  return out == -1 && PyErr_Occurred() ? -1 : 0;
}

// ModuleTracker.add_parent / remove_parent, on the main thread's running modules (name ->
// how many of its calls run): PUSH where it starts running, POP where it stops. -1 with an
// exception set on failure.
int add_parent(PyObject* name, int64_t name_id, int64_t how) {
  PyObject* count = PyDict_GetItemWithError(mods->parents, name);
  if (!count && PyErr_Occurred()) return -1;
  long c = count ? PyLong_AsLong(count) : 0;
  PyObject* now = c == -1 && PyErr_Occurred() ? nullptr : PyLong_FromLong(c + 1);
  int r = now ? PyDict_SetItem(mods->parents, name, now) : -1;
  Py_XDECREF(now);
  int64_t push[3] = {code(C_PUSH), name_id, how};
  return r < 0 ? -1 : count ? 0 : emit(push, 3);
}

int remove_parent(PyObject* name, int64_t name_id) {
  PyObject* count = PyDict_GetItemWithError(mods->parents, name);
  if (!count) return PyErr_Occurred() ? -1 : 0;
  long c = PyLong_AsLong(count);
  if (c == -1 && PyErr_Occurred()) return -1;
  if (c <= 1) {
    int64_t pop[2] = {code(C_POP), name_id};
    return PyDict_DelItem(mods->parents, name) < 0 ? -1 : emit(pop, 2);
  }
  PyObject* now = PyLong_FromLong(c - 1);
  int r = now ? PyDict_SetItem(mods->parents, name, now) : -1;
  Py_XDECREF(now);
  return r;
}

// The entry of tensor t's storage in ops._known (a new reference) and the storage's key: 1,
// or 0 where it has none (not counted, or another kind of storage), -1 with an exception set
// on failure.
int known_entry(const at::Tensor& t, PyObject*& entry, int64_t& key) {
  entry = nullptr;
  PyObject* st = THPStorage_Wrap(t.storage());
  if (!st) return -1;
  key = (int64_t)(intptr_t)st;
  PyObject* k = Py_TYPE(st) == THPStorageClass ? PyLong_FromVoidPtr(st) : nullptr;
  PyObject* e = k ? PyDict_GetItemWithError(hot->known, k) : nullptr;
  Py_XDECREF(k);
  Py_DECREF(st);
  if (PyErr_Occurred()) return -1;
  if (!e || !PyList_Check(e) || PyList_GET_SIZE(e) < 2) return 0;
  Py_INCREF(e);
  entry = e;
  return 1;
}

// A known entry's bytes (None: 0); -1 with an exception set on failure
int64_t entry_bytes(PyObject* e) {
  PyObject* nb = PyList_GET_ITEM(e, 1);
  if (nb == Py_None) return 0;
  int64_t v = PyLong_AsLongLong(nb);
  return v == -1 && PyErr_Occurred() ? -1 : v;
}

// The bytes counted for a tensor's storage (ops.storage_bytes), 0 where it is not counted;
// -1 with an exception set on failure.
int64_t counted_bytes(const at::Tensor& t) {
  PyObject* e;
  int64_t key;
  int r = known_entry(t, e, key);
  if (r <= 0) return r;
  int64_t v = entry_bytes(e);
  Py_DECREF(e);
  return v;
}

// ---- a module's first call in an iteration: its parameters and buffers (params.Params.track)

bool own_method(PyObject* mod, int i) {
  return _PyType_Lookup(Py_TYPE(mod), mods->s_methods[i]) == mods->methods[i];
}

// mod.__dict__[name] where it is a dict (borrowed), else null (an exception set on failure)
PyObject* dict_attr(PyObject* mod, PyObject* name) {
  PyObject* v = own_attr(mod, name);
  return v && PyDict_Check(v) ? v : nullptr;
}

// Module.named_modules()'s modules under mod (each once, mod first, depth first) into out: 1,
// or 0 where one overrides named_modules, or is not a plain module, or the tree is deeper
// than 64; -1 with an exception set on failure.
int sub_modules(PyObject* mod, std::vector<PyObject*>& out, std::unordered_set<PyObject*>& memo,
                int depth = 0) {
  if (!memo.insert(mod).second) return 1;
  if (depth > 64 || !own_method(mod, M_NAMED_MODULES)) return 0;
  out.push_back(mod);
  PyObject* children = dict_attr(mod, mods->s_modules);
  if (!children) return PyErr_Occurred() ? -1 : 0;
  Py_ssize_t pos = 0;
  PyObject *key, *child;
  while (PyDict_Next(children, &pos, &key, &child)) {
    if (child == Py_None) continue;
    int r = sub_modules(child, out, memo, depth + 1);
    if (r <= 0) return r;
  }
  return 1;
}

// Add a plain CPU tensor's storage, known already, to out, counted as `cat`: 1, or 0 where
// ops.track_as would do more (count a new storage, note an unusual tensor); -1 with an
// exception set on failure.
int add_member(const at::Tensor& t, int64_t cat, std::vector<Member>& out) {
  if (!t.defined() || !fast_tensor(t)) return 0;
  Member e{nullptr, 0, cat};
  int r = known_entry(t, e.entry, e.key);
  if (r > 0) out.push_back(e);
  return r;
}

// Whether tracker.params.hooked holds p (its hooks are on it); -1 with an exception set on
// failure
int hooked(PyObject* p) {
  PyObject* k = PyLong_FromVoidPtr(p);
  PyObject* w = k ? PyDict_GetItemWithError(mods->hooked, k) : nullptr;
  Py_XDECREF(k);
  if (!w) return PyErr_Occurred() || !k ? -1 : 0;
  return PyWeakref_CheckRef(w) && PyWeakref_GetObject(w) == p;
}

// c's members, as mod.parameters() (each parameter, then its gradient) and mod.buffers()
// give them: 1, or 0 where the Python path must count them (a method overridden, a tensor
// that is not a plain known CPU one, a parameter whose hooks are not on it yet); -1 with an
// exception set on failure.
int gather_members(PyObject* mod, Call& c) {
  for (int i = 0; i < N_METHODS; ++i)
    if (!own_method(mod, i)) return 0;
  std::vector<PyObject*> modules;
  std::unordered_set<PyObject*> seen;  // named_modules' memo, then _named_members'
  int r = sub_modules(mod, modules, seen);
  if (r <= 0) return r;
  for (int buffers = 0; buffers < 2; ++buffers) {
    seen.clear();
    for (PyObject* sub : modules) {
      PyObject* d = dict_attr(sub, buffers ? mods->s_buffers : mods->s_parameters);
      if (!d) return PyErr_Occurred() ? -1 : 0;
      Py_ssize_t pos = 0;
      PyObject *key, *v;
      while (PyDict_Next(d, &pos, &key, &v)) {
        if (v == Py_None || !seen.insert(v).second) continue;  // each tensor once
        if (Py_TYPE(v) != (PyTypeObject*)THPVariableClass &&
            Py_TYPE(v) != (PyTypeObject*)mods->parameter)
          return 0;
        const at::Tensor& t = THPVariable_Unpack(v);
        if (buffers) {
          r = add_member(t, code(C_BUFFER), c.buffers);
          if (r <= 0) return r;
          continue;
        }
        if (t.grad_fn()) return 0;  // not a leaf (whose .grad Python warns of)
        if ((r = hooked(v)) <= 0 || (r = add_member(t, code(C_PARAM), c.params)) <= 0) return r;
        const at::Tensor& grad = t.grad();
        if (grad.defined() && (r = add_member(grad, code(C_GRAD), c.params)) <= 0) return r;
      }
    }
  }
  return 1;
}

// ops.track_as for each member: its category set (a REF record where it changes); the bytes
// of those counted as `cat` into total. -1 with an exception set on failure.
int count_members(const std::vector<Member>& members, int64_t cat, int64_t& total) {
  for (const Member& e : members) {
    int64_t was = PyLong_AsLongLong(PyList_GET_ITEM(e.entry, 0));
    if (was == -1 && PyErr_Occurred()) return -1;
    if (was != e.cat) {
      PyObject* now = PyLong_FromLongLong(e.cat);
      int64_t ref[3] = {code(C_REF), e.key, e.cat};
      if (!now || PyList_SetItem(e.entry, 0, now) < 0 || emit(ref, 3) < 0) return -1;
    }
    if (e.cat != cat) continue;
    int64_t nb = entry_bytes(e.entry);
    if (nb < 0) return -1;
    total += nb;
  }
  return 0;
}

// Whether the call of `mod` is the fast path's, with what it needs gathered into c; output:
// the post-forward's (its call's result), else the pre-forward's (its arguments). 0: the
// Python path's; -1: an exception is set (the Python path's too, which reports its own).
int gather(PyObject* mod, PyObject* io, bool post, Call& c) {
  Mods* m = mods;
  if (!m || !hot || PyThread_get_thread_ident() != m->main_ident) return 0;
  if (PyDict_GET_SIZE(m->inner) != 0 || !strcmp(Py_TYPE(mod)->tp_name, "OptimizedModule"))
    return 0;
  if (torch::autograd::get_current_graph_task_id() != -1) return 0;
  c.info = own_attr(mod, m->s_info);
  Py_XINCREF(c.info);
  if (!c.info) return PyErr_Occurred() ? -1 : 0;
  PyObject* obj_id = attr(c.info, m->s_obj_id);
  PyObject* seen = obj_id ? attr(c.info, m->s_seen) : nullptr;
  bool same = obj_id && PyLong_AsVoidPtr(obj_id) == (void*)mod;
  bool is_seen = seen == Py_True;
  Py_XDECREF(obj_id);
  Py_XDECREF(seen);
  if (PyErr_Occurred()) return -1;
  if (!same || !is_seen) return 0;
  if (!(c.name = attr(c.info, m->s_name)) || int_attr(c.info, m->s_name_id, c.name_id) < 0 ||
      !(c.wmod = attr(c.info, m->s_wmod)) || !(c.fw_inputs = attr(c.info, m->s_fw_inputs)))
    return -1;
  if (!PyList_Check(c.fw_inputs)) return 0;
  PyObject* mk = attr(c.info, m->s_mk);
  if (!mk) return -1;
  c.mk = PyLong_AsLongLong(mk);
  int tracked = PyDict_Contains(m->tracked, mk);
  Py_DECREF(mk);
  if (tracked < 0 || PyErr_Occurred()) return -1;
  c.first = !tracked;
  if (c.first && post) return 0;
  if (post) {  // a module with forward hooks of its own: its outputs' hooks are tensor hooks
    PyObject* hooks = own_attr(mod, m->s_forward_hooks);  // (ModuleTracker.post_forward)
    if (!hooks && PyErr_Occurred()) return -1;
    if (!hooks || !PyDict_Check(hooks) || PyDict_GET_SIZE(hooks) != 0) return 0;
  }
  // not a top-level call (which may begin an iteration), nor a module running already
  PyObject* count = PyDict_GetItemWithError(m->parents, c.name);
  if (!count && PyErr_Occurred()) return -1;
  if (post) {
    if (!count || PyLong_AsLong(count) != 1 || PyDict_GET_SIZE(m->parents) < 2) return 0;
  } else if (count || PyDict_GET_SIZE(m->parents) == 0) {
    return 0;
  }
  std::vector<PyObject*> leaves;
  if (THPVariable_Check(io)) {
    leaves.push_back(io);
  } else if (!(PyTuple_CheckExact(io) || PyList_CheckExact(io)) || !plain_leaves(io, leaves)) {
    return 0;
  }
  for (PyObject* a : leaves) {
    if (!THPVariable_Check(a)) continue;
    if (Py_TYPE(a) != (PyTypeObject*)THPVariableClass && Py_TYPE(a) != (PyTypeObject*)m->parameter)
      return 0;
    const at::Tensor& t = THPVariable_Unpack(a);
    if (!fast_tensor(t)) return 0;
    int64_t nb = counted_bytes(t);
    if (nb < 0) return -1;
    c.io += nb;
    if (!t.requires_grad()) continue;
    const auto& g = t.grad_fn();
    if (!g) return 0;  // a leaf: its hooks stay on it (gradhooks.on_leaf_grads)
    c.grads.push_back(a);
    bool known = false;
    for (const auto& n : c.nodes) known = known || n.get() == g.get();
    if (known) continue;
    // a custom Function's node is not held weakly (gradhooks._weakly)
    PyObject* o = torch::autograd::functionToPyObject(g);
    if (!o) return -1;
    bool cpp = torch::autograd::THPCppFunction_Check(o);
    Py_DECREF(o);
    if (!cpp) return 0;
    c.nodes.push_back(g);
  }
  if (post) {  // the inputs' entry: no hook holding nodes to hand over (gradhooks.on_grads)
    Py_ssize_t n = PyList_GET_SIZE(c.fw_inputs);
    PyObject* last = n > 0 ? PyList_GET_ITEM(c.fw_inputs, n - 1) : nullptr;
    bool plain = n == 0 || (PyList_Check(last) && PyList_GET_SIZE(last) == 2 &&
                            PyList_GET_ITEM(last, 1) == Py_None);
    if (!plain) return 0;
  }
  return c.first ? gather_members(mod, c) : 1;  // (last: the walk costs most)
}

// ---- the hooks on the nodes (gradhooks.py's _every, _first, _last, for one module)

enum { EVERY, FIRST, LAST };

struct HookState {
  int kind;
  std::vector<int> ran;                   // FIRST: the backwards (graph tasks) it ran in
  std::vector<WeakNode> nodes;            // LAST: its nodes, held weakly
  std::unordered_map<int, size_t> left;   // LAST: per backward, how many have still to run
};

struct ModHook {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  HookState* state;
  Mods* mods;      // the recording it was made in (an in-process one may have begun since)
  PyObject* fn;    // the tracker's backward_starts or backward_ends
  PyObject* args[3];  // wmod, info, how (backward_starts only)
  Py_ssize_t nargs;
};

void hook_dealloc(PyObject* self) {
  auto* h = reinterpret_cast<ModHook*>(self);
  delete h->state;
  Py_XDECREF(h->fn);
  for (Py_ssize_t i = 0; i < h->nargs; ++i) Py_XDECREF(h->args[i]);
  Py_TYPE(self)->tp_free(self);
}

// Whether the running backward runs `node` (torch._C._will_engine_execute_node).
bool will_run(torch::autograd::Node* node) {
  const auto* in_graph = torch::autograd::get_current_graph_task_nodes_in_graph();
  if (!in_graph || in_graph->find(node) == in_graph->end()) return false;
  const auto* exec_info = torch::autograd::get_current_graph_task_exec_info();
  if (!exec_info || exec_info->empty()) return true;
  auto it = exec_info->find(node);
  return it != exec_info->end() && it->second.should_execute();
}

// ModuleTracker.backward_starts(wmod, info, how) (starts) or backward_ends(wmod, info) in the
// main thread, its end-of-backward callback queued already: 1 when done here, 0 where it is
// the tracker's to do (nothing done), -1 with an exception set on failure.
int backward_fast(bool starts, PyObject* const* args) {
  Mods* m = mods;
  if (!m || PyThread_get_thread_ident() != m->main_ident) return 0;
  PyObject* active = PyDict_GetItemWithError(m->state, m->s_active);
  if (!active) return PyErr_Occurred() ? -1 : 0;
  if (active != Py_True) return 0;
  if (starts) {
    PyObject* queued = PyObject_GetAttr(m->main, m->s_has_callback);
    if (!queued) return -1;
    Py_DECREF(queued);
    if (queued != Py_True) return 0;  // maybe_set_engine_callback queues it
  }
  PyObject* info = args[1];
  int64_t id = 0;
  PyObject* name = attr(info, m->s_name);
  PyObject* mk = name && int_attr(info, m->s_name_id, id) == 0 ? attr(info, m->s_mk) : nullptr;
  PyObject* mod = mk ? PyObject_CallNoArgs(args[0]) : nullptr;
  int r = mod ? 0 : -1;
  int tracked = r == 0 && mod != Py_None ? PyDict_Contains(m->tracked, mk) : 0;
  int64_t rec[3] = {code(C_SNAP), mk ? PyLong_AsLongLong(mk) : 0,
                    code(starts ? C_PRE_BW : C_POST_BW)};
  int64_t how = starts ? PyLong_AsLongLong(args[2]) : 0;
  if (tracked < 0 || PyErr_Occurred()) r = -1;
  if (r == 0 && starts) {  // add_parent(info, how), then the snapshot
    r = add_parent(name, id, how);
    if (r == 0 && tracked) r = emit(rec, 3);
  } else if (r == 0) {  // the snapshot, then remove_parent(info)
    if (tracked) r = emit(rec, 3);
    if (r == 0) r = remove_parent(name, id);
  }
  Py_XDECREF(mod);
  Py_XDECREF(mk);
  Py_XDECREF(name);
  return r < 0 ? -1 : 1;
}

PyObject* hook_call(PyObject* self, PyObject* const*, size_t, PyObject*) {
  auto* h = reinterpret_cast<ModHook*>(self);
  HookState& s = *h->state;
  int k = torch::autograd::get_current_graph_task_id();
  if (s.kind == FIRST) {
    for (int r : s.ran)
      if (r == k) Py_RETURN_NONE;
    s.ran.push_back(k);
  } else if (s.kind == LAST) {
    auto it = s.left.find(k);
    size_t n = 0;
    if (it == s.left.end()) {
      for (auto& weak : s.nodes) {
        auto node = weak.lock();
        if (node && will_run(node.get())) ++n;
      }
    } else {
      n = it->second;
    }
    if (n > 1) {
      s.left[k] = n - 1;
      Py_RETURN_NONE;
    }
    s.left.erase(k);
  }
  int done = h->mods == mods ? backward_fast(h->nargs == 3, h->args) : 0;
  ++(done != 0 ? path_counts.backward_in_c : path_counts.backward_to_python);
  if (done < 0) report_own_failure();
  if (done != 0) {
    if (PyErr_Occurred()) return nullptr;  // a signal handler's exception: the program's
    Py_RETURN_NONE;
  }
  // the tracker's method reports its own failures; anything else (a signal handler's
  // KeyboardInterrupt) is the program's, and goes on through the backward
  PyObject* r = PyObject_Vectorcall(h->fn, h->args, (size_t)h->nargs, nullptr);
  if (!r) return nullptr;
  Py_DECREF(r);
  Py_RETURN_NONE;
}

PyTypeObject ModHookType = callable_type<ModHook>(
    "memtrack_observer.ModHook", hook_dealloc,
    "A module's backward starts or ends: a pre-hook on its outputs' or inputs' nodes.");

// The hook calling fn(wmod, info[, how]) on c's nodes: when the first of them runs in a
// backward (starts) or the last that backward runs (ends), and registered on each. -1 with
// an exception set on failure.
int hook_nodes(Call& c, bool starts, PyObject* how) {
  auto* h = PyObject_New(ModHook, &ModHookType);
  if (!h) return -1;
  h->vectorcall = hook_call;
  h->mods = mods;
  h->state = new HookState();
  h->state->kind = c.nodes.size() == 1 ? EVERY : starts ? FIRST : LAST;
  if (h->state->kind == LAST)
    for (const auto& n : c.nodes) h->state->nodes.emplace_back(n);
  h->fn = starts ? mods->starts : mods->ends;
  Py_INCREF(h->fn);
  h->nargs = starts ? 3 : 2;
  h->args[0] = c.wmod;
  h->args[1] = c.info;
  h->args[2] = how;
  for (Py_ssize_t i = 0; i < h->nargs; ++i) Py_INCREF(h->args[i]);
  int r = 0;
  for (const auto& n : c.nodes) {
    PyObject* handle;
    try {
      handle = torch::autograd::registerFunctionPreHook(*n, (PyObject*)h);
    } catch (python_error& e) {
      e.restore();  // _register_hook's own exception
      handle = nullptr;
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      handle = nullptr;
    }
    if (!handle) {
      r = -1;
      break;
    }
    Py_DECREF(handle);  // the hook goes with the node
  }
  Py_DECREF(h);
  return r;
}

// ModuleTracker.pre_forward's work for c (add_parent, mt_pre_fw, the inputs' hooks)
int pre_effects(Call& c) {
  Mods* m = mods;
  int64_t snap[3] = {code(C_SNAP), c.mk, code(C_PRE_FW)};
  if (add_parent(c.name, c.name_id, code(C_PUSH_FORWARD)) < 0) return -1;
  if (c.first) {  // its parameters and buffers counted, and it is tracked in this iteration
    int64_t pm = 0, bm = 0;
    PyObject* mk = PyLong_FromLongLong(c.mk);
    int r = mk && count_members(c.params, code(C_PARAM), pm) == 0 &&
                    count_members(c.buffers, code(C_BUFFER), bm) == 0
                ? PyDict_SetItem(m->tracked, mk, Py_True)
                : -1;
    Py_XDECREF(mk);
    int64_t first[6] = {code(C_MOD), c.mk, c.name_id, pm, bm, c.io};
    if (r < 0 || emit(first, 6) < 0) return -1;
  } else {
    int64_t input[4] = {code(C_INPUT), c.mk, c.name_id, c.io};
    if (emit(input, 4) < 0) return -1;
  }
  if (emit(snap, 3) < 0) return -1;
  // [[(id, version) of each input requiring grad], None]: passes_through reads it
  PyObject* ids = PyList_New((Py_ssize_t)c.grads.size());
  if (!ids) return -1;
  for (size_t i = 0; i < c.grads.size(); ++i) {
    PyObject* pair = Py_BuildValue("(NL)", PyLong_FromVoidPtr(c.grads[i]),
                                   (long long)THPVariable_Unpack(c.grads[i])._version());
    if (!pair) {
      Py_DECREF(ids);
      return -1;
    }
    PyList_SET_ITEM(ids, (Py_ssize_t)i, pair);
  }
  PyObject* seen = Py_BuildValue("[NO]", ids, Py_None);
  int r = seen ? PyList_Append(c.fw_inputs, seen) : -1;
  Py_XDECREF(seen);
  if (r < 0) return -1;
  if (!c.grads.empty()) return hook_nodes(c, false, nullptr);
  // ModTracker queues the end until the next backward; a program that never runs one
  // (inference) would grow the queue forever
  if (PyList_GET_SIZE(m->queued) >= 100000 && PyList_SetSlice(m->queued, 0, PY_SSIZE_T_MAX, nullptr) < 0)
    return -1;
  PyObject* ends = PyObject_CallFunctionObjArgs(m->partial, m->ends, c.wmod, c.info, nullptr);
  r = ends ? PyList_Append(m->queued, ends) : -1;
  Py_XDECREF(ends);
  return r;
}

// ModuleTracker.passes_through: each output one of the inputs, at the same version
bool passes_through(const Call& c, PyObject* seen_ids) {
  if (!seen_ids || !PyList_Check(seen_ids) || PyList_GET_SIZE(seen_ids) == 0) return false;
  for (PyObject* o : c.grads) {
    int64_t v = THPVariable_Unpack(o)._version();
    bool found = false;
    for (Py_ssize_t i = 0; !found && i < PyList_GET_SIZE(seen_ids); ++i) {
      PyObject* pair = PyList_GET_ITEM(seen_ids, i);
      if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) return false;
      found = PyLong_AsVoidPtr(PyTuple_GET_ITEM(pair, 0)) == (void*)o &&
              PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1)) == v;
    }
    if (!found) return false;
  }
  return true;
}

// ModuleTracker.post_forward's work for c (mt_post_fw, remove_parent, the outputs' hooks)
int post_effects(Call& c) {
  int64_t output[3] = {code(C_OUTPUT), c.mk, c.io};
  int64_t snap[3] = {code(C_SNAP), c.mk, code(C_POST_FW)};
  if (emit(output, 3) < 0 || emit(snap, 3) < 0 || remove_parent(c.name, c.name_id) < 0)
    return -1;
  PyObject* entry = nullptr;  // info.fw_inputs.pop(), where it has one
  Py_ssize_t n = PyList_GET_SIZE(c.fw_inputs);
  if (n > 0) {
    entry = PyList_GET_ITEM(c.fw_inputs, n - 1);
    Py_INCREF(entry);
    if (PyList_SetSlice(c.fw_inputs, n - 1, n, nullptr) < 0) {
      Py_DECREF(entry);
      return -1;
    }
  }
  int r = 0;
  if (!c.grads.empty()) {
    PyObject* ids = entry && PyList_Check(entry) && PyList_GET_SIZE(entry) == 2
                        ? PyList_GET_ITEM(entry, 0)
                        : nullptr;
    bool through = passes_through(c, ids);
    PyObject* how = PyLong_FromLongLong(code(through ? C_PUSH_PASS_THROUGH : C_PUSH_BACKWARD));
    r = how ? hook_nodes(c, true, how) : -1;
    Py_XDECREF(how);
  }
  Py_XDECREF(entry);
  return r;
}

// module_pre(mod, inputs) / module_post(mod, output): True where the call was done here,
// False where it is the Python path's (nothing was done). A failure of the agent's own is
// reported (the call is then done, as far as it went, as the Python path's would be).
PyObject* module_hook(PyObject* const* args, Py_ssize_t n, bool post) {
  if (n != 2) {
    PyErr_SetString(PyExc_TypeError, "module_pre(mod, inputs) / module_post(mod, output)");
    return nullptr;
  }
  Call c;
  int g = gather(args[0], args[1], post, c);
  auto& count = post ? (g > 0 ? path_counts.module_post_in_c : path_counts.module_post_to_python)
                     : (g > 0 ? path_counts.module_pre_in_c : path_counts.module_pre_to_python);
  ++count;
  if (g <= 0) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  if ((post ? post_effects(c) : pre_effects(c)) < 0) {
    report_own_failure();
    if (PyErr_Occurred()) return nullptr;  // a signal handler's exception: the program's
  }
  Py_RETURN_TRUE;
}

PyObject* module_pre(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return module_hook(args, n, false);
}

PyObject* module_post(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return module_hook(args, n, true);
}

// bind_modules(tracker, codes, Parameter, functools.partial, vars(state), nn.Module): after
// install() with the CPU fast path (whose table and writers this path uses)
PyObject* bind_modules(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n != 6 || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != N_CODES) {
    PyErr_SetString(PyExc_TypeError,
                    "bind_modules(tracker, codes, Parameter, partial, state, Module)");
    return nullptr;
  }
  PyObject* tracker = args[0];
  auto* m = new Mods();
  const char* names[15] = {"__dict__", "_memtrack_info", "obj_id", "seen", "mk", "name",
                           "name_id", "wmod", "fw_inputs", "active", "has_callback",
                           "_parameters", "_buffers", "_modules", "_forward_hooks"};
  PyObject** slots[15] = {&m->s_dict, &m->s_info, &m->s_obj_id, &m->s_seen,
                          &m->s_mk, &m->s_name, &m->s_name_id, &m->s_wmod,
                          &m->s_fw_inputs, &m->s_active, &m->s_has_callback,
                          &m->s_parameters, &m->s_buffers, &m->s_modules,
                          &m->s_forward_hooks};
  bool ok = PyDict_Check(args[4]) && PyType_Check(args[5]);
  for (int i = 0; ok && i < 15; ++i) ok = (*slots[i] = PyUnicode_InternFromString(names[i]));
  for (int i = 0; ok && i < N_METHODS; ++i) {
    ok = (m->s_methods[i] = PyUnicode_InternFromString(method_names[i]));
    // borrowed: nn.Module holds its methods
    ok = ok && (m->methods[i] = _PyType_Lookup((PyTypeObject*)args[5], m->s_methods[i]));
    if (!ok && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bind_modules: not nn.Module");
  }
  for (int i = 0; ok && i < N_CODES; ++i) {
    m->codes[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(args[1], i));
    ok = !PyErr_Occurred();
  }
  PyObject* main = ok ? PyObject_GetAttrString(tracker, "main") : nullptr;
  PyObject* ident = main ? PyObject_GetAttrString(tracker, "main_ident") : nullptr;
  if (ident) m->main_ident = PyLong_AsUnsignedLong(ident);
  Py_XDECREF(ident);
  PyObject* params = ident ? PyObject_GetAttrString(tracker, "params") : nullptr;
  ok = params && !PyErr_Occurred() &&
       (m->tracked = PyObject_GetAttrString(tracker, "tracked")) &&
       (m->inner = PyObject_GetAttrString(tracker, "inner")) &&
       (m->hooked = PyObject_GetAttrString(params, "hooked")) &&
       (m->parents = PyObject_GetAttrString(main, "parents")) &&
       (m->queued = PyObject_GetAttrString(main, "post_bw_to_enqueue")) &&
       (m->starts = PyObject_GetAttrString(tracker, "backward_starts")) &&
       (m->ends = PyObject_GetAttrString(tracker, "backward_ends"));
  Py_XDECREF(params);
  m->main = main;
  if (ok && !(PyDict_Check(m->tracked) && PyDict_Check(m->inner) && PyDict_Check(m->parents) &&
              PyDict_Check(m->hooked) && PyList_Check(m->queued))) {
    PyErr_SetString(PyExc_TypeError, "bind_modules: not a module tracker");
    ok = false;
  }
  if (ok && PyType_Ready(&ModHookType) < 0) ok = false;
  if (!ok) return nullptr;  // (m leaks: a failed bind is rare and small)
  m->parameter = args[2];
  m->partial = args[3];
  m->state = args[4];
  for (int i = 0; i < N_METHODS; ++i) Py_INCREF(m->methods[i]);
  Py_INCREF(m->parameter);
  Py_INCREF(m->partial);
  Py_INCREF(m->state);
  mods = m;  // (a previous one, of an earlier in-process recording, is left: a late hook)
  Py_RETURN_NONE;
}

}  // namespace
