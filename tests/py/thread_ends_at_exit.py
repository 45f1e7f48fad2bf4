"""A thread that ran torch ops ends; its C++ thread-local destructors run after the
main thread's join() has returned (here held back 300 ms by a thread-exit destructor of the
thread's own, libc's usleep, which runs before torch's: last registered, first run). If the
thread's dispatch stack still held a Python dispatch mode then, torch's destructor would drop
it and take the GIL, and if the interpreter is finalizing by then (the main thread exited
after the join), the thread ends inside that C++ destructor: std::terminate, SIGABRT.

    python tests/py/thread_ends_at_exit.py

Prints `modes dropped by thread destructors: N`, N the references to the modes on the main
thread's dispatch stack that the joined thread's destructors let go of (0: the thread let
go of them while its Python ran)."""

import ctypes
import sys
import threading
import time

import torch


def work():
    m = torch.nn.Linear(64, 64)
    with torch.no_grad():
        for _ in range(5):
            m(torch.randn(32, 64))
    libc = ctypes.CDLL(None)
    at_thread_exit = libc.__cxa_thread_atexit_impl
    at_thread_exit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    at_thread_exit(ctypes.cast(libc.usleep, ctypes.c_void_p), 300_000, None)


modes = [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]
t = threading.Thread(target=work, name="ends-at-exit")
t.start()
t.join()
at_join = sum(sys.getrefcount(m) for m in modes)
time.sleep(1.0)  # the thread's destructors have run
print(f"modes dropped by thread destructors: {at_join - sum(sys.getrefcount(m) for m in modes)}")
