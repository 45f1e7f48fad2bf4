"""The wire protocol between the agent and the collector: every constant both sides share.

The collector's copy is src/record/protocol.rs; its tests read this file and fail when the two
differ (a name on one side only, or another value). Keep one `NAME = value` per line. The
format itself is documented in docs/record.md ("Wire format").
"""

# ---- record codes (int64 stream); an op is any value >= 0: (func id << 2) | mutable << 1 | bw
ADD = -1  # key cat dev bytes: a storage appeared
DEL = -2  # key: it died
REF = -3  # key cat: it changed category
SIZE = -4  # key bytes: it changed size
PUSH = -5  # name how: a module became active (how: PUSH_FORWARD, PUSH_BACKWARD, ...)
POP = -6  # name: it stopped
RESET = -7  # all modules reset at the end of backward
MOD = -8  # mod name params buffers inputs: a module's first call in the iteration
SNAP = -9  # mod state: snapshot the current memory into the module's state
INPUT = -10  # mod name inputs: a further call's inputs
OUTPUT = -11  # mod outputs
ITER = -12  # a new iteration
MARK = -13  # 0|1: fw_start / fw_bw_boundary
OPT_BEGIN = -14  # name: optimizer.step() begins
OPT_END = -15  # optimizer.step() ends
CYCLE = -16  # id: the `cycles` message id was found here
TIME = -17  # ns: a CLOCK_MONOTONIC time mark
JSON = -18  # n bytes...: a message (JSON, n bytes, padded to whole slots)
NOTE = -19  # why cat was: a tensor not measured as one dense storage, now in cat (was: -1 new)
THREAD = -20  # n: the records after it are thread n's (0: the main thread; `thread` names n)

# ---- how a module became active (PUSH's `how`)
PUSH_FORWARD = 0  # its forward pre-hook
PUSH_BACKWARD = 1  # a backward hook: the gradient of its output arrived
PUSH_PASS_THROUGH = 2  # the same, for a module whose outputs are its inputs: it runs no node

# ---- why a tensor was noted (NOTE's `why`): how its memory was measured, if at all
WHY_SPARSE = 0  # a sparse layout: sized by the storages of its indices and values
WHY_NESTED = 1  # a nested tensor: sized by its buffer
WHY_META = 2  # on the meta device, or fake: it holds no memory
WHY_NO_STORAGE = 3  # no storage reachable (a wrapper subclass without __tensor_flatten__)
WHY_ERROR = 4  # reading its storages failed (the error is reported once as agent_error)
WHY_HOST = 5  # `memtrack estimate`: on the host (a CPU tensor), not the device's memory

# ---- MemTracker's categories (_MemRefType), in its order
PARAM = 0
BUFFER = 1
GRAD = 2
ACT = 3
TEMP = 4
OPT = 5
OTH = 6

# ---- MemTracker's module states (_ModState)
PRE_FW = 0
POST_FW = 1
PEAK_FW = 2
PRE_BW = 3
POST_BW = 4
PEAK_BW = 5
PRE_FW_AC = 6
POST_FW_AC = 7

# ---- socket frame kinds: u32 little-endian payload length, u8 kind, payload
FRAME_ALIVE = 0  # empty: the process is alive
FRAME_JSON = 1  # a JSON message
FRAME_RECORDS = 2  # int64 little-endian records

# ---- JSON message kinds (the message's "t")
MSG_HELLO = "hello"
MSG_OP = "op"
MSG_NAME = "name"
MSG_DEVICE = "device"
MSG_CYCLES = "cycles"
MSG_EXCEPTION = "exception"
MSG_SIGNAL = "signal"
MSG_OOM = "oom"
MSG_SNAPSHOT = "snapshot"
MSG_AGENT_ERROR = "agent_error"
MSG_BYE = "bye"
MSG_NO_TORCH = "no_torch"
MSG_TORCH_NOT_IMPORTED = "torch_not_imported"
MSG_CUDA_UNAVAILABLE = "cuda_unavailable"
MSG_TORCH_UNSUPPORTED = "torch_unsupported"
MSG_THREAD = "thread"
MSG_THREADS_BEFORE = "threads_before"
# `memtrack estimate` (fake_values.py, fake_files.py): a value read, a data-dependent op sized
# by its upper bound, a file not written, the program stopped on a read repeated too often
MSG_ESTIMATE_READ = "read"
MSG_ESTIMATE_BOUND = "bound"
MSG_ESTIMATE_UNWRITTEN = "unwritten"
MSG_ESTIMATE_STOPPED = "stopped"
MSG_ESTIMATE_GROUP = "group"  # a process group of a distributed estimate ran its first collective
MSG_ESTIMATE_RANK = "rank"  # the rank and world the program named in init_process_group (mp.spawn)

# The pseudo-op sampled after each call of a graph torch.compile compiled (its name in files)
COMPILED_GRAPH = "compiled_graph"
