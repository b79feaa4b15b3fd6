// Releasing the GIL around calls that may block (pool waits, dispatch pacing, host copies) from
// code that may or may not hold it.
#pragma once

#include <Python.h>

namespace pgk {

// Whether the calling thread keeps the GIL through its kernel launches and graph replays
// (set_launches_keep_gil). A launch gives the GIL up in case the dispatch controller holds it;
// a thread whose launches are never held (a Guaranteed partition's) and whose host work is
// latency-critical pays for each give-up with a wait to get the GIL back while other threads
// run Python: up to a switch interval per launch.
inline thread_local bool t_launches_keep_gil = false;

// Releases the GIL for its scope when the calling thread holds it (and `release` is true).
class GilRelease {
  public:
    explicit GilRelease(bool release = true)
        : state_(release && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
    ~GilRelease() {
        if (state_ != nullptr) PyEval_RestoreThread(state_);
    }
    GilRelease(const GilRelease&) = delete;
    GilRelease& operator=(const GilRelease&) = delete;

  private:
    PyThreadState* state_;
};

}  // namespace pgk
