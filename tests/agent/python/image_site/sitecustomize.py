# An image's own sitecustomize, as a Python image may ship one (tests/agent/probe_test.cpp):
# it writes what it sees to $IMAGE_SITE_MARKER, and with IMAGE_SITE_FAIL=1 it raises, as a
# broken one would.
import os
import sys

marker = os.environ.get("IMAGE_SITE_MARKER")
if marker:
    with open(marker, "a") as f:
        f.write("image sitecustomize ran as %s; lockstep probe set up before it: %s\n"
                % (__name__, "lockstep._probe" in sys.modules))
if os.environ.get("IMAGE_SITE_FAIL") == "1":
    raise RuntimeError("the image's sitecustomize failed on purpose")
