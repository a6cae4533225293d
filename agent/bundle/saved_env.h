/* What the bundle's launcher (launcher.c) sets aside for the agent (bundle_env.cpp), in C
 * so both include it.
 *
 * The launcher starts the agent through the bundle's own dynamic loader. The loader acts on
 * the variables below, which belong to the user's image and pod: honoured, they would load the
 * image's libraries (built against another glibc) into the agent, or make its loader search
 * the image's directories. So the launcher removes each from the environment and records it
 * in a private variable, LOCKSTEP_BUNDLE_SAVED_<NAME>, whose value says whether it was set:
 *   "unset"        the image and pod did not set it
 *   "set:VALUE"    they set it to VALUE (VALUE may be empty: set, but empty)
 * The agent puts each back into its own environment, exactly as it was, at the start of
 * main() and removes the private variables, so its workers, which it starts normally with
 * their image's own loader, get what the image and pod set and nothing of the bundle.
 *
 * The loader's other variables stay as they are: LD_BIND_NOW, LD_BIND_NOT, LD_DYNAMIC_WEAK,
 * LD_HWCAP_MASK and GLIBC_TUNABLES change how libraries are bound, not which are loaded, and
 * mean the same to our glibc; LD_DEBUG, LD_DEBUG_OUTPUT, LD_SHOW_AUXV and LD_VERBOSE are
 * diagnostics a user who sets them wants; LD_PROFILE names one of the process's own
 * libraries and loads nothing. */
#ifndef LOCKSTEP_AGENT_BUNDLE_SAVED_ENV_H
#define LOCKSTEP_AGENT_BUNDLE_SAVED_ENV_H

/* LD_PRELOAD and LD_AUDIT load the libraries they name into every dynamically linked program;
 * LD_LIBRARY_PATH puts the image's directories before the bundle's. */
#define LOCKSTEP_BUNDLE_SAVED_NAMES {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"}
#define LOCKSTEP_BUNDLE_SAVED_COUNT 3
#define LOCKSTEP_BUNDLE_SAVED_PREFIX "LOCKSTEP_BUNDLE_SAVED_"
#define LOCKSTEP_BUNDLE_UNSET "unset"
#define LOCKSTEP_BUNDLE_SET "set:"

/* Set by the launcher when the image does not set it: the Python probe's directory, the
 * bundle's python/ (another part of the agent reads it). */
#define LOCKSTEP_BUNDLE_PYTHON_PROBE_DIR "LOCKSTEP_PYTHON_PROBE_DIR"
/* Likewise the NCCL profiler plugin, the bundle's nccl/libnccl-profiler-lockstep.so when the
 * bundle has it (the agent cannot find it from its own path: that is the bundle's loader). */
#define LOCKSTEP_BUNDLE_NCCL_PROFILER "LOCKSTEP_NCCL_PROFILER"

#endif
