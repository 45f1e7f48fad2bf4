// The compiled observer's CPU fast path (included by observer.cpp, in its translation unit).
// An op whose outputs are plain dense CPU tensors (no CUDA stats to read) is accounted here,
// with the agent's own table and spool (ops.py, transport.py) and the same records
// ops.observed would write, so that no Python frame runs per op (on a loop of small ops, a
// Python call and body per op cost about 0.5x the program's own time). Anything else (sparse,
// nested, subclasses, CUDA, an op not seen before) goes to ops.observed, and a record that
// cannot be written in place (its segment full, several threads recording) goes through the
// agent's own writer for it (which reserves room, opens segments, locks). Everything here runs
// with the GIL held.
#pragma once

#include <ATen/core/ivalue.h>
#include <Python.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/graph_task.h>

#include <atomic>
#include <initializer_list>
#include <vector>

namespace {

void defer_if_the_programs();  // observer.cpp: a signal handler's exception, to the program

constexpr int64_t ADD = -1, DEL = -2, SIZE = -4;  // protocol.py's record codes
constexpr int64_t ACT = 3, TEMP = 4, OPT = 5;     // and MemTracker's categories

struct Hot {
  PyObject* globals = nullptr;  // ops.py's: in_opt, in_ac, _death_callback, the bound writers
  PyObject* known = nullptr;    // ops._known: id(storage) -> [category, bytes, weakref]
  PyObject* codes = nullptr;    // ops._native_codes: op id -> code
  PyObject* spool = nullptr;    // transport._spool: [next free slot, end of reserved, slots, map]
  PyObject* unlocked[4] = {};   // transport's unlocked writers: ap, ext, ext2, ext6
  PyObject* internal_error = nullptr;
  PyObject* names[7] = {};      // interned: in_opt, in_ac, _death_callback, _ap, _ext, _ext2, _ext6
};
Hot* hot = nullptr;  // set by install() on the CPU backend; never freed (callbacks may be late)

enum { IN_OPT, IN_AC, DEATH_CALLBACK, AP, EXT, EXT2, EXT6 };

// Which path each op, record, module call and storage death took (counts(), for the
// benchmark and the tests: a figure that says how it was reached). Plain integers, each
// changed with the GIL held: an add where the work is done, nothing else.
struct PathCounts {
  uint64_t ops_in_c = 0;             // ops accounted here (observe_fast)
  uint64_t ops_to_python = 0;        // ops handed to ops.observed
  uint64_t records_in_place = 0;     // records stored straight into the spool
  uint64_t records_to_python = 0;    // records written by the agent's Python writers
  uint64_t deaths_in_c = 0;          // storage deaths reported here (Death)
  uint64_t module_pre_in_c = 0;      // module calls begun here (module_path.h)
  uint64_t module_pre_to_python = 0;   // ... and by the tracker's Python
  uint64_t module_post_in_c = 0;       // module calls ended here
  uint64_t module_post_to_python = 0;  // ... and by the tracker's Python
  uint64_t backward_in_c = 0;        // a module's backward start or end marked here
  uint64_t backward_to_python = 0;   // ... and by the tracker's Python
};
PathCounts path_counts;

PyObject* global(int name) { return PyDict_GetItemWithError(hot->globals, hot->names[name]); }

// Append a record of n slots: into the reserved slots of the current segment when the agent's
// writer for it is still the unlocked one (no other thread records), else through the writer
// bound in ops.py. -1 with a Python exception set where that fails.
int emit(const int64_t* rec, int n) {
  int which = n == 1 ? AP : n == 2 ? EXT2 : n == 6 ? EXT6 : EXT;
  PyObject* writer = global(which);
  if (!writer) return PyErr_Occurred() ? -1 : 0;
  PyObject* sp = hot->spool;
  if (writer == hot->unlocked[which - AP] && PyList_GET_SIZE(sp) >= 3) {
    long long p = PyLong_AsLongLong(PyList_GET_ITEM(sp, 0));
    long long end = PyLong_AsLongLong(PyList_GET_ITEM(sp, 1));
    PyObject* mv = PyList_GET_ITEM(sp, 2);
    if (PyErr_Occurred()) return -1;
    if (PyMemoryView_Check(mv) && p >= 1 && p + n <= end &&
        (p + n) * 8 <= PyMemoryView_GET_BUFFER(mv)->len) {
      auto* slots = static_cast<int64_t*>(PyMemoryView_GET_BUFFER(mv)->buf);
      PyObject* next = PyLong_FromLongLong(p + n);
      if (!next) return -1;
      PyList_SetItem(sp, 0, next);  // (steals next)
      for (int i = 0; i < n; ++i) slots[p + i] = rec[i];
      std::atomic_thread_fence(std::memory_order_release);
      slots[0] = p + n;  // published after the record: the reader never sees half of one
      ++path_counts.records_in_place;
      return 0;
    }
  }
  // the writer's own way: it finds room (or drops the record where there is none) and locks
  ++path_counts.records_to_python;
  PyObject* args[6];
  int made = 0, ok = 0;
  for (; made < n && made < 6; ++made) {
    args[made] = PyLong_FromLongLong(rec[made]);
    if (!args[made]) break;
  }
  if (made == n) {
    PyObject* r;
    if (which == EXT) {
      PyObject* tuple = PyTuple_New(n);
      if (tuple) {
        for (int i = 0; i < n; ++i) {
          Py_INCREF(args[i]);
          PyTuple_SET_ITEM(tuple, i, args[i]);
        }
      }
      r = tuple ? PyObject_CallOneArg(writer, tuple) : nullptr;
      Py_XDECREF(tuple);
    } else {
      r = PyObject_Vectorcall(writer, args, (size_t)n, nullptr);
    }
    ok = r != nullptr;
    Py_XDECREF(r);
  }
  for (int i = 0; i < made; ++i) Py_DECREF(args[i]);
  return ok ? 0 : -1;
}

// The agent's own failure, reported as ops.py reports its own, never raised into the program.
// A KeyboardInterrupt or SystemExit (a signal handler's, run in one of the agent's writers) is
// the program's: left set, for defer_if_the_programs.
void report_own_failure() {
  if (!PyErr_Occurred() || !PyErr_ExceptionMatches(PyExc_Exception)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value && traceback) PyException_SetTraceback(value, traceback);
  if (hot && hot->internal_error && value) {
    PyObject* r = PyObject_CallOneArg(hot->internal_error, value);
    Py_XDECREF(r);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
}

// Whether the fast path may account tensor t: undefined (nothing to count), or plain, dense,
// on the CPU, with a storage (never a subclass, meta, sparse or functorch wrapper).
bool fast_tensor(const at::Tensor& t) {
  if (!t.defined()) return true;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return !impl->key_set().has(c10::DispatchKey::Python) &&
         !impl->key_set().has_any(c10::functorch_transforms_ks) &&
         t.layout() == c10::kStrided && t.is_cpu() && impl->has_storage();
}

// The op's outputs' tensors where the fast path takes them all, as ops.observed would see
// them: a tensor, a list of tensors, or several values (their tensors; a list among several
// the agent ignores, so that case is left to it); false where one is not fast_tensor.
bool fast_outputs(const std::vector<c10::IValue>* outs, std::vector<at::Tensor>& ts) {
  if (!hot || !outs) return false;
  for (const c10::IValue& v : *outs) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!fast_tensor(t)) return false;
      if (t.defined()) ts.push_back(t);
    } else if (v.isTensorList()) {
      if (outs->size() != 1) return false;
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (!fast_tensor(t)) return false;
        if (t.defined()) ts.push_back(t);
      }
    }
  }
  return true;
}

