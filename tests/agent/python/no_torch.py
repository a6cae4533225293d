"""A Python program that never imports torch (tests/agent/probe_test.cpp): under the agent it
must run as it runs without it. It prints the same lines either way and writes to FILE what
the probe left in the process: whether torch was imported, the probe's modules, and the
meta-path finders.

  python3 no_torch.py FILE
"""
import json
import sys


def main():
    import collections  # a few imports after start-up, which the probe's finder sees pass by
    import fractions

    total = sum(fractions.Fraction(1, n) for n in range(1, 30))
    counts = collections.Counter("the quick brown fox jumps over the lazy dog")
    print("no_torch: sum %s" % total)
    print("no_torch: most common %s" % counts.most_common(3))
    finders = [(f if isinstance(f, type) else type(f)).__module__ + "." + (f if isinstance(f, type) else type(f)).__qualname__
               for f in sys.meta_path]
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": "torch" in sys.modules,
                   "lockstep_modules": sorted(m for m in sys.modules if m.startswith("lockstep")),
                   "finders": finders}, f)


if __name__ == "__main__":
    main()
