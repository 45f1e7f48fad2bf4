// A compiled per-op observer, built only to measure what one costs (issue 26 item 10).
// It registers an at::RecordFunction callback and, optionally, a c10::MemoryReportingInfoBase
// (the slot the profiler uses for allocation events), and writes small fixed-size records
// into a preallocated ring. Variants (see probe.py):
//   A  start callback that only counts ops;
//   B  end callback with needsOutputs: one record per output tensor (storage ptr, nbytes),
//      plus the device allocator's stats when a CUDA allocator is initialized;
//   C  B plus allocation/free events from the allocator's memory report;
//   D  B plus module push/pop records from Python module hooks;
//   S  B plus a start record per op (op name, sequence number).
// Nothing here is part of memtrack; it is a probe.
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

enum Kind : uint32_t {
  OP = 0, OUT = 1, ALLOC = 2, FREE = 3, MOD_PUSH = 4, MOD_POP = 5, STATS = 6, OP_START = 7
};

struct Record {
  uint64_t a;     // ptr (OUT, ALLOC, FREE), module id (MOD_*), bytes (STATS)
  uint64_t b;     // nbytes / size
  uint32_t kind;  // Kind
  uint32_t id;    // interned op name, or device index
};

constexpr size_t kRing = 1 << 20;  // 24 MiB; a real observer drains it from another thread
std::vector<Record> ring;
std::atomic<uint64_t> head{0};

inline void put(uint32_t kind, uint32_t id, uint64_t a, uint64_t b) {
  uint64_t i = head.fetch_add(1, std::memory_order_relaxed);
  Record& r = ring[i & (kRing - 1)];
  r.a = a;
  r.b = b;
  r.kind = kind;
  r.id = id;
}

// Counters, per scope and per thread kind, to answer "which ops does the callback see".
std::atomic<uint64_t> ops{0}, backward_ops{0}, other_thread_ops{0}, allocs{0}, frees{0},
    alloc_bytes{0};
std::thread::id main_thread;

// Op names: RecordFunction::name() points into the dispatcher's schema for ops (stable), but
// into a std::string owned by the RecordFunction for autograd nodes and user scopes (not
// stable), so a per-thread pointer cache is checked with strcmp and falls back to a global
// table under a mutex.
std::mutex names_mu;
std::unordered_map<std::string, uint32_t> names;
std::vector<std::string> names_by_id;

struct CacheEntry {
  const char* ptr;
  uint32_t id;
  std::string text;
};

uint32_t intern(const char* name) {
  thread_local std::unordered_map<const char*, CacheEntry> cache;
  auto it = cache.find(name);
  if (it != cache.end() && std::strcmp(it->second.text.c_str(), name) == 0) {
    return it->second.id;
  }
  uint32_t id;
  {
    std::lock_guard<std::mutex> g(names_mu);
    auto [n, fresh] = names.try_emplace(name, (uint32_t)names_by_id.size());
    if (fresh) names_by_id.emplace_back(name);
    id = n->second;
  }
  cache[name] = CacheEntry{name, id, name};
  return id;
}

bool cuda_stats = false;  // set at install when a CUDA allocator is initialized

void count(const at::RecordFunction& fn) {
  ops.fetch_add(1, std::memory_order_relaxed);
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION)
    backward_ops.fetch_add(1, std::memory_order_relaxed);
  if (std::this_thread::get_id() != main_thread)
    other_thread_ops.fetch_add(1, std::memory_order_relaxed);
}

std::unique_ptr<at::ObserverContext> start_count(const at::RecordFunction& fn) {
  count(fn);
  return nullptr;
}

inline bool put_tensor(uint32_t id, const at::Tensor& t) {
  if (!t.defined() || !t.unsafeGetTensorImpl()->has_storage()) return false;
  const c10::Storage& s = t.storage();
  put(OUT, id, (uint64_t)s.data_ptr().get(), s.nbytes());
  return true;
}

// Variant S: a start record too, so that allocations made inside an op (which precede its
// end record) can be attributed to it; a = the op's sequence number (links autograd nodes
// to their forward op).
std::unique_ptr<at::ObserverContext> start_record(const at::RecordFunction& fn) {
  put(OP_START, intern(fn.name()), (uint64_t)fn.seqNr(), 0);
  return nullptr;
}

void end_record(const at::RecordFunction& fn, at::ObserverContext*) {
  count(fn);
  uint32_t id = intern(fn.name());
  bool any = false;
  for (const c10::IValue& v : fn.outputs()) {
    if (v.isTensor()) {
      any |= put_tensor(id, v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) any |= put_tensor(id, t);
    }
  }
  if (!any) put(OP, id, 0, 0);
  if (cuda_stats) {
    auto st = c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(0);
    put(STATS, 0, (uint64_t)st.allocated_bytes[0].current, (uint64_t)st.reserved_bytes[0].current);
  }
}