// Account one output storage of an op (ops._new_dense, or _resized for a mutable op's known
// one). `sample` >= 0: the op's sample, written with a new storage's ADD record in one (true
// when it was). -1 with an exception set on failure.
int account(const at::Tensor& t, long code, long bw, int64_t sample) {
  const c10::Storage& storage = t.storage();
  PyObject* st = THPStorage_Wrap(storage);
  if (!st) return -1;
  if (Py_TYPE(st) != THPStorageClass) {  // (a subclass's storage, which the agent ignores)
    Py_DECREF(st);
    return 0;
  }
  PyObject* k = PyLong_FromVoidPtr(st);  // id(storage): the table's and the records' key
  PyObject* e = k ? PyDict_GetItemWithError(hot->known, k) : nullptr;
  int64_t key = (int64_t)(intptr_t)st;
  int64_t nbytes = (int64_t)storage.nbytes();
  int r = !k || PyErr_Occurred() ? -1 : 0;
  if (r == 0 && !e) {
    // a new storage: counted in its category, its death reported by its weakref's callback
    PyObject* flag = global(IN_OPT);
    bool in_opt = flag && PyObject_IsTrue(flag) == 1;
    flag = in_opt ? nullptr : global(IN_AC);
    bool in_ac = flag && PyObject_IsTrue(flag) == 1;
    int64_t cat = in_opt ? OPT : (bw && !in_ac ? TEMP : ACT);
    PyObject* make_callback = global(DEATH_CALLBACK);
    PyObject* callback = make_callback ? PyObject_CallOneArg(make_callback, k) : nullptr;
    PyObject* ref = callback ? PyWeakref_NewRef(st, callback) : nullptr;
    PyObject* entry = ref ? PyList_New(3) : nullptr;
    PyObject* pcat = entry ? PyLong_FromLongLong(cat) : nullptr;
    PyObject* pbytes = pcat ? PyLong_FromLongLong(nbytes) : nullptr;
    if (pbytes) {
      PyList_SET_ITEM(entry, 0, pcat);
      PyList_SET_ITEM(entry, 1, pbytes);
      Py_INCREF(ref);
      PyList_SET_ITEM(entry, 2, ref);
      r = PyDict_SetItem(hot->known, k, entry);
    } else {
      Py_XDECREF(pcat);
      r = -1;
    }
    Py_XDECREF(entry);
    Py_XDECREF(ref);
    Py_XDECREF(callback);
    if (r == 0) {
      int64_t rec[6] = {ADD, key, cat, -1, nbytes, sample};
      r = emit(rec, sample >= 0 ? 6 : 5) < 0 ? -1 : sample >= 0;
    }
  } else if (r == 0 && (code & 2)) {  // a mutable op may have resized it
    PyObject* old = PyList_Check(e) && PyList_GET_SIZE(e) >= 2 ? PyList_GET_ITEM(e, 1) : nullptr;
    long long was = old ? PyLong_AsLongLong(old) : -1;
    if (!old || PyErr_Occurred()) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a malformed storage entry");
      r = -1;
    } else if (was != nbytes) {
      PyObject* now = PyLong_FromLongLong(nbytes);
      int64_t rec[3] = {SIZE, key, nbytes};
      r = !now || PyList_SetItem(e, 1, now) < 0 || emit(rec, 3) < 0 ? -1 : 0;
    }
  }
  Py_XDECREF(k);
  Py_DECREF(st);
  return r;
}

