#include "core/residency.hpp"

#include <string>

#include "core/errors.hpp"

namespace pgk {

namespace {

template <typename Arrays>
void resident(const StreamPtr& stream, const Arrays& arrays) {
    size_t evictable = 0;
    for (const Array* a : arrays) evictable += a->buffer()->evictable() ? 1 : 0;
    if (evictable == 0) return;
    // Restoring one buffer may spill another of the same set when the device is full (the pool
    // prefers idle, older blocks, so this is rare). A pass that moved nothing restored nothing,
    // hence spilled nothing: every address read after it is current. Each pass restores at least
    // one buffer, so evictable + 1 passes settle any set that fits.
    for (size_t pass = 0; pass <= evictable; ++pass) {
        bool moved = false;
        for (const Array* a : arrays) {
            if (a->buffer()->evictable()) moved |= a->buffer()->touch(stream);
        }
        if (!moved) {
            for (const Array* a : arrays) {
                if (a->buffer()->evictable()) a->buffer()->mark_resident();
            }
            return;
        }
    }
    uint64_t total = 0;
    for (const Array* a : arrays) total += a->buffer()->evictable() ? a->buffer()->nbytes() : 0;
    throw OutOfMemoryError(total, "the " + std::to_string(evictable) +
                                      " evictable arrays of one operation do not fit in device "
                                      "memory together");
}

}  // namespace

void make_resident(const StreamPtr& stream, std::initializer_list<const Array*> arrays) {
    resident(stream, arrays);
}

void make_resident(const StreamPtr& stream, const std::vector<const Array*>& arrays) {
    resident(stream, arrays);
}

}  // namespace pgk