inline void report(void* ptr, int64_t size, c10::Device device) {
  if (size >= 0) {
    allocs.fetch_add(1, std::memory_order_relaxed);
    alloc_bytes.fetch_add((uint64_t)size, std::memory_order_relaxed);
    put(ALLOC, (uint32_t)device.index(), (uint64_t)ptr, (uint64_t)size);
  } else {
    frees.fetch_add(1, std::memory_order_relaxed);
    put(FREE, (uint32_t)device.index(), (uint64_t)ptr, (uint64_t)(-size));
  }
}

// memory=1: a bare MemoryReportingInfoBase in the PROFILER_STATE slot. The profiler
// static_casts whatever sits there to ProfilerStateBase (profilerEnabled(), profilerType()),
// so this one makes torch.autograd._profiler_enabled() read foreign memory: kept to show it.
struct RawMemoryObserver : public c10::MemoryReportingInfoBase {
  void reportMemoryUsage(void* ptr, int64_t size, size_t, size_t, c10::Device device) override {
    report(ptr, size, device);
  }
  bool memoryProfilingEnabled() const override { return true; }
};

// memory=2: a ProfilerStateBase whose config says Disabled, so profilerEnabled() is false
// and the user's own torch.profiler can push its state on top (ours is shadowed meanwhile).
struct MemoryObserver : public torch::profiler::impl::ProfilerStateBase {
  MemoryObserver()
      : ProfilerStateBase(
            torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled)) {}
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }
  void reportMemoryUsage(void* ptr, int64_t size, size_t, size_t, c10::Device device) override {
    report(ptr, size, device);
  }
  bool memoryProfilingEnabled() const override { return true; }
};

at::CallbackHandle handle = 0;
bool memory_pushed = false;

// variant: "A" counts in a start callback; "B" records outputs in an end callback; "S" is B
// with a start record.
// global: addGlobalCallback (every thread) rather than addThreadLocalCallback (this thread
// and what inherits its ThreadLocalState). memory: 0 none, 1 RawMemoryObserver,
// 2 MemoryObserver, pushed as this thread's PROFILER_STATE.
void install(const std::string& variant, bool global, int memory) {
  TORCH_CHECK(handle == 0, "observer already installed");
  main_thread = std::this_thread::get_id();
  if (ring.empty()) ring.assign(kRing, Record{0, 0, 0, 0});  // touch every page up front
  try {
    cuda_stats = c10::GetAllocator(c10::DeviceType::CUDA) != nullptr &&
                 c10::getDeviceAllocator(c10::DeviceType::CUDA)->initialized();
  } catch (const std::exception&) {
    cuda_stats = false;
  }
  TORCH_CHECK(variant == "A" || variant == "B" || variant == "S", "variant A, B or S");
  at::RecordFunctionCallback cb =
      variant == "A"   ? at::RecordFunctionCallback(start_count)
      : variant == "B" ? at::RecordFunctionCallback(nullptr, end_record).needsOutputs(true)
                       : at::RecordFunctionCallback(start_record, end_record).needsOutputs(true);
  cb.scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION});
  handle = global ? at::addGlobalCallback(cb) : at::addThreadLocalCallback(cb);
  if (memory) {
    std::shared_ptr<c10::DebugInfoBase> info;
    if (memory == 1)
      info = std::make_shared<RawMemoryObserver>();
    else
      info = std::make_shared<MemoryObserver>();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, info);
    memory_pushed = true;
  }
}

void uninstall() {
  if (handle) at::removeCallback(handle);
  handle = 0;
  if (memory_pushed) c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  memory_pushed = false;
}

void module_push(uint64_t module_id) { put(MOD_PUSH, 0, module_id, 0); }
void module_pop(uint64_t module_id) { put(MOD_POP, 0, module_id, 0); }

py::dict stats() {
  py::dict d;
  d["ops"] = ops.load();
  d["backward_ops"] = backward_ops.load();
  d["other_thread_ops"] = other_thread_ops.load();
  d["records"] = head.load();
  d["allocs"] = allocs.load();
  d["frees"] = frees.load();
  d["alloc_bytes"] = alloc_bytes.load();
  d["names"] = names_by_id.size();
  d["cuda_stats"] = cuda_stats;
  return d;
}

void reset() {
  ops = backward_ops = other_thread_ops = allocs = frees = alloc_bytes = 0;
  head = 0;
}

// The last n records, oldest first, as (kind, name-or-id, a, b) tuples: for checks only.
py::list tail(size_t n) {
  py::list out;
  uint64_t h = head.load();
  n = std::min<uint64_t>({n, h, kRing});
  for (uint64_t i = h - n; i < h; ++i) {
    const Record& r = ring[i & (kRing - 1)];
    bool named = r.kind == OP || r.kind == OUT;
    py::object id = named && r.id < names_by_id.size() ? py::object(py::str(names_by_id[r.id]))
                                                       : py::object(py::int_(r.id));
    out.append(py::make_tuple(r.kind, id, r.a, r.b));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, py::arg("variant"), py::arg("global_") = false,
        py::arg("memory") = 0);
  m.def("uninstall", &uninstall);
  m.def("module_push", &module_push);
  m.def("module_pop", &module_pop);
  m.def("stats", &stats);
  m.def("reset", &reset);
  m.def("tail", &tail);
}