// ops.observed's work for op id, whose outputs' tensors fast_outputs gave; false where it is
// left to ops.observed (the op's code not known yet).
bool observe_fast(int32_t id, const std::vector<c10::IValue>& outs,
                  const std::vector<at::Tensor>& ts) {
  if (id >= PyList_GET_SIZE(hot->codes)) return false;
  long code = PyLong_AsLong(PyList_GET_ITEM(hot->codes, id));
  if (code < 0) {  // never sampled (or an error, reported)
    if (PyErr_Occurred()) report_own_failure();
    return true;
  }
  long bw = torch::autograd::get_current_graph_task_id() != -1 ? 1 : 0;
  int64_t sample = code | bw;
  // one tensor out: its ADD record and the sample go together (as ops._new_dense writes them)
  bool single = outs.size() == 1 && outs[0].isTensor();
  int r = 0;
  for (size_t i = 0; r >= 0 && i < ts.size(); ++i) r = account(ts[i], code, bw, single ? sample : -1);
  if (r == 0) r = emit(&sample, 1);
  if (r < 0) report_own_failure();
  return true;
}

// A counted storage's death: the callback of its weakref (ops._death_callback(key) makes it,
// death(key) with this observer): out of the table, and its DEL record written. A C object,
// not a functools.partial of a function: none of the agent's bytecode runs in it (but a
// writer's where several threads record), and it costs a fraction of a partial to make and
// call, once per storage. A signal handler's exception raised in it is deferred to the
// program (as guarded() does) and the record written again.
struct Death {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* key;  // id(storage)
};

