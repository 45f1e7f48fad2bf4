// The hybrid observer, built only to measure it (issue 26 item 10): a RecordFunction callback
// in C++ takes the place of the agent's Python TorchDispatchMode as the per-op trampoline, and
// hands each op a dispatch mode would see to a Python function (the agent's per-op body: the
// storage table, categories, the spool), so everything but the trampoline stays Python.
//
// Which RecordFunction calls are the ops a dispatch mode sees: RecordFunction fires at every
// Dispatcher::call, a dispatch mode only where an op reaches the Python key. So:
//   - a CompositeImplicitAutograd op decomposes above the Python key: not an op, and its
//     decomposition's ops are (they are seen one by one);
//   - a call made while an op is running (inside its kernel) is not seen by the mode (the
//     mode is off its stack while it runs the op): not an op, at any depth;
//   - a call made while another Python dispatch mode is on the stack (a FakeTensorMode, the
//     user's own) is left to that mode, and what runs under it is nested;
//   - a call made with the Python key excluded (torch.tensor() builds its tensor so) is
//     not seen, nor what runs under it;
//   - autograd nodes (BACKWARD_FUNCTION) are scopes, not ops, and do not nest;
//   - `record_function` blocks: their enter and exit ops are not observed by RecordFunction
//     (they make one), but the dispatch mode sees them; the USER_SCOPE they open and close
//     stands for them.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Storage.h>

#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

struct OpInfo {
  int32_t id;       // index into names
  bool composite;   // decomposes above the Python key
};

std::vector<std::string> names;  // "add.Tensor"
std::unordered_map<const char*, OpInfo> by_ptr;  // fn.name() points into the op's schema
PyObject* on_op = nullptr;  // Python: on_op(op id, output)
bool call_python = true;

struct Ctx : at::ObserverContext {
  int32_t id;  // -1: nested or left to another mode
  explicit Ctx(int32_t i) : id(i) {}
};

thread_local int depth = 0;

OpInfo info_of(const at::RecordFunction& fn) {
  const char* p = fn.name();
  auto it = by_ptr.find(p);
  if (it != by_ptr.end()) return it->second;
  OpInfo info{-1, false};
  auto op_name = fn.operator_name();
  if (op_name) {
    std::string n = op_name->name;
    auto colon = n.find("::");
    if (colon != std::string::npos) n = n.substr(colon + 2);
    n += "." + (op_name->overload_name.empty() ? std::string("default") : op_name->overload_name);
    auto handle = c10::Dispatcher::singleton().findOp(*op_name);
    // detach_ is done whole by its autograd kernel, which never calls below it
    info.composite =
        (handle && handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) ||
        n == "detach_.default";
    info.id = (int32_t)names.size();
    names.push_back(n);
  }
  by_ptr.emplace(p, info);
  return info;
}

int32_t enter_id = -1, exit_id = -1;  // the record_function ops
void call(int32_t id, const std::vector<c10::IValue>* outs);

std::unique_ptr<at::ObserverContext> start(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    if (depth == 0) call(enter_id, nullptr);
    return depth == 0 ? std::make_unique<Ctx>(exit_id) : nullptr;
  }
  if (fn.scope() != at::RecordScope::FUNCTION) return nullptr;
  if (depth > 0) {
    ++depth;
    return std::make_unique<Ctx>(-1);
  }
  if (c10::impl::TorchDispatchModeTLS::any_modes_set() ||
      c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Python)) {
    ++depth;
    return std::make_unique<Ctx>(-1);
  }
  OpInfo info = info_of(fn);
  if (info.id < 0 || info.composite) return nullptr;
  ++depth;
  return std::make_unique<Ctx>(info.id);
}

void end(const at::RecordFunction& fn, at::ObserverContext* ctx_) {
  if (!ctx_) return;
  auto* ctx = static_cast<Ctx*>(ctx_);
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    call(ctx->id, nullptr);
    return;
  }
  --depth;
  if (ctx->id >= 0) call(ctx->id, &fn.outputs());
}

void call(int32_t op, const std::vector<c10::IValue>* outs_) {
  if (op < 0 || !call_python || !on_op) return;
  py::gil_scoped_acquire gil;
  static const std::vector<c10::IValue> none;
  const auto& outs = outs_ ? *outs_ : none;
  // the outputs' storages, not the tensors: a tensor given a Python object here would be
  // tied to it (Tensor._make_subclass then refuses it), a storage's object is what the body
  // keys its table by anyway
  PyObject* out;
  auto storage_of = [](const c10::IValue& v) -> PyObject* {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && t.unsafeGetTensorImpl()->has_storage()) return THPStorage_Wrap(t.storage());
    }
    Py_INCREF(Py_None);
    return Py_None;
  };
  if (outs.size() == 1) {
    out = storage_of(outs[0]);
  } else {
    out = PyTuple_New((Py_ssize_t)outs.size());
    for (size_t i = 0; i < outs.size(); ++i) PyTuple_SET_ITEM(out, (Py_ssize_t)i, storage_of(outs[i]));
  }
  PyObject* id = PyLong_FromLong(op);
  PyObject* args[2] = {id, out};
  PyObject* r = PyObject_Vectorcall(on_op, args, 2, nullptr);
  Py_DECREF(id);
  Py_DECREF(out);
  if (r) {
    Py_DECREF(r);
  } else {
    PyErr_Clear();  // never into the program
  }
}

at::CallbackHandle handle = 0;

void install(py::object fn, bool call) {
  TORCH_CHECK(handle == 0, "observer already installed");
  on_op = fn.release().ptr();
  call_python = call;
  enter_id = (int32_t)names.size();
  names.push_back("_record_function_enter_new.default");
  exit_id = (int32_t)names.size();
  names.push_back("_record_function_exit._RecordFunction");
  at::RecordFunctionCallback cb(start, end);
  cb.needsOutputs(true);
  cb.scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
             at::RecordScope::USER_SCOPE});
  handle = at::addThreadLocalCallback(cb);
}

void uninstall() {
  if (handle) at::removeCallback(handle);
  handle = 0;
}

py::list op_names() {
  py::list l;
  for (const auto& n : names) l.append(n);
  return l;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, py::arg("on_op"), py::arg("call") = true);
  m.def("uninstall", &uninstall);
  m.def("op_names", &op_names);
}
