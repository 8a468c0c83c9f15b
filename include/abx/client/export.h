// ABX_EXPORT: marks the public API of libabx.
//
// libabx is compiled with -fvisibility=hidden, so only classes and functions marked here are
// exported from the shared library (libabx.so); everything else (transport, Connect framing,
// parsing helpers) stays internal and may change freely. Tests reach the internals by linking
// the static archive (abx::client), where visibility does not apply.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define ABX_EXPORT __attribute__((visibility("default")))
#else
#define ABX_EXPORT
#endif