PyObject* death_call(PyObject* self, PyObject* const*, size_t, PyObject*) {
  PyObject* k = reinterpret_cast<Death*>(self)->key;
  if (!hot) Py_RETURN_NONE;
  ++path_counts.deaths_in_c;
  PyObject* e = PyDict_GetItemWithError(hot->known, k);
  if (e) {
    int64_t rec[2] = {DEL, (int64_t)PyLong_AsLongLong(k)};
    bool written = PyDict_DelItem(hot->known, k) == 0 && !PyErr_Occurred();
    for (int attempt = 0; written && attempt < 2; ++attempt) {
      if (emit(rec, 2) == 0) break;
      if (PyErr_ExceptionMatches(PyExc_Exception)) break;
      defer_if_the_programs();
    }
  }
  report_own_failure();
  defer_if_the_programs();
  Py_RETURN_NONE;
}

void death_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<Death*>(self)->key);
  Py_TYPE(self)->tp_free(self);
}

// The type of a small callable C object (Death, module_path.h's ModHook): called through
// its `vectorcall` member, and not tracked by the collector: nothing it holds leads back to
// it, so it is in no reference cycle.
template <class Object>
PyTypeObject callable_type(const char* name, destructor dealloc, const char* doc) {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = name;
  t.tp_basicsize = sizeof(Object);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_vectorcall_offset = offsetof(Object, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_dealloc = dealloc;
  t.tp_doc = doc;
  return t;
}

PyTypeObject DeathType = callable_type<Death>("memtrack_observer.Death", death_dealloc,
                                              "A counted storage's weakref callback.");

// death(key) -> the weakref callback reporting storage `key`'s death
PyObject* death(PyObject*, PyObject* k) {
  if (!PyLong_CheckExact(k)) {
    PyErr_SetString(PyExc_TypeError, "death(key): an int");
    return nullptr;
  }
  if (PyType_Ready(&DeathType) < 0) return nullptr;
  auto* d = PyObject_New(Death, &DeathType);
  if (!d) return nullptr;
  d->vectorcall = death_call;
  Py_INCREF(k);
  d->key = k;
  return reinterpret_cast<PyObject*>(d);
}

// install(on_op, fast): fast is None, or (ops' globals, transport._spool, transport's
// unlocked writers (ap, ext, ext2, ext6), ops._internal_error) for the CPU fast path
bool set_hot(PyObject* fast) {
  if (fast == Py_None) return true;
  PyObject *globals, *spool, *unlocked, *internal_error;
  if (!PyArg_ParseTuple(fast, "O!O!O!O", &PyDict_Type, &globals, &PyList_Type, &spool,
                        &PyTuple_Type, &unlocked, &internal_error))
    return false;
  if (PyTuple_GET_SIZE(unlocked) != 4) {
    PyErr_SetString(PyExc_TypeError, "install: four unlocked writers");
    return false;
  }
  auto* h = new Hot();
  h->globals = globals;
  h->spool = spool;
  h->internal_error = internal_error;
  h->known = PyDict_GetItemString(globals, "_known");
  h->codes = PyDict_GetItemString(globals, "_native_codes");
  const char* names[7] = {"in_opt", "in_ac", "_death_callback", "_ap", "_ext", "_ext2", "_ext6"};
  bool ok = h->known && PyDict_Check(h->known) && h->codes && PyList_Check(h->codes);
  for (int i = 0; ok && i < 7; ++i) ok = (h->names[i] = PyUnicode_InternFromString(names[i]));
  if (!ok) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "install: not ops.py's globals");
    delete h;
    return false;
  }
  for (int i = 0; i < 4; ++i) h->unlocked[i] = PyTuple_GET_ITEM(unlocked, i);
  for (PyObject* o : {h->globals, h->spool, h->internal_error, h->known, h->codes}) Py_INCREF(o);
  for (PyObject* o : h->unlocked) Py_INCREF(o);
  hot = h;  // (a previous one, of an earlier in-process recording, is left: a late callback)
  return true;
}

}  // namespace
