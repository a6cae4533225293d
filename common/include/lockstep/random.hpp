// Random values for secrets and challenges: the kernel's CSPRNG (getrandom(2)), so every
// component draws them the same way without a library.
#pragma once

#include <cstddef>
#include <string>

namespace lockstep {

// `bytes` random bytes as lowercase hex (2 * bytes characters). Throws std::runtime_error if
// the kernel cannot supply them.
std::string random_hex(size_t bytes);

}  // namespace lockstep
