// Releasing the GIL around calls that may block (pool waits, dispatch pacing, host copies) from
// code that may or may not hold it.
#pragma once

#include <Python.h>

namespace pgk {

// Releases the GIL for its scope when the calling thread holds it.
class GilRelease {
  public:
    GilRelease() : state_(PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
    ~GilRelease() {
        if (state_ != nullptr) PyEval_RestoreThread(state_);
    }
    GilRelease(const GilRelease&) = delete;
    GilRelease& operator=(const GilRelease&) = delete;

  private:
    PyThreadState* state_;
};

}  // namespace pgk
